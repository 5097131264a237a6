#ifndef TRAINCTL_COORDINATOR_DEPENDENCY_INDEX_H_
#define TRAINCTL_COORDINATOR_DEPENDENCY_INDEX_H_

// The reverse index of job dependencies (dependency.h): which jobs that have
// not ended wait on job X (or on X's array), which jobs form each singleton
// group (same JobSpec.name and user, not ended), which jobs' dependency does
// not hold yet (the scheduler's queue leaves those out), and the jobs to
// evaluate again after a change.
//
// Kept by JobTable (Add registers a job, a final edge unregisters it); the
// coordinator marks the jobs a change affects (MarkDirty), asks for their
// judgement (JudgeNext: evaluates and records the verdict) and carries out
// what it says (reasons, cancels). Not thread-safe: guarded by the coordinator's lock, as
// JobTable.

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "coordinator/dependency.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

class DependencyIndex {
 public:
  // Registers `job` (not final): as a dependent of the jobs its
  // spec.dependency names (parsed here; a string that does not parse, which
  // submit refuses, is registered as blocked with no target, and its
  // evaluation ends it), and as a member of its singleton group. A job with
  // a dependency starts blocked until the coordinator's first evaluation.
  void Add(const v1::Job& job);
  // Job `id` ended (final): it waits on nothing and leaves its group.
  void Remove(int64_t id);

  // The parsed dependency of job `id`; null when it has none (or is not
  // registered).
  const Dependency* DependencyOf(int64_t id) const;
  // The jobs to evaluate again after job `changed` moved (its state edge):
  // those waiting on it or on its array, and the singleton jobs of its group
  // but itself, in id order.
  std::vector<int64_t> Affected(const v1::Job& changed) const;
  // Every registered job with a dependency, in id order (after a load).
  std::vector<int64_t> WithDependency() const;
  // The members of job `id`'s singleton group (`id` included), in id order.
  std::vector<int64_t> GroupOf(int64_t id) const;

  // Whether job `id`'s dependency does not hold (yet): the scheduler and the
  // packer leave it out.
  bool Blocked(int64_t id) const { return blocked_.contains(id); }
  void SetBlocked(int64_t id, bool blocked);
  // Jobs blocked now.
  size_t blocked_count() const { return blocked_.size(); }

  // ---- judging: what one job's dependency says now, and what the
  // coordinator must do about it.
  struct Judgement {
    int64_t id = 0;
    // kSatisfied: the job may be placed (`unblocked`: it was blocked until
    // now, so its "waiting for dependency" reason goes); kWaiting: it stays
    // out of the queue with `verdict.reason`; kNever: the coordinator ends
    // it (CANCELLED) with `verdict.reason`.
    DepVerdict verdict;
    bool unblocked = false;
  };
  // The state of job `id` if the coordinator holds it in memory (every job
  // that has not ended is), else nullopt.
  using StateFn = absl::FunctionRef<std::optional<v1::JobState>(int64_t id)>;
  // Takes dirty jobs until one is PENDING (by `state`), evaluates its
  // dependency (EvaluateDependency over `facts` and, for singleton, its
  // group's members with their states) and records the verdict's blocked
  // flag here; nullopt when the worklist is empty. A registered job whose
  // string did not parse (submit refuses those; only a record written
  // otherwise has one) is judged kNever with the parse error. No errors.
  std::optional<Judgement> JudgeNext(StateFn state, DepFactsFn facts);

  // ---- the evaluation worklist (the coordinator drains it iteratively so
  // a cascade of ends does not recurse).
  void MarkDirty(const std::vector<int64_t>& ids);
  // The next job to evaluate, or 0 when none.
  int64_t TakeDirty();
  // Set while the coordinator drains the worklist (a nested edge only
  // marks).
  bool draining() const { return draining_; }
  void set_draining(bool on) { draining_ = on; }

 private:
  struct Entry {
    Dependency dep;
    std::string group;
    // Why spec.dependency did not parse; empty when it did (or is empty).
    std::string parse_error;
    // JobSpec.array: whether it is an array task, and its index (aftercorr).
    bool is_array_task = false;
    int32_t task_id = 0;
  };
  static std::string GroupKey(const v1::Job& job);

  absl::flat_hash_map<int64_t, Entry> entries_;
  // Target job id (or array id) -> jobs waiting on it.
  absl::flat_hash_map<int64_t, absl::btree_set<int64_t>> waiters_;
  // user + '\0' + name -> the group's jobs; and the singleton ones.
  absl::flat_hash_map<std::string, absl::btree_set<int64_t>> groups_;
  absl::flat_hash_map<std::string, absl::btree_set<int64_t>> singletons_;
  absl::flat_hash_set<int64_t> blocked_;
  std::deque<int64_t> dirty_;
  absl::flat_hash_set<int64_t> dirty_set_;
  bool draining_ = false;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_DEPENDENCY_INDEX_H_
