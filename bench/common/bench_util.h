#ifndef TRAINCTL_BENCH_COMMON_BENCH_UTIL_H_
#define TRAINCTL_BENCH_COMMON_BENCH_UTIL_H_

// Shared pieces of the gRPC benchmarks (bench/swarm, bench/rendezvous):
// latency summaries, the transport floor (a no-op unary service served with
// the coordinator's server settings), /proc readings of a process, and
// writing a result message as JSON (protobuf's JSON printer).

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "trainctl/v1/bench.pb.h"

namespace trainctl::bench {

// Maximum message size of the coordinator's server and the agents' channels
// (coordinator/grpc_service.cc, worker/agent_client.cc), bytes.
inline constexpr int kMaxMessageBytes = 16 << 20;

// Nearest-rank percentiles of `samples_us` (microseconds; reordered). An
// empty input gives count 0 and zeros. `floor_p50_us` > 0 fills the
// *_floor_multiple fields.
v1::LatencySummary Summarize(std::vector<double>& samples_us,
                             double floor_p50_us = 0);

// Channel arguments of the simulated clients: the agents' message limits, and
// `channel_id` as a distinct argument so each channel gets its own TCP
// connection (gRPC shares subchannels between channels with equal arguments).
grpc::ChannelArguments ClientChannelArgs(int channel_id);

// A BenchPing server on 127.0.0.1 (any free port) built like the
// coordinator's (StartCoordinatorServer: insecure, 16 MiB messages, callback
// API). Shuts down when destroyed.
class PingServer {
 public:
  // Errors: UNAVAILABLE when no port can be bound.
  static absl::StatusOr<std::unique_ptr<PingServer>> Start();
  ~PingServer();
  // "127.0.0.1:PORT".
  std::string address() const;

 private:
  class Service;
  PingServer() = default;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// Calls Ping `calls` times one after another on one fresh channel to
// `address` (after 100 warm-up calls) and summarizes the round trips.
// Errors: the first failed call's status (UNAVAILABLE...).
absl::StatusOr<v1::LatencySummary> MeasureFloor(const std::string& address,
                                                int calls);

// CPU time (user + system) of process `pid` so far, seconds, from
// /proc/PID/stat. Errors: NOT_FOUND when the process is gone.
absl::StatusOr<double> ProcessCpuSeconds(pid_t pid);
// Resident set size of `pid` (VmRSS of /proc/PID/status), bytes.
// Errors: NOT_FOUND when the process is gone.
absl::StatusOr<int64_t> ProcessRssBytes(pid_t pid);

// Raises this process's open-file soft limit to its hard limit (simulated
// agents and ranks hold a connection each) and returns the soft limit now,
// at most 2^20 descriptors.
int RaiseOpenFileLimit();

// Host facts for a result: cores, 1-minute load average now (both start and
// end set to it; update load_avg_1m_end with LoadAvg1m() at the end), UTC
// time, the git commit from $TRAINCTL_GIT_COMMIT if set.
v1::BenchHost HostNow();
// The 1-minute load average (/proc/loadavg), or -1 when unreadable.
double LoadAvg1m();

// Writes `msg` as indented JSON (proto field names) to `path`; "-" or empty
// prints to stdout only. Errors: UNAVAILABLE when the file cannot be written.
absl::Status WriteJson(const google::protobuf::Message& msg,
                       const std::string& path);

}  // namespace trainctl::bench

#endif  // TRAINCTL_BENCH_COMMON_BENCH_UTIL_H_
