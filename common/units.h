#ifndef TRAINCTL_COMMON_UNITS_H_
#define TRAINCTL_COMMON_UNITS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace trainctl {

// Parses a byte size as users write it: "1024", "512MiB", "10GiB", "1.5TiB",
// "80G" (K/M/G/T with or without "iB"/"B" are powers of 1024, as nvidia-smi
// and Slurm's --mem mean them), case-insensitive.
// Errors: INVALID_ARGUMENT naming the text and the accepted forms, for an
// empty, negative, malformed or overflowing size.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

// A long duration as admins write it (token lifetimes, `--since`, the
// coordinator's retention flags): a whole number of weeks or days first
// ("2w", "90d", "1d12h"), then what absl::ParseDuration reads ("36h",
// "1h30m"). Errors: INVALID_ARGUMENT quoting `text` and the accepted forms,
// for a malformed, negative or zero duration, or over 36,600 days.
absl::StatusOr<absl::Duration> ParseLongDuration(absl::string_view text);

// Formats bytes for people: "0 B", "512 MiB", "79.6 GiB" (powers of 1024, at
// most one decimal).
std::string FormatBytes(int64_t bytes);

}  // namespace trainctl

#endif  // TRAINCTL_COMMON_UNITS_H_
