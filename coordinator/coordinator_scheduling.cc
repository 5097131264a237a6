// Coordinator: the scheduler's view of the cluster (snapshot, pending queue),
// coalesced scheduling passes, and what a pass decides: attempts started,
// preempted, failed. Declared in coordinator.h.

#include "coordinator/coordinator.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/secrets.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/coordinator_internal.h"
#include "coordinator/job_spec.h"
#include "coordinator/launch_env.h"

namespace trainctl::coord {

namespace {

// Scheduling passes coalesced per burst of events (RequestScheduleLocked):
// at most this many events, or events this far apart on the injected clock,
// share one pass. At 100,000 pending jobs a pass costs tens of ms
// (bench/README.md, scheduler throughput); these bounds keep a steady stream
// of events from postponing the pass indefinitely.
constexpr int kMaxCoalescedEvents = 256;
constexpr absl::Duration kMaxCoalesceDelay = absl::Milliseconds(2);

// Whether `n` already describes node `e` (name, GPUs, NVLink peers); the
// reservations are not compared (they are reset and recounted).
bool SameNodeShape(const sched::NodeState& n, const std::string& name,
                   const v1::Node& node) {
  if (n.name != name || n.gpus.size() != static_cast<size_t>(node.gpus_size())) {
    return false;
  }
  for (int i = 0; i < node.gpus_size(); ++i) {
    const v1::Gpu& g = node.gpus(i);
    const sched::GpuState& gs = n.gpus[i];
    if (gs.index != g.index() || gs.memory_total_bytes != g.memory_total_bytes() ||
        !std::equal(gs.nvlink_peers.begin(), gs.nvlink_peers.end(),
                    g.nvlink_peers().begin(), g.nvlink_peers().end())) {
      return false;
    }
  }
  return true;
}

}  // namespace

const sched::ClusterSnapshot& Coordinator::SnapshotLocked() const {
  // Rebuilt in place: node and GPU entries whose shape did not change are
  // kept (no string or vector allocated per event), only their reservations
  // are reset and recounted below. Per-event cost was dominated by malloc
  // here (bench/README.md, swarm perf notes).
  sched::ClusterSnapshot& snap = snapshot_cache_;
  snap.running.clear();
  if (snap.nodes.size() != nodes_.size()) snap.nodes.resize(nodes_.size());
  size_t i = 0;
  for (const auto& [name, e] : nodes_) {
    sched::NodeState& n = snap.nodes[i++];
    n.schedulable = e.conn != nullptr && e.node.state() == v1::NODE_STATE_READY &&
                    e.stopping_unplaced.empty();
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
      gs.nvlink_peers.assign(g.nvlink_peers().begin(), g.nvlink_peers().end());
    }
  }
  auto reserve = [&](const v1::Task& t) {
    // nodes_ and snap.nodes are both in name order.
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
  snapshot_ports_.clear();
  ForEachActiveLocked([&](const v1::Job& job) {
    bool live = false;
    for (const v1::Task& t : job.tasks()) {
      if (HoldsGpus(job, t)) {
        reserve(t);
        live = true;
      }
    }
    // As PortsInUseLocked(nullptr), in the same walk.
    if (live) snapshot_ports_[PortHostLocked(job.tasks(0).node())].insert(job.master_port());
  });
  for (const DrainingTask& d : draining_) reserve(d.task);
  // Who holds what, for quotas, fair share, preemption and ETAs.
  const int64_t now_ms = ToUnixMs(clock_->Now());
  ForEachActiveLocked([&](const v1::Job& job) {
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

namespace {

// The batch `job` was submitted in, for PendingQueueLocked's cut: its job
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
// one (see PendingQueueLocked).
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

std::vector<sched::JobRequest> Coordinator::PendingQueueLocked(
    absl::flat_hash_map<int64_t, TrimmedArray>* trimmed) const {
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
    for (const auto& [name, e] : nodes_) {
      if (e.conn != nullptr && e.node.state() == v1::NODE_STATE_READY &&
          e.stopping_unplaced.empty()) {
        schedulable_gpus += e.node.gpus_size();
      }
    }
  }
  // Preemptors whose victims' tasks are still stopping.
  absl::flat_hash_set<int64_t> waiting_on_victims;
  for (const DrainingTask& d : draining_) {
    auto it = jobs_.find(d.job_id);
    if (it != jobs_.end() && it->second.preempted_for_job_id() != 0) {
      waiting_on_victims.insert(it->second.preempted_for_job_id());
    }
  }
  std::vector<sched::JobRequest> queue;
  queue.reserve(active_.size());
  const int64_t now_ms = ToUnixMs(clock_->Now());
  ForEachActiveLocked([&](const v1::Job& job) {
    const int64_t id = job.id();
    if (job.state() != v1::JOB_STATE_PENDING) return;
    // Auto-packed trials are placed by the packer, after the scheduler.
    if (job.spec().auto_pack()) return;
    const int64_t array = trimmed != nullptr ? BatchKey(job) : 0;
    if (array != 0) {
      ArrayCut& cut = cuts[array];
      if (cut.first == nullptr) {
        cut.first = &job.spec();
        cut.cap = ArrayPassCap(job.spec(), schedulable_gpus,
                               config_.scheduler.max_tasks_per_gpu);
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
    queue.back().victims_stopping = waiting_on_victims.contains(id);
    // Queued since its submit, or since its last attempt ended (requeue).
    int64_t queued_since_ms = job.submit_time_ms();
    if (job.attempts_size() > 0) {
      queued_since_ms = std::max(queued_since_ms,
                                 job.attempts(job.attempts_size() - 1).end_time_ms());
    }
    queue.back().waited_s =
        static_cast<double>(std::max<int64_t>(0, now_ms - queued_since_ms)) / 1000.0;
  });
  return queue;
}

Coordinator::EventLock::EventLock(Coordinator* c) : c_(c) {
  c_->events_waiting_.fetch_add(1);
  c_->mu_.Lock();
  c_->events_waiting_.fetch_sub(1);
}

Coordinator::EventLock::~EventLock() { c_->mu_.Unlock(); }

bool Coordinator::RequestScheduleLocked(Deferred& deferred) {
  if (!schedule_requested_) {
    schedule_requested_ = true;
    schedule_requested_at_ = clock_->Now();
  }
  ++coalesced_events_;
  return !ServeScheduleLocked(deferred);
}

bool Coordinator::ServeScheduleLocked(Deferred& deferred) {
  if (!schedule_requested_) return true;
  if (events_waiting_.load() > 0 && coalesced_events_ < kMaxCoalescedEvents &&
      clock_->Now() - schedule_requested_at_ < kMaxCoalesceDelay) {
    return false;  // The event waiting for mu_ runs it at its end.
  }
  RunRequestedPassLocked(deferred);
  return true;
}

void Coordinator::RunRequestedPassLocked(Deferred& deferred) {
  schedule_requested_ = false;
  coalesced_events_ = 0;
  ScheduleLocked(deferred);
}

bool Coordinator::SchedulePassDueLocked() const {
  return !schedule_requested_ || events_waiting_.load() == 0 ||
         coalesced_events_ >= kMaxCoalescedEvents;
}

void Coordinator::AwaitSchedulePass() {
  Deferred deferred;
  {
    absl::MutexLock lock(&mu_);
    // Woken at each release of mu_: by then the waiting events have run
    // (one of them ran the pass), or one left without running it.
    mu_.Await(absl::Condition(this, &Coordinator::SchedulePassDueLocked));
    if (schedule_requested_) {
      CommitHold hold(store_);
      RunRequestedPassLocked(deferred);
    }
  }
  RunDeferred(deferred);
}

void Coordinator::ScheduleLocked(Deferred& deferred) {
  while (SchedulePassLocked(deferred)) {
  }
}

bool Coordinator::SchedulePassLocked(Deferred& deferred) {
  absl::flat_hash_map<int64_t, TrimmedArray> trimmed;
  std::vector<sched::JobRequest> queue = PendingQueueLocked(&trimmed);
  if (queue.empty()) {
    PackPendingLocked(deferred);
    return false;
  }
  const absl::Time pass_start = clock_->Now();
  const std::vector<sched::Decision> decisions =
      scheduler_.Schedule(SnapshotLocked(), queue);
  // The snapshot's walk left the ports in use in snapshot_ports_; this
  // pass's placements add theirs.
  in_pass_ = true;
  // The queue's jobs by id, for the decisions (a hash lookup each instead of
  // a btree walk: the pass decides every pending job). jobs_ gains and loses
  // no job while the decisions are applied, so the pointers stay valid.
  // Only the queue's: the tasks of a job array left out of it are many.
  absl::flat_hash_map<int64_t, v1::Job*> queued;
  queued.reserve(queue.size());
  for (const sched::JobRequest& r : queue) {
    auto it = jobs_.find(r.job_id);
    if (it != jobs_.end()) queued.emplace(r.job_id, &it->second);
  }
  for (const sched::Decision& d : decisions) {
    auto it = queued.find(d.job_id);
    if (it == queued.end()) continue;
    v1::Job& job = *it->second;
    switch (d.outcome) {
      case sched::Outcome::kPlaced:
        StartAttemptLocked(job, d.placement, deferred);
        break;
      case sched::Outcome::kInfeasible:
        if (job.spec().hold()) {
          // Accepted for nodes that will join: it waits.
          const std::string reason =
              absl::StrCat("held (--hold): cannot run on this cluster yet: ", d.reason);
          if (job.reason() != reason) job.set_reason(reason);
          break;
        }
        if (TransitionLocked(job, v1::JOB_STATE_FAILED,
                             absl::StrCat("cannot run on this cluster: ", d.reason),
                             deferred)) {
          PersistLocked(job);
        }
        break;
      case sched::Outcome::kRetryLater:
        // Usually the sentence of the last pass: compared, not rewritten.
        if (job.reason() != d.reason) job.set_reason(d.reason);
        if (job.preflight().excluded_size() > 0) {
          std::vector<std::string> names;
          for (const v1::ExcludedNode& e : job.preflight().excluded()) {
            names.push_back(e.node());
          }
          absl::StrAppend(job.mutable_reason(), "; excluded by pre-flight: ",
                          absl::StrJoin(names, ", "),
                          " (`trainctl describe` says why)");
        }
        break;
      case sched::Outcome::kPreempting:
        // Placed by a later pass, once the victims' tasks have exited.
        job.set_reason(d.reason);
        for (int64_t victim : d.preempt) {
          auto vt = jobs_.find(victim);
          if (vt == jobs_.end()) continue;
          PreemptLocked(vt->second, job.id(), deferred);
        }
        break;
    }
  }
  in_pass_ = false;
  // The tasks of an array left out of the pass wait for the same reason as
  // the last one it decided, or fail with it (they would not fit either).
  // Had that one started, the cut was too tight: pass again.
  // The reasons are not copied again while the array's cut and reason are
  // those of the last pass (trimmed_reasons_): with the same cut the tasks
  // left out are those of the last pass but the ones that moved into the
  // queue, and each already has the reason.
  bool again = false;
  absl::flat_hash_map<int64_t, std::pair<int, std::string>> reasons;
  for (auto& [array, cut] : trimmed) {
    if (cut.trimmed.empty()) continue;
    auto last = jobs_.find(cut.last_included);
    if (last == jobs_.end()) continue;
    const v1::Job& decided = last->second;
    if (decided.state() != v1::JOB_STATE_PENDING &&
        decided.state() != v1::JOB_STATE_FAILED) {
      again = true;
      continue;
    }
    if (decided.state() == v1::JOB_STATE_PENDING) {
      auto memo = trimmed_reasons_.find(array);
      const bool unchanged = memo != trimmed_reasons_.end() &&
                             memo->second.first == cut.cap &&
                             memo->second.second == decided.reason();
      reasons.emplace(array, std::make_pair(cut.cap, decided.reason()));
      if (unchanged) continue;
    }
    for (int64_t id : cut.trimmed) {
      auto it = jobs_.find(id);
      if (it == jobs_.end() || it->second.state() != v1::JOB_STATE_PENDING) continue;
      v1::Job& job = it->second;
      if (decided.state() == v1::JOB_STATE_PENDING) {
        if (job.reason() != decided.reason()) job.set_reason(decided.reason());
      } else if (TransitionLocked(job, v1::JOB_STATE_FAILED, decided.reason(), deferred)) {
        PersistLocked(job);
      }
    }
  }
  trimmed_reasons_ = std::move(reasons);
  PackPendingLocked(deferred);
  if (config_.on_schedule_pass) {
    deferred.push_back([this, took = clock_->Now() - pass_start]() {
      config_.on_schedule_pass(took);
    });
  }
  return again;
}

const std::string& Coordinator::PortHostLocked(const std::string& node) const {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.node.address().empty()) return node;
  return it->second.node.address();
}

absl::flat_hash_map<std::string, absl::flat_hash_set<int>>
Coordinator::PortsInUseLocked(const std::string* only_host) const {
  absl::flat_hash_map<std::string, absl::flat_hash_set<int>> used;
  ForEachActiveLocked([&](const v1::Job& job) {
    if (job.tasks().empty()) return;
    const std::string& host = PortHostLocked(job.tasks(0).node());
    if (only_host != nullptr && host != *only_host) return;
    for (const v1::Task& t : job.tasks()) {
      if (HoldsGpus(job, t)) {
        used[host].insert(job.master_port());
        break;
      }
    }
  });
  return used;
}

int Coordinator::AllocatePortLocked(NodeEntry& node) {
  const int lo = node.node.port_min();
  const int hi = node.node.port_max();
  // In a pass, one scan of the active jobs serves all its placements (was:
  // one scan per placement, O(pending jobs) each).
  absl::flat_hash_map<std::string, absl::flat_hash_set<int>> scanned;
  absl::flat_hash_map<std::string, absl::flat_hash_set<int>>* by_host = &scanned;
  // Agents that share a host (each offering some of its GPUs) share its
  // ports: they are counted by address.
  const std::string& host = PortHostLocked(node.node.name());
  if (in_pass_) {
    by_host = &snapshot_ports_;
  } else {
    scanned = PortsInUseLocked(&host);
  }
  absl::flat_hash_set<int>& used = (*by_host)[host];
  const int span = hi - lo + 1;
  for (int i = 0; i < span; ++i) {
    const int port = lo + (node.next_port - lo + i + span) % span;
    if (!used.contains(port)) {
      node.next_port = port + 1;
      used.insert(port);
      return port;
    }
  }
  TC_LOG_WARN("node {}: every MASTER_PORT in {}-{} is in use; reusing {}",
              node.node.name(), lo, hi, lo);
  return lo;
}

void Coordinator::StartAttemptLocked(v1::Job& job,
                                     const sched::Placement& placement,
                                     Deferred& deferred) {
  job.clear_tasks();
  job.set_attempt_token(NewSecretToken());
  int rank = 0;
  std::vector<std::string> rank_hosts;
  for (size_t node_rank = 0; node_rank < placement.nodes.size(); ++node_rank) {
    const sched::NodeAssignment& na = placement.nodes[node_rank];
    const v1::Node& node = nodes_[na.node].node;
    const int tasks = TasksPerNode(job.spec(), static_cast<int>(na.gpu_indices.size()));
    for (int local = 0; local < tasks; ++local) {
      v1::Task* t = job.add_tasks();
      t->set_rank(rank++);
      t->set_local_rank(local);
      t->set_local_world_size(tasks);
      t->set_node_rank(static_cast<int>(node_rank));
      t->set_node(na.node);
      int64_t node_gpu_bytes = 0;
      for (int idx : na.gpu_indices) {
        t->add_gpu_indices(idx);
        for (const v1::Gpu& g : node.gpus()) {
          if (g.index() != idx) continue;
          t->add_gpu_uuids(g.uuid());
          node_gpu_bytes = std::max(node_gpu_bytes, g.memory_total_bytes());
        }
      }
      // Whole GPUs: each is held whole (TaskBytesOnGpu); the bytes shown
      // are this node's GPU size, not the gang's smallest.
      t->set_whole_gpus(placement.whole_gpus);
      t->set_reserved_bytes_per_gpu(placement.whole_gpus ? node_gpu_bytes
                                                         : placement.reserved_bytes_per_gpu);
      TaskToLocked(job, *t, v1::TASK_STATE_STARTING);
      rank_hosts.push_back(na.node);
    }
  }
  job.set_world_size(rank);
  job.set_placement_seq(next_placement_seq_++);
  job.clear_preempted_for_job_id();
  // The jobs preempted for this one may start again now that it is placed
  // (the no-ping-pong rule: a victim is not restarted until its preemptor is
  // placed or gone); their records are
  // stored with the same group commit as this placement.
  if (auto victims = victims_of_.extract(job.id()); !victims.empty()) {
    for (int64_t v : victims.mapped()) {
      auto it = jobs_.find(v);
      if (it == jobs_.end() || it->second.preempted_for_job_id() != job.id()) continue;
      it->second.clear_preempted_for_job_id();
      PersistLocked(it->second);
    }
  }
  NodeEntry& master = nodes_[placement.nodes[0].node];
  job.set_master_addr(master.node.address());
  job.set_master_port(AllocatePortLocked(master));
  TransitionLocked(job, v1::JOB_STATE_SCHEDULED, "", deferred);
  if (PreflightWantedLocked(job, static_cast<int>(placement.nodes.size()))) {
    // The job's own rendezvous opens and its tasks start once it passes.
    BeginPreflightLocked(job);
    return;
  }
  rendezvous_.Open(job.id(), job.attempt(), job.attempt_token(),
                   std::move(rank_hosts));
  rendezvous_opened_[{job.id(), job.attempt()}] = clock_->Now();
  PersistLocked(job);
  LaunchTasksLocked(job, deferred);
}

// Sends the StartTasks of `job`'s tasks once its SCHEDULED record is durable
// (the group commit's ticket; see SendStartsWhenStored).
v1::CoordinatorMessage Coordinator::BuildStartTaskLocked(const v1::Job& job,
                                                         const v1::Task& t,
                                                         bool agent_store) const {
  int num_nodes = 0;
  for (const v1::Task& o : job.tasks()) num_nodes = std::max(num_nodes, o.node_rank() + 1);
  LaunchContext ctx;
  ctx.coordinator_address = advertise_address_;
  ctx.num_nodes = num_nodes;
  ctx.local_world_size = t.local_world_size();
  auto node = nodes_.find(t.node());
  ctx.node_cpu_count = node != nodes_.end() ? node->second.node.cpu_count() : 0;
  ctx.agent_store = agent_store;
  ctx.exported_env = ExportedEnvLocked(job);
  if (ctx.exported_env == nullptr) {
    // LoadLocked and SubmitJobs keep a shared environment in memory while a
    // job refers to it: this is a bug, and the task would start without it.
    TC_LOG_ERROR("job {}: the exported environment it shares with job {} is not in memory; "
                 "its task starts without it",
                 job.id(), job.exported_env_job_id());
  }
  v1::CoordinatorMessage msg;
  v1::StartTask* start = msg.mutable_start_task();
  *start->mutable_task() = RefOf(job, t);
  start->mutable_argv()->CopyFrom(job.spec().command());
  for (auto& [k, v] : BuildLaunchEnv(job, t, ctx)) (*start->mutable_env())[k] = std::move(v);
  start->set_workdir(job.spec().workdir());
  start->set_checkpoint_dir(job.checkpoint_dir());
  if (config_.run_jobs_as_user) start->set_run_as_user(job.spec().user());
  start->set_allow_root(config_.allow_root_jobs);
  start->set_image(job.spec().image());
  start->set_cpus(job.spec().cpus());
  start->set_memory_bytes(job.spec().memory_bytes());
  start->set_discard_output(job.spec().discard_output());
  // An experiment sharing its GPU, and the memory it may use there
  // (StartTask.shared_gpu_memory_limit_bytes).
  if (t.gpu_indices_size() == 1 && !t.whole_gpus() && t.reserved_bytes_per_gpu() > 0 &&
      node != nodes_.end()) {
    for (const v1::Gpu& g : node->second.node.gpus()) {
      if (g.index() != t.gpu_indices(0) ||
          t.reserved_bytes_per_gpu() >= g.memory_total_bytes()) {
        continue;
      }
      start->set_shared_gpu(true);
      start->set_shared_gpu_index(g.index());
      // An auto-packed trial's first reservation is the packer's
      // bookkeeping share (PackerConfig.initial_reservation_fraction), not a
      // size: no limit then.
      const int64_t initial = static_cast<int64_t>(
          config_.packer.initial_reservation_fraction * g.memory_total_bytes());
      const bool sized = !job.spec().auto_pack() || job.auto_pack_memory_bytes() > 0 ||
                         job.spec().gpu_memory_bytes() > 0 ||
                         t.reserved_bytes_per_gpu() > initial;
      if (sized) start->set_shared_gpu_memory_limit_bytes(t.reserved_bytes_per_gpu());
    }
  }
  return msg;
}

void Coordinator::LaunchTasksLocked(const v1::Job& job, Deferred& deferred) {
  // Rank 0's agent hosts the gang's PyTorch store (Node.torch_store).
  const bool agent_store =
      job.world_size() > 1 && nodes_[job.tasks(0).node()].node.torch_store();
  std::vector<v1::CoordinatorMessage> starts;
  starts.reserve(job.tasks_size());
  for (const v1::Task& t : job.tasks()) {
    starts.push_back(BuildStartTaskLocked(job, t, agent_store));
  }
  // Sent once the SCHEDULED record is durable (after mu_ is released: the
  // callback takes it; with a synchronous store it runs at once).
  deferred.push_back([this, ticket = last_ticket_, id = job.id(),
                      attempt = job.attempt(), seq = job.placement_seq(),
                      starts = std::move(starts)]() mutable {
    store_->WhenDurable(ticket, [this, id, attempt, seq, starts = std::move(starts)](
                                    absl::Status stored) mutable {
      SendStartsWhenStored(id, attempt, seq, std::move(starts), std::move(stored));
    });
  });
}

void Coordinator::SendStartsWhenStored(int64_t job_id, int attempt,
                                       int64_t placement_seq,
                                       std::vector<v1::CoordinatorMessage> starts,
                                       absl::Status stored) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  const v1::Job& job = it->second;
  if (job.attempt() != attempt || job.placement_seq() != placement_seq) return;
  if (!stored.ok()) {
    TC_LOG_ERROR("job {} attempt {}: not started, its placement was not stored: {}",
                 job_id, attempt, stored.ToString());
    return;
  }
  for (v1::CoordinatorMessage& msg : starts) {
    const v1::TaskRef& ref = msg.start_task().task();
    for (const v1::Task& t : job.tasks()) {
      if (t.rank() == ref.rank() && t.state() == v1::TASK_STATE_STARTING) {
        SendLocked(t.node(), std::move(msg));
        break;
      }
    }
  }
}

void Coordinator::SendLocked(const std::string& node, v1::CoordinatorMessage msg) {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.conn == nullptr) {
    TC_LOG_WARN("node {} is not connected; dropped a message to it", node);
    return;
  }
  it->second.conn->Send(std::move(msg));
}

void Coordinator::StopTaskLocked(const v1::Job& job, v1::Task& task) {
  TaskToLocked(job, task, v1::TASK_STATE_STOPPING);
  v1::CoordinatorMessage msg;
  v1::StopTask* stop = msg.mutable_stop_task();
  *stop->mutable_task() = RefOf(job, task);
  stop->set_grace_ms(absl::ToInt64Milliseconds(config_.stop_grace));
  SendLocked(task.node(), std::move(msg));
}

void Coordinator::PreemptLocked(v1::Job& victim, int64_t by, Deferred& deferred) {
  if (victim.state() != v1::JOB_STATE_SCHEDULED &&
      victim.state() != v1::JOB_STATE_RUNNING) {
    return;
  }
  for (v1::Task& t : *victim.mutable_tasks()) {
    if (IsLive(t.state())) StopTaskLocked(victim, t);
  }
  victim.set_preemptions(victim.preemptions() + 1);
  ++counters_.preemptions;
  victim.set_preempted_for_job_id(by);
  victims_of_[by].push_back(victim.id());
  TransitionLocked(victim, v1::JOB_STATE_PENDING,
                   absl::StrCat("preempted for job ", by, " (preemption ",
                                victim.preemptions(), "); requeued as attempt ",
                                victim.attempt() + 1, ", restarts once job ", by,
                                " has started"),
                   deferred);
  PersistLocked(victim);
}

bool Coordinator::EnforceTimeLimitsLocked(absl::Time now, Deferred& deferred) {
  bool any = false;
  const int64_t now_ms = ToUnixMs(now);
  for (int64_t id : ActiveIdsLocked()) {
    v1::Job& job = jobs_.at(id);
    const int64_t limit = job.spec().time_limit_ms();
    if (limit <= 0 || job.state() != v1::JOB_STATE_RUNNING ||
        job.start_time_ms() <= 0 || now_ms - job.start_time_ms() < limit) {
      continue;
    }
    for (v1::Task& t : *job.mutable_tasks()) {
      if (IsLive(t.state())) StopTaskLocked(job, t);
    }
    TransitionLocked(
        job, v1::JOB_STATE_FAILED,
        absl::StrCat("TIMEOUT: ran past its time limit of ",
                     absl::FormatDuration(absl::Milliseconds(limit)),
                     " (--time-limit); its tasks were stopped"),
        deferred);
    PersistLocked(job);
    any = true;
  }
  return any;
}

void Coordinator::FailAttemptLocked(v1::Job& job, const std::string& why,
                                    Deferred& deferred) {
  for (v1::Task& t : *job.mutable_tasks()) {
    if (IsLive(t.state())) StopTaskLocked(job, t);
  }
  // Preemptions start new attempts too, but do not use up restarts.
  const int failures =
      job.attempt() - job.preemptions() - job.preflight().requeues();
  if (failures < job.spec().max_restarts()) {
    ++counters_.restarts;
    TransitionLocked(job, v1::JOB_STATE_PENDING,
                     absl::StrCat("attempt ", job.attempt(), " failed: ", why,
                                  "; restarting (", failures + 1, " of ",
                                  job.spec().max_restarts(), " restarts)"),
                     deferred);
  } else {
    TransitionLocked(job, v1::JOB_STATE_FAILED, why, deferred);
  }
  PersistLocked(job);
}

void Coordinator::OnTaskEndedLocked(v1::Job& job, Deferred& deferred) {
  if (IsFinal(job.state()) || job.state() == v1::JOB_STATE_PENDING) return;
  if (InPreflight(job)) {
    OnProbeEndedLocked(job, deferred);
    return;
  }
  for (const v1::Task& t : job.tasks()) {
    if (TaskFailed(t) && t.out_of_memory() && job.spec().auto_pack() &&
        RequeueAfterOomLocked(job, t, deferred)) {
      return;
    }
  }
  for (const v1::Task& t : job.tasks()) {
    if (TaskFailed(t)) {
      std::string why = absl::StrCat("rank ", t.rank(), " on ", t.node(), " ",
                                     ExitText(t));
      if (job.world_size() > 1) {
        absl::StrAppend(&why, "; see `trainctl logs ", job.id(), " --rank ",
                        t.rank(), "`");
      }
      FailAttemptLocked(job, why, deferred);
      return;
    }
  }
  for (const v1::Task& t : job.tasks()) {
    if (t.state() != v1::TASK_STATE_EXITED) {
      PersistLocked(job);
      return;
    }
  }
  // Every rank exited 0. A job that never reported RUNNING (all its ranks
  // ended before the last start report) passes through RUNNING.
  if (job.state() == v1::JOB_STATE_SCHEDULED) {
    TransitionLocked(job, v1::JOB_STATE_RUNNING, "", deferred);
  }
  TransitionLocked(job, v1::JOB_STATE_SUCCEEDED, "", deferred);
  PersistLocked(job);
}

}  // namespace trainctl::coord
