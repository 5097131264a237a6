#ifndef TRAINCTL_WORKER_JOB_DIRS_H_
#define TRAINCTL_WORKER_JOB_DIRS_H_

// Directories the agent (usually root) makes for a job and hands to the
// job's account. The agent runs with every right on its node, so it must
// never create, chmod or chown a path that a job named: only the checkpoint
// directory the coordinator derived from its own configuration
// (StartTask.checkpoint_dir = <--checkpoint-root>/<job id>), and only a
// directory it made itself or one the account already owns.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "worker/hw/process_launcher.h"

namespace trainctl::worker {

// Makes `dir`, the checkpoint directory of job `job_id`, the private
// directory (mode 0700) of `owner` (of the agent's own account when unset):
//  - `dir` must be absolute and lexically normal ("/ckpt/42": no ".", "..",
//    empty component or trailing '/') and end in the component `job_id`;
//  - its parent (the coordinator's --checkpoint-root, an administrator's
//    path) is created as the agent's account when missing;
//  - `dir` itself is made with mkdir, opened without following a symbolic
//    link, and given to `owner` (fchown, fchmod 0700) only when this call
//    made it; an existing `dir` is accepted only when it is a directory (not
//    a link) that `owner` already owns, and is then left as it is (a later
//    attempt of the same job).
// Errors: INVALID_ARGUMENT for a `dir` that breaks the first rule;
// FAILED_PRECONDITION for an existing `dir` that is a link, not a directory
// or owned by another account (named, with its uid); INTERNAL with errno's
// text when the parent cannot be made or opened, or mkdir, fchown or fchmod
// fail (e.g. root squashed on NFS).
absl::Status MakeCheckpointDir(const std::string& dir, int64_t job_id,
                               const std::optional<RunAs>& owner);

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_JOB_DIRS_H_
