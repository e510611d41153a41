#include "agent/stop_signal.h"

#include <thread>

#include "absl/synchronization/notification.h"
#include "common/clock/clock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

// Moves `clock` 100 ms at a time until `done`; returns how far.
absl::Duration Drive(FakeClock& clock, const absl::Notification& done) {
  absl::Duration moved;
  while (!done.HasBeenNotified()) {
    clock.Advance(absl::Milliseconds(100));
    moved += absl::Milliseconds(100);
    done.WaitForNotificationWithTimeout(absl::Milliseconds(1));
  }
  return moved;
}

TEST(StopSignalTest, ASleepLastsClockTime) {
  FakeClock clock;
  StopSignal stop(clock, absl::Milliseconds(1));
  absl::Notification done;
  absl::Duration moved;
  std::thread mover([&] { moved = Drive(clock, done); });
  EXPECT_FALSE(stop.SleepOrStop(absl::Seconds(10)));
  done.Notify();
  mover.join();
  EXPECT_GE(moved, absl::Seconds(10));
  EXPECT_FALSE(stop.SleepOrStop(absl::ZeroDuration()));
}

TEST(StopSignalTest, StopEndsSleepsButOnlyDetachEndsSleepOrDetach) {
  FakeClock clock;
  StopSignal stop(clock, absl::Milliseconds(1));
  stop.Stop();
  EXPECT_TRUE(stop.stopping());
  EXPECT_FALSE(stop.detaching());
  EXPECT_TRUE(stop.SleepOrStop(absl::Hours(1)));
  absl::Notification done;
  std::thread mover([&] { Drive(clock, done); });
  EXPECT_FALSE(stop.SleepOrDetach(absl::Seconds(2)));
  done.Notify();
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
