#ifndef TRAINCTL_BENCH_SIM_TRACE_IO_H_
#define TRAINCTL_BENCH_SIM_TRACE_IO_H_

// Reading the Muri/Tiresias trace format and cluster spec, writing per-job
// results. Only I/O; no policy, no cost model.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/sched/muri_policy.h"

namespace trainctl::sim {

// One row of a trace (header `job_id,num_gpu,submit_time,iterations,
// model_name,...,iteration_time,...`), raw units: times in milliseconds.
struct TraceJob {
  int64_t job_id = 0;
  int num_gpu = 0;
  double submit_time_ms = 0;
  double iterations = 0;
  std::string model_name;
  // Isolated time of one iteration at num_gpu GPUs, ms.
  double iteration_time_ms = 0;
  // Columns resource_time_0, resource_time_1, ... (in that order, as many
  // as the header has): ms per iteration on each resource, Muri's per-job
  // profile for multi-resource interleaving. Empty when the trace has none.
  std::vector<double> resource_time_ms;
};

// Parses a trace CSV. Errors: NotFound (file), InvalidArgument (missing
// column, unparsable or non-positive num_gpu/iterations/iteration_time,
// negative submit_time, unparsable or negative resource_time_N), naming the
// line.
absl::StatusOr<std::vector<TraceJob>> ReadTraceCsv(const std::string& path);

// Parses a cluster spec CSV (`num_switch,num_node_p_switch,num_gpu_p_node,
// ...`, one data row). Errors: NotFound, InvalidArgument; Unimplemented for
// more than one switch (placement is modelled within one switch).
absl::StatusOr<sched::muri::GpuCluster> ReadClusterCsv(const std::string& path);

// One job's outcome; all times in simulated seconds.
struct JobRecord {
  int64_t job_id = 0;
  int num_gpu = 0;
  double submit_time_s = 0;
  // First start.
  double start_time_s = 0;
  double end_time_s = 0;
  double jct_s = 0;
  double pending_time_s = 0;
  int preempt = 0;
};

// Writes records sorted by job_id with the columns of the golden files in
// shared/traces/muri/reproduced/: job_id,num_gpu,submit_time_s,start_time_s,
// end_time_s,jct_s,pending_time_s,preempt (doubles round-trip exactly).
absl::Status WriteJobsCsv(const std::string& path,
                          std::vector<JobRecord> records);

// Reads a file written by WriteJobsCsv or a golden file of that format.
absl::StatusOr<std::vector<JobRecord>> ReadJobsCsv(const std::string& path);

}  // namespace trainctl::sim

#endif  // TRAINCTL_BENCH_SIM_TRACE_IO_H_
