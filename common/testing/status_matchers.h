// gMock matcher for tests (the style guide's "assert the specific error"):
//
//   EXPECT_THAT(st, StatusIs(absl::StatusCode::kNotFound, "experiment 3 not found"));
//   EXPECT_THAT(st, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("slots")));
//
// StatusIs(code, message) matches an absl::Status, or the status of an absl::StatusOr<T>,
// with that code and whose message matches `message`: a string is a substring the message
// must contain; a gMock matcher (HasSubstr, Eq, StartsWith, AllOf...) is applied to the whole
// message.
#ifndef DET_COMMON_TESTING_STATUS_MATCHERS_H_
#define DET_COMMON_TESTING_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"

namespace det::testing {
namespace internal_status {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

class StatusIsMatcher {
 public:
  StatusIsMatcher(absl::StatusCode code, ::testing::Matcher<const std::string&> message)
      : code_(code), message_(std::move(message)) {}

  template <typename T>
  bool MatchAndExplain(const T& value, ::testing::MatchResultListener* listener) const {
    const absl::Status& status = GetStatus(value);
    *listener << "whose status is " << status;
    return status.code() == code_ && message_.Matches(std::string(status.message()));
  }
  void DescribeTo(std::ostream* os) const {
    *os << "has code " << absl::StatusCodeToString(code_) << " and a message that ";
    message_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const {
    *os << "does not have code " << absl::StatusCodeToString(code_)
        << " or has a message that ";
    message_.DescribeNegationTo(os);
  }

 private:
  absl::StatusCode code_;
  ::testing::Matcher<const std::string&> message_;
};

}  // namespace internal_status

template <typename MessageMatcher>
::testing::PolymorphicMatcher<internal_status::StatusIsMatcher> StatusIs(
    absl::StatusCode code, MessageMatcher&& message) {
  if constexpr (std::is_convertible_v<MessageMatcher, absl::string_view>) {
    return ::testing::MakePolymorphicMatcher(internal_status::StatusIsMatcher(
        code, ::testing::HasSubstr(std::string(absl::string_view(message)))));
  } else {
    return ::testing::MakePolymorphicMatcher(internal_status::StatusIsMatcher(
        code, ::testing::SafeMatcherCast<const std::string&>(
                  std::forward<MessageMatcher>(message))));
  }
}

}  // namespace det::testing

#endif  // DET_COMMON_TESTING_STATUS_MATCHERS_H_
