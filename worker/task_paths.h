#ifndef TRAINCTL_WORKER_TASK_PATHS_H_
#define TRAINCTL_WORKER_TASK_PATHS_H_

// Where an agent keeps a task's files on its host, and how it reads its
// log. The path functions are pure, shared by the agent (agent.h) and the
// cluster simulation (tests/sim/), which checks that no two tasks ever write
// one log file.

#include <string>

#include "absl/strings/string_view.h"
#include "trainctl/v1/service.pb.h"

namespace trainctl::worker {

// Task logs are grouped in directories of this many consecutive job ids
// (<log_dir>/cluster-C/jobs-12000/ holds jobs 12000-12999): one mkdir per
// 1,000 jobs.
inline constexpr int64_t kJobsPerLogShard = 1000;

// <log_dir>/cluster-<cluster_id>, or <log_dir> when the coordinator sent no
// cluster id (RegisterAck.cluster_id). Per cluster because job ids start
// again at 1 in a new cluster: without it a new cluster's job 1 would append
// to, and `trainctl logs` would show, an older cluster's job 1.
std::string ClusterDir(const std::string& log_dir, const std::string& cluster_id);

// The log file of task `ref` (one flat file per task):
// <ClusterDir>/jobs-<k>/job-<id>.attempt-<n>.rank-<r>.log, k = the job id
// rounded down to a multiple of kJobsPerLogShard; for a pre-flight probe
// (TaskRef.probe_run = run >= 1) .../job-<id>.preflight-<run>.rank-<r>.log
// (runs are numbered over the job's life, so that names one task).
std::string TaskLogPath(const std::string& log_dir, const std::string& cluster_id,
                        const v1::TaskRef& ref);

// Working directory of a task whose StartTask names none:
// <ClusterDir>/work/job-<id>/attempt-<n>, for a probe attempt-<n>.preflight-<run>.
std::string DefaultTaskWorkdir(const std::string& log_dir, const std::string& cluster_id,
                               const v1::TaskRef& ref);

// Most bytes one ReadLog returns (fits gRPC's default 4 MiB message).
inline constexpr int kMaxLogRead = 2 << 20;

// The answer to `read` from the log file at `path` on node `node`: up to
// read.max_bytes (clamped to 1..kMaxLogRead) from read.offset, and the
// offset after them; LogChunk.error naming the path and node when the file
// cannot be opened.
v1::LogChunk ReadLogChunk(const std::string& path, const v1::ReadLog& read,
                          const std::string& node);

// The last `bytes` of the file at `path` ("" when unreadable).
std::string FileTail(const std::string& path, int64_t bytes);

// Why a container runtime could not run a task (an image pull that failed,
// a bad mount), from the tail of the task's log, where podman writes
// "Error: ..." and Apptainer "FATAL: ..." before exiting 125 (podman's own
// error, podman-run(1)), 126, 127 or 255: the last such line, at most 400
// bytes. Empty when there is none (the program itself exited so).
std::string ContainerRuntimeError(absl::string_view log_tail);

// Why `probe` (the agent's --preflight-probe) cannot run as a pre-flight
// program: "" when it is an executable file, else a sentence naming the
// path and what is wrong (not given, does not exist, not a regular file, not
// executable) and how to fix it. Node.preflight_probe_error carries it: the
// agent's configuration error, never a verdict on the node's GPUs.
std::string PreflightProbeError(const std::string& probe);

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_TASK_PATHS_H_
