// Scheduler: explanations. The wait reason of a kRetryLater job (jobs of one
// shape waiting for the same facts share one sentence), what each node lacks
// for Scheduler::Explain, and the text helpers reasons are written with.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "coordinator/sched/node_selection.h"
#include "coordinator/sched/schedule_pass.h"

namespace trainctl::sched::internal {
namespace {

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;
// Lists in user-facing reasons show at most this many items (a reason is one
// sentence a user reads, not a dump).
constexpr size_t kMaxListed = 3;

}  // namespace

std::string GiB(int64_t bytes) {
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / kBytesPerGiB);
}

std::string JoinList(const std::vector<std::string>& items,
                     absl::string_view conjunction) {
  if (items.empty()) return "";
  if (items.size() > kMaxListed) {
    std::vector<std::string> shown(items.begin(), items.begin() + kMaxListed);
    return absl::StrFormat("%s %s %d more", absl::StrJoin(shown, ", "),
                           conjunction, items.size() - kMaxListed);
  }
  if (items.size() == 1) return items[0];
  std::vector<std::string> head(items.begin(), items.end() - 1);
  return absl::StrFormat("%s %s %s", absl::StrJoin(head, ", "), conjunction,
                         items.back());
}

std::string ShortDuration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::ceil(std::max(seconds, 0.0)));
  if (s < 60) return absl::StrFormat("%ds", s);
  if (s < 3600) return absl::StrFormat("%dm", (s + 59) / 60);
  const int64_t m = (s + 59) / 60;
  return absl::StrFormat("%dh%02dm", m / 60, m % 60);
}

// Fills *explanation_ for `job`, decided as `decision`.
void SchedulePass::Explain(const JobRequest& job, const Decision& decision,
                           int position) {
  Explanation& e = *explanation_;
  e.decision = decision;
  e.position = position;
  e.queue = std::string(QueueName(job.queue));
  if (std::optional<std::string> quota = ranking_.QuotaReason(job);
      quota && decision.outcome == Outcome::kRetryLater) {
    e.quota = *quota;
  }
  const int64_t preempted_for = job.standing.preempted_for;
  if (preempted_for != 0 && preemption_.WaitsForPreemptor(preempted_for)) {
    e.preempted_for = preempted_for;
  }
  if (reservation_.taken()) {
    e.reservation_job = reservation_.holder_job_id();
    e.reservation = reservation_.description();
    e.reservation_eta_s = reservation_.eta_s();
  }
  e.constraints = DescribeRuledOut(state_.cluster_nodes(), job);
  if (decision.outcome != Outcome::kRetryLater) return;
  constexpr size_t kMaxNodeLines = 20;
  int more = 0;
  for (int n = 0; n < static_cast<int>(state_.nodes().size()); ++n) {
    std::optional<std::string> line = NodeShortfall(job, n);
    if (!line) continue;
    if (e.nodes.size() < kMaxNodeLines) {
      e.nodes.push_back(*std::move(line));
    } else {
      ++more;
    }
  }
  if (more > 0) {
    e.nodes.push_back(absl::StrFormat("... and %d more nodes", more));
  }
}

