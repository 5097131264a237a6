#ifndef TRAINCTL_COMMON_ENV_NAMES_H_
#define TRAINCTL_COMMON_ENV_NAMES_H_

// The rules for a task's environment variable names, shared by the
// coordinator (JobSpec validation), the CLI (`submit --export`, `--env`) and
// the agent, so that a name one of them accepts is never refused by another.

#include "absl/strings/string_view.h"

namespace trainctl {

// A POSIX shell variable name: [A-Za-z_][A-Za-z0-9_]*, not empty.
bool IsEnvName(absl::string_view name);

// The launch contract's names (docs/design.md, "The launch contract"): the
// rank variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...),
// CUDA_VISIBLE_DEVICES, TORCHELASTIC_* and every TRAINCTL_* but
// TRAINCTL_NCCL_UNIQUE_IDS (a knob the ranks read, the user's to set).
// trainctl sets these; a job may set none of them, neither with --env nor
// through --export, because the agent (root) acts on some of them.
bool IsReservedEnvVar(absl::string_view name);

// Whether a variable's name says it holds a secret: it contains TOKEN,
// SECRET, PASSWORD, PASSWD, CREDENTIAL, KEY or AUTH (any case). Such values
// are shown as "****" (`describe`, GetJob, ListJobs, REST).
bool LooksSecret(absl::string_view name);

}  // namespace trainctl

#endif  // TRAINCTL_COMMON_ENV_NAMES_H_
