#include "common/checkpoint/checkpoint_files.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

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
  mkdir((dir + "/u-1").c_str(), 0700);
  mkdir((dir + "/u-1/sub").c_str(), 0700);
  std::ofstream(dir + "/u-1/sub/model.bin") << "x";
  v1::Checkpoint c = C("u-1", dir + "/u-1");
  ASSERT_TRUE(DeleteCheckpointFiles(c, dir).ok());
  EXPECT_FALSE(Exists(dir + "/u-1"));
  EXPECT_TRUE(Exists(dir));
  EXPECT_TRUE(DeleteCheckpointFiles(c, dir).ok());  // Already gone.

  c.set_storage_path(dir);  // Does not end in the uuid: nothing is deleted.
  EXPECT_EQ(DeleteCheckpointFiles(c, dir).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Exists(dir));
  c.set_storage_path("u-1");
  EXPECT_EQ(DeleteCheckpointFiles(c, dir).code(), absl::StatusCode::kInvalidArgument);
}

// A victim directory outside the storage root, reached by a path that leaves it lexically
// or through a link below the root: nothing of it is deleted, and the error says why.
TEST(DeleteCheckpointFiles, DeletesNothingOutsideItsRoot) {
  const std::string root = TempDir();
  const std::string outside = TempDir();
  mkdir((outside + "/victim").c_str(), 0700);
  std::ofstream(outside + "/victim/keep") << "k";

  absl::Status st = DeleteCheckpointFiles(C("victim", outside + "/victim"), root);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("not inside the checkpoint storage root '" + root + "'"));
  // The root itself is not a checkpoint.
  EXPECT_EQ(DeleteCheckpointFiles(C(root.substr(root.rfind('/') + 1), root), root).code(),
            absl::StatusCode::kInvalidArgument);

  ASSERT_EQ(symlink(outside.c_str(), (root + "/link").c_str()), 0);
  st = DeleteCheckpointFiles(C("victim", root + "/link/victim"), root);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("'" + root + "/link' is a symbolic link, and deletion follows none"));
  EXPECT_TRUE(Exists(outside + "/victim/keep"));

  // The checkpoint itself a link: the link goes, not what it names; a link inside it too.
  ASSERT_EQ(symlink((outside + "/victim").c_str(), (root + "/u-2").c_str()), 0);
  EXPECT_TRUE(DeleteCheckpointFiles(C("u-2", root + "/u-2"), root).ok());
  EXPECT_FALSE(Exists(root + "/u-2"));
  mkdir((root + "/u-3").c_str(), 0700);
  ASSERT_EQ(symlink((outside + "/victim").c_str(), (root + "/u-3/inner").c_str()), 0);
  EXPECT_TRUE(DeleteCheckpointFiles(C("u-3", root + "/u-3"), root).ok());
  EXPECT_FALSE(Exists(root + "/u-3"));
  EXPECT_TRUE(Exists(outside + "/victim/keep"));
}

TEST(CheckpointStorageRoot, TheAllowedRootADirectoryLiesUnder) {
  const std::vector<std::string> roots = {"/srv/ckpt", "/data/team/"};
  EXPECT_EQ(*CheckpointStorageRoot("/srv/ckpt", roots), "/srv/ckpt");
  EXPECT_EQ(*CheckpointStorageRoot("/srv/ckpt/a/b", roots), "/srv/ckpt");
  EXPECT_EQ(*CheckpointStorageRoot("/data//team/x/", roots), "/data/team/");
  for (const std::string dir : {"/srv/ckpt2", "/srv", "/etc", "/srv/ckpt/../../etc",
                                "/srv/ckpt/./a", "srv/ckpt/a", ""}) {
    absl::StatusOr<std::string> root = CheckpointStorageRoot(dir, roots);
    EXPECT_EQ(root.status().code(), absl::StatusCode::kInvalidArgument) << dir;
    EXPECT_THAT(std::string(root.status().message()), HasSubstr("'" + dir + "'")) << dir;
  }
  EXPECT_THAT(std::string(CheckpointStorageRoot("/etc", roots).status().message()),
              HasSubstr("'/etc' is not under a checkpoint storage root this cluster allows "
                        "(/srv/ckpt, /data/team/; master.yaml checkpoint_storage_allowed_roots"));
  // A cluster that restricts nothing: the directory is its own root.
  EXPECT_EQ(*CheckpointStorageRoot("/anywhere/x", {}), "/anywhere/x");
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
