#include "coordinator/draining_tasks.h"

#include <algorithm>

namespace trainctl::coord {

bool DrainingTasks::HoldsJob(int64_t job_id) const {
  return std::any_of(tasks_.begin(), tasks_.end(),
                     [job_id](const DrainingTask& d) { return d.job_id == job_id; });
}

int DrainingTasks::RemoveIf(absl::FunctionRef<bool(const DrainingTask&)> pred) {
  const size_t before = tasks_.size();
  tasks_.erase(std::remove_if(tasks_.begin(), tasks_.end(),
                              [&pred](const DrainingTask& d) { return pred(d); }),
               tasks_.end());
  return static_cast<int>(before - tasks_.size());
}

bool DrainingTasks::Ended(const TaskKey& key, const std::string& node) {
  return RemoveIf([&](const DrainingTask& d) {
           return d.job_id == key.job_id && d.attempt == key.attempt &&
                  d.probe_run == key.probe_run && d.task.rank() == key.rank &&
                  d.task.node() == node;
         }) > 0;
}

void DrainingTasks::AddVictim(int64_t preemptor, int64_t victim) {
  victims_of_[preemptor].push_back(victim);
}

std::vector<int64_t> DrainingTasks::TakeVictims(int64_t preemptor) {
  auto node = victims_of_.extract(preemptor);
  return node.empty() ? std::vector<int64_t>() : std::move(node.mapped());
}

}  // namespace trainctl::coord
