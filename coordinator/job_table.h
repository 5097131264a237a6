#ifndef TRAINCTL_COORDINATOR_JOB_TABLE_H_
#define TRAINCTL_COORDINATOR_JOB_TABLE_H_

// Every job the coordinator knows, and the indexes over them.
//
// A job's full record stays in memory while it is active (not final, or a
// task still live) and until its final record is stored; then it retires:
// only a summary (user, state) stays here and the record is read from the
// StateStore on demand (Lookup), so a long finished history costs a few
// bytes a job (bench/results/history.json: ~20 MB at 1M jobs, where full
// records took ~1.9 GB). Indexes: the active jobs (the only ones scheduling
// and reconciliation visit), request ids (idempotent submit), sweep trials,
// jobs per state and PENDING jobs per user (limits, metrics), exported
// environments that many jobs of one array or sweep share (kept once), and
// the dependency index (deps(): who waits on whom, singleton groups).
//
// Not thread-safe: called under the coordinator's lock, which guards it.
// It never changes a job's state: the coordinator does (TransitionLocked)
// and reports each edge here (CountEdge) and each change (Track).

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/dependency_index.h"
#include "coordinator/state_store.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

class JobTable {
 public:
  using Records = absl::btree_map<int64_t, v1::Job>;
  using Env = google::protobuf::Map<std::string, std::string>;

  // ---- full records in memory, by id (as a map)
  Records::iterator find(int64_t id) { return jobs_.find(id); }
  Records::const_iterator find(int64_t id) const { return jobs_.find(id); }
  Records::iterator begin() { return jobs_.begin(); }
  Records::iterator end() { return jobs_.end(); }
  Records::const_iterator begin() const { return jobs_.begin(); }
  Records::const_iterator end() const { return jobs_.end(); }
  // The record of job `id`, which must be in memory (an active job always
  // is).
  v1::Job& at(int64_t id) { return jobs_.at(id); }
  const v1::Job& at(int64_t id) const { return jobs_.at(id); }
  bool contains(int64_t id) const { return jobs_.contains(id); }
  // Records in memory (retired jobs not counted).
  size_t size() const { return jobs_.size(); }

  // Whether job `id` exists, in memory or retired.
  bool Known(int64_t id) const { return jobs_.contains(id) || retired_.contains(id); }
  // The job `id`: its record in memory, or for a retired job its record read
  // from `store` into `*scratch`. Errors: NOT_FOUND; those of
  // StateStore::ReadJobs (DATA_LOSS also when a retired job's record is
  // missing).
  absl::StatusOr<const v1::Job*> Lookup(int64_t id, v1::Job* scratch,
                                        StateStore& store) const;

  // ---- job dependencies: Add registers every job that has not ended, a
  // final edge (CountEdge) unregisters it.
  DependencyIndex& deps() { return deps_; }
  const DependencyIndex& deps() const { return deps_; }

  // ---- the active jobs (not final, or with a live task), in id order
  const absl::btree_set<int64_t>& active() const { return active_; }
  // A copy of active(), for loops that change jobs.
  std::vector<int64_t> ActiveIds() const { return {active_.begin(), active_.end()}; }
  // Calls fn(job) for every active job in id order, walking the active set
  // and the records side by side instead of a lookup per id: a scheduling
  // pass visits every active job several times, and at 100,000 pending jobs
  // the lookups were a large part of its cost. fn must not add or remove
  // jobs.
  template <typename Fn>
  void ForEachActive(Fn fn) const {
    Walk(active_, jobs_, fn);
  }
  template <typename Fn>
  void ForEachActiveMutable(Fn fn) {
    Walk(active_, jobs_, fn);
  }

  // ---- adding jobs
  // Takes `job` (just submitted, or loaded from the store) into memory:
  // counts its state (and, PENDING, its user's pending jobs), indexes its
  // request id and sweep, holds the environment it shares, tracks it as
  // active or not, and moves next_id() and the placement sequence past it.
  // Returns its record here.
  v1::Job& Add(v1::Job job);
  // At load: a retired job, as its summary.
  void AddRetired(const JobSummary& summary);
  // After loading: sorts the sweep index, and queues every job that is not
  // active for Evict.
  void FinishLoad();

  // The id the next submitted job gets (ids count from 1, never reused once
  // a job was added).
  int64_t next_id() const { return next_job_id_; }
  // Job.placement_seq for a new placement (increasing).
  int64_t TakePlacementSeq() { return next_placement_seq_++; }
  // The first job of the submit that carried `request_id`, if any (retired
  // jobs included).
  std::optional<int64_t> JobOfRequest(const std::string& request_id) const;
  // The trials of sweep `sweep_id`, ascending; null for an unknown sweep.
  const std::vector<int64_t>* SweepTrials(const std::string& sweep_id) const;

  // ---- changes
  // Keeps the active set in step with `job` (call on every change of it).
  void Track(const v1::Job& job);
  // Job `job` moves from `from` to `to` (the coordinator's transition):
  // counts per state and the PENDING jobs of its user follow.
  void CountEdge(const v1::Job& job, v1::JobState from, v1::JobState to);
  // Whether the latest write of job `id` reached the store: a job whose
  // write failed stays in memory (its stored record is stale) until a later
  // write succeeds.
  void NoteStored(int64_t id, const absl::Status& stored);
  // Moves jobs that retired (final, no live task) since the last call out of
  // memory, keeping their summary, unless their last write failed or
  // `draining(id)` (a task of an earlier attempt still holds GPUs). Call
  // only while nobody holds a reference into the records.
  void Evict(absl::FunctionRef<bool(int64_t)> draining);

