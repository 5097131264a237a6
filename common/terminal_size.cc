#include "common/terminal_size.h"

#include "absl/strings/str_format.h"

namespace trainctl {

absl::Status CheckTerminalSize(int rows, int cols, bool allow_zero) {
  const int lo = allow_zero ? 0 : 1;
  if (rows < lo || rows > kMaxTerminalRowsCols || cols < lo || cols > kMaxTerminalRowsCols) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rows/cols: %d x %d is not a terminal size (%d-%d each)", rows, cols, lo,
                        kMaxTerminalRowsCols));
  }
  return absl::OkStatus();
}

}  // namespace trainctl
