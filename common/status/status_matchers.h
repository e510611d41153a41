// Forwards to common/testing/status_matchers.h, StatusIs's one home. Include that instead;
// this header goes once master/store's tests include it directly.
#ifndef DET_COMMON_STATUS_STATUS_MATCHERS_H_
#define DET_COMMON_STATUS_STATUS_MATCHERS_H_

#include "common/testing/status_matchers.h"  // IWYU pragma: export

#endif  // DET_COMMON_STATUS_STATUS_MATCHERS_H_
