// Waiting in tests for something another thread or process does, bounded by a deadline
// (the style guide's "no sleep in tests to wait for something: wait on the condition").
//
//   ASSERT_TRUE(WaitUntil("both ranks exited", [&] { return exits() == 2; }, absl::Seconds(30)));
//
// On timeout the failure says what was awaited and for how long.
#ifndef DET_COMMON_TESTING_WAIT_UNTIL_H_
#define DET_COMMON_TESTING_WAIT_UNTIL_H_

#include <functional>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace det::testing {

// How often WaitUntil evaluates its condition. Default of `poll`.
inline constexpr absl::Duration kWaitPollInterval = absl::Milliseconds(20);

// Evaluates `condition` at once and then every `poll` (real time) until it holds or
// `timeout` has passed; once more at the deadline. Success when it held; otherwise a failure
// whose message names `what` (a description of the awaited condition), `timeout` and `poll`.
// Runs `condition` on the calling thread only.
::testing::AssertionResult WaitUntil(absl::string_view what, const std::function<bool()>& condition,
                                     absl::Duration timeout,
                                     absl::Duration poll = kWaitPollInterval);

}  // namespace det::testing

#endif  // DET_COMMON_TESTING_WAIT_UNTIL_H_
