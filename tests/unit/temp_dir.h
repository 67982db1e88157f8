// TempDir: a fresh directory for one test (mkdtemp under the system's temporary directory: $TMPDIR, else /tmp),
// removed with everything in it when the TempDir is destroyed, so nothing a test writes outlives it. The name
// starts with the prefix given (e.g. "gpupack-storage"), by default "gpupack-" and the running test suite's name,
// so a leftover of a crashed run says whose it is. A directory that cannot be made ends the test binary at once
// (every path under it would be meaningless).
// Tests only; one TempDir is used by one thread (its methods only read its path).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include <gtest/gtest.h>

namespace gpupack::testing_support {

class TempDir {
 public:
  explicit TempDir(std::string_view prefix = {}) {
    std::string name = prefix.empty() ? DefaultPrefix() : std::string(prefix);
    std::string pattern = (std::filesystem::temp_directory_path() / (name + "-XXXXXX")).string();
    const char* made = ::mkdtemp(pattern.data());
    if (made == nullptr) {
      ADD_FAILURE() << "cannot make a temporary directory like " << pattern;
      std::abort();
    }
    path_ = made;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

  // path: the directory, absolute.
  const std::string& path() const { return path_; }
  // File: the path of `relative` inside the directory (nothing is created).
  std::string File(std::string_view relative) const { return path_ + "/" + std::string(relative); }
  // Write makes the file `relative` (and its parent directories) holding `text`, and returns its path.
  std::string Write(std::string_view relative, std::string_view text = {}) const {
    const std::filesystem::path p = std::filesystem::path(path_) / relative;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }

 private:
  // DefaultPrefix: "gpupack-" and the running test suite's name, characters other than letters, digits, '-' and
  // '_' as '-' (a parameterized suite is "Stores/StoreContractTest"); "gpupack-test" outside a test.
  static std::string DefaultPrefix() {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info != nullptr ? info->test_suite_name() : "test";
    for (char& c : name) {
      const bool keep =
          (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
      if (!keep) c = '-';
    }
    return "gpupack-" + name;
  }

  std::string path_;
};

}  // namespace gpupack::testing_support
