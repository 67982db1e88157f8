// fuzz_protocol: the libFuzzer entry point of the protocol target; its body and input format are in targets.h.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return gpupack::fuzz::FuzzProtocol(data, size);
}