// What node `n` lacks for `job` now, or nullopt when it could take it
// (or its share of it).
std::optional<std::string> SchedulePass::NodeShortfall(const JobRequest& job,
                                                       int n) const {
  const NodeState& node = state_.nodes()[n];
  const JobRequest::NodeConstraints& c = job.constraints;
  const int64_t holder = reservation_.holder_job_id();
  if (std::find(c.excluded_nodes.begin(), c.excluded_nodes.end(), node.name) !=
      c.excluded_nodes.end()) {
    return absl::StrFormat("%s: excluded for this job by a pre-flight",
                           node.name);
  }
  if (std::optional<std::string> why =
          SelectionRulesOut(state_.cluster_nodes()[n], job)) {
    return absl::StrFormat("%s: ruled out by %s", node.name, *why);
  }
  if (c.needs_container_runtime && !node.container_runtime) {
    return absl::StrFormat(
        "%s: no container runtime (podman or Apptainer) for the job's image",
        node.name);
  }
  if (c.needs_cgroup_limits && !node.cgroups) {
    return absl::StrFormat(
        "%s: no task cgroups for the job's --cpus/--mem limits", node.name);
  }
  const int usable = UsableGpuCount(node);
  if (!node.out_of_service.empty()) {
    return absl::StrFormat("%s: out of service (%s)", node.name, node.out_of_service);
  }
  if (!node.schedulable) {
    return absl::StrFormat(
        "%s: not schedulable (lost, disconnected, or stopping processes it "
        "reported that hold no reservation)",
        node.name);
  }
  if (usable == 0) return absl::StrFormat("%s: no GPUs", node.name);
  if (job.kind == JobKind::kGang) {
    int per_node = job.gpus_per_node;
    if (job.nodes < 1) {
      per_node = job.total_gpus;
      const ClusterShape& shape = state_.shape();
      for (const Layout& l : GangLayouts(job, shape.node_count)) {
        if (shape.CouldEverHold(l)) {
          per_node = l.per_node;
          break;
        }
      }
    }
    const int free = state_.GangFreeCount(n, /*honor_hold=*/false);
    if (free < per_node) {
      return absl::StrFormat("%s: %d of %d GPUs free, needs %d", node.name,
                             free, usable, per_node);
    }
    if (state_.GangFreeCount(n, /*honor_hold=*/true) < per_node &&
        holder != job.job_id) {
      return absl::StrFormat("%s: %d of %d GPUs free, but reserved for job %d",
                             node.name, free, usable, holder);
    }
    return std::nullopt;
  }
  int64_t best_free = 0;
  int64_t need = 0;
  bool fits = false;
  bool held_only = false;
  for (int g = 0; g < static_cast<int>(node.gpus.size()); ++g) {
    const GpuState& gpu = node.gpus[g];
    if (!IsUsable(gpu)) continue;
    const int64_t want = ReservationBytes(job, gpu.memory_total_bytes);
    need = std::max(need, want);
    best_free = std::max(best_free, FreeBytes(gpu));
    if (want <= FreeBytes(gpu) &&
        gpu.task_count < state_.config().max_tasks_per_gpu) {
      if (state_.IsHeld(n, g) && holder != job.job_id) {
        held_only = true;
      } else {
        fits = true;
      }
    }
  }
  if (fits) return std::nullopt;
  if (held_only) {
    return absl::StrFormat("%s: has room, but reserved for job %d", node.name,
                           holder);
  }
  return absl::StrFormat("%s: at most %s free on a GPU, needs %s", node.name,
                         GiB(best_free), GiB(need));
}

// The kRetryLater reason of `job`: the hold's blocked reason, or the
// placer's (ExperimentPlacer::WaitReason, GangPlacer::WaitReason).
// Jobs of one shape waiting for the same facts share one sentence, worked
// out once per pass.
std::string SchedulePass::WaitReason(const JobRequest& job) {
  // Same shape, nothing changed since: the same sentence.
  const std::tuple<int, double, int64_t, int, int, int> shape =
      job.kind == JobKind::kExperiment
          ? std::make_tuple(0, job.gpu_fraction, job.gpu_memory_bytes, 0, 0,
                            0)
          : std::make_tuple(1, 0.0, int64_t{0}, job.nodes, job.gpus_per_node,
                            job.total_gpus);
  auto [last, added] = last_reason_.try_emplace(shape);
  if (!added && last->second.first == state_.state_version()) {
    return *last->second.second;
  }
  // (shape, blocked by the hold, task limited, most free bytes or GPUs,
  // nodes big enough).
  std::tuple<int, double, int64_t, int, int, int, bool, bool, int64_t, int>
      key;
  const std::string* reason = nullptr;
  if (job.kind == JobKind::kExperiment) {
    const ExperimentFacts f = experiments_.WaitFacts(job, reservation_.taken());
    key = std::tuple_cat(shape, std::make_tuple(f.blocked_by_hold,
                                                f.task_limited, f.max_free,
                                                0));
    auto it = reasons_.find(key);
    if (it == reasons_.end()) {
      it =
          reasons_
              .emplace(key, f.blocked_by_hold ? reservation_.BlockedReason()
                                              : experiments_.WaitReason(job, f))
              .first;
    }
    reason = &it->second;
  } else {
    const GangFacts f = gangs_.WaitFacts(job, reservation_.taken());
    key = std::tuple_cat(shape, std::make_tuple(f.blocked_by_hold, false,
                                                int64_t{f.max_free},
                                                f.big_enough));
    auto it = reasons_.find(key);
    if (it == reasons_.end()) {
      it = reasons_
               .emplace(key, f.blocked_by_hold ? reservation_.BlockedReason()
                                               : gangs_.WaitReason(job, f))
               .first;
    }
    reason = &it->second;
  }
  // reasons_ is a node map: the pointer stays valid.
  last->second = {state_.state_version(), reason};
  return *reason;
}

}  // namespace trainctl::sched::internal
