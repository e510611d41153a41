#include "agent/sysmetrics/metrics_buffer.h"

#include "gtest/gtest.h"

namespace det::agent {
namespace {

v1::SystemMetrics At(int64_t ms) {
  v1::SystemMetrics m;
  m.set_time_ms(ms);
  return m;
}

TEST(MetricsBufferTest, KeepsTheNewestSamplesUpToItsCapacity) {
  MetricsBuffer buffer(2);
  buffer.Add(At(1));
  buffer.Add(At(2));
  buffer.Add(At(3));
  std::vector<v1::SystemMetrics> pending = buffer.Pending();
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[0].time_ms(), 2);
  EXPECT_EQ(pending[1].time_ms(), 3);
}

TEST(MetricsBufferTest, SamplesTheMasterAcceptedAreDropped) {
  MetricsBuffer buffer;
  buffer.Add(At(1));
  buffer.Add(At(2));
  buffer.SentUntil(1);
  buffer.Add(At(3));
  std::vector<v1::SystemMetrics> pending = buffer.Pending();
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[0].time_ms(), 2);
  buffer.SentUntil(3);
  EXPECT_TRUE(buffer.Pending().empty());
}

}  // namespace
}  // namespace det::agent