  // ---- counts
  // Jobs per state, retired ones included (index: v1::JobState).
  const std::array<int64_t, v1::JobState_ARRAYSIZE>& by_state() const { return by_state_; }
  // OK when `specs`, submitted now, keep PENDING jobs within `max_pending`
  // and each user's within `max_pending_per_user` (0 or less: no limit).
  // Errors: RESOURCE_EXHAUSTED naming the limit, its coordinator flag, the
  // jobs pending and the jobs asked for.
  absl::Status CheckPendingLimit(const std::vector<v1::JobSpec>& specs,
                                 int64_t max_pending, int64_t max_pending_per_user) const;

  // ---- exported environments shared by many jobs (Job.exported_env_job_id)
  // The exported environment `job` launches with: its own
  // spec.exported_env, or the one it shares. Null only when a shared one is
  // missing from memory, which loading (LoadSharedEnvs) and submit rule out.
  const Env* ExportedEnv(const v1::Job& job) const;
  // Job `holder` (being added, with the jobs that share it) holds `env` for
  // the others.
  void ShareEnv(int64_t holder, const Env& env);
  // The exported environment stored in job `holder`'s record (in memory or
  // read from `store`). Errors: DATA_LOSS when the record cannot be read
  // (records are never deleted).
  absl::StatusOr<Env> HolderEnv(int64_t holder, StateStore& store) const;
  // After loading: reads each shared environment from its holder. Errors:
  // those of HolderEnv.
  absl::Status LoadSharedEnvs(StateStore& store);

  // ---- listing (ListJobs)
  struct ListFilter {
    // Empty: every state.
    absl::flat_hash_set<int> states;
    // Non-empty: only this user's jobs.
    std::string user;
    // Non-empty: only this sweep's trials.
    std::string sweep_id;
    // Non-zero: only this job array's tasks.
    int64_t array_job_id = 0;
    // At most this many jobs (> 0).
    int limit = 1000;
  };
  // One job picked: its record in memory, or null for a retired job (the
  // caller reads it from the store).
  struct Listed {
    int64_t id = 0;
    const v1::Job* record = nullptr;
  };
  // The jobs `filter` keeps, newest first. Reads at most one record from
  // `store` (a retired job array's first task, for its size); an array or
  // sweep that does not exist gives an empty list.
  std::vector<Listed> Select(const ListFilter& filter, StateStore& store) const;

  // A retired job Select picked, waiting in a list for its record: its
  // index in the list and its metric point count (Job.metric_points).
  struct RetiredSlot {
    int64_t id = 0;
    size_t index = 0;
    int64_t points = 0;
  };
  // Reads the records of `slots` from `store` into `list` (as users see
  // them: no attempt token); a record the store no longer has is dropped
  // from the list (logged). A failed read drops them all (logged): a list is
  // shown with what could be read.
  static void FillRetired(const std::vector<RetiredSlot>& slots, StateStore& store,
                          std::vector<v1::Job>& list);

 private:
  // A retired job: the few bytes ListJobs filters on.
  struct Retired {
    // Index into user_names_.
    uint32_t user = 0;
    // A v1::JobState (final).
    uint8_t state = 0;
  };
  // Index of `user` in user_names_ (added when new).
  uint32_t UserIndex(const std::string& user);
  void HoldSharedEnv(const v1::Job& job);
  void ReleaseSharedEnv(const v1::Job& job);
  template <typename Ids, typename Jobs, typename Fn>
  static void Walk(const Ids& active, Jobs& jobs, Fn& fn) {
    auto it = jobs.begin();
    for (int64_t id : active) {
      // Usually the next job; a few retired ones may lie between.
      for (int step = 0; step < 8 && it != jobs.end() && it->first < id; ++step) ++it;
      if (it == jobs.end() || it->first < id) it = jobs.lower_bound(id);
      fn(it != jobs.end() && it->first == id ? it->second : jobs.at(id));
    }
  }

  Records jobs_;
  DependencyIndex deps_;
  absl::btree_set<int64_t> active_;
  absl::btree_map<int64_t, Retired> retired_;
  std::vector<std::string> user_names_;
  absl::flat_hash_map<std::string, uint32_t> user_index_;
  // Jobs that became inactive since the last Evict.
  std::vector<int64_t> evict_candidates_;
  // Holder job id -> the environment it holds for others, and how many jobs
  // in memory refer to it (dropped with the last).
  struct SharedEnv {
    Env env;
    int64_t refs = 0;
  };
  absl::flat_hash_map<int64_t, SharedEnv> shared_envs_;
  // Jobs whose latest store write failed.
  absl::flat_hash_set<int64_t> unsaved_;
  int64_t next_job_id_ = 1;
  int64_t next_placement_seq_ = 1;
  absl::flat_hash_map<std::string, int64_t> request_ids_;
  absl::flat_hash_map<std::string, std::vector<int64_t>> sweep_jobs_;
  std::array<int64_t, v1::JobState_ARRAYSIZE> by_state_{};
  absl::flat_hash_map<std::string, int64_t> pending_by_user_;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_JOB_TABLE_H_
