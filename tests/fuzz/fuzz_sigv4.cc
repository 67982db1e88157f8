// fuzz_sigv4: the libFuzzer entry point of the sigv4 target; its body and input format are in targets.h.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return gpupack::fuzz::FuzzSigV4(data, size);
}
