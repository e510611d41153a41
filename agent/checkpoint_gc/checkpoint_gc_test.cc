#include "agent/checkpoint_gc/checkpoint_gc.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  std::string t =
      std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/gc-XXXXXX";
  return mkdtemp(t.data());
}

bool Exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

// A checkpoint directory `dir`/`uuid` holding a file.
v1::Checkpoint Make(const std::string& dir, const std::string& uuid) {
  mkdir((dir + "/" + uuid).c_str(), 0755);
  std::ofstream(dir + "/" + uuid + "/model.bin") << "weights";
  v1::Checkpoint c;
  c.set_uuid(uuid);
  c.set_storage_path(dir + "/" + uuid);
  return c;
}

TEST(DeleteCheckpoints, DeletesEachDirectoryAndSaysSoPerCheckpoint) {
  std::string dir = TempDir();
  v1::CheckpointGcSpec spec;
  spec.set_storage_root(dir);
  *spec.add_checkpoints() = Make(dir, "u-1");
  *spec.add_checkpoints() = Make(dir, "u-2");
  v1::Checkpoint gone;  // Deleted by an earlier run of the task: success.
  gone.set_uuid("u-3");
  gone.set_storage_path(dir + "/u-3");
  *spec.add_checkpoints() = gone;
  std::stringstream out, err;
  absl::Status st = DeleteCheckpoints(spec, out, err);
  ASSERT_TRUE(st.ok()) << st << err.str();
  EXPECT_FALSE(Exists(dir + "/u-1"));
  EXPECT_FALSE(Exists(dir + "/u-2"));
  EXPECT_TRUE(Exists(dir));
  EXPECT_EQ(out.str(), "deleted checkpoint u-1 (" + dir + "/u-1)\ndeleted checkpoint u-2 (" + dir +
                           "/u-2)\ndeleted checkpoint u-3 (" + dir + "/u-3)\n");
  EXPECT_EQ(err.str(), "");
}

TEST(DeleteCheckpoints, RefusesPathsThatAreNotTheCheckpointsOwnAndGoesOn) {
  std::string dir = TempDir();
  std::ofstream(dir + "/keep.txt") << "not a checkpoint";
  v1::CheckpointGcSpec spec;
  spec.set_storage_root(dir);
  v1::Checkpoint root;  // The storage root itself: does not end in the uuid.
  root.set_uuid("u-root");
  root.set_storage_path(dir);
  *spec.add_checkpoints() = root;
  v1::Checkpoint relative = Make(dir, "u-rel");
  relative.set_storage_path("u-rel");
  *spec.add_checkpoints() = relative;
  v1::Checkpoint escape = Make(dir, "u-esc");
  escape.set_storage_path(dir + "/../" + dir.substr(dir.rfind('/') + 1) + "/u-esc");
  *spec.add_checkpoints() = escape;
  *spec.add_checkpoints() = Make(dir, "u-ok");
  std::stringstream out, err;
  absl::Status st = DeleteCheckpoints(spec, out, err);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("checkpoint u-root: refusing to delete storage path '" + dir + "'"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("(and 2 more); 1 of 4 checkpoint(s) deleted"));
  // Nothing refused was touched; the good one went.
  EXPECT_TRUE(Exists(dir + "/keep.txt"));
  EXPECT_TRUE(Exists(dir + "/u-rel/model.bin"));
  EXPECT_TRUE(Exists(dir + "/u-esc/model.bin"));
  EXPECT_FALSE(Exists(dir + "/u-ok"));
  EXPECT_EQ(out.str(), "deleted checkpoint u-ok (" + dir + "/u-ok)\n");
  EXPECT_THAT(err.str(), HasSubstr("checkpoint u-rel: refusing"));
  EXPECT_THAT(err.str(), HasSubstr("checkpoint u-esc: refusing"));
}

// The attack of the review (N6): a checkpoint "registered" under a link in the storage
// root that names a victim directory elsewhere, and one outside the root altogether.
TEST(DeleteCheckpoints, RefusesAPathOutsideItsStorageRoot) {
  const std::string root = TempDir();
  const std::string elsewhere = TempDir();
  Make(elsewhere, "victim");
  ASSERT_EQ(symlink(elsewhere.c_str(), (root + "/link").c_str()), 0);
  v1::CheckpointGcSpec spec;
  spec.set_storage_root(root);
  v1::Checkpoint through_link;
  through_link.set_uuid("victim");
  through_link.set_storage_path(root + "/link/victim");
  *spec.add_checkpoints() = through_link;
  v1::Checkpoint outside;
  outside.set_uuid("victim");
  outside.set_storage_path(elsewhere + "/victim");
  *spec.add_checkpoints() = outside;
  std::stringstream out, err;
  absl::Status st = DeleteCheckpoints(spec, out, err);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("'" + root + "/link' is a symbolic link, and deletion follows none"));
  EXPECT_THAT(err.str(), HasSubstr("refusing to delete '" + elsewhere +
                                   "/victim': not inside the checkpoint storage root '" + root +
                                   "'"));
  EXPECT_TRUE(Exists(elsewhere + "/victim/model.bin"));
  EXPECT_EQ(out.str(), "");

  // A spec without a root deletes nothing.
  spec.clear_storage_root();
  spec.clear_checkpoints();
  *spec.add_checkpoints() = Make(root, "u-1");
  EXPECT_EQ(DeleteCheckpoints(spec, out, err).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Exists(root + "/u-1/model.bin"));
}

TEST(RunCheckpointGc, ReadsItsSpecFileAndExitsWithTheOutcome) {
  std::string dir = TempDir();
  v1::CheckpointGcSpec spec;
  spec.set_storage_root(dir);
  *spec.add_checkpoints() = Make(dir, "u-1");
  std::string path = dir + "/spec.json";
  ASSERT_TRUE(WriteCheckpointGcSpec(path, spec).ok());
  auto read = ReadCheckpointGcSpec(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->checkpoints(0).storage_path(), dir + "/u-1");
  EXPECT_EQ(RunCheckpointGc({path}), 0);
  EXPECT_FALSE(Exists(dir + "/u-1"));
  EXPECT_EQ(RunCheckpointGc({path}), 0);  // Again: already gone is success.

  v1::Checkpoint bad;
  bad.set_uuid("u-2");
  bad.set_storage_path("/");
  *spec.add_checkpoints() = bad;
  ASSERT_TRUE(WriteCheckpointGcSpec(path, spec).ok());
  EXPECT_EQ(RunCheckpointGc({path}), 1);
  EXPECT_TRUE(Exists(dir));

  std::ofstream(path) << "{not json";
  EXPECT_EQ(RunCheckpointGc({path}), 2);
  EXPECT_EQ(RunCheckpointGc({dir + "/missing.json"}), 2);
  EXPECT_EQ(RunCheckpointGc({}), 2);
  EXPECT_THAT(CheckpointGcArgv("/bin/det-agent", path),
              ::testing::ElementsAre("/bin/det-agent", "--checkpoint-gc", path));
}

}  // namespace
}  // namespace det::agent
