#include "cli/checkpoint_download.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::cli {
namespace {

namespace fs = std::filesystem;
using ::det::testing::StatusIs;
using ::testing::HasSubstr;

class CopyCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = fs::path(tmp ? tmp : "/tmp") /
            ("ckpt-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    src_ = root_ / "storage" / "uuid-1";
    fs::create_directories(src_ / "sub");
    Write(src_ / "model.pt", "weights");
    Write(src_ / "sub" / "state.json", "{\"batches\": 10}");
  }
  void TearDown() override { fs::remove_all(root_); }

  static void Write(const fs::path& p, const std::string& content) { std::ofstream(p) << content; }
  static std::string Read(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  fs::path root_, src_;
};

TEST_F(CopyCheckpointTest, CopiesEveryFileIntoANewDirectory) {
  const fs::path out = root_ / "out" / "uuid-1";
  auto copied = CopyCheckpointDirectory(src_.string(), out.string());
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(copied->files, 2);
  EXPECT_EQ(copied->bytes, 7 + 15);
  EXPECT_EQ(Read(out / "model.pt"), "weights");
  EXPECT_EQ(Read(out / "sub" / "state.json"), "{\"batches\": 10}");
}

TEST_F(CopyCheckpointTest, ALinkInsideTheCheckpointIsCopiedAsItsFile) {
  fs::create_symlink(src_ / "model.pt", src_ / "latest.pt");
  const fs::path out = root_ / "out";
  auto copied = CopyCheckpointDirectory(src_.string(), out.string());
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(copied->files, 3);
  EXPECT_FALSE(fs::is_symlink(out / "latest.pt"));
  EXPECT_EQ(Read(out / "latest.pt"), "weights");
}

TEST_F(CopyCheckpointTest, ALinkOutOfTheCheckpointIsRefusedAndNothingIsCopied) {
  Write(root_ / "secret", "password");
  fs::create_symlink(root_ / "secret", src_ / "sub" / "escape");
  const fs::path out = root_ / "out";
  EXPECT_THAT(CopyCheckpointDirectory(src_.string(), out.string()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "escape: a symbolic link to " + (root_ / "secret").string() +
                           " outside the checkpoint directory"));
  EXPECT_FALSE(fs::exists(out));
  // A link to a directory outside, or to its parent, the same.
  fs::remove(src_ / "sub" / "escape");
  fs::create_directory_symlink(src_.parent_path(), src_ / "up");
  EXPECT_THAT(CopyCheckpointDirectory(src_.string(), out.string()),
              StatusIs(absl::StatusCode::kFailedPrecondition, "outside the checkpoint directory"));
}

TEST_F(CopyCheckpointTest, ALinkThatClimbsOutOrIsTheCheckpointItselfIsRefused) {
  Write(root_ / "secret", "password");
  fs::create_symlink("../../secret", src_ / "sub" / "up");
  const fs::path out = root_ / "out";
  EXPECT_THAT(CopyCheckpointDirectory(src_.string(), out.string()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "up: a symbolic link to ../../secret outside the checkpoint directory"));
  EXPECT_FALSE(fs::exists(out));
  fs::remove(src_ / "sub" / "up");
  // A relative link down into the checkpoint is followed.
  fs::create_symlink("sub/state.json", src_ / "state-link.json");
  auto copied = CopyCheckpointDirectory(src_.string(), out.string());
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(Read(out / "state-link.json"), "{\"batches\": 10}");

  fs::create_directory_symlink(src_, root_ / "storage" / "uuid-link");
  EXPECT_THAT(CopyCheckpointDirectory((root_ / "storage" / "uuid-link").string(),
                                      (root_ / "out2").string()),
              StatusIs(absl::StatusCode::kFailedPrecondition, "is a symbolic link; not followed"));
}

// A file that is another user's, hard-linked into the checkpoint (fs.protected_hardlinks
// off): not copied. Needs root to make a file of another uid.
TEST_F(CopyCheckpointTest, AHardLinkToAnotherUsersFileIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  Write(root_ / "theirs", "password");
  ASSERT_EQ(chown((root_ / "theirs").c_str(), 12345, 12345), 0);
  fs::create_hard_link(root_ / "theirs", src_ / "sub" / "model2.pt");
  const fs::path out = root_ / "out";
  EXPECT_THAT(CopyCheckpointDirectory(src_.string(), out.string()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "model2.pt: a hard link to a file of uid 12345 in a checkpoint of uid 0"));
  EXPECT_FALSE(fs::exists(out));
}

// The review's race (N7): while the copies run, model.pt keeps turning into a link to a
// file outside and back (atomic renames). Each copy either refuses or copies the real
// file; none reads the outside file.
TEST_F(CopyCheckpointTest, ALinkSwappedInDuringTheCopyReadsNothingOutside) {
  Write(root_ / "secret", "password");
  std::atomic<bool> stop{false};
  std::thread swapper([&] {
    const fs::path link = root_ / ".link", file = root_ / ".file";  // Renamed in from outside.
    std::error_code ec;
    while (!stop.load()) {
      fs::remove(link, ec);
      fs::create_symlink(root_ / "secret", link, ec);
      fs::rename(link, src_ / "model.pt", ec);
      Write(file, "weights");
      fs::rename(file, src_ / "model.pt", ec);
    }
  });
  int refused = 0, copied = 0;
  for (int i = 0; i < 300; ++i) {
    const fs::path out = root_ / ("out-" + std::to_string(i));
    auto c = CopyCheckpointDirectory(src_.string(), out.string());
    if (c.ok()) {
      ++copied;
      EXPECT_EQ(Read(out / "model.pt"), "weights") << i;
    } else {
      ++refused;
      EXPECT_THAT(std::string(c.status().message()),
                  HasSubstr("model.pt: a symbolic link to " + (root_ / "secret").string()))
          << i;
      EXPECT_FALSE(fs::exists(out)) << i;
    }
    fs::remove_all(out);
  }
  stop = true;
  swapper.join();
  EXPECT_EQ(refused + copied, 300);
}

TEST_F(CopyCheckpointTest, AnUnreachableStoragePathIsNamed) {
  EXPECT_THAT(CopyCheckpointDirectory("/no/such/storage/uuid-9", (root_ / "out").string()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "cannot read the checkpoint's directory /no/such/storage/uuid-9 from this "
                       "machine"));
}

TEST_F(CopyCheckpointTest, ANonEmptyOutputIsRefused) {
  const fs::path out = root_ / "out";
  fs::create_directories(out);
  Write(out / "keep.txt", "mine");
  EXPECT_THAT(CopyCheckpointDirectory(src_.string(), out.string()),
              StatusIs(absl::StatusCode::kFailedPrecondition, "exists and is not empty"));
  EXPECT_EQ(Read(out / "keep.txt"), "mine");
  EXPECT_FALSE(fs::exists(out / "model.pt"));
}

}  // namespace
}  // namespace det::cli
