#include "common/logging/log_ring.h"

#include <memory>

#include "common/logging/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;

std::shared_ptr<spdlog::logger> RingLogger(const std::shared_ptr<LogRing>& ring) {
  auto logger = std::make_shared<spdlog::logger>("ring-test", ring);
  logger->set_level(spdlog::level::info);
  return logger;
}

TEST(LogRingTest, KeepsTheLatestLinesAndCountsTheDropped) {
  auto ring = std::make_shared<LogRing>(3);
  auto logger = RingLogger(ring);
  for (int i = 1; i <= 5; ++i) logger->info("line {}", i);
  logger->warn("careful");
  LogRing::Page page = ring->Read(0, 0);
  EXPECT_EQ(page.dropped, 3);
  EXPECT_EQ(page.capacity, 3u);
  EXPECT_THAT(page.lines,
              ElementsAre(Field(&RingLine::message, "line 4"), Field(&RingLine::message, "line 5"),
                          Field(&RingLine::message, "careful")));
  EXPECT_EQ(page.lines[2].id, 6);
  EXPECT_EQ(page.lines[2].level, "warning");
  EXPECT_EQ(page.lines[2].component, "ring-test");
  EXPECT_GT(page.lines[2].time_ms, 0);
}

TEST(LogRingTest, TailAndAfterId) {
  auto ring = std::make_shared<LogRing>(100);
  auto logger = RingLogger(ring);
  for (int i = 1; i <= 10; ++i) logger->info("line {}", i);
  EXPECT_THAT(ring->Read(2, 0).lines,
              ElementsAre(Field(&RingLine::id, 9), Field(&RingLine::id, 10)));
  EXPECT_THAT(ring->Read(0, 8).lines,
              ElementsAre(Field(&RingLine::id, 9), Field(&RingLine::id, 10)));
  EXPECT_THAT(ring->Read(1, 8).lines, ElementsAre(Field(&RingLine::id, 10)));
  EXPECT_TRUE(ring->Read(0, 10).lines.empty());
  EXPECT_EQ(ring->Read(0, 0).dropped, 0);
}

TEST(LogRingTest, EveryComponentLoggerWritesToTheProcessRing) {
  Logger("ring-component")->error("seen in the ring {}", 42);
  LogRing::Page page = ProcessLogRing()->Read(1, 0);
  ASSERT_EQ(page.lines.size(), 1u);
  EXPECT_EQ(page.lines[0].message, "seen in the ring 42");
  EXPECT_EQ(page.lines[0].component, "ring-component");
  EXPECT_EQ(page.lines[0].level, "error");
}

}  // namespace
}  // namespace det
