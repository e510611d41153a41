#include "common/worker/cpp/data/elastic_sampler.h"

#include <algorithm>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::data {
namespace {

using ::testing::HasSubstr;

TEST(ElasticEpochOrder, IsAPermutationForEveryPartitionCount) {
  for (int64_t n : {0, 1, 7, 100, 1001}) {
    for (int64_t c : {1, 2, 3, 8, 2000}) {
      std::vector<int64_t> order = ElasticEpochOrder(n, 42, 3, c);
      std::vector<int64_t> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << "n " << n << " c " << c;
    }
  }
}

TEST(ElasticEpochOrder, InterleavesTheCanonicalPartitions) {
  // 4 partitions of 25: position p comes from partition p % 4.
  std::vector<int64_t> order = ElasticEpochOrder(100, 7, 0, 4);
  for (int64_t p = 0; p < 100; ++p) EXPECT_EQ(order[p] / 25, p % 4) << p;
}

TEST(ElasticEpochOrder, DependsOnSeedEpochAndCanonicalNodesOnly) {
  EXPECT_EQ(ElasticEpochOrder(1000, 1, 0, 4), ElasticEpochOrder(1000, 1, 0, 4));
  EXPECT_NE(ElasticEpochOrder(1000, 1, 0, 4), ElasticEpochOrder(1000, 2, 0, 4));
  EXPECT_NE(ElasticEpochOrder(1000, 1, 0, 4), ElasticEpochOrder(1000, 1, 1, 4));
  EXPECT_NE(ElasticEpochOrder(1000, 1, 0, 4), ElasticEpochOrder(1000, 1, 0, 2));
}

// The union of the ranks' slices of every step is the same global window for 1, 2, 4 ranks.
TEST(ElasticLoader, SameGlobalWindowsWhateverTheRankCount) {
  const int64_t n = 1000, batch = 64;
  std::vector<std::vector<int64_t>> reference;
  for (int world : {1, 2, 4}) {
    ElasticLoader loader(n, 0xabc, 9, 4, batch);
    for (int step = 0; step < 40; ++step) {  // 15 steps an epoch: crosses two epochs
      Window w = loader.Next();
      std::vector<int64_t> ids;
      for (int r = 0; r < world; ++r) {
        absl::Span<const int64_t> s = ElasticLoader::RankSlice(w, r, world);
        ASSERT_EQ(s.size(), static_cast<size_t>(batch / world));
        ids.insert(ids.end(), s.begin(), s.end());
      }
      if (world == 1) {
        reference.push_back(ids);
      } else {
        ASSERT_EQ(ids, reference[step]) << "world " << world << " step " << step;
      }
    }
  }
  // Epoch 0 is windows 0..14 of ElasticEpochOrder(n, 9, 0, 4); epoch 1 restarts at 0.
  std::vector<int64_t> order0 = ElasticEpochOrder(n, 9, 0, 4), order1 = ElasticEpochOrder(n, 9, 1, 4);
  EXPECT_EQ(reference[14], std::vector<int64_t>(order0.begin() + 14 * 64, order0.begin() + 15 * 64));
  EXPECT_EQ(reference[15], std::vector<int64_t>(order1.begin(), order1.begin() + 64));
}

TEST(ElasticLoader, RestoreContinuesAtTheExactNextSample) {
  ElasticLoader a(1000, 0xabc, 9, 4, 50);
  for (int i = 0; i < 27; ++i) a.Next();
  nlohmann::json saved = a.state().ToJson();
  absl::StatusOr<LoaderState> state = LoaderState::FromJson(nlohmann::json::parse(saved.dump()));
  ASSERT_TRUE(state.ok()) << state.status();
  absl::StatusOr<ElasticLoader> b = ElasticLoader::Restore(*state, 1000, 0xabc, 50);
  ASSERT_TRUE(b.ok()) << b.status();
  for (int i = 0; i < 30; ++i) {
    Window wa = a.Next(), wb = b->Next();
    ASSERT_EQ(wa.epoch, wb.epoch);
    ASSERT_EQ(wa.first_position, wb.first_position);
    ASSERT_TRUE(std::equal(wa.ids.begin(), wa.ids.end(), wb.ids.begin(), wb.ids.end()));
  }
}

TEST(ElasticLoader, RefusesAnotherDataSetOrAlgorithmVersion) {
  ElasticLoader a(1000, 0xabc, 9, 4, 50);
  absl::StatusOr<ElasticLoader> other = ElasticLoader::Restore(a.state(), 1000, 0xdef, 50);
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.status().message(), HasSubstr("0000000000000abc"));
  EXPECT_THAT(other.status().message(), HasSubstr("0000000000000def"));
  LoaderState old = a.state();
  old.version = 0;
  other = ElasticLoader::Restore(old, 1000, 0xabc, 50);
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.status().message(), HasSubstr("version 0"));
  EXPECT_THAT(other.status().message(), HasSubstr("version 1"));
}

TEST(SampleKey, DependsOnThePosition) {
  std::set<uint64_t> keys;
  for (int64_t e = 0; e < 3; ++e) {
    for (int64_t p = 0; p < 1000; ++p) keys.insert(SampleKey(5, e, p));
  }
  EXPECT_EQ(keys.size(), 3000u);
}

}  // namespace
}  // namespace det::data
