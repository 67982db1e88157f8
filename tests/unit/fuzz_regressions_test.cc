// Replays the fuzz targets' inputs with the normal compiler: every file of tests/fuzz/regressions/<target>/ (a
// crash a fuzzer found, minimized, and since fixed) and of the seed corpus tests/fuzz/corpus/<target>/. The
// targets' bodies are tests/fuzz/targets.cc; a broken invariant there aborts, which fails this test binary.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/fuzz/targets.h"

namespace gpupack::fuzz {
namespace {

namespace fs = std::filesystem;

struct Target {
  const char* name;
  int (*body)(const uint8_t*, size_t);
};

std::vector<fs::path> FilesIn(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

// Replay runs every file of `dir` through the target and returns how many there were.
size_t Replay(const Target& target, const fs::path& dir) {
  std::vector<fs::path> files = FilesIn(dir);
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    std::ifstream in(file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(target.body(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
  }
  return files.size();
}

class FuzzReplayTest : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzReplayTest, RegressionsStayFixed) {
  Replay(GetParam(), fs::path(GPUPACK_FUZZ_DIR) / "regressions" / GetParam().name);
}

TEST_P(FuzzReplayTest, SeedCorpusPasses) {
  // Every target has a seed corpus; an empty one means the path is wrong.
  EXPECT_GT(Replay(GetParam(), fs::path(GPUPACK_FUZZ_DIR) / "corpus" / GetParam().name), 0u);
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzReplayTest,
                         ::testing::Values(Target{"query", FuzzQuery}, Target{"codec", FuzzCodec},
                                           Target{"operations", FuzzOperations}, Target{"http", FuzzHttp},
                                           Target{"channel", FuzzChannel}, Target{"sigv4", FuzzSigV4},
                                           Target{"protocol", FuzzProtocol}, Target{"ecs_model", FuzzEcsModel}),
                         [](const ::testing::TestParamInfo<Target>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace gpupack::fuzz
