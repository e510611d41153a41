#include "common/worker/cpp/harness/checkpoint.h"

#include <stdlib.h>
#include <sys/stat.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::harness {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

std::string TempDir() {
  std::string t = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/ckpt-XXXXXX";
  return mkdtemp(t.data());
}

bool Exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

TEST(Checkpoint, WritesAtomicallyAndReadsBack) {
  std::string dir = TempDir() + "/storage/exp";
  std::string uuid = NewCheckpointUuid();
  EXPECT_THAT(uuid, MatchesRegex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"));
  std::string blob(100000, '\0');
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>(i * 13);
  auto c = WriteCheckpoint(dir, uuid, {{"model.bin", blob}, {"state.json", "{}"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->uuid(), uuid);
  EXPECT_EQ(c->storage_path(), dir + "/" + uuid);
  EXPECT_EQ(c->resources().at("model.bin"), 100000);
  EXPECT_FALSE(Exists(dir + "/." + uuid + ".tmp"));
  auto files = ReadCheckpoint(c->storage_path());
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->size(), 2u);
  EXPECT_EQ(files->at("model.bin"), blob);
}

TEST(Checkpoint, AFailedWriteLeavesNoCheckpoint) {
  std::string dir = TempDir();
  auto c = WriteCheckpoint(dir, "u1", {{"ok", "x"}, {"bad/name", "y"}});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Exists(dir + "/u1"));
  EXPECT_FALSE(Exists(dir + "/.u1.tmp"));
  // Not writable: the error names the path.
  auto denied = WriteCheckpoint("/proc/det-no-such", "u2", {{"a", "b"}});
  EXPECT_FALSE(denied.ok());
  EXPECT_THAT(denied.status().message(), HasSubstr("/proc/det-no-such"));
}

TEST(Checkpoint, AMissingCheckpointIsNotFoundNamingThePath) {
  auto files = ReadCheckpoint("/nonexistent/ckpt");
  EXPECT_EQ(files.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(files.status().message(), HasSubstr("/nonexistent/ckpt"));
}

TEST(TrainingState, RoundTripsAndRejectsGarbage) {
  TrainingState s;
  s.total_batches = 1234;
  s.epoch = 2;
  s.samples_in_epoch = 640;
  s.global_batch_size = 64;
  s.order_algorithm = "epoch_order_v1";
  s.dataset_fingerprint = 0xfedcba9876543210ULL;
  s.dataset_size = 60000;
  s.trial_seed = 4000000000u;
  s.world_size = 4;
  s.rng_states = {"1 2 3", "4 5 6"};
  s.extra["best_validation"] = 0.25;
  auto back = ParseTrainingState(SerializeTrainingState(s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->total_batches, 1234);
  EXPECT_EQ(back->samples_in_epoch, 640);
  EXPECT_EQ(back->dataset_fingerprint, 0xfedcba9876543210ULL);
  EXPECT_EQ(back->trial_seed, 4000000000u);
  EXPECT_EQ(back->rng_states, s.rng_states);
  EXPECT_DOUBLE_EQ(back->extra["best_validation"].get<double>(), 0.25);

  EXPECT_EQ(ParseTrainingState("not json").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(ParseTrainingState(R"({"version": 1, "epoch": "x"})").status().message(),
              HasSubstr("total_batches"));
}

}  // namespace
}  // namespace det::harness
