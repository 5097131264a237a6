#include "coordinator/cluster_views.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/clock.h"
#include "coordinator/job_facts.h"
#include "coordinator/job_spec.h"
#include "coordinator/node_admin.h"

namespace trainctl::coord {

CoordinatorStats CollectStats(const JobTable& jobs, const NodeRegistry& nodes,
                              const DrainingTasks& draining,
                              const sched::PolicyConfig& policy) {
  CoordinatorStats stats;
  stats.jobs_by_state = jobs.by_state();
  stats.pending_jobs = jobs.by_state()[v1::JOB_STATE_PENDING];
  stats.jobs_in_memory = static_cast<int64_t>(jobs.size());
  stats.pending_by_queue["default"] = 0;
  for (const auto& q : policy.queues) stats.pending_by_queue[q.name] = 0;
  for (int64_t id : jobs.active()) {
    const v1::Job& job = jobs.at(id);
    if (job.state() != v1::JOB_STATE_PENDING) continue;
    ++stats.pending_by_queue[job.spec().queue().empty() ? "default" : job.spec().queue()];
  }
  // GPUs with a reservation: live tasks of active jobs (current attempts
  // and pre-flight probes) and of earlier attempts still draining.
  absl::flat_hash_set<std::pair<std::string, int>> allocated;
  for (int64_t id : jobs.active()) {
    for (const v1::Task& t : jobs.at(id).tasks()) {
      if (!IsLive(t.state())) continue;
      for (int gpu : OwnedGpus(t)) allocated.insert({t.node(), gpu});
    }
  }
  for (const DrainingTask& d : draining) {
    for (int gpu : OwnedGpus(d.task)) allocated.insert({d.task.node(), gpu});
  }
  for (const auto& [name, e] : nodes) {
    const bool ready = e.node.state() == v1::NODE_STATE_READY;
    if (ready) ++stats.nodes_ready;
    if (e.node.state() == v1::NODE_STATE_LOST) ++stats.nodes_lost;
    bool holds = false;
    for (const v1::Gpu& g : e.node.gpus()) holds = holds || allocated.contains({name, g.index()});
    stats.node_service_states[name] = ServiceStateOf(e.node, holds);
    for (const v1::Gpu& g : e.node.gpus()) {
      GpuStats& gs = stats.gpus.emplace_back();
      gs.node = name;
      gs.node_ready = ready;
      gs.index = g.index();
      gs.uuid = g.uuid();
      gs.model = g.name();
      gs.memory_used_bytes = g.memory_used_bytes();
      gs.memory_total_bytes = g.memory_total_bytes();
      gs.utilization_pct = g.utilization_pct();
      gs.power_w = g.power_w();
      gs.temperature_c = g.temperature_c();
      gs.allocated = allocated.contains({name, g.index()});
    }
  }
  for (int64_t id : jobs.active()) {
    const v1::Job& job = jobs.at(id);
    // Distinct GPUs of the live tasks: packed experiments share a GPU, and a
    // task with all of its node's GPUs owns several.
    absl::flat_hash_set<std::pair<std::string, int>> owned;
    for (const v1::Task& t : job.tasks()) {
      if (!IsLive(t.state())) continue;
      for (int gpu : OwnedGpus(t)) owned.insert({t.node(), gpu});
    }
    if (owned.empty()) continue;
    JobGpuStats& js = stats.jobs.emplace_back();
    js.job_id = id;
    js.job_name = job.spec().name();
    int64_t sum = 0;
    for (const auto& [node, index] : owned) {
      auto it = nodes.find(node);
      if (it == nodes.end()) continue;
      for (const v1::Gpu& g : it->second.node.gpus()) {
        if (g.index() != index) continue;
        sum += g.utilization_pct();
        ++js.gpus;
      }
    }
    if (js.gpus > 0) js.utilization_pct = static_cast<double>(sum) / js.gpus;
  }
  return stats;
}

std::vector<v1::NodeView> NodeViews(const JobTable& jobs, const NodeRegistry& nodes,
                                    const DrainingTasks& draining) {
  std::vector<v1::NodeView> out;
  absl::flat_hash_map<std::string, size_t> index;
  for (const auto& [name, e] : nodes) {
    index[name] = out.size();
    v1::NodeView& view = out.emplace_back();
    *view.mutable_node() = e.node;
    view.mutable_node()->set_last_heartbeat_ms(ToUnixMs(e.last_heartbeat));
    for (int i = 0; i < e.node.gpus_size(); ++i) view.add_gpu_tasks();
  }
  auto add = [&](const v1::Job& job, const v1::Task& t) {
    auto it = index.find(t.node());
    if (it == index.end()) return;
    v1::NodeView& view = out[it->second];
    for (int gpu : OwnedGpus(t)) {
      for (int i = 0; i < view.node().gpus_size(); ++i) {
        if (view.node().gpus(i).index() != gpu) continue;
        v1::GpuTaskRef* ref = view.mutable_gpu_tasks(i)->add_tasks();
        ref->set_job_id(job.id());
        ref->set_rank(t.rank());
        ref->set_reserved_bytes(
            TaskBytesOnGpu(t, view.node().gpus(i).memory_total_bytes()));
        ref->set_job_name(job.spec().name());
      }
    }
  };
  for (int64_t id : jobs.active()) {
    const v1::Job& job = jobs.at(id);
    for (const v1::Task& t : job.tasks()) {
      if (HoldsGpus(job, t)) add(job, t);
    }
  }
  for (const DrainingTask& d : draining) {
    auto it = jobs.find(d.job_id);
    if (it != jobs.end()) add(it->second, d.task);
  }
  for (v1::NodeView& view : out) {
    bool holds = false;
    for (const v1::GpuTasks& g : view.gpu_tasks()) holds = holds || g.tasks_size() > 0;
    view.set_service_state(ServiceStateOf(view.node(), holds));
  }
  return out;
}

bool NodeHoldsTasks(const JobTable& jobs, const DrainingTasks& draining,
                    const std::string& node) {
  for (int64_t id : jobs.active()) {
    const v1::Job& job = jobs.at(id);
    for (const v1::Task& t : job.tasks()) {
      if (t.node() == node && HoldsGpus(job, t)) return true;
    }
  }
  for (const DrainingTask& d : draining) {
    if (d.task.node() == node) return true;
  }
  return false;
}

std::vector<int64_t> JobsHoldingNode(const JobTable& jobs, const std::string& node) {
  std::vector<int64_t> out;
  for (int64_t id : jobs.active()) {
    const v1::Job& job = jobs.at(id);
    if (job.state() != v1::JOB_STATE_SCHEDULED && job.state() != v1::JOB_STATE_RUNNING) {
      continue;
    }
    for (const v1::Task& t : job.tasks()) {
      if (t.node() == node && IsLive(t.state()) && t.state() != v1::TASK_STATE_STOPPING) {
        out.push_back(id);
        break;
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace trainctl::coord
