#include "common/testing/wait_until.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

TEST(WaitUntilTest, AConditionThatAlreadyHoldsSucceedsWithoutWaiting) {
  int calls = 0;
  EXPECT_TRUE(WaitUntil(
      "always", [&] { return ++calls > 0; }, absl::Hours(1)));
  EXPECT_EQ(calls, 1);
}

TEST(WaitUntilTest, WaitsForAnotherThreadToMakeTheConditionTrue) {
  std::atomic<bool> done{false};
  std::thread setter([&] { done = true; });
  EXPECT_TRUE(WaitUntil(
      "the setter ran", [&] { return done.load(); }, absl::Minutes(1), absl::Milliseconds(1)));
  setter.join();
}

TEST(WaitUntilTest, ATimeoutNamesWhatWasAwaitedAndForHowLong) {
  int calls = 0;
  ::testing::AssertionResult r = WaitUntil(
      "the pid file", [&] { return ++calls < 0; }, absl::Milliseconds(30), absl::Milliseconds(10));
  EXPECT_FALSE(r);
  EXPECT_THAT(r.message(), HasSubstr("timed out after 30ms (polling every 10ms) waiting for: "
                                     "the pid file"));
  EXPECT_GE(calls, 2);  // At least the first try and the one at the deadline.
}

TEST(WaitUntilTest, AZeroTimeoutTriesTheConditionOnce) {
  int calls = 0;
  EXPECT_FALSE(WaitUntil(
      "a second try", [&] { return ++calls > 1; }, absl::ZeroDuration()));
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace det::testing
