// fuzz_http: the libFuzzer entry point of the http target; its body and input format are in targets.h.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return gpupack::fuzz::FuzzHttp(data, size);
}
