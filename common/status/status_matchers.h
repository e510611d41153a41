// gMock matcher for tests: StatusIs(code, substring) matches an absl::Status with that code
// whose message contains the substring (the style guide's "assert the specific error").
#ifndef DET_COMMON_STATUS_STATUS_MATCHERS_H_
#define DET_COMMON_STATUS_STATUS_MATCHERS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"

namespace det::testing {

MATCHER_P2(StatusIs, code, substr, "") {
  const absl::Status& st = arg;
  *result_listener << "status " << st;
  return st.code() == code && st.message().find(substr) != absl::string_view::npos;
}

}  // namespace det::testing

#endif  // DET_COMMON_STATUS_STATUS_MATCHERS_H_
