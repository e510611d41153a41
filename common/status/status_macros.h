// Propagation macros for absl::Status / absl::StatusOr (Debian's Abseil 20220623 has none).
#ifndef DET_COMMON_STATUS_STATUS_MACROS_H_
#define DET_COMMON_STATUS_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DET_STATUS_CONCAT_INNER_(x, y) x##y
#define DET_STATUS_CONCAT_(x, y) DET_STATUS_CONCAT_INNER_(x, y)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                     \
  do {                                            \
    ::absl::Status det_status_ = (expr);          \
    if (!det_status_.ok()) return det_status_;    \
  } while (0)

// `lhs` = value of `rexpr` (an absl::StatusOr<T>), or returns its error.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  DET_ASSIGN_OR_RETURN_IMPL_(DET_STATUS_CONCAT_(det_statusor_, __LINE__), lhs, rexpr)

#define DET_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                               \
  if (!statusor.ok()) return statusor.status();          \
  lhs = std::move(statusor).value()

#endif  // DET_COMMON_STATUS_STATUS_MACROS_H_
