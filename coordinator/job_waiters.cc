#include "coordinator/job_waiters.h"

#include <algorithm>

namespace trainctl::coord {

void JobWaiters::Add(int64_t job_id, absl::Time deadline, Done done) {
  by_job_[job_id].push_back({deadline, std::move(done)});
}

std::vector<JobWaiters::Done> JobWaiters::TakeAll(int64_t job_id) {
  std::vector<Done> out;
  auto it = by_job_.find(job_id);
  if (it == by_job_.end()) return out;
  for (Waiter& w : it->second) out.push_back(std::move(w.done));
  by_job_.erase(it);
  return out;
}

std::vector<JobWaiters::Expired> JobWaiters::Expire(absl::Time now) {
  std::vector<Expired> out;
  for (auto it = by_job_.begin(); it != by_job_.end();) {
    std::vector<Waiter>& ws = it->second;
    auto keep = std::stable_partition(ws.begin(), ws.end(),
                                      [now](const Waiter& w) { return w.deadline > now; });
    for (auto w = keep; w != ws.end(); ++w) out.push_back({it->first, std::move(w->done)});
    ws.erase(keep, ws.end());
    if (ws.empty()) {
      by_job_.erase(it++);
    } else {
      ++it;
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Expired& a, const Expired& b) {
    return a.job_id < b.job_id;
  });
  return out;
}

size_t JobWaiters::size() const {
  size_t n = 0;
  for (const auto& [id, ws] : by_job_) n += ws.size();
  return n;
}

}  // namespace trainctl::coord
