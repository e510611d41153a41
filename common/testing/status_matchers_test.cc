#include "common/testing/status_matchers.h"

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::testing {
namespace {

using ::testing::AllOf;
using ::testing::Eq;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(StatusIsTest, AStringIsASubstringOfTheMessage) {
  absl::Status st = absl::NotFoundError("experiment 3 not found");
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kNotFound, "experiment 3"));
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kNotFound, std::string("not found")));
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_THAT(st, Not(StatusIs(absl::StatusCode::kNotFound, "trial 3")));
}

TEST(StatusIsTest, TheCodeMustMatch) {
  absl::Status st = absl::NotFoundError("experiment 3 not found");
  EXPECT_THAT(st, Not(StatusIs(absl::StatusCode::kInvalidArgument, "experiment 3")));
  EXPECT_THAT(absl::OkStatus(), Not(StatusIs(absl::StatusCode::kNotFound, "")));
  EXPECT_THAT(absl::OkStatus(), StatusIs(absl::StatusCode::kOk, ""));
}

TEST(StatusIsTest, AMatcherIsAppliedToTheWholeMessage) {
  absl::Status st = absl::InvalidArgumentError("slots_per_trial: must be positive");
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("slots_per_trial")));
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("slots_per_trial:")));
  EXPECT_THAT(st, Not(StatusIs(absl::StatusCode::kInvalidArgument, Eq("slots_per_trial"))));
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kInvalidArgument,
                           AllOf(HasSubstr("slots"), HasSubstr("positive"))));
}

TEST(StatusIsTest, MatchesTheStatusOfAStatusOr) {
  absl::StatusOr<int> refused = absl::PermissionDeniedError("only admins");
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kPermissionDenied, "admins"));
  absl::StatusOr<int> value = 7;
  EXPECT_THAT(value, StatusIs(absl::StatusCode::kOk, ""));
  EXPECT_THAT(value, Not(StatusIs(absl::StatusCode::kPermissionDenied, "")));
}

TEST(StatusIsTest, TheFailureShowsTheStatusAndTheExpectation) {
  ::testing::Matcher<absl::Status> m = StatusIs(absl::StatusCode::kNotFound, "trial 3");
  ::testing::StringMatchResultListener listener;
  EXPECT_FALSE(m.MatchAndExplain(absl::InvalidArgumentError("bad slots"), &listener));
  EXPECT_THAT(listener.str(), HasSubstr("INVALID_ARGUMENT: bad slots"));
  EXPECT_THAT(::testing::DescribeMatcher<absl::Status>(m),
              AllOf(HasSubstr("NOT_FOUND"), HasSubstr("trial 3")));
}

}  // namespace
}  // namespace det::testing
