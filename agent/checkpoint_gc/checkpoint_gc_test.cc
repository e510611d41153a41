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

TEST(RunCheckpointGc, ReadsItsSpecFileAndExitsWithTheOutcome) {
  std::string dir = TempDir();
  v1::CheckpointGcSpec spec;
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
