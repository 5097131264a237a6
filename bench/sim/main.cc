// trainctl-sim: replays a job trace through the coordinator's scheduler
// library on simulated nodes and prints one JSON object (last line of
// stdout) with the metrics.
//
//   trainctl-sim --trace FILE.csv --cluster FILE.csv --policy NAME
//                [--compat muri] [--jobs-out FILE.csv]

#include <chrono>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/sim/simulator.h"
#include "bench/sim/trace_io.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace {

int Fail(const absl::Status& status) {
  std::cerr << "trainctl-sim: " << status.message() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "trainctl-sim: discrete-event replay of a GPU job trace through the "
      "coordinator's scheduler library (simulated clock and nodes)"};
  std::string trace_path;
  std::string cluster_path;
  std::string policy_name;
  std::string compat;
  std::string jobs_out;
  double reservation_min_wait_s = -1;
  app.add_option("--trace", trace_path,
                 "trace CSV (job_id,num_gpu,submit_time,iterations,"
                 "model_name,...,iteration_time; times in ms)")
      ->required();
  app.add_option("--cluster", cluster_path,
                 "cluster spec CSV (num_switch,num_node_p_switch,"
                 "num_gpu_p_node,...)")
      ->required();
  app.add_option("--policy", policy_name,
                 "las | las-nopack | las-tiresias | las-overtake | muri-l | fifo | "
                 "fifo-backfill | srtf | srsf | tiresias")
      ->required();
  app.add_option("--compat", compat,
                 "cost model of an artifact to reproduce: 'muri' (restart "
                 "overhead charged at every event, upstream float order)")
      ->check(CLI::IsMember({"muri"}));
  app.add_option("--jobs-out", jobs_out, "write per-job results to this CSV");
  app.add_option("--reservation-min-wait-s", reservation_min_wait_s,
                 "policies through the scheduler library: a blocked job "
                 "reserves GPUs only after waiting this many seconds "
                 "(PolicyConfig.reservation_min_wait_s); default: the "
                 "policy's own")
      ->check(CLI::NonNegativeNumber);
  int interleave_max_jobs = -1;
  double interleave_min_gain = -1;
  app.add_option("--interleave-max-jobs", interleave_max_jobs,
                 "las, las-overtake, muri-l: at most this many jobs share "
                 "GPUs (PolicyConfig.interleave.max_jobs; default 3, muri-l 4)")
      ->check(CLI::Range(1, 4));
  app.add_option("--interleave-min-gain", interleave_min_gain,
                 "las, las-overtake, muri-l: pack only when the group gains "
                 "at least this fraction (PolicyConfig.interleave.min_gain; "
                 "default 0)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<trainctl::sim::Policy> policy =
      trainctl::sim::ParsePolicy(policy_name);
  if (!policy.ok()) return Fail(policy.status());
  absl::StatusOr<std::vector<trainctl::sim::TraceJob>> trace =
      trainctl::sim::ReadTraceCsv(trace_path);
  if (!trace.ok()) return Fail(trace.status());
  absl::StatusOr<trainctl::sched::muri::GpuCluster> cluster =
      trainctl::sim::ReadClusterCsv(cluster_path);
  if (!cluster.ok()) return Fail(cluster.status());

  trainctl::sim::SimConfig config;
  config.policy = *policy;
  config.cost_model = compat == "muri" ? trainctl::sim::CostModel::kMuri
                                       : trainctl::sim::CostModel::kOurs;
  config.cluster = *cluster;
  config.reservation_min_wait_s = reservation_min_wait_s;
  config.interleave_max_jobs = interleave_max_jobs;
  config.interleave_min_gain = interleave_min_gain;

  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<trainctl::sim::SimResult> result =
      trainctl::sim::Simulate(config, *trace);
  const double wall_s = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - t0)
                            .count();
  if (!result.ok()) return Fail(result.status());
  if (!jobs_out.empty()) {
    absl::Status s = trainctl::sim::WriteJobsCsv(jobs_out, result->jobs);
    if (!s.ok()) return Fail(s);
  }

  const trainctl::sim::SimMetrics& m = result->metrics;
  google::protobuf::Struct out;
  auto& f = *out.mutable_fields();
  f["trace"].set_string_value(trace_path);
  f["policy"].set_string_value(policy_name);
  if (reservation_min_wait_s >= 0) {
    f["reservation_min_wait_s"].set_number_value(reservation_min_wait_s);
  }
  if (interleave_max_jobs >= 0) {
    f["interleave_max_jobs"].set_number_value(interleave_max_jobs);
  }
  if (interleave_min_gain >= 0) {
    f["interleave_min_gain"].set_number_value(interleave_min_gain);
  }
  f["compat"].set_string_value(compat.empty() ? "none" : compat);
  f["nodes"].set_number_value(cluster->num_nodes);
  f["gpus_per_node"].set_number_value(cluster->gpus_per_node);
  f["jobs"].set_number_value(static_cast<double>(m.jobs));
  f["avg_jct_s"].set_number_value(m.avg_jct_s);
  f["makespan_s"].set_number_value(m.makespan_s);
  f["p99_jct_s"].set_number_value(m.p99_jct_s);
  f["gpu_allocation"].set_number_value(m.gpu_allocation);
  f["gpu_allocation_while_queued"].set_number_value(
      m.gpu_allocation_while_queued);
  f["queued_s"].set_number_value(m.queued_s);
  f["events"].set_number_value(static_cast<double>(m.events));
  f["preemptions"].set_number_value(static_cast<double>(m.preemptions));
  f["wall_s"].set_number_value(wall_s);
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(out, &json, options).ok()) {
    return Fail(absl::InternalError("cannot render the JSON result"));
  }
  std::cout << json << std::endl;
  return 0;
}
