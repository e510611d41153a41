#include "agent/supervisor/allocation_record.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  mkdir(dir.c_str(), 0755);
  return dir;
}

TEST(AllocationRecord, RoundTrip) {
  std::string dir = TempDir("roundtrip");
  AllocationRecord r;
  r.launch.set_allocation_id("7.1");
  r.launch.set_trial_id(7);
  r.launch.add_argv("./train.sh");
  (*r.launch.mutable_env())["DET_TRIAL_ID"] = "7";
  r.launch.add_ranks()->set_rank(3);
  r.launch.mutable_model_context()->set_experiment_id(2);
  r.launch.mutable_model_context()->set_sha256("ab12");
  r.launched_reported = true;
  r.killing = true;
  r.kill_deadline_ms = 1700000000123;
  WorkerRecord& w = r.workers.emplace_back();
  w.rank = 3;
  w.pid = 4242;
  w.start_ticks = 987654321;
  w.shipped[0] = 100;
  w.shipped[1] = 7;
  w.exit_reported = true;
  ASSERT_TRUE(WriteAllocationRecord(dir, r).ok());

  auto back = ReadAllocationRecord(dir);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->launch.allocation_id(), "7.1");
  EXPECT_EQ(back->launch.argv(0), "./train.sh");
  EXPECT_EQ(back->launch.env().at("DET_TRIAL_ID"), "7");
  EXPECT_EQ(back->launch.ranks(0).rank(), 3);
  EXPECT_EQ(back->launch.model_context().experiment_id(), 2);
  EXPECT_EQ(back->launch.model_context().sha256(), "ab12");
  EXPECT_TRUE(back->launched_reported);
  EXPECT_TRUE(back->killing);
  EXPECT_EQ(back->kill_deadline_ms, 1700000000123);
  ASSERT_EQ(back->workers.size(), 1u);
  EXPECT_EQ(back->workers[0].pid, 4242);
  EXPECT_EQ(back->workers[0].start_ticks, 987654321u);
  EXPECT_EQ(back->workers[0].shipped[0], 100);
  EXPECT_EQ(back->workers[0].shipped[1], 7);
  EXPECT_TRUE(back->workers[0].exit_reported);
}

TEST(AllocationRecord, MissingIsNotFoundAndGarbageIsDataLoss) {
  std::string dir = TempDir("garbage");
  EXPECT_TRUE(absl::IsNotFound(ReadAllocationRecord(dir).status()));
  std::ofstream(RecordPath(dir)) << "{\"launch\": {}, \"workers\": [{\"rank\": \"x\"}]}";
  auto r = ReadAllocationRecord(dir);
  EXPECT_TRUE(absl::IsDataLoss(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr(RecordPath(dir)));
  std::ofstream(RecordPath(dir)) << "{not json";
  EXPECT_TRUE(absl::IsDataLoss(ReadAllocationRecord(dir).status()));
}

}  // namespace
}  // namespace det::agent
