// Scratch directories and files for tests, under Bazel's TEST_TMPDIR.
#ifndef SHARDPS_TESTS_TEMP_DIR_H_
#define SHARDPS_TESTS_TEMP_DIR_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace shardps::testing {

// A fresh, empty directory under the test's temporary directory.
inline std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(base ? base : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The whole file (a process's log, a summary); empty when it cannot be read.
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_TEMP_DIR_H_
