// GlooCollective with real processes on loopback: collective_test_worker started once
// per rank, rendezvous through files.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/worker/cpp/collective/testing/process_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::collective {
namespace {

using ::det::testing::NewTempDir;
using ::det::testing::ProcessGroup;
using ::det::testing::RankResult;
using ::det::testing::RunfilePath;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<RankResult> RunRanks(int n, const std::string& scenario, int victim = -1,
                                 int timeout_ms = 60000, const std::vector<int>& only = {}) {
  std::string dir = NewTempDir(scenario);
  EXPECT_FALSE(dir.empty());
  auto group = ProcessGroup::Start(
      n,
      [&](int rank) {
        return std::vector<std::string>{RunfilePath("common/worker/cpp/collective/collective_test_worker"),
                                        "gloo",
                                        absl::StrCat(rank),
                                        absl::StrCat(n),
                                        dir,
                                        "test",
                                        scenario,
                                        absl::StrCat(victim),
                                        absl::StrCat(timeout_ms)};
      },
      dir);
  EXPECT_TRUE(group.ok()) << group.status();
  if (!group.ok()) return {};
  return (*group)->Wait(absl::Seconds(120), only);
}

class GlooRanks : public ::testing::TestWithParam<int> {};

TEST_P(GlooRanks, AllReduceBroadcastAndBarrierGiveTheRightAnswerOnEveryRank) {
  auto results = RunRanks(GetParam(), "ops");
  ASSERT_EQ(results.size(), static_cast<size_t>(GetParam()));
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].exited && results[r].status.ok())
        << "rank " << r << ": " << results[r].status.ToString() << "\n" << results[r].err;
    EXPECT_THAT(results[r].out, HasSubstr(absl::StrCat("rank ", r, " ok")));
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooRanks, ::testing::Values(2, 3, 4));

TEST(GlooCollective, EachRunGetsAFreshMembership) {
  auto results = RunRanks(3, "generations");
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].status.ok()) << "rank " << r << ": " << results[r].err;
  }
}

TEST(GlooCollective, APeerKilledMidOperationMakesEveryOtherRankFailFast) {
  const int victim = 2;
  auto results = RunRanks(4, "die", victim);
  ASSERT_EQ(results.size(), 4u);
  ASSERT_TRUE(results[victim].exited);
  EXPECT_EQ(results[victim].status.signal, SIGKILL);
  for (int r = 0; r < 4; ++r) {
    if (r == victim) continue;
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(results[r].exited) << "rank " << r << " hung after rank " << victim << " died";
    EXPECT_EQ(results[r].status.exit_code, 3) << results[r].err;
    // The broken connection was noticed (ABORTED), not waited out to the 60 s operation
    // timeout (DEADLINE_EXCEEDED).
    EXPECT_THAT(results[r].err, Not(HasSubstr("DEADLINE_EXCEEDED")));
    EXPECT_THAT(results[r].err, HasSubstr(absl::StrCat("gloo all-reduce of 262144 floats on rank ", r, " of 4 failed")));
    EXPECT_THAT(results[r].err, HasSubstr("ABORTED"));
  }
}

TEST(GlooCollective, APeerThatHangsIsCaughtByTheTimeout) {
  const int victim = 1;
  auto results = RunRanks(3, "hang", victim, /*timeout_ms=*/1500, /*only=*/{0, 2});
  ASSERT_EQ(results.size(), 3u);
  EXPECT_FALSE(results[victim].exited);  // Stopped; killed by Wait() afterwards.
  int timed_out = 0;
  for (int r = 0; r < 3; ++r) {
    if (r == victim) continue;
    ASSERT_TRUE(results[r].exited) << "rank " << r << " hung";
    EXPECT_EQ(results[r].status.exit_code, 3) << results[r].err;
    // A rank waiting on the stopped one times out; a rank waiting on a rank that timed
    // out may instead see that rank's connection close.
    EXPECT_THAT(results[r].err, ::testing::AnyOf(HasSubstr("DEADLINE_EXCEEDED"), HasSubstr("ABORTED")));
    timed_out += results[r].err.find("DEADLINE_EXCEEDED") != std::string::npos;
  }
  EXPECT_GE(timed_out, 1);
}

}  // namespace
}  // namespace det::collective
