// `trainctl nodes`: every GPU of the cluster (model, memory, utilization,
// temperature, power, the jobs on it), as a table or JSON.

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli.h"
#include "client/cli_internal.h"
#include "client/table.h"
#include "common/units.h"

namespace trainctl::cli::internal {

CLI::App* AddNodesCommand(CLI::App& app, Flags& f) {
  CLI::App* nodes_cmd =
      app.add_subcommand("nodes", "Show every GPU of the cluster");
  nodes_cmd->add_option("-o,--output", f.output, "Output format: table, json or yaml")
      ->check(CLI::IsMember({"table", "json", "yaml"}));
  nodes_cmd->footer(Example("  trainctl nodes\n  trainctl nodes -o json"));
  return nodes_cmd;
}

namespace {

// "h100 80G": the GPU's type (Gpu.gpu_type, set by the coordinator) and
// its memory in whole GiB; "-" for a GPU without a type. Each row is one
// GPU, so a node that mixes types shows each GPU's own.
std::string GpuTypeCell(const v1::Gpu& gpu) {
  if (gpu.gpu_type().empty()) return "-";
  const int64_t gib = (gpu.memory_total_bytes() + (int64_t{1} << 29)) >> 30;
  return absl::StrCat(gpu.gpu_type(), " ", gib, "G");
}

// The node's features and labels ("ib,nvlink rack=r1"), "-" when none.
std::string NodeFeaturesCell(const v1::Node& node) {
  std::vector<std::string> parts;
  if (node.features_size() > 0) parts.push_back(absl::StrJoin(node.features(), ","));
  std::map<std::string, std::string> labels(node.labels().begin(), node.labels().end());
  for (const auto& [k, v] : labels) parts.push_back(absl::StrCat(k, "=", v));
  return parts.empty() ? "-" : absl::StrJoin(parts, " ");
}

}  // namespace

int Session::Nodes(bool json) {
  v1::ListNodesResponse response;
  if (absl::Status s =
          Call(&Stub::ListNodes, v1::ListNodesRequest(), &response);
      !s.ok()) {
    return Fail(s);
  }
  if (json) {
    out_ << ToJson(response);
    return kExitOk;
  }
  // A job seen on more than one GPU is a gang: show its ranks.
  absl::flat_hash_map<int64_t, int> gpus_per_job;
  for (const v1::NodeView& view : response.nodes()) {
    for (const v1::GpuTasks& gpu : view.gpu_tasks()) {
      for (const v1::GpuTaskRef& ref : gpu.tasks())
        ++gpus_per_job[ref.job_id()];
    }
  }
  std::vector<std::string> header = {"NODE", "STATE", "GPU",  "MODEL",    "TYPE", "MEMORY",
                                     "UTIL", "TEMP",  "POWER", "FEATURES", "JOBS"};
  std::vector<std::vector<std::string>> rows;
  bool any_fake = false;
  for (const v1::NodeView& view : response.nodes()) {
    const v1::Node& node = view.node();
    std::string name = node.name() + (node.fake_gpus() ? "*" : "");
    any_fake |= node.fake_gpus();
    const std::string features = NodeFeaturesCell(node);
    if (node.gpus_size() == 0) {
      rows.push_back({name, NodeStateName(node.state()), "-", "(no GPUs)", "-", "-",
                    "-", "-", "-", features, "-"});
    }
    for (int i = 0; i < node.gpus_size(); ++i) {
      const v1::Gpu& gpu = node.gpus(i);
      std::vector<std::string> jobs;
      if (i < view.gpu_tasks_size()) {
        for (const v1::GpuTaskRef& ref : view.gpu_tasks(i).tasks()) {
          bool gang = ref.rank() > 0 || gpus_per_job[ref.job_id()] > 1;
          jobs.push_back(gang ? absl::StrCat(ref.job_id(), "/", ref.rank())
                              : absl::StrCat(ref.job_id()));
        }
      }
      rows.push_back({name, NodeStateName(node.state()),
                    absl::StrCat(gpu.index()),
                    gpu.name() + (gpu.mig_enabled() ? " (MIG)" : ""),
                    GpuTypeCell(gpu),
                    absl::StrCat(FormatBytes(gpu.memory_used_bytes()), " / ",
                                 FormatBytes(gpu.memory_total_bytes())),
                    absl::StrCat(gpu.utilization_pct(), "%"),
                    absl::StrCat(gpu.temperature_c(), "C"),
                    absl::StrFormat("%.0fW", gpu.power_w()), features,
                    jobs.empty() ? "-" : absl::StrJoin(jobs, ",")});
    }
  }
  // TYPE and FEATURES only when some GPU has a type or some node features
  // or labels (a cluster without them reads as before).
  auto any_in = [&rows](size_t column) {
    return std::any_of(rows.begin(), rows.end(),
                       [column](const std::vector<std::string>& r) { return r[column] != "-"; });
  };
  const bool any_features = any_in(9);
  const bool any_type = any_in(4);
  for (size_t column : {size_t{9}, size_t{4}}) {
    if (column == 9 ? any_features : any_type) continue;
    header.erase(header.begin() + column);
    for (std::vector<std::string>& r : rows) r.erase(r.begin() + column);
  }
  Table table(header);
  for (std::vector<std::string>& r : rows) table.AddRow(std::move(r));
  const int off = any_type ? 0 : -1;  // columns after TYPE
  // On a narrow terminal names, models, features and jobs are cut; POWER,
  // TEMP, FEATURES and TYPE go.
  for (int column : {1, 2, 6 + off, 7 + off, 8 + off}) table.KeepWhole(column);
  if (any_type) table.KeepWhole(4);
  table.Optional(8 + off);
  table.Optional(7 + off);
  if (any_features) table.Optional(9 + off);
  if (any_type) table.Optional(4);
  table.Print(out_, terminal_width_);
  if (any_fake) out_ << "* fake GPUs (trainctl-agent --fake-gpus)\n";
  return kExitOk;
}

}  // namespace trainctl::cli::internal
