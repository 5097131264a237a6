#ifndef TRAINCTL_COMMON_TERMINAL_SIZE_H_
#define TRAINCTL_COMMON_TERMINAL_SIZE_H_

// The terminal sizes an interactive session accepts (session.proto's open
// and resize), checked by the coordinator's session relay and again by the
// agent that sets them on the pseudo-terminal (TIOCSWINSZ).

#include "absl/status/status.h"

namespace trainctl {

// Largest rows or columns accepted.
inline constexpr int kMaxTerminalRowsCols = 10000;

// OK when rows and cols (characters) are each within 1..kMaxTerminalRowsCols,
// or 0 as well when `allow_zero` (an open without a size: the pty keeps its
// default). Errors: INVALID_ARGUMENT naming rows/cols and the range.
absl::Status CheckTerminalSize(int rows, int cols, bool allow_zero);

}  // namespace trainctl

#endif  // TRAINCTL_COMMON_TERMINAL_SIZE_H_
