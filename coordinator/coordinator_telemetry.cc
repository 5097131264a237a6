// Coordinator: measurements and what acts on them. Usage goes to the
// UsageHistory component (usage_history.h): the heartbeat samples a node may
// report, the live tasks at each sample, GetJobUsage; the auto-packer
// (sched::Packer) places and backs off auto-packed trials from those
// measurements. Declared in coordinator.h.

#include "coordinator/coordinator.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/coordinator_internal.h"

namespace trainctl::coord {

absl::StatusOr<std::vector<v1::JobUsage>> Coordinator::GetJobUsage(
    const std::vector<int64_t>& job_ids, int max_samples,
    const std::string& user) const {
  if (max_samples < 0) {
    return absl::InvalidArgumentError("max_samples: must not be negative");
  }
  const std::vector<int64_t> ids =
      job_ids.empty() ? usage_.JobsWithHistory() : job_ids;
  std::vector<UsageJobLabel> labels;
  {
    absl::MutexLock lock(&mu_);
    for (int64_t id : ids) {
      // A retired job's record is read from the store (at most
      // usage_finished_jobs of them have a history).
      v1::Job scratch;
      TC_ASSIGN_OR_RETURN(const v1::Job* found, LookupLocked(id, &scratch));
      if (job_ids.empty() && !user.empty() && found->spec().user() != user) continue;
      labels.push_back({id, found->spec().name(), found->spec().auto_pack()});
    }
  }
  // Assembled and diagnosed outside the coordinator's lock.
  return usage_.GetJobUsage(labels, max_samples);
}

absl::Status Coordinator::ReportThroughput(int64_t job_id, double samples_per_s) {
  absl::MutexLock lock(&mu_);
  if (!KnownLocked(job_id)) {
    return absl::NotFoundError(absl::StrCat("job ", job_id, " does not exist"));
  }
  return usage_.ReportThroughput(job_id, samples_per_s);
}

void Coordinator::RecordTaskUsageLocked(const std::string& node,
                                        const v1::Heartbeat& hb) {
  int ignored = 0;
  // Samples naming a task placed on another node (not merely one that has
  // ended): the first of them, for the log.
  int foreign = 0;
  const v1::TaskUsage* first_foreign = nullptr;
  std::string owner;
  for (const v1::TaskUsage& u : hb.task_usage()) {
    const v1::Task* task = nullptr;
    auto jt = jobs_.find(u.job_id());
    if (jt != jobs_.end() && jt->second.attempt() == u.attempt()) {
      for (const v1::Task& t : jt->second.tasks()) {
        if (t.rank() == u.rank() && IsLive(t.state())) task = &t;
      }
    }
    if (task != nullptr && task->node() == node) {
      usage_.RecordTaskUsage(u);
      continue;
    }
    ++ignored;
    if (task != nullptr && ++foreign == 1) {
      first_foreign = &u;
      owner = task->node();
    }
  }
  if (ignored == 0) return;
  ignored_task_usage_ += ignored;
  if (first_foreign != nullptr) {
    TC_LOG_WARN("node {} reported usage of {} task(s) it does not run, ignored: "
                "e.g. job {} rank {} runs on {}; check the agent on {}",
                node, foreign, first_foreign->job_id(), first_foreign->rank(), owner,
                node);
  } else {
    // Tasks that ended or belong to an earlier attempt (a heartbeat races
    // their exit): expected now and then.
    TC_LOG_DEBUG("node {}: usage of {} ended or unknown task(s) ignored", node,
                 ignored);
  }
}

int Coordinator::AutoPackedOnGpuLocked(const std::string& node, int gpu) const {
  int n = 0;
  for (int64_t id : active_) {
    const v1::Job& job = jobs_.at(id);
    if (!job.spec().auto_pack()) continue;
    for (const v1::Task& t : job.tasks()) {
      if (!IsLive(t.state()) || t.node() != node) continue;
      for (int g : OwnedGpus(t)) n += g == gpu;
    }
  }
  return n;
}

void Coordinator::SampleUsageLocked(absl::Time now) {
  const int64_t now_ms = ToUnixMs(now);
  // Live tasks per GPU, every job's (to split a GPU's memory when nothing
  // per-process is known).
  absl::flat_hash_map<std::pair<std::string, int>, int> tasks_on;
  for (int64_t id : active_) {
    for (const v1::Task& t : jobs_.at(id).tasks()) {
      if (!IsLive(t.state())) continue;
      for (int g : OwnedGpus(t)) ++tasks_on[{t.node(), g}];
    }
  }
  for (const DrainingTask& d : draining_) {
    for (int g : OwnedGpus(d.task)) ++tasks_on[{d.task.node(), g}];
  }
  // The live tasks of every active job's current attempt, as values: what
  // is live and where is job state, decided here under mu_.
  std::vector<UsageJob> live;
  for (int64_t id : active_) {
    const v1::Job& job = jobs_.at(id);
    UsageJob* u = nullptr;
    for (const v1::Task& t : job.tasks()) {
      if (!IsLive(t.state())) continue;
      if (u == nullptr) u = &live.emplace_back(UsageJob{id, job.attempt(), {}});
      UsageTask& ut = u->tasks.emplace_back();
      ut.rank = t.rank();
      auto nt = nodes_.find(t.node());
      if (nt == nodes_.end()) continue;
      ut.cpu_cores = std::max(1, nt->second.node.cpu_count()) /
                     static_cast<double>(std::max(1, t.local_world_size()));
      for (int g : OwnedGpus(t)) {
        for (const v1::Gpu& gpu : nt->second.node.gpus()) {
          if (gpu.index() != g) continue;
          UsageGpu& ug = ut.gpus.emplace_back();
          ug.node = t.node();
          ug.index = g;
          ug.utilization_pct = gpu.utilization_pct();
          ug.memory_used_bytes = gpu.memory_used_bytes();
          ug.memory_total_bytes = gpu.memory_total_bytes();
          ug.tasks_on = tasks_on[{t.node(), g}];
          ug.gpm = gpu.activity_source() == v1::GPU_ACTIVITY_SOURCE_GPM;
          ug.sm_active_pct = gpu.sm_active_pct();
          ug.sm_occupancy_pct = gpu.sm_occupancy_pct();
          ug.dram_bw_pct = gpu.dram_bw_pct();
        }
      }
    }
  }
  usage_.Sample(now_ms, live, [&](int64_t id) { return active_.contains(id); });

  // The packer's plateau detection and ramp plans see every sample.
  packer_.Observe(PackGpusLocked(now_ms), now_ms);

  // Throughput back-off: a GPU whose auto-packed trials have all settled and
  // all report throughput gives the packer its aggregate for k trials.
  absl::flat_hash_map<std::pair<std::string, int>, std::pair<int, double>> agg;
  absl::flat_hash_set<std::pair<std::string, int>> incomplete;
  for (int64_t id : active_) {
    const v1::Job& job = jobs_.at(id);
    if (!job.spec().auto_pack()) continue;
    for (const v1::Task& t : job.tasks()) {
      if (!IsLive(t.state())) continue;
      for (int g : OwnedGpus(t)) {
        const std::pair<std::string, int> key{t.node(), g};
        const std::optional<double> tp = usage_.Throughput(id);
        const bool settled =
            t.start_time_ms() > 0 &&
            packer_.Settled(t.node(), g, id, t.start_time_ms(), now_ms);
        if (!tp.has_value() || !settled) {
          incomplete.insert(key);
          continue;
        }
        agg[key].first += 1;
        agg[key].second += *tp;
      }
    }
  }
  for (const auto& [key, kv] : agg) {
    if (incomplete.contains(key)) continue;
    if (packer_.ObserveThroughput(key.first, key.second, kv.first, kv.second)) {
      TC_LOG_INFO("auto-pack: GPU {} on {} capped at {} trials: {} trials give "
                  "{:.1f} samples/s, not enough more than {} did",
                  key.second, key.first, packer_.Cap(key.first, key.second),
                  kv.first, kv.second, kv.first - 1);
    }
  }
}

std::vector<sched::PackGpu> Coordinator::PackGpusLocked(int64_t now_ms) const {
  const sched::ClusterSnapshot& snap = SnapshotLocked();
  std::vector<sched::PackGpu> gpus;
  absl::flat_hash_map<std::pair<std::string, int>, size_t> slot;
  for (const sched::NodeState& n : snap.nodes) {
    const NodeEntry& e = nodes_.at(n.name);
    for (const sched::GpuState& g : n.gpus) {
      slot[{n.name, g.index}] = gpus.size();
      sched::PackGpu& p = gpus.emplace_back();
      p.node = n.name;
      p.index = g.index;
      p.memory_total_bytes = g.memory_total_bytes;
      p.schedulable = n.schedulable;
      p.other_reserved_bytes = g.reserved_bytes;
      for (const v1::Gpu& vg : e.node.gpus()) {
        if (vg.index() == g.index) p.memory_used_bytes = vg.memory_used_bytes();
      }
      auto u = e.util_avg.find(g.index);
      p.util_pct = u == e.util_avg.end() ? 0 : u->second;
      if (auto m = e.gpm_avg.find(g.index); m != e.gpm_avg.end()) {
        p.gpm = true;
        p.sm_active_pct = m->second.sm_active;
        p.sm_occupancy_pct = m->second.sm_occupancy;
        p.dram_bw_pct = m->second.dram_bw;
      }
    }
  }
  for (int64_t id : active_) {
    const v1::Job& job = jobs_.at(id);
    if (!job.spec().auto_pack()) continue;
    for (const v1::Task& t : job.tasks()) {
      if (!IsLive(t.state())) continue;
      for (int g : OwnedGpus(t)) {
        auto it = slot.find({t.node(), g});
        if (it == slot.end()) continue;
        sched::PackGpu& p = gpus[it->second];
        p.other_reserved_bytes -= t.reserved_bytes_per_gpu();
        sched::PackedTrial& trial = p.trials.emplace_back();
        trial.job_id = id;
        trial.start_ms = t.start_time_ms() > 0 ? t.start_time_ms() : now_ms;
        trial.peak_memory_bytes = usage_.PeakGpuMemoryBytes(id, job.attempt(), t.rank());
        trial.reserved_bytes = t.reserved_bytes_per_gpu();
        trial.group = job.spec().sweep_id();
      }
    }
  }
  return gpus;
}

void Coordinator::PackPendingLocked(Deferred& deferred) {
  std::vector<v1::Job*> pending;
  ForEachActiveMutableLocked([&](v1::Job& job) {
    if (job.state() == v1::JOB_STATE_PENDING && job.spec().auto_pack()) {
      pending.push_back(&job);
    }
  });
  if (pending.empty()) return;
  std::stable_sort(pending.begin(), pending.end(), [](const v1::Job* a, const v1::Job* b) {
    return a->spec().priority() > b->spec().priority();
  });
  const int64_t now_ms = ToUnixMs(clock_->Now());
  std::vector<sched::PackGpu> gpus = PackGpusLocked(now_ms);
  // Choose() depends only on the GPUs, the memory request and the sweep, and
  // the GPUs change only when a trial is placed: a (request, sweep) refused
  // once this pass is refused again (a sweep's trials share one request, so
  // a long queue costs one evaluation).
  absl::flat_hash_map<std::pair<int64_t, std::string>, std::string> refused;
  for (v1::Job* job : pending) {
    const int64_t request =
        std::max(job->auto_pack_memory_bytes(), job->spec().gpu_memory_bytes());
    sched::PackChoice c;
    if (auto it = refused.find({request, job->spec().sweep_id()}); it != refused.end()) {
      c.reason = it->second;
    } else {
      c = packer_.Choose(gpus, request, now_ms, job->spec().sweep_id(),
                         /*declared=*/job->spec().gpu_memory_bytes() > 0);
    }
    if (!c.gpu.has_value()) {
      refused.emplace(std::make_pair(request, job->spec().sweep_id()), c.reason);
      std::string reason = c.reason;
      if (job->oom_count() > 0) {
        absl::StrAppendFormat(&reason,
                              "; it ran out of GPU memory %d time(s) and now "
                              "asks for %.1f GiB",
                              job->oom_count(),
                              job->auto_pack_memory_bytes() / double(int64_t{1} << 30));
      }
      job->set_reason(reason);
      continue;
    }
    sched::PackGpu& p = gpus[*c.gpu];
    sched::Placement placement;
    placement.nodes.push_back({p.node, {p.index}});
    placement.reserved_bytes_per_gpu = c.reserved_bytes;
    TC_LOG_INFO("auto-pack: job {} goes to GPU {} on {} as trial {} there "
                "(measured {:.0f}% busy{}, {} MiB used; plan {} trials), reserving {} MiB",
                job->id(), p.index, p.node, p.trials.size() + 1, p.util_pct,
                p.gpm ? absl::StrFormat(", SM activity %.0f%%, DRAM bandwidth %.0f%%",
                                        p.sm_active_pct, p.dram_bw_pct)
                      : std::string(),
                p.memory_used_bytes >> 20, packer_.Planned(p.node, p.index),
                c.reserved_bytes >> 20);
    StartAttemptLocked(*job, placement, deferred);
    sched::PackedTrial& placed = p.trials.emplace_back();
    placed.job_id = job->id();
    placed.start_ms = now_ms;
    placed.reserved_bytes = c.reserved_bytes;
    placed.group = job->spec().sweep_id();
    refused.clear();  // The GPUs changed.
  }
}

bool Coordinator::RequeueAfterOomLocked(v1::Job& job, const v1::Task& task,
                                        Deferred& deferred) {
  if (task.gpu_indices().empty()) return false;
  const int gpu = task.gpu_indices(0);
  const NodeEntry* e = nullptr;
  if (auto it = nodes_.find(task.node()); it != nodes_.end()) e = &it->second;
  int64_t total = 0;
  if (e != nullptr) {
    for (const v1::Gpu& g : e->node.gpus()) {
      if (g.index() == gpu) total = g.memory_total_bytes();
    }
  }
  const int64_t request = std::max(job.auto_pack_memory_bytes(),
                                   task.reserved_bytes_per_gpu());
  if (total <= 0 || request >= total) return false;
  const int64_t peak = usage_.PeakGpuMemoryBytes(job.id(), job.attempt(), task.rank());
  // The trial itself has exited; it ran with the live ones.
  const int trials = AutoPackedOnGpuLocked(task.node(), gpu) + 1;
  const int64_t next =
      packer_.OnOutOfMemory(task.node(), gpu, trials, peak, request, total);
  job.set_auto_pack_memory_bytes(next);
  job.set_oom_count(job.oom_count() + 1);
  ++counters_.oom_requeues;
  const std::string why = absl::StrFormat(
      "attempt %d ran out of GPU memory on GPU %d of %s with %d trials there; "
      "requeued asking for %.1f GiB, and that GPU now takes at most %d trials",
      job.attempt(), gpu, task.node(), trials, next / double(int64_t{1} << 30),
      packer_.Cap(task.node(), gpu));
  for (v1::Task& t : *job.mutable_tasks()) {
    if (IsLive(t.state())) StopTaskLocked(job, t);
  }
  TransitionLocked(job, v1::JOB_STATE_PENDING, why, deferred);
  PersistLocked(job);
  return true;
}

}  // namespace trainctl::coord
