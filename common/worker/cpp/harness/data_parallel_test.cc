// Data-parallel training with real processes and real Gloo all-reduce on loopback: after
// every all-reduce step every rank holds bit-identical parameters, and N ranks train the
// same model as one rank with the same global batch.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/worker/cpp/collective/testing/process_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::harness {
namespace {

using ::det::testing::NewTempDir;
using ::det::testing::ProcessGroup;
using ::det::testing::RunfilePath;

struct RankRun {
  std::vector<std::string> step_hashes;
  double final_loss = -1;
};

std::vector<RankRun> Train(int ranks, int batches, int global_batch, const std::string& mode,
                           int aggregation = 1) {
  std::string dir = NewTempDir("dp");
  auto group = ProcessGroup::Start(
      ranks,
      [&](int rank) {
        return std::vector<std::string>{RunfilePath("common/worker/cpp/harness/data_parallel_test_worker"),
                                        absl::StrCat(rank),
                                        absl::StrCat(ranks),
                                        dir,
                                        absl::StrCat(batches),
                                        absl::StrCat(global_batch),
                                        mode,
                                        absl::StrCat(aggregation)};
      },
      dir);
  EXPECT_TRUE(group.ok()) << group.status();
  if (!group.ok()) return {};
  auto results = (*group)->Wait(absl::Seconds(120));
  std::vector<RankRun> runs(ranks);
  for (int r = 0; r < ranks; ++r) {
    EXPECT_TRUE(results[r].status.ok()) << "rank " << r << ": " << results[r].err;
    for (absl::string_view line : absl::StrSplit(results[r].out, '\n')) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      if (f.size() == 4 && f[0] == "step") runs[r].step_hashes.push_back(f[3]);
      if (f.size() == 2 && f[0] == "final_loss") EXPECT_TRUE(absl::SimpleAtod(f[1], &runs[r].final_loss));
    }
    EXPECT_EQ(runs[r].step_hashes.size(), static_cast<size_t>(batches)) << "rank " << r;
  }
  return runs;
}

TEST(DataParallel, EveryRankHoldsIdenticalParametersAfterEveryStep) {
  auto runs = Train(4, 24, 64, "reduce");
  ASSERT_EQ(runs.size(), 4u);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(runs[r].step_hashes, runs[0].step_hashes) << "rank " << r;
  // Training happened: the parameters moved every step.
  ASSERT_FALSE(runs[0].step_hashes.empty());
  EXPECT_NE(runs[0].step_hashes.front(), runs[0].step_hashes.back());
}

TEST(DataParallel, WithoutTheAllReduceRanksDiverge) {
  // The negative control for the test above: it can fail.
  auto runs = Train(2, 3, 64, "no_reduce");
  ASSERT_EQ(runs.size(), 2u);
  ASSERT_EQ(runs[1].step_hashes.size(), 3u);
  EXPECT_NE(runs[0].step_hashes[0], runs[1].step_hashes[0]);
}

TEST(DataParallel, FourRanksTrainLikeOneRankWithTheSameGlobalBatch) {
  auto one = Train(1, 24, 64, "reduce");
  auto four = Train(4, 24, 64, "reduce");
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(four.size(), 4u);
  // Same math; only the order of floating-point sums differs.
  EXPECT_NEAR(four[0].final_loss, one[0].final_loss, 1e-4);
  EXPECT_GT(one[0].final_loss, 0);
}

TEST(DataParallel, AggregationFrequencyAveragesOverBatchesBeforeStepping) {
  // Two ranks all-reducing every 2 batches of 16 make the same steps as one rank with
  // batches of 32: the union of two consecutive windows is one window twice as large.
  auto aggregated = Train(2, 20, 16, "reduce", /*aggregation=*/2);
  auto big_batch = Train(1, 10, 32, "reduce");
  ASSERT_EQ(aggregated.size(), 2u);
  ASSERT_EQ(big_batch.size(), 1u);
  EXPECT_EQ(aggregated[0].step_hashes, aggregated[1].step_hashes);
  EXPECT_NEAR(aggregated[0].final_loss, big_batch[0].final_loss, 1e-4);
  // The optimizer steps on the second batch of each group only.
  ASSERT_GE(aggregated[0].step_hashes.size(), 3u);
  EXPECT_NE(aggregated[0].step_hashes[1], aggregated[0].step_hashes[0]);
  EXPECT_EQ(aggregated[0].step_hashes[2], aggregated[0].step_hashes[1]);
}

}  // namespace
}  // namespace det::harness
