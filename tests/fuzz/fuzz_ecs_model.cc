// fuzz_ecs_model: the libFuzzer entry point of the ecs_model target; its body and input format are in targets.h.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return gpupack::fuzz::FuzzEcsModel(data, size);
}
