#include "worker/task_paths.h"

#include "absl/strings/str_cat.h"

namespace trainctl::worker {

std::string ClusterDir(const std::string& log_dir, const std::string& cluster_id) {
  if (cluster_id.empty()) return log_dir;
  return absl::StrCat(log_dir, "/cluster-", cluster_id);
}

std::string TaskLogPath(const std::string& log_dir, const std::string& cluster_id,
                        const v1::TaskRef& ref) {
  const std::string dir = ClusterDir(log_dir, cluster_id);
  const int64_t job = ref.job_id();
  const int64_t shard = job / kJobsPerLogShard * kJobsPerLogShard;
  if (ref.attempt() > kProbeAttemptBase) {
    return absl::StrCat(dir, "/jobs-", shard, "/job-", job, ".preflight-",
                        ref.attempt() - kProbeAttemptBase, ".rank-", ref.rank(), ".log");
  }
  return absl::StrCat(dir, "/jobs-", shard, "/job-", job, ".attempt-", ref.attempt(),
                      ".rank-", ref.rank(), ".log");
}

std::string DefaultTaskWorkdir(const std::string& log_dir, const std::string& cluster_id,
                               const v1::TaskRef& ref) {
  return absl::StrCat(ClusterDir(log_dir, cluster_id), "/work/job-", ref.job_id(),
                      "/attempt-", ref.attempt());
}

}  // namespace trainctl::worker
