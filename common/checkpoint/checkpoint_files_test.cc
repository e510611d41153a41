#include "common/checkpoint/checkpoint_files.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  std::string t =
      std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/ckpt-XXXXXX";
  return mkdtemp(t.data());
}

bool Exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

v1::Checkpoint C(const std::string& uuid, const std::string& path) {
  v1::Checkpoint c;
  c.set_uuid(uuid);
  c.set_storage_path(path);
  return c;
}

TEST(CheckCheckpointPath, AcceptsOnlyAbsolutePathsEndingInTheUuid) {
  EXPECT_TRUE(CheckCheckpointPath(C("u-1", "/ckpt/u-1")).ok());
  for (const auto& [uuid, path] : std::vector<std::pair<std::string, std::string>>{
           {"u-1", "u-1"},               // relative
           {"u-1", "ckpt/u-1"},          // relative
           {"u-1", "/ckpt"},             // not the checkpoint's own directory
           {"u-1", "/ckpt/xu-1"},        // the uuid is not a whole path component
           {"u-1", "/ckpt/../etc/u-1"},  // escapes
           {"u-1", ""},
           {"", "/ckpt/"},  // no uuid: would name the storage root
       }) {
    absl::Status st = CheckCheckpointPath(C(uuid, path));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << uuid << " " << path;
    EXPECT_THAT(std::string(st.message()),
                HasSubstr("refusing to delete storage path '" + path + "'"));
  }
}

TEST(DeleteCheckpointFiles, RemovesTheTreeAndRefusesSuspiciousPaths) {
  std::string dir = TempDir();
  mkdir((dir + "/u-1").c_str(), 0755);
  mkdir((dir + "/u-1/sub").c_str(), 0755);
  std::ofstream(dir + "/u-1/sub/model.bin") << "x";
  v1::Checkpoint c = C("u-1", dir + "/u-1");
  ASSERT_TRUE(DeleteCheckpointFiles(c).ok());
  EXPECT_FALSE(Exists(dir + "/u-1"));
  EXPECT_TRUE(Exists(dir));
  EXPECT_TRUE(DeleteCheckpointFiles(c).ok());  // Already gone.

  c.set_storage_path(dir);  // Does not end in the uuid: nothing is deleted.
  EXPECT_EQ(DeleteCheckpointFiles(c).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Exists(dir));
  c.set_storage_path("u-1");
  EXPECT_EQ(DeleteCheckpointFiles(c).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckReportedCheckpoint, OnlyADirectoryOfItsOwnInTheExperimentsStorage) {
  EXPECT_TRUE(CheckReportedCheckpoint(C("u-1", "/ckpt/u-1"), "/ckpt").ok());
  for (const auto& [uuid, path] : std::vector<std::pair<std::string, std::string>>{
           {"u-1", "/etc/u-1"},          // another directory
           {"u-1", "/ckpt/x/u-1"},       // deeper
           {"u-1", "/ckpt/../etc/u-1"},  // escaping
           {"u-1", "/ckpt"},             // the storage root
       }) {
    absl::Status st = CheckReportedCheckpoint(C(uuid, path), "/ckpt");
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_THAT(std::string(st.message()), HasSubstr("checkpoint.storage_path")) << path;
  }
  for (const std::string uuid : {"", ".", "..", "a/b"}) {
    EXPECT_THAT(std::string(CheckReportedCheckpoint(C(uuid, "/ckpt/" + uuid), "/ckpt").message()),
                HasSubstr("checkpoint.uuid")) << uuid;
  }
  EXPECT_EQ(CheckReportedCheckpoint(C("u-1", "/ckpt/u-1"), "").code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace det
