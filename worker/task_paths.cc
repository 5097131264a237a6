#include "worker/task_paths.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

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
  if (ref.probe_run() > 0) {
    return absl::StrCat(dir, "/jobs-", shard, "/job-", job, ".preflight-", ref.probe_run(),
                        ".rank-", ref.rank(), ".log");
  }
  return absl::StrCat(dir, "/jobs-", shard, "/job-", job, ".attempt-", ref.attempt(),
                      ".rank-", ref.rank(), ".log");
}

std::string DefaultTaskWorkdir(const std::string& log_dir, const std::string& cluster_id,
                               const v1::TaskRef& ref) {
  const std::string dir = absl::StrCat(ClusterDir(log_dir, cluster_id), "/work/job-",
                                       ref.job_id(), "/attempt-", ref.attempt());
  // A probe's scratch directory is its own, beside its attempt's.
  return ref.probe_run() > 0 ? absl::StrCat(dir, ".preflight-", ref.probe_run()) : dir;
}

v1::LogChunk ReadLogChunk(const std::string& path, const v1::ReadLog& read,
                          const std::string& node) {
  v1::LogChunk chunk;
  chunk.set_request_id(read.request_id());
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    chunk.set_error(absl::StrCat("no log at ", path, " on ", node));
    return chunk;
  }
  const int max = std::clamp(read.max_bytes(), 1, kMaxLogRead);
  std::string data(max, '\0');
  in.seekg(read.offset());
  in.read(data.data(), max);
  data.resize(in ? max : std::max<std::streamsize>(0, in.gcount()));
  chunk.set_next_offset(read.offset() + static_cast<int64_t>(data.size()));
  chunk.set_data(std::move(data));
  return chunk;
}

std::string FileTail(const std::string& path, int64_t bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const int64_t size = in.tellg();
  const int64_t from = std::max<int64_t>(0, size - bytes);
  std::string tail(size - from, '\0');
  in.seekg(from);
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  tail.resize(std::max<std::streamsize>(0, in.gcount()));
  return tail;
}

std::string ContainerRuntimeError(absl::string_view log_tail) {
  std::string found;
  for (absl::string_view line : absl::StrSplit(log_tail, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (absl::StartsWith(line, "Error:") || absl::StartsWith(line, "FATAL:")) {
      found = std::string(line.substr(0, 400));
    }
  }
  return found;
}

std::string PreflightProbeError(const std::string& probe) {
  const std::string fix =
      "build it (the quickstart builds trainctl-fake-preflight-probe; GPU hosts "
      "need trainctl-nccl-allreduce) or point --preflight-probe at it";
  if (probe.empty()) return absl::StrCat("no --preflight-probe given: ", fix);
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(probe, ec);
  if (!std::filesystem::exists(st)) {
    return absl::StrCat("pre-flight program ", probe, " does not exist: ", fix);
  }
  if (!std::filesystem::is_regular_file(st)) {
    return absl::StrCat("pre-flight program ", probe, " is not a regular file: ", fix);
  }
  if (access(probe.c_str(), X_OK) != 0) {
    return absl::StrCat("pre-flight program ", probe, " is not executable (",
                        std::strerror(errno), "): chmod +x it, or ", fix);
  }
  return "";
}

}  // namespace trainctl::worker
