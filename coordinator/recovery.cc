#include "coordinator/recovery.h"

#include <map>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "coordinator/job_facts.h"
#include "coordinator/job_spec.h"

namespace trainctl::coord {

std::optional<StaleClaim> FindStaleClaim(const JobTable& jobs, const DrainingTasks& draining,
                                         const NodeRegistry& nodes) {
  struct Claim {
    int64_t seq;
    int64_t job_id;
    int rank;
    bool draining;
    int64_t bytes;
    bool whole;  // holds its GPUs whole: the GPU's own size (TaskBytesOnGpu)
  };
  std::map<std::pair<std::string, int>, std::vector<Claim>> claims;
  auto add = [&](const v1::Task& t, Claim c) {
    for (int gpu : OwnedGpus(t)) claims[{t.node(), gpu}].push_back(c);
  };
  for (int64_t id : jobs.active()) {
    const v1::Job& job = jobs.at(id);
    for (const v1::Task& t : job.tasks()) {
      if (IsLive(t.state())) {
        add(t, {job.placement_seq(), id, t.rank(), false, t.reserved_bytes_per_gpu(),
                t.whole_gpus()});
      }
    }
  }
  for (const DrainingTask& d : draining) {
    add(d.task, {d.placement_seq, d.job_id, d.task.rank(), true,
                 d.task.reserved_bytes_per_gpu(), d.task.whole_gpus()});
  }
  const Claim* stale = nullptr;
  std::string where;
  for (const auto& [gpu, list] : claims) {
    auto node = nodes.find(gpu.first);
    if (node == nodes.end()) continue;
    int64_t capacity = -1;
    for (const v1::Gpu& g : node->second.node.gpus()) {
      if (g.index() == gpu.second) capacity = g.memory_total_bytes();
    }
    if (capacity < 0) continue;
    __int128 sum = 0;
    for (const Claim& c : list) sum += c.whole ? capacity : c.bytes;
    if (sum <= capacity) continue;
    for (const Claim& c : list) {
      if (stale == nullptr || std::tie(c.seq, c.job_id) < std::tie(stale->seq, stale->job_id)) {
        stale = &c;
        where = absl::StrCat(gpu.first, " GPU ", gpu.second);
      }
    }
    break;
  }
  if (stale == nullptr) return std::nullopt;
  return StaleClaim{stale->seq, stale->job_id, stale->rank, stale->draining, where};
}

Reconciliation Reconcile(const v1::RegisterNode& reg, const JobTable& jobs) {
  const std::string& node = reg.node().name();
  Reconciliation r;
  for (const v1::TaskRef& ref : reg.running_tasks()) {
    r.reported.insert(TaskKey::Of(ref));
    const v1::Task* task = nullptr;
    if (auto jt = jobs.find(ref.job_id()); jt != jobs.end() && IsCurrent(jt->second, ref)) {
      for (const v1::Task& t : jt->second.tasks()) {
        if (t.rank() == ref.rank() && t.node() == node && IsLive(t.state())) task = &t;
      }
    }
    if (task != nullptr && task->state() != v1::TASK_STATE_STOPPING) {
      if (task->state() == v1::TASK_STATE_STARTING) r.started.push_back(ref);
      continue;
    }
    // A STOPPING task of the current attempt still holds its reservation;
    // any other keeps the whole node from placements until it exits.
    if (task == nullptr) r.unplaced.insert(TaskKey::Of(ref));
    r.stop.push_back(ref);
  }
  for (const v1::TaskStatus& st : reg.finished_tasks()) {
    if (r.reported.contains(TaskKey::Of(st.task()))) continue;
    if (st.state() == v1::TASK_STATE_EXITED || st.state() == v1::TASK_STATE_START_FAILED) {
      r.replay.push_back(st);
    }
  }
  return r;
}

absl::flat_hash_set<int> OverbookedGpus(const NodeEntry& e, const JobTable& jobs,
                                        const DrainingTasks& draining) {
  const std::string& name = e.node.name();
  absl::flat_hash_map<int, int64_t> capacity;
  for (const v1::Gpu& g : e.node.gpus()) capacity[g.index()] = g.memory_total_bytes();
  absl::flat_hash_map<int, int64_t> reserved;
  auto add = [&](const v1::Task& t) {
    for (int gpu : OwnedGpus(t)) reserved[gpu] += TaskBytesOnGpu(t, capacity[gpu]);
  };
  for (int64_t id : jobs.active()) {
    const v1::Job& job = jobs.at(id);
    for (const v1::Task& t : job.tasks()) {
      if (t.node() == name && HoldsGpus(job, t)) add(t);
    }
  }
  for (const DrainingTask& d : draining) {
    if (d.task.node() == name) add(d.task);
  }
  absl::flat_hash_set<int> bad;
  for (const auto& [gpu, bytes] : reserved) {
    auto it = capacity.find(gpu);
    if (it == capacity.end() || bytes > it->second) bad.insert(gpu);
  }
  return bad;
}

}  // namespace trainctl::coord
