#ifndef TRAINCTL_WORKER_TASK_ENV_H_
#define TRAINCTL_WORKER_TASK_ENV_H_

// What of the agent's own environment a task may see (pure).

#include <map>
#include <string>
#include <vector>

namespace trainctl::worker {

// The variables of `environ` (NAME=VALUE strings, null-terminated array)
// that tasks get under their launch environment: PATH, the locale (LANG,
// LANGUAGE, LC_*), TZ, LD_LIBRARY_PATH, and the site's GPU settings (CUDA_*,
// NCCL_*), plus each name of `extra` (trainctl-agent --task-env; a trailing
// '*' is a prefix: "HF_*"). Nothing else passes: the agent's environment may
// hold its own secrets (tokens, key passphrases), and a job's environment is
// the submitter's (JobSpec.exported_env), as under Slurm, not the daemon's.
std::map<std::string, std::string> PassThroughEnv(
    const char* const* environ, const std::vector<std::string>& extra);

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_TASK_ENV_H_
