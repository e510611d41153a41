#include "master/metrics/downsample.h"

#include "gtest/gtest.h"

namespace det::master {
namespace {

std::vector<v1::Metrics> Rows(const std::string& group, int n, int first_batch = 1) {
  std::vector<v1::Metrics> rows(n);
  for (int i = 0; i < n; ++i) {
    rows[i].set_group(group);
    rows[i].set_total_batches(first_batch + i);
  }
  return rows;
}

std::vector<int64_t> Batches(const std::vector<v1::Metrics>& rows) {
  std::vector<int64_t> out;
  for (const auto& r : rows) out.push_back(r.total_batches());
  return out;
}

TEST(DownsampleMetrics, KeepsEverythingWhenNotAsked) {
  EXPECT_EQ(DownsampleMetrics(Rows("training", 7), 0).size(), 7u);
  EXPECT_EQ(DownsampleMetrics(Rows("training", 7), -3).size(), 7u);
  EXPECT_EQ(DownsampleMetrics(Rows("training", 7), 7).size(), 7u);
  EXPECT_EQ(DownsampleMetrics(Rows("training", 7), 100).size(), 7u);
  EXPECT_TRUE(DownsampleMetrics({}, 5).empty());
}

TEST(DownsampleMetrics, EvenlySpacedWithFirstAndLast) {
  EXPECT_EQ(Batches(DownsampleMetrics(Rows("training", 11), 3)), (std::vector<int64_t>{1, 6, 11}));
  EXPECT_EQ(Batches(DownsampleMetrics(Rows("training", 10), 4)),
            (std::vector<int64_t>{1, 4, 7, 10}));
  EXPECT_EQ(Batches(DownsampleMetrics(Rows("training", 5), 2)), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(Batches(DownsampleMetrics(Rows("training", 5), 1)), (std::vector<int64_t>{5}));
  for (int n = 2; n < 60; ++n) {
    for (int m = 2; m < n; ++m) {
      auto kept = Batches(DownsampleMetrics(Rows("g", n), m));
      ASSERT_EQ(kept.size(), static_cast<size_t>(m)) << n << " " << m;
      EXPECT_EQ(kept.front(), 1);
      EXPECT_EQ(kept.back(), n);
    }
  }
}

TEST(DownsampleMetrics, EachGroupOnItsOwnInOriginalOrder) {
  std::vector<v1::Metrics> rows;
  auto t = Rows("training", 9, 100);
  auto v = Rows("validation", 2, 200);
  rows.insert(rows.end(), t.begin(), t.begin() + 5);
  rows.push_back(v[0]);
  rows.insert(rows.end(), t.begin() + 5, t.end());
  rows.push_back(v[1]);
  auto kept = DownsampleMetrics(rows, 3);
  EXPECT_EQ(Batches(kept), (std::vector<int64_t>{100, 104, 200, 108, 201}));
}

}  // namespace
}  // namespace det::master
