#include "cli/experiment_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::cli {
namespace {

using ::testing::HasSubstr;

class ExperimentFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string pattern = std::string(tmp ? tmp : "/tmp") + "/files_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Write(const std::string& relative, const std::string& content) {
    std::filesystem::path path = std::filesystem::path(dir_) / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << content;
  }

  std::string dir_;
};

TEST_F(ExperimentFilesTest, ReadsConfig) {
  Write("exp.yaml", "name: x\n");
  absl::StatusOr<std::string> text = ReadConfigFile(dir_ + "/exp.yaml");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "name: x\n");
}

TEST_F(ExperimentFilesTest, MissingConfigNamesTheFile) {
  absl::StatusOr<std::string> text = ReadConfigFile(dir_ + "/nope.yaml");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(text.status().message(), "config file '" + dir_ + "/nope.yaml' does not exist");
}

TEST_F(ExperimentFilesTest, ConfigThatIsADirectory) {
  absl::StatusOr<std::string> text = ReadConfigFile(dir_);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(), HasSubstr("is a directory"));
}

TEST_F(ExperimentFilesTest, ReadsContextRecursivelySkippingGit) {
  Write("ctx/train.py", "print(1)\n");
  Write("ctx/sub/data.txt", "abc");
  Write("ctx/.git/HEAD", "ref");
  Write("ctx/sub/.git", "gitdir: elsewhere");
  Write("ctx/.gitignore", "*.pyc");
  ::chmod((dir_ + "/ctx/train.py").c_str(), 0755);
  absl::StatusOr<std::vector<v1::ContextFile>> files = ReadContextDir(dir_ + "/ctx");
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 3u);
  EXPECT_EQ((*files)[0].path(), ".gitignore");
  EXPECT_EQ((*files)[1].path(), "sub/data.txt");
  EXPECT_EQ((*files)[1].content(), "abc");
  EXPECT_EQ((*files)[2].path(), "train.py");
  EXPECT_EQ((*files)[2].mode(), 0755u);
}

TEST_F(ExperimentFilesTest, RefusesContextOverLimit) {
  Write("ctx/a", std::string(600, 'a'));
  Write("ctx/b", std::string(600, 'b'));
  absl::StatusOr<std::vector<v1::ContextFile>> files =
      ReadContextDir(dir_ + "/ctx", /*max_bytes=*/1024);
  EXPECT_EQ(files.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(files.status().message(), HasSubstr("'" + dir_ + "/ctx'"));
  EXPECT_THAT(files.status().message(), HasSubstr("1.2 KiB (1200 bytes)"));
  EXPECT_THAT(files.status().message(), HasSubstr("limit of 1.0 KiB"));
}

TEST_F(ExperimentFilesTest, MissingContextDir) {
  absl::StatusOr<std::vector<v1::ContextFile>> files = ReadContextDir(dir_ + "/none");
  EXPECT_EQ(files.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(files.status().message(), HasSubstr("does not exist"));
}

}  // namespace
}  // namespace det::cli
