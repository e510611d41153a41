// A fresh directory for the running test: TEST_TMPDIR (or /tmp)/<test name>, emptied.
#ifndef DET_AGENT_TESTING_TEST_DIR_H_
#define DET_AGENT_TESTING_TEST_DIR_H_

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace det::agent {

inline std::string FreshTestDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/",
                                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace det::agent

#endif  // DET_AGENT_TESTING_TEST_DIR_H_
