#include "common/event_loop/event_loop.h"

#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace det {
namespace {

TEST(EventLoop, RunsPostedWorkInOrderOnItsThread) {
  RealClock clock;
  EventLoop loop(clock);
  loop.Start();
  std::vector<int> seen;
  bool all_in_loop = true;
  for (int i = 0; i < 100; ++i) {
    loop.Post([&, i] {
      all_in_loop &= loop.InLoop();
      seen.push_back(i);
    });
  }
  loop.RunSync([] {});
  ASSERT_EQ(seen.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[i], i);
  EXPECT_TRUE(all_in_loop);
  EXPECT_FALSE(loop.InLoop());
}

TEST(EventLoop, UrgentWorkOvertakesQueuedWork) {
  RealClock clock;
  EventLoop loop(clock);
  loop.Start();
  std::vector<std::string> order;
  absl::Notification release;
  // Hold the loop so the following posts queue up behind this closure.
  loop.Post([&] { release.WaitForNotification(); });
  loop.Post([&] { order.push_back("normal-1"); });
  loop.Post([&] { order.push_back("normal-2"); });
  loop.PostUrgent([&] { order.push_back("urgent"); });
  release.Notify();
  loop.RunSync([] {});
  EXPECT_EQ(order, (std::vector<std::string>{"urgent", "normal-1", "normal-2"}));
}

TEST(EventLoop, TimersFollowTheClockAndCanBeCancelled) {
  FakeClock clock;
  EventLoop loop(clock);
  loop.Start();
  std::vector<int> fired;
  loop.PostAfter(absl::Seconds(10), [&] { fired.push_back(10); });
  loop.PostAfter(absl::Seconds(5), [&] { fired.push_back(5); });
  auto cancelled = loop.PostAfter(absl::Seconds(7), [&] { fired.push_back(7); });
  loop.Cancel(cancelled);
  loop.RunSync([] {});
  EXPECT_TRUE(fired.empty());

  clock.Advance(absl::Seconds(6));
  loop.Wake();
  absl::Notification n5;
  loop.PostAfter(absl::ZeroDuration(), [&] { n5.Notify(); });
  ASSERT_TRUE(n5.WaitForNotificationWithTimeout(absl::Seconds(10)));
  loop.RunSync([&] { EXPECT_EQ(fired, std::vector<int>{5}); });

  clock.Advance(absl::Seconds(5));
  loop.Wake();
  absl::Notification n10;
  loop.PostAfter(absl::ZeroDuration(), [&] { n10.Notify(); });
  ASSERT_TRUE(n10.WaitForNotificationWithTimeout(absl::Seconds(10)));
  loop.RunSync([&] { EXPECT_EQ(fired, (std::vector<int>{5, 10})); });
}

}  // namespace
}  // namespace det
