#include "common/testing/wait_until.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace det::testing {

::testing::AssertionResult WaitUntil(absl::string_view what, const std::function<bool()>& condition,
                                     absl::Duration timeout, absl::Duration poll) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (condition()) return ::testing::AssertionSuccess();
    absl::SleepFor(std::min(poll, deadline - absl::Now()));
  }
  if (condition()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "timed out after " << absl::FormatDuration(timeout) << " (polling every "
         << absl::FormatDuration(poll) << ") waiting for: " << what;
}

}  // namespace det::testing
