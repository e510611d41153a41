#include "common/worker/cpp/harness/timings.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::harness {
namespace {

TEST(Timings, SummarizesMeanPercentilesAndMaxPerPhaseThenForgets) {
  Timings t;
  for (int ms = 1; ms <= 100; ++ms) t.Add("train_batch", absl::Milliseconds(ms));
  t.Add("dataloader_next", absl::Microseconds(500));
  auto s = t.Summarize();
  EXPECT_DOUBLE_EQ(s["train_batch_mean_ms"], 50.5);
  EXPECT_DOUBLE_EQ(s["train_batch_p50_ms"], 50);
  EXPECT_DOUBLE_EQ(s["train_batch_p90_ms"], 90);
  EXPECT_DOUBLE_EQ(s["train_batch_p99_ms"], 99);
  EXPECT_DOUBLE_EQ(s["train_batch_max_ms"], 100);
  EXPECT_DOUBLE_EQ(s["train_batch_count"], 100);
  EXPECT_DOUBLE_EQ(s["dataloader_next_p99_ms"], 0.5);
  EXPECT_TRUE(t.empty());
  EXPECT_TRUE(t.Summarize().empty());
}

TEST(Timings, ScopedTimingMeasuresOnTheGivenClock) {
  FakeClock clock;
  Timings t;
  {
    ScopedTiming s(t, "to_device", clock);
    clock.Advance(absl::Milliseconds(7));
  }
  EXPECT_DOUBLE_EQ(t.Summarize()["to_device_mean_ms"], 7);
}

}  // namespace
}  // namespace det::harness
