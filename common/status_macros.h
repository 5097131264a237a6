#ifndef TRAINCTL_COMMON_STATUS_MACROS_H_
#define TRAINCTL_COMMON_STATUS_MACROS_H_

// Abseil 20220623 (Debian 12) has no ABSL_RETURN_IF_ERROR; these are the two
// we need.

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns `expr`'s status from the enclosing function when it is not OK.
#define TC_RETURN_IF_ERROR(expr)                  \
  do {                                            \
    ::absl::Status tc_status_ = (expr);           \
    if (!tc_status_.ok()) return tc_status_;      \
  } while (0)

#define TC_STATUS_CONCAT_INNER_(a, b) a##b
#define TC_STATUS_CONCAT_(a, b) TC_STATUS_CONCAT_INNER_(a, b)

// `TC_ASSIGN_OR_RETURN(auto x, StatusOrExpr())`: assigns the value, or returns
// the status from the enclosing function.
#define TC_ASSIGN_OR_RETURN(lhs, rexpr) \
  TC_ASSIGN_OR_RETURN_IMPL_(TC_STATUS_CONCAT_(tc_statusor_, __LINE__), lhs, rexpr)
#define TC_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                              \
  if (!statusor.ok()) return statusor.status();         \
  lhs = std::move(statusor).value()

#endif  // TRAINCTL_COMMON_STATUS_MACROS_H_
