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

using ::testing::ElementsAre;
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

  void Link(const std::string& target, const std::string& relative) {
    std::filesystem::path path = std::filesystem::path(dir_) / relative;
    std::filesystem::create_directories(path.parent_path());
    ASSERT_EQ(::symlink(target.c_str(), path.c_str()), 0) << relative;
  }

  // The uploaded paths of `dir_`/ctx, or the error.
  absl::StatusOr<std::vector<std::string>> Paths(uint64_t max_files = kMaxContextFiles) {
    absl::StatusOr<std::vector<v1::ContextFile>> files =
        ReadContextDir(dir_ + "/ctx", kMaxContextBytes, max_files);
    if (!files.ok()) return files.status();
    std::vector<std::string> paths;
    for (const v1::ContextFile& f : *files) paths.push_back(f.path());
    return paths;
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

TEST_F(ExperimentFilesTest, ConfigOverTheLimitIsRefusedWithoutReadingIt) {
  Write("big.yaml", "description: " + std::string(50 << 20, 'x') + "\n");
  absl::StatusOr<std::string> text = ReadConfigFile(dir_ + "/big.yaml");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(text.status().message(),
            "config file '" + dir_ + "/big.yaml' is 50.0 MiB; a config may be at most 1024 KiB");
}

TEST_F(ExperimentFilesTest, ConfigThatIsNotUtf8NamesWhere) {
  Write("latin1.yaml", "name: x\ndescription: caf\xe9\n");
  absl::StatusOr<std::string> text = ReadConfigFile(dir_ + "/latin1.yaml");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(text.status().message(), "config file '" + dir_ +
                                         "/latin1.yaml' is not valid UTF-8 at line 2, byte "
                                         "offset 24 (0xe9); save it as UTF-8");
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

struct IgnoreCase {
  const char* detignore;
  const char* path;
  bool is_dir;
  bool ignored;
};

TEST(ContextIgnore, FollowsGitignoreSyntax) {
  const IgnoreCase cases[] = {
      // No slash: a name at any depth.
      {"*.log", "a.log", false, true},
      {"*.log", "sub/deep/b.log", false, true},
      {"*.log", "a.logx", false, false},
      {"*.log", "logs.d/a.txt", false, false},
      // A leading or middle slash anchors to the context directory.
      {"/build", "build", true, true},
      {"/build", "sub/build", true, false},
      {"doc/*.txt", "doc/a.txt", false, true},
      {"doc/*.txt", "doc/sub/a.txt", false, false},
      {"doc/*.txt", "x/doc/a.txt", false, false},
      // A trailing slash: directories only.
      {"build/", "build", true, true},
      {"build/", "build", false, false},
      {"build/", "sub/build", true, true},
      {"out/tmp/", "out/tmp", true, true},
      {"out/tmp/", "x/out/tmp", true, false},
      // **.
      {"**/foo", "foo", false, true},
      {"**/foo", "a/b/foo", true, true},
      {"a/**/b", "a/b", false, true},
      {"a/**/b", "a/x/y/b", false, true},
      {"a/**/b", "a/xb", false, false},
      {"logs/**", "logs/x", false, true},
      {"logs/**", "logs/x/y", false, true},
      {"logs/**", "logs", true, false},
      {"a**b", "axxb", false, true},
      {"a**b", "ax/b", false, false},
      // ?, sets, escapes.
      {"data?.csv", "data1.csv", false, true},
      {"data?.csv", "data12.csv", false, false},
      {"[a-c]x", "bx", false, true},
      {"[a-c]x", "dx", false, false},
      {"[!a-c]x", "dx", false, true},
      {"[!a-c]x", "ax", false, false},
      {"[]]x", "]x", false, true},
      {"[unclosed", "[unclosed", false, true},
      {"\\#hash", "#hash", false, true},
      {"\\!bang", "!bang", false, true},
      {"*\\?", "what?", false, true},
      {"*\\?", "whats", false, false},
      // Comments, blank lines, trailing spaces, CRLF.
      {"# a.txt\n\n", "# a.txt", false, false},
      {"foo   ", "foo", false, true},
      {"foo\\ ", "foo ", false, true},
      {"foo\\ ", "foo", false, false},
      {"bar\r\nbaz\r\n", "bar", false, true},
      {"bar\r\nbaz\r\n", "baz", false, true},
      // Negation: the last matching rule decides.
      {"*.log\n!keep.log", "keep.log", false, false},
      {"*.log\n!keep.log", "other.log", false, true},
      {"!keep.log\n*.log", "keep.log", false, true},
      {"!", "!", false, false},
      // det's defaults, which a .detignore may undo.
      {"", ".git", true, true},
      {"", "sub/.git", false, true},
      {"", "pkg/__pycache__", true, true},
      {"", "model.pyc", false, true},
      {"", "model.py", false, false},
      {"!*.pyc", "model.pyc", false, false},
  };
  for (const IgnoreCase& c : cases) {
    EXPECT_EQ(ContextIgnore(c.detignore).Ignored(c.path, c.is_dir), c.ignored)
        << "rules \"" << c.detignore << "\" path \"" << c.path << "\" dir " << c.is_dir;
  }
}

TEST_F(ExperimentFilesTest, DetignoreLeavesOutWhatItNamesAndIsNotUploaded) {
  Write("ctx/.detignore",
        "# big things\n"
        "data/\n"
        "*.ckpt\n"
        "!best.ckpt\n"
        "/notes.txt\n"
        "logs/**\n");
  Write("ctx/train.py", "x");
  Write("ctx/data/big.bin", "x");
  Write("ctx/data/keep.py", "x");
  Write("ctx/sub/data/also.bin", "x");
  Write("ctx/a.ckpt", "x");
  Write("ctx/sub/best.ckpt", "x");
  Write("ctx/notes.txt", "x");
  Write("ctx/sub/notes.txt", "x");
  Write("ctx/logs/1/out.txt", "x");
  Write("ctx/sub/.detignore", "train.py\n");  // Only the top one is read; none is uploaded.
  Write("ctx/pkg/__pycache__/m.cpython-311.pyc", "x");
  Write("ctx/pkg/m.py", "x");
  // Inside a left-out directory nothing is looked at: not even a link out of the context.
  Link("/etc/passwd", "ctx/data/passwd");
  absl::StatusOr<std::vector<std::string>> paths = Paths();
  ASSERT_TRUE(paths.ok()) << paths.status();
  EXPECT_THAT(*paths, ElementsAre("pkg/m.py", "sub/best.ckpt", "sub/notes.txt", "train.py"));
}

TEST_F(ExperimentFilesTest, ALeftOutDirectoryCannotBeReincluded) {
  Write("ctx/.detignore", "data/\n!data/keep.txt\n");
  Write("ctx/data/keep.txt", "x");
  Write("ctx/main.py", "x");
  absl::StatusOr<std::vector<std::string>> paths = Paths();
  ASSERT_TRUE(paths.ok()) << paths.status();
  EXPECT_THAT(*paths, ElementsAre("main.py"));
}

TEST_F(ExperimentFilesTest, ALinkToAFileInsideIsUploadedAsACopy) {
  Write("ctx/real/config.json", "{\"a\": 1}");
  ::chmod((dir_ + "/ctx/real/config.json").c_str(), 0640);
  Link("real/config.json", "ctx/config.json");
  Link("../config.json", "ctx/sub/chain.json");  // A link to a link inside.
  Link("does-not-exist", "ctx/dangling");
  absl::StatusOr<std::vector<v1::ContextFile>> files = ReadContextDir(dir_ + "/ctx");
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 3u);
  EXPECT_EQ((*files)[0].path(), "config.json");
  EXPECT_EQ((*files)[0].content(), "{\"a\": 1}");
  EXPECT_EQ((*files)[0].mode(), 0640u);
  EXPECT_EQ((*files)[1].path(), "real/config.json");
  EXPECT_EQ((*files)[2].path(), "sub/chain.json");
  EXPECT_EQ((*files)[2].content(), "{\"a\": 1}");
}

TEST_F(ExperimentFilesTest, ALinkOutOfTheDirectoryIsRefusedNamingIt) {
  Write("secret", "admin password");
  Write("ctx/train.py", "x");
  Link("../../secret", "ctx/sub/innocent.txt");
  absl::StatusOr<std::vector<std::string>> paths = Paths();
  EXPECT_EQ(paths.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(paths.status().message(), HasSubstr("context directory '" + dir_ + "/ctx'"));
  EXPECT_THAT(paths.status().message(), HasSubstr("symbolic link 'sub/innocent.txt' points to '" +
                                                  std::filesystem::canonical(dir_).string() +
                                                  "/secret', outside the directory"));
  EXPECT_THAT(paths.status().message(), HasSubstr(".detignore"));

  // Absolute targets, and links inside that lead outside, are refused too.
  std::filesystem::remove(dir_ + "/ctx/sub/innocent.txt");
  Link("/etc/passwd", "ctx/abs");
  EXPECT_THAT(Paths().status().message(), HasSubstr("symbolic link 'abs' points to '/etc/"));
  std::filesystem::remove(dir_ + "/ctx/abs");
  Link(dir_ + "/secret", "ctx/hop1");
  Link("hop1", "ctx/hop2");
  EXPECT_THAT(Paths().status().message(), HasSubstr("outside the directory"));

  // Listed in .detignore, the links are left out and the rest is read.
  Write("ctx/.detignore", "hop*\n");
  paths = Paths();
  ASSERT_TRUE(paths.ok()) << paths.status();
  EXPECT_THAT(*paths, ElementsAre("train.py"));
}

TEST_F(ExperimentFilesTest, ALinkToADirectoryIsRefusedNamingIt) {
  Write("ctx/real/a.txt", "x");
  Link("real", "ctx/alias");
  absl::StatusOr<std::vector<std::string>> paths = Paths();
  EXPECT_EQ(paths.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(paths.status().message(), HasSubstr("symbolic link 'alias' points to a directory"));
  // Even one to the context directory itself (a cycle).
  std::filesystem::remove(dir_ + "/ctx/alias");
  Link("..", "ctx/real/up");
  EXPECT_THAT(Paths().status().message(),
              HasSubstr("symbolic link 'real/up' points to a directory"));
  Write("ctx/.detignore", "up/\n");  // A link to a directory is matched as a directory.
  paths = Paths();
  ASSERT_TRUE(paths.ok()) << paths.status();
  EXPECT_THAT(*paths, ElementsAre("real/a.txt"));
}

TEST_F(ExperimentFilesTest, AContextGivenThroughALinkIsRead) {
  Write("real-ctx/train.py", "x");
  Link("real-ctx", "ctx");
  absl::StatusOr<std::vector<std::string>> paths = Paths();
  ASSERT_TRUE(paths.ok()) << paths.status();
  EXPECT_THAT(*paths, ElementsAre("train.py"));
}

TEST_F(ExperimentFilesTest, RefusesMoreFilesThanTheLimitNamingIt) {
  for (int i = 0; i < 4; ++i) Write("ctx/f" + std::to_string(i), "");
  Write("ctx/skip.log", "");
  Write("ctx/.detignore", "*.log\n");
  absl::StatusOr<std::vector<std::string>> paths = Paths(/*max_files=*/4);
  ASSERT_TRUE(paths.ok()) << paths.status();  // Left-out files do not count.
  EXPECT_EQ(paths->size(), 4u);
  Write("ctx/f4", "");
  paths = Paths(/*max_files=*/4);
  EXPECT_EQ(paths.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(paths.status().message(), HasSubstr("context directory '" + dir_ +
                                                  "/ctx': holds more than 4 files to "
                                                  "upload, over the limit of 4 files"));
}

// The case from issue 15: many empty files, which the byte limit alone let through.
TEST_F(ExperimentFilesTest, TheDefaultLimitIsTenThousandFiles) {
  EXPECT_EQ(kMaxContextFiles, 10000u);
  std::filesystem::create_directories(dir_ + "/ctx");
  for (int i = 0; i <= 10000; ++i) {
    std::ofstream(dir_ + "/ctx/f" + std::to_string(i));
  }
  absl::StatusOr<std::vector<std::string>> paths = Paths();
  EXPECT_EQ(paths.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(paths.status().message(), HasSubstr("over the limit of 10000 files"));
  std::filesystem::remove(dir_ + "/ctx/f0");
  paths = Paths();
  ASSERT_TRUE(paths.ok()) << paths.status();
  EXPECT_EQ(paths->size(), 10000u);
}

}  // namespace
}  // namespace det::cli
