#include "coordinator/measurements.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/logging.h"
#include "coordinator/job_facts.h"
#include "coordinator/job_spec.h"
#include "coordinator/sched/node_selection.h"

namespace trainctl::coord {
namespace {

// Calls fn(job, task, gpu) for each GPU held by each live task of every
// active auto-packed job.
template <typename Fn>
void ForEachAutoPackedGpu(const JobTable& jobs, Fn fn) {
  jobs.ForEachActive([&](const v1::Job& job) {
    if (!job.spec().auto_pack()) return;
    for (const v1::Task& t : job.tasks()) {
      if (!IsLive(t.state())) continue;
      for (int g : OwnedGpus(t)) fn(job, t, g);
    }
  });
}

}  // namespace

bool Measurements::SampleDue(absl::Time now) {
  if (now < next_sample_) return false;
  next_sample_ = now + sample_period_;
  return true;
}

int Measurements::RecordTaskUsage(const JobTable& jobs, const std::string& node,
                                  const v1::Heartbeat& hb) {
  int ignored = 0;
  // Samples naming a task placed on another node (not merely one that has
  // ended): the first of them, for the log.
  int foreign = 0;
  const v1::TaskUsage* first_foreign = nullptr;
  std::string owner;
  for (const v1::TaskUsage& u : hb.task_usage()) {
    const v1::Task* task = nullptr;
    auto jt = jobs.find(u.job_id());
    if (jt != jobs.end() && jt->second.attempt() == u.attempt()) {
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
  if (ignored == 0) return 0;
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
  return ignored;
}

int Measurements::AutoPackedOnGpu(const JobTable& jobs, const std::string& node, int gpu) {
  int n = 0;
  ForEachAutoPackedGpu(jobs, [&](const v1::Job&, const v1::Task& t, int g) {
    n += t.node() == node && g == gpu;
  });
  return n;
}

void Measurements::Sample(absl::Time now, const JobTable& jobs, const NodeRegistry& nodes,
                          const DrainingTasks& draining,
                          const sched::ClusterSnapshot& snapshot) {
  const int64_t now_ms = ToUnixMs(now);
  // Live tasks per GPU, every job's (to split a GPU's memory when nothing
  // per-process is known).
  absl::flat_hash_map<std::pair<std::string, int>, int> tasks_on;
  for (int64_t id : jobs.active()) {
    for (const v1::Task& t : jobs.at(id).tasks()) {
      if (!IsLive(t.state())) continue;
      for (int g : OwnedGpus(t)) ++tasks_on[{t.node(), g}];
    }
  }
  for (const DrainingTask& d : draining) {
    for (int g : OwnedGpus(d.task)) ++tasks_on[{d.task.node(), g}];
  }
  // The live tasks of every active job's current attempt, as values: what
  // is live and where is job state, decided here under mu_.
  std::vector<UsageJob> live;
  for (int64_t id : jobs.active()) {
    const v1::Job& job = jobs.at(id);
    UsageJob* u = nullptr;
    for (const v1::Task& t : job.tasks()) {
      if (!IsLive(t.state())) continue;
      if (u == nullptr) u = &live.emplace_back(UsageJob{id, job.attempt(), {}});
      UsageTask& ut = u->tasks.emplace_back();
      ut.rank = t.rank();
      auto nt = nodes.find(t.node());
      if (nt == nodes.end()) continue;
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
          ug.share = TaskShareOfGpu(t, gpu.memory_total_bytes());
        }
      }
    }
  }
  usage_.Sample(now_ms, live, [&](int64_t id) { return jobs.active().contains(id); });

  // The packer's plateau detection and ramp plans see every sample.
  packer_.Observe(PackGpus(snapshot, jobs, nodes, now_ms), now_ms);

  // Throughput back-off: a GPU whose auto-packed trials have all settled and
  // all report throughput gives the packer its aggregate for k trials.
  absl::flat_hash_map<std::pair<std::string, int>, std::pair<int, double>> agg;
  absl::flat_hash_set<std::pair<std::string, int>> incomplete;
  ForEachAutoPackedGpu(jobs, [&](const v1::Job& job, const v1::Task& t, int g) {
    const int64_t id = job.id();
    const std::pair<std::string, int> key{t.node(), g};
    const std::optional<double> tp = usage_.Throughput(id);
    const bool settled =
        t.start_time_ms() > 0 && packer_.Settled(t.node(), g, id, t.start_time_ms(), now_ms);
    if (!tp.has_value() || !settled) {
      incomplete.insert(key);
      return;
    }
    agg[key].first += 1;
    agg[key].second += *tp;
  });
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

std::vector<sched::PackGpu> Measurements::PackGpus(const sched::ClusterSnapshot& snap,
                                                   const JobTable& jobs,
                                                   const NodeRegistry& nodes,
                                                   int64_t now_ms) const {
  std::vector<sched::PackGpu> gpus;
  absl::flat_hash_map<std::pair<std::string, int>, size_t> slot;
  for (const sched::NodeState& n : snap.nodes) {
    const NodeEntry& e = nodes.at(n.name);
    for (const sched::GpuState& g : n.gpus) {
      slot[{n.name, g.index}] = gpus.size();
      sched::PackGpu& p = gpus.emplace_back();
      p.node = n.name;
      p.index = g.index;
      p.memory_total_bytes = g.memory_total_bytes;
      p.schedulable = n.schedulable;
      p.gpu_type = g.gpu_type;
      p.node_features = n.features;
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
  ForEachAutoPackedGpu(jobs, [&](const v1::Job& job, const v1::Task& t, int g) {
    auto it = slot.find({t.node(), g});
    if (it == slot.end()) return;
    sched::PackGpu& p = gpus[it->second];
    p.other_reserved_bytes -= t.reserved_bytes_per_gpu();
    sched::PackedTrial& trial = p.trials.emplace_back();
    trial.job_id = job.id();
    trial.start_ms = t.start_time_ms() > 0 ? t.start_time_ms() : now_ms;
    trial.peak_memory_bytes = usage_.PeakGpuMemoryBytes(job.id(), job.attempt(), t.rank());
    trial.reserved_bytes = t.reserved_bytes_per_gpu();
    trial.group = job.spec().sweep_id();
  });
  return gpus;
}

std::vector<Measurements::PackedPlacement> Measurements::PlanPacking(
    const std::vector<v1::Job*>& pending, std::vector<sched::PackGpu> gpus, int64_t now_ms) {
  std::vector<PackedPlacement> out;
  // Choose() depends only on the GPUs, the memory request and the sweep, and
  // the GPUs change only when a trial is placed: a (request, sweep) refused
  // once is refused again until then (a sweep's trials share one request, so
  // a long queue costs one evaluation).
  absl::flat_hash_map<std::pair<int64_t, std::string>, std::string> refused;
  for (v1::Job* job : pending) {
    const int64_t request =
        std::max(job->auto_pack_memory_bytes(), job->spec().gpu_memory_bytes());
    sched::PackChoice c;
    // A trial with a node selection (--gpu-type, --constraint, -w, -x) sees
    // the GPUs it rules out as unschedulable, for its own choice only.
    const sched::JobRequest selection = ToJobRequest(*job);
    const bool selective = sched::HasNodeSelection(selection);
    if (auto it = refused.find({request, job->spec().sweep_id()});
        !selective && it != refused.end()) {
      c.reason = it->second;
    } else if (selective) {
      std::vector<size_t> masked;
      for (size_t i = 0; i < gpus.size(); ++i) {
        sched::NodeState one;
        one.name = gpus[i].node;
        one.features = gpus[i].node_features;
        sched::GpuState& g = one.gpus.emplace_back();
        g.memory_total_bytes = gpus[i].memory_total_bytes;
        g.gpu_type = gpus[i].gpu_type;
        if (gpus[i].schedulable && sched::SelectionRulesOut(one, selection)) {
          gpus[i].schedulable = false;
          masked.push_back(i);
        }
      }
      c = packer_.Choose(gpus, request, now_ms, job->spec().sweep_id(),
                         /*declared=*/job->spec().gpu_memory_bytes() > 0);
      for (size_t i : masked) gpus[i].schedulable = true;
    } else {
      c = packer_.Choose(gpus, request, now_ms, job->spec().sweep_id(),
                         /*declared=*/job->spec().gpu_memory_bytes() > 0);
    }
    if (!c.gpu.has_value()) {
      if (!selective) refused.emplace(std::make_pair(request, job->spec().sweep_id()), c.reason);
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
    PackedPlacement& placed = out.emplace_back();
    placed.job = job;
    placed.placement.nodes.push_back({p.node, {p.index}});
    placed.placement.reserved_bytes_per_gpu = c.reserved_bytes;
    TC_LOG_INFO("auto-pack: job {} goes to GPU {} on {} as trial {} there "
                "(measured {:.0f}% busy{}, {} MiB used; plan {} trials), reserving {} MiB",
                job->id(), p.index, p.node, p.trials.size() + 1, p.util_pct,
                p.gpm ? absl::StrFormat(", SM activity %.0f%%, DRAM bandwidth %.0f%%",
                                        p.sm_active_pct, p.dram_bw_pct)
                      : std::string(),
                p.memory_used_bytes >> 20, packer_.Planned(p.node, p.index),
                c.reserved_bytes >> 20);
    sched::PackedTrial& trial = p.trials.emplace_back();
    trial.job_id = job->id();
    trial.start_ms = now_ms;
    trial.reserved_bytes = c.reserved_bytes;
    trial.group = job->spec().sweep_id();
    refused.clear();  // The GPUs changed.
  }
  return out;
}

std::optional<Measurements::OomRequeue> Measurements::OnOutOfMemory(
    const v1::Job& job, const v1::Task& task, const JobTable& jobs,
    const NodeRegistry& nodes) {
  if (task.gpu_indices().empty()) return std::nullopt;
  const int gpu = task.gpu_indices(0);
  int64_t total = 0;
  if (auto it = nodes.find(task.node()); it != nodes.end()) {
    for (const v1::Gpu& g : it->second.node.gpus()) {
      if (g.index() == gpu) total = g.memory_total_bytes();
    }
  }
  const int64_t request = std::max(job.auto_pack_memory_bytes(), task.reserved_bytes_per_gpu());
  if (total <= 0 || request >= total) return std::nullopt;
  const int64_t peak = usage_.PeakGpuMemoryBytes(job.id(), job.attempt(), task.rank());
  // The trial itself has exited; it ran with the live ones.
  const int trials = AutoPackedOnGpu(jobs, task.node(), gpu) + 1;
  OomRequeue r;
  r.next_request_bytes = packer_.OnOutOfMemory(task.node(), gpu, trials, peak, request, total);
  r.why = absl::StrFormat(
      "attempt %d ran out of GPU memory on GPU %d of %s with %d trials there; "
      "requeued asking for %.1f GiB, and that GPU now takes at most %d trials",
      job.attempt(), gpu, task.node(), trials, r.next_request_bytes / double(int64_t{1} << 30),
      packer_.Cap(task.node(), gpu));
  return r;
}

}  // namespace trainctl::coord
