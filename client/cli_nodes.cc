// `trainctl nodes`: every GPU of the cluster (model, memory, utilization,
// temperature, power, the jobs on it), as a table or JSON; `trainctl node
// drain|resume|down|describe`: the admin levers on nodes.

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
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
#include "coordinator/node_admin.h"

namespace trainctl::cli::internal {

CLI::App* AddNodesCommand(CLI::App& app, Flags& f) {
  CLI::App* nodes_cmd =
      app.add_subcommand("nodes", "Show every GPU of the cluster");
  nodes_cmd->add_option("-o,--output", f.output, "Output format: table, json or yaml")
      ->check(CLI::IsMember({"table", "json", "yaml"}));
  nodes_cmd->footer(Example("  trainctl nodes\n  trainctl nodes -o json"));
  return nodes_cmd;
}

NodeCommands AddNodeCommands(CLI::App& app, Flags& f) {
  CLI::App* node = app.add_subcommand(
      "node", "Drain, resume, down or describe nodes (drain/resume/down: admins)");
  node->require_subcommand(1);
  NodeCommands c;
  auto common = [&](CLI::App* cmd) {
    cmd->add_option("NODE", f.node_names, "Node names")->required();
    cmd->add_option("-o,--output", f.output, "Output format: table, json or yaml")
        ->check(CLI::IsMember({"table", "json", "yaml"}));
  };
  c.drain = node->add_subcommand(
      "drain",
      "No new jobs on the nodes; running jobs finish (DRAINING, then DRAINED once "
      "empty). With --deadline, what still runs then is requeued (no restart used)");
  common(c.drain);
  c.drain->add_option("--reason", f.node_reason, "Why (shown to users whose jobs wait)")
      ->required();
  c.drain->add_option("--deadline", f.node_deadline,
                      "Requeue what still runs after this long: 30m, 2h, 1h30m");
  c.drain->footer(Example(
      "  trainctl node drain gpu-07 --reason 'swap PSU'\n"
      "  trainctl node drain gpu-07 gpu-08 --reason 'kernel update' --deadline 2h"));
  c.resume = node->add_subcommand("resume", "Put drained or down nodes back in service");
  common(c.resume);
  c.resume->add_flag("--verify", f.node_verify,
                     "Resume each node only once its pre-flight probe passes on every "
                     "GPU (a verify job; waits for it); a node that fails stays drained "
                     "with the verdict");
  c.resume->footer(Example("  trainctl node resume gpu-07 --verify"));
  c.down = node->add_subcommand(
      "down", "Out of service now: running jobs are stopped and requeued (no restart used)");
  common(c.down);
  c.down->add_option("--reason", f.node_reason, "Why")->required();
  c.down->footer(Example("  trainctl node down gpu-07 --reason 'GPU 3 fell off the bus'"));
  c.describe = node->add_subcommand("describe", "Show nodes in detail");
  common(c.describe);
  c.describe->footer(Example("  trainctl node describe gpu-07"));
  return c;
}

std::string NodeShownState(const v1::NodeView& view) {
  switch (view.service_state()) {
    case v1::NODE_SERVICE_STATE_DRAINING:
      return "draining";
    case v1::NODE_SERVICE_STATE_DRAINED:
      return "drained";
    case v1::NODE_SERVICE_STATE_DOWN:
      return "down";
    default:
      return NodeStateName(view.node().state());
  }
}


int Session::UpdateNodes(v1::NodeAction action, const std::vector<std::string>& nodes,
                         const std::string& reason, std::optional<absl::Duration> deadline,
                         bool verify, bool json) {
  v1::UpdateNodesRequest req;
  for (const std::string& n : nodes) req.add_nodes(n);
  req.set_action(action);
  req.set_reason(reason);
  if (deadline.has_value()) req.set_deadline_s(absl::ToInt64Seconds(*deadline));
  req.set_verify(verify);
  v1::UpdateNodesResponse response;
  if (absl::Status s = Call(&Stub::UpdateNodes, req, &response); !s.ok()) return Fail(s);
  int status = kExitOk;
  if (!response.verify_jobs().empty() && !json) {
    // Each node resumes once its verify job (its pre-flight probe on every
    // GPU) succeeds: wait for them, then show where the nodes stand.
    std::vector<int64_t> jobs;
    for (const std::string& n : nodes) {
      auto it = response.verify_jobs().find(n);
      if (it == response.verify_jobs().end()) continue;
      out_ << n << ": verifying with job " << it->second
           << " (its pre-flight probe on every GPU)\n";
      jobs.push_back(it->second);
    }
    status = WaitJobs(jobs, std::nullopt);
    v1::ListNodesResponse all;
    if (absl::Status s = Call(&Stub::ListNodes, v1::ListNodesRequest(), &all); !s.ok()) {
      return Fail(s);
    }
    response.clear_nodes();
    for (const v1::NodeView& v : all.nodes()) {
      if (std::find(nodes.begin(), nodes.end(), v.node().name()) != nodes.end()) {
        *response.add_nodes() = v;
      }
    }
  }
  if (json) {
    out_ << ToJson(response);
    return kExitOk;
  }
  const absl::Time now = clock_.Now();
  for (const v1::NodeView& view : response.nodes()) {
    int jobs = 0;
    absl::flat_hash_map<int64_t, bool> seen;
    for (const v1::GpuTasks& g : view.gpu_tasks()) {
      for (const v1::GpuTaskRef& t : g.tasks()) jobs += seen.emplace(t.job_id(), true).second;
    }
    const std::string admin = coord::DescribeAdmin(view.node(), now);
    out_ << view.node().name() << ": " << NodeShownState(view);
    if (view.service_state() == v1::NODE_SERVICE_STATE_DRAINING) {
      out_ << " (" << jobs << (jobs == 1 ? " job" : " jobs") << " still running)";
    }
    out_ << (admin.empty() ? "" : absl::StrCat(" - ", admin)) << "\n";
  }
  return status;
}

int Session::DescribeNodes(const std::vector<std::string>& nodes, bool json) {
  v1::ListNodesResponse all;
  if (absl::Status s = Call(&Stub::ListNodes, v1::ListNodesRequest(), &all); !s.ok()) {
    return Fail(s);
  }
  v1::ListNodesResponse picked;
  for (const std::string& name : nodes) {
    bool found = false;
    for (const v1::NodeView& v : all.nodes()) {
      if (v.node().name() != name) continue;
      *picked.add_nodes() = v;
      found = true;
    }
    if (!found) {
      return Fail(absl::NotFoundError(absl::StrCat("no node ", name, " is registered")));
    }
  }
  if (json) {
    out_ << ToJson(picked);
    return kExitOk;
  }
  const absl::Time now = clock_.Now();
  for (int i = 0; i < picked.nodes_size(); ++i) {
    const v1::NodeView& view = picked.nodes(i);
    const v1::Node& n = view.node();
    if (i > 0) out_ << "\n";
    out_ << "Name:          " << n.name() << (n.fake_gpus() ? " (fake GPUs)" : "") << "\n"
         << "State:         " << NodeShownState(view) << "\n";
    if (const std::string admin = coord::DescribeAdmin(n, now); !admin.empty()) {
      out_ << "Reason:        " << admin << (n.admin().automatic() ? " (automatic)" : "")
           << "\n";
    }
    out_ << "Address:       " << n.address() << "\n"
         << "Agent:         " << n.agent_version() << ", last heartbeat "
         << FormatAge(now - absl::FromUnixMillis(n.last_heartbeat_ms())) << " ago\n"
         << "CPUs:          " << n.cpu_count() << "\n";
    if (n.features_size() > 0) {
      out_ << "Features:      " << absl::StrJoin(n.features(), ",") << "\n";
    }
    if (!n.labels().empty()) {
      std::vector<std::string> labels;
      for (const auto& [k, v] : n.labels()) labels.push_back(absl::StrCat(k, "=", v));
      std::sort(labels.begin(), labels.end());
      out_ << "Labels:        " << absl::StrJoin(labels, ",") << "\n";
    }
    if (!n.preflight_probe_error().empty()) {
      out_ << "Probe error:   " << n.preflight_probe_error() << "\n";
    }
    out_ << "GPUs:\n";
    for (int g = 0; g < n.gpus_size(); ++g) {
      std::vector<std::string> jobs;
      if (g < view.gpu_tasks_size()) {
        for (const v1::GpuTaskRef& t : view.gpu_tasks(g).tasks()) {
          jobs.push_back(absl::StrCat(t.job_id(), "/", t.rank()));
        }
      }
      out_ << "  " << n.gpus(g).index() << "  " << n.gpus(g).name() << "  "
           << FormatBytes(n.gpus(g).memory_total_bytes()) << "  jobs: "
           << (jobs.empty() ? "-" : absl::StrJoin(jobs, ",")) << "\n";
    }
  }
  return kExitOk;
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
      rows.push_back({name, NodeShownState(view), "-", "(no GPUs)", "-", "-",
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
      rows.push_back({name, NodeShownState(view),
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
  // Why nodes are out of service (Slurm's `sinfo -R`).
  for (const v1::NodeView& view : response.nodes()) {
    const std::string admin = coord::DescribeAdmin(view.node(), clock_.Now());
    if (!admin.empty()) out_ << view.node().name() << ": " << admin << "\n";
  }
  return kExitOk;
}

}  // namespace trainctl::cli::internal
