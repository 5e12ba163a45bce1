// A fresh directory under the system's temporary directory for one test, removed with
// everything in it when the test ends. Unique per process and instance, so that tests of two
// build trees (or two sections) running at once never share files.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <system_error>

namespace fp4d_test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "fp4d_test") {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace fp4d_test
