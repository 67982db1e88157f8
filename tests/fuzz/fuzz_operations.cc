// fuzz_operations: the libFuzzer entry point of the operations target; its body and input format are in targets.h.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return gpupack::fuzz::FuzzOperations(data, size);
}
