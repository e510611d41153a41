#include "agent/stop_signal.h"

#include <thread>

#include "common/clock/clock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

TEST(StopSignalTest, ASleepLastsClockTime) {
  FakeClock clock;
  StopSignal stop(clock, absl::Milliseconds(1));
  std::thread mover([&] {
    for (int i = 0; i < 10; ++i) clock.Advance(absl::Seconds(1));
  });
  EXPECT_FALSE(stop.SleepOrStop(absl::Seconds(10)));
  mover.join();
  EXPECT_FALSE(stop.SleepOrStop(absl::ZeroDuration()));
}

TEST(StopSignalTest, StopEndsSleepsButOnlyDetachEndsSleepOrDetach) {
  FakeClock clock;
  StopSignal stop(clock, absl::Milliseconds(1));
  stop.Stop();
  EXPECT_TRUE(stop.stopping());
  EXPECT_FALSE(stop.detaching());
  EXPECT_TRUE(stop.SleepOrStop(absl::Hours(1)));
  std::thread mover([&] { clock.Advance(absl::Seconds(2)); });
  EXPECT_FALSE(stop.SleepOrDetach(absl::Seconds(2)));
  mover.join();
  stop.Detach();
  EXPECT_TRUE(stop.detaching());
  EXPECT_TRUE(stop.SleepOrDetach(absl::Hours(1)));
}

TEST(StopSignalTest, AStopFromAnotherThreadEndsAWait) {
  FakeClock clock;
  StopSignal stop(clock);
  std::thread stopper([&] { stop.Stop(); });
  EXPECT_TRUE(stop.SleepOrStop(absl::Hours(1)));
  stopper.join();
}

}  // namespace
}  // namespace det::agent
