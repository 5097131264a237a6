#include "coordinator/scheduler_view.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "coordinator/node_admin.h"
#include "coordinator/job_facts.h"
#include "coordinator/job_spec.h"

namespace trainctl::coord {
namespace {

// Whether `n` already describes node `e` (name, features, GPUs and their
// types, NVLink peers); the reservations are not compared (they are reset
// and recounted).
bool SameNodeShape(const sched::NodeState& n, const std::string& name,
                   const v1::Node& node) {
  if (n.name != name || n.gpus.size() != static_cast<size_t>(node.gpus_size()) ||
      !std::equal(n.features.begin(), n.features.end(), node.features().begin(),
                  node.features().end())) {
    return false;
  }
  for (int i = 0; i < node.gpus_size(); ++i) {
    const v1::Gpu& g = node.gpus(i);
    const sched::GpuState& gs = n.gpus[i];
    if (gs.index != g.index() || gs.memory_total_bytes != g.memory_total_bytes() ||
        gs.gpu_type != g.gpu_type() ||
        !std::equal(gs.nvlink_peers.begin(), gs.nvlink_peers.end(),
                    g.nvlink_peers().begin(), g.nvlink_peers().end())) {
      return false;
    }
  }
  return true;
}

// The batch `job` was submitted in, for Queue's cut: its job
// array's id, or for a sweep's trial a negative key from the sweep id; 0
// for any other job, and for a task that may differ from its batch's others
// by more than its index (started before, excluded by pre-flight, or
// preempting).
int64_t BatchKey(const v1::Job& job) {
  if (job.attempts_size() > 0 || job.preflight().excluded_size() > 0 ||
      job.preempted_for_job_id() != 0) {
    return 0;
  }
  if (job.spec().has_array()) return job.spec().array().array_job_id();
  if (job.spec().sweep_id().empty()) return 0;
  // Two sweeps sharing a key (a hash collision) are cut as one batch, which
  // is still exact: the cut compares every trial's request with the first's.
  return -static_cast<int64_t>(absl::HashOf(job.spec().sweep_id()) >> 1) - 1;
}

// Most tasks shaped like `spec` that one pass can place or preempt for, plus
// one (see Queue).
int ArrayPassCap(const v1::JobSpec& spec, int schedulable_gpus, int max_tasks_per_gpu) {
  if (KindOf(spec) == v1::JOB_KIND_GANG) {
    const int per_task = spec.nodes() > 0 ? spec.nodes() * spec.gpus_per_node() : spec.gpus();
    return schedulable_gpus / std::max(1, per_task) + 1;
  }
  const bool whole = spec.gpu_memory_bytes() == 0 &&
                     (spec.gpu_fraction() <= 0 || spec.gpu_fraction() >= 1.0);
  return schedulable_gpus * (whole ? 1 : std::max(1, max_tasks_per_gpu)) + 1;
}

}  // namespace

const sched::ClusterSnapshot& SchedulerView::Snapshot(const JobTable& jobs,
                                                      const NodeRegistry& nodes,
                                                      const DrainingTasks& draining,
                                                      int64_t now_ms) const {
  // Rebuilt in place: node and GPU entries whose shape did not change are
  // kept (no string or vector allocated per event), only their reservations
  // are reset and recounted below. Per-event cost was dominated by malloc
  // here (bench/README.md, swarm perf notes).
  sched::ClusterSnapshot& snap = cache_;
  snap.running.clear();
  if (snap.nodes.size() != nodes.size()) snap.nodes.resize(nodes.size());
  size_t i = 0;
  for (const auto& [name, e] : nodes) {
    sched::NodeState& n = snap.nodes[i++];
    n.schedulable = e.conn != nullptr && e.node.state() == v1::NODE_STATE_READY &&
                    e.stopping_unplaced.empty() && InService(e.node);
    n.out_of_service = InService(e.node) ? "" : DescribeAdmin(e.node, absl::FromUnixMillis(now_ms));
    n.container_runtime = e.node.container_runtimes_size() > 0;
    n.cgroups = e.node.cgroups();
    if (SameNodeShape(n, name, e.node)) {
      for (sched::GpuState& gs : n.gpus) {
        gs.reserved_bytes = 0;
        gs.task_count = 0;
      }
      continue;
    }
    n.name = name;
    n.features.assign(e.node.features().begin(), e.node.features().end());
    n.gpus.clear();
    for (const v1::Gpu& g : e.node.gpus()) {
      sched::GpuState& gs = n.gpus.emplace_back();
      gs.index = g.index();
      // gs.uuid stays empty: the scheduler places by index and never reads
      // it, and StartAttemptLocked takes UUIDs from the node record. Not
      // copying it saves a string allocation per GPU here and in every
      // Schedule() pass's copy of the snapshot (40-byte NVML UUIDs do not
      // fit the small-string buffer).
      gs.memory_total_bytes = g.memory_total_bytes();
      gs.gpu_type = g.gpu_type();
      gs.nvlink_peers.assign(g.nvlink_peers().begin(), g.nvlink_peers().end());
    }
  }
  auto reserve = [&](const v1::Task& t) {
    // nodes and snap.nodes are both in name order.
    auto it = std::lower_bound(
        snap.nodes.begin(), snap.nodes.end(), t.node(),
        [](const sched::NodeState& n, const std::string& name) { return n.name < name; });
    if (it == snap.nodes.end() || it->name != t.node()) return;
    for (int gpu : OwnedGpus(t)) {
      for (sched::GpuState& gs : it->gpus) {
        if (gs.index != gpu) continue;
        gs.reserved_bytes += TaskBytesOnGpu(t, gs.memory_total_bytes);
        gs.task_count += 1;
      }
    }
  };
  NodeRegistry::PortsByHost& ports = nodes.snapshot_ports();
  ports.clear();
  jobs.ForEachActive([&](const v1::Job& job) {
    bool live = false;
    for (const v1::Task& t : job.tasks()) {
      if (HoldsGpus(job, t)) {
        reserve(t);
        live = true;
      }
    }
    // As PortsInUseLocked(nullptr), in the same walk.
    if (live) {
      auto& used = ports[nodes.PortHost(job.tasks(0).node())];
      used.insert(job.master_port());
      if (job.jax_port() > 0) used.insert(job.jax_port());
    }
  });
  for (const DrainingTask& d : draining) reserve(d.task);
  // Who holds what, for quotas, fair share, preemption and ETAs.
  jobs.ForEachActive([&](const v1::Job& job) {
    const int64_t id = job.id();
    if (job.state() != v1::JOB_STATE_SCHEDULED &&
        job.state() != v1::JOB_STATE_RUNNING) {
      return;
    }
    sched::RunningJob& r = snap.running.emplace_back();
    const v1::JobSpec& spec = job.spec();
    r.job_id = id;
    r.priority = spec.priority();
    r.submit_seq = id;
    r.queue = spec.queue();
    r.user = spec.user();
    r.project = spec.project();
    r.preemptible = spec.preemptible();
    if (spec.has_array()) r.group = ArrayGroup(spec.array().array_job_id());
    // A job not yet RUNNING counts as starting now.
    const int64_t start_ms = job.start_time_ms() > 0 ? job.start_time_ms() : now_ms;
    const int64_t ran_ms = std::max<int64_t>(0, now_ms - start_ms);
    r.attained_gpu_s =
        static_cast<double>(job.attained_gpu_ms() + ran_ms * JobGpuCount(job)) / 1000.0;
    if (spec.time_limit_ms() > 0) {
      r.remaining_s =
          static_cast<double>(std::max<int64_t>(0, spec.time_limit_ms() - ran_ms)) / 1000.0;
    }
    // One assignment per node, in node-rank order, from its live tasks.
    for (const v1::Task& t : job.tasks()) {
      if (!HoldsGpus(job, t)) continue;
      r.placement.reserved_bytes_per_gpu = t.reserved_bytes_per_gpu();
      r.placement.whole_gpus = t.whole_gpus();
      sched::NodeAssignment* a = nullptr;
      for (sched::NodeAssignment& x : r.placement.nodes) {
        if (x.node == t.node()) a = &x;
      }
      if (a == nullptr) {
        a = &r.placement.nodes.emplace_back();
        a->node = t.node();
      }
      for (int gpu : OwnedGpus(t)) {
        if (std::find(a->gpu_indices.begin(), a->gpu_indices.end(), gpu) ==
            a->gpu_indices.end()) {
          a->gpu_indices.push_back(gpu);
        }
      }
    }
    if (r.placement.nodes.empty()) snap.running.pop_back();
  });
  return snap;
}

std::vector<sched::JobRequest> SchedulerView::Queue(
    const JobTable& jobs, const NodeRegistry& nodes, const DrainingTasks& draining,
    int64_t now_ms, absl::flat_hash_map<int64_t, TrimmedArray>* trimmed) const {
  // Per array: the spec of its first pending first-attempt task, and how
  // many tasks shaped like it the queue holds.
  struct ArrayCut {
    const v1::JobSpec* first = nullptr;
    int included = 0;
    int cap = 0;
  };
  absl::flat_hash_map<int64_t, ArrayCut> cuts;
  int schedulable_gpus = 0;
  if (trimmed != nullptr) {
    for (const auto& [name, e] : nodes) {
      if (e.conn != nullptr && e.node.state() == v1::NODE_STATE_READY &&
          e.stopping_unplaced.empty()) {
        schedulable_gpus += e.node.gpus_size();
      }
    }
  }
  // Preemptors whose victims' tasks are still stopping.
  absl::flat_hash_set<int64_t> waiting_on_victims;
  for (const DrainingTask& d : draining) {
    auto it = jobs.find(d.job_id);
    if (it != jobs.end() && it->second.preempted_for_job_id() != 0) {
      waiting_on_victims.insert(it->second.preempted_for_job_id());
    }
  }
  std::vector<sched::JobRequest> queue;
  queue.reserve(jobs.active().size());
  jobs.ForEachActive([&](const v1::Job& job) {
    const int64_t id = job.id();
    if (job.state() != v1::JOB_STATE_PENDING) return;
    // Auto-packed trials are placed by the packer, after the scheduler; a
    // verify job only ever on its node, by UpdateNodes.
    if (job.spec().auto_pack() || !job.spec().verify_node().empty()) return;
    // A job whose dependency does not hold yet waits out of the queue, with
    // its "waiting for dependency" reason (dependency_index.h).
    if (jobs.deps().Blocked(id)) return;
    const int64_t array = trimmed != nullptr ? BatchKey(job) : 0;
    if (array != 0) {
      ArrayCut& cut = cuts[array];
      if (cut.first == nullptr) {
        cut.first = &job.spec();
        cut.cap = ArrayPassCap(job.spec(), schedulable_gpus,
                               max_tasks_per_gpu_);
      }
      if (SameSchedulingRequest(*cut.first, job.spec())) {
        if (cut.included >= cut.cap) {
          (*trimmed)[array].trimmed.push_back(id);
          return;
        }
        ++cut.included;
        TrimmedArray& t = (*trimmed)[array];
        t.last_included = id;
        t.cap = cut.cap;
      }
    }
    queue.push_back(ToJobRequest(job));
    queue.back().standing.victims_stopping = waiting_on_victims.contains(id);
    // Queued since its submit, or since its last attempt ended (requeue).
    int64_t queued_since_ms = job.submit_time_ms();
    if (job.attempts_size() > 0) {
      queued_since_ms = std::max(queued_since_ms,
                                 job.attempts(job.attempts_size() - 1).end_time_ms());
    }
    queue.back().standing.waited_s =
        static_cast<double>(std::max<int64_t>(0, now_ms - queued_since_ms)) / 1000.0;
  });
  return queue;
}

v1::WhyJobResponse SchedulerView::Why(const v1::Job& job, const sched::Scheduler& scheduler,
                                      const JobTable& jobs, const NodeRegistry& nodes,
                                      const DrainingTasks& draining, absl::Time now) const {
  const int64_t job_id = job.id();
  const int64_t now_ms = ToUnixMs(now);
  v1::WhyJobResponse out;
  out.set_job_id(job_id);
  out.set_state(job.state());
  out.set_queue(job.spec().queue().empty() ? "default" : job.spec().queue());
  out.set_preemptions(job.preemptions());
  for (const v1::ExcludedNode& e : job.preflight().excluded()) {
    out.add_excluded_nodes(absl::StrCat(e.node(), ": pre-flight ", e.run(), ": ",
                                        e.reason()));
  }
  for (const auto& [name, entry] : nodes) {
    if (!InService(entry.node)) {
      out.add_drained_nodes(absl::StrCat(name, ": ", DescribeAdmin(entry.node, now)));
    }
  }
  if (KindOf(job.spec()) == v1::JOB_KIND_GANG) {
    // Agents' configuration errors that bear on a gang's pre-flight, in name
    // order (the registry is a hash map).
    std::vector<std::string> errors;
    for (const auto& [name, entry] : nodes) {
      if (!entry.node.preflight_probe_error().empty()) {
        errors.push_back(absl::StrCat(name, ": agent configuration error: ",
                                      entry.node.preflight_probe_error()));
      }
    }
    std::sort(errors.begin(), errors.end());
    for (std::string& e : errors) out.add_agent_errors(std::move(e));
  }
  if (job.state() != v1::JOB_STATE_PENDING) {
    out.set_summary(absl::StrCat(
        "job ", job_id, " is not waiting: it is ",
        absl::AsciiStrToLower(v1::JobState_Name(job.state()).substr(10)),
        job.reason().empty() ? "" : absl::StrCat(" (", job.reason(), ")")));
    return out;
  }
  std::optional<sched::Explanation> e =
      scheduler.Explain(Snapshot(jobs, nodes, draining, now_ms),
                        Queue(jobs, nodes, draining, now_ms), job_id);
  if (!e.has_value()) {
    out.set_summary(job.reason());
    return out;
  }
  out.set_summary(e->decision.outcome == sched::Outcome::kPlaced
                      ? "it fits now and starts at the next scheduling pass"
                      : e->decision.reason);
  out.set_position(e->position);
  out.set_queue(e->queue);
  out.set_quota(e->quota);
  for (std::string& line : e->nodes) out.add_nodes(std::move(line));
  for (std::string& line : e->constraints) out.add_constraints(std::move(line));
  out.set_reservation_job_id(e->reservation_job);
  out.set_reservation(e->reservation);
  if (e->reservation_eta_s >= 0) {
    out.set_reservation_eta_ms(ToUnixMs(now + absl::Seconds(e->reservation_eta_s)));
  }
  out.set_preempted_for_job_id(e->preempted_for);
  return out;
}

bool SchedulerView::TrimReasonUnchanged(int64_t array, int cap,
                                        const std::string& reason) const {
  auto it = trim_reasons_.find(array);
  return it != trim_reasons_.end() && it->second.first == cap && it->second.second == reason;
}

SchedulerView::FollowUp SchedulerView::FollowUpTrimmed(
    const absl::flat_hash_map<int64_t, TrimmedArray>& trimmed, JobTable& jobs) {
  FollowUp f;
  absl::flat_hash_map<int64_t, std::pair<int, std::string>> reasons;
  for (const auto& [array, cut] : trimmed) {
    if (cut.trimmed.empty()) continue;
    auto last = jobs.find(cut.last_included);
    if (last == jobs.end()) continue;
    const v1::Job& decided = last->second;
    const bool pending = decided.state() == v1::JOB_STATE_PENDING;
    if (!pending && decided.state() != v1::JOB_STATE_FAILED) {
      f.pass_again = true;
      continue;
    }
    if (pending) {
      // With the same cut the tasks left out are those of the last pass but
      // the ones that moved into the queue, and each has the reason already.
      const bool unchanged = TrimReasonUnchanged(array, cut.cap, decided.reason());
      reasons.emplace(array, std::make_pair(cut.cap, decided.reason()));
      if (unchanged) continue;
    }
    for (int64_t id : cut.trimmed) {
      auto it = jobs.find(id);
      if (it == jobs.end() || it->second.state() != v1::JOB_STATE_PENDING) continue;
      if (!pending) {
        f.fail.emplace_back(id, decided.reason());
      } else if (it->second.reason() != decided.reason()) {
        it->second.set_reason(decided.reason());
      }
    }
  }
  SetTrimReasons(std::move(reasons));
  return f;
}

}  // namespace trainctl::coord
