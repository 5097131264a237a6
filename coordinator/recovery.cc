#include "coordinator/recovery.h"

#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/job_facts.h"

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

}  // namespace trainctl::coord
