#ifndef TRAINCTL_CLIENT_ARRAY_SPEC_H_
#define TRAINCTL_CLIENT_ARRAY_SPEC_H_

// `trainctl submit --array`: Slurm's job-array index syntax (sbatch(1),
// --array): a comma list of indices `5`, ranges `0-15` and stepped ranges
// `0-15:4` (0, 4, 8, 12), optionally followed by `%P`, at most P tasks
// running at once: `0-999%8`, `1,3,5-7%2`. Pure (Abseil only).

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainctl::cli {

// The largest task index (Slurm's default MaxArraySize is 1001, its
// highest allowed 4000001) and the most tasks in one array (the
// coordinator's limit per SubmitJobs call).
inline constexpr int kMaxArrayTaskId = 4'000'000;
inline constexpr int kMaxArrayTaskCount = 10'000;

struct ArraySpec {
  // The task indices, ascending, each once (an index listed twice counts
  // once, as in Slurm).
  std::vector<int> task_ids;
  // `%P`: at most this many tasks running at once; 0 = no limit.
  int max_running = 0;
};

// Parses `text` as above. Errors: INVALID_ARGUMENT with a message that
// quotes the offending part and says what is expected ("\"9-2\": the range
// ends before it starts"): empty text or item, a non-number, a negative
// index or one above kMaxArrayTaskId, a range whose end is below its
// start, a step < 1, `%` without a number >= 1, more than
// kMaxArrayTaskCount tasks. The caller names the flag.
absl::StatusOr<ArraySpec> ParseArraySpec(absl::string_view text);

}  // namespace trainctl::cli

#endif  // TRAINCTL_CLIENT_ARRAY_SPEC_H_
