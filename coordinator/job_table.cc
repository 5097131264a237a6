#include "coordinator/job_table.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/job_facts.h"
#include "common/status_macros.h"

namespace trainctl::coord {
namespace {

// The slot of `state` in a per-state count (UNSPECIFIED for a value this
// build does not know).
size_t Slot(int state) {
  return v1::JobState_IsValid(state) ? static_cast<size_t>(state) : 0;
}

}  // namespace

absl::StatusOr<const v1::Job*> JobTable::Lookup(int64_t id, v1::Job* scratch,
                                                StateStore& store) const {
  auto it = jobs_.find(id);
  if (it != jobs_.end()) return &it->second;
  if (!retired_.contains(id)) {
    return absl::NotFoundError(absl::StrCat("job ", id, " does not exist"));
  }
  TC_ASSIGN_OR_RETURN(std::vector<v1::Job> read, store.ReadJobs({id}));
  if (read.empty()) {
    return absl::DataLossError(absl::StrCat(
        "job ", id, " is finished but its record is missing from the store"));
  }
  *scratch = std::move(read.front());
  return scratch;
}

v1::Job& JobTable::Add(v1::Job job) {
  const int64_t id = job.id();
  next_job_id_ = std::max(next_job_id_, id + 1);
  next_placement_seq_ = std::max(next_placement_seq_, job.placement_seq() + 1);
  if (!job.request_id().empty()) request_ids_[job.request_id()] = id;
  if (!job.spec().sweep_id().empty()) sweep_jobs_[job.spec().sweep_id()].push_back(id);
  Track(job);
  if (!IsFinal(job.state())) deps_.Add(job);
  auto [it, added] = jobs_.emplace(id, std::move(job));
  if (added) {
    ++by_state_[Slot(it->second.state())];
    if (it->second.state() == v1::JOB_STATE_PENDING) {
      ++pending_by_user_[it->second.spec().user()];
    }
    HoldSharedEnv(it->second);
  }
  return it->second;
}

void JobTable::AddRetired(const JobSummary& r) {
  next_job_id_ = std::max(next_job_id_, r.id + 1);
  next_placement_seq_ = std::max(next_placement_seq_, r.placement_seq + 1);
  if (!r.request_id.empty()) request_ids_[r.request_id] = r.id;
  if (!r.sweep_id.empty()) sweep_jobs_[r.sweep_id].push_back(r.id);
  Retired& e = retired_[r.id];
  e.user = UserIndex(r.user);
  e.state = static_cast<uint8_t>(r.state);
  ++by_state_[Slot(r.state)];
}

void JobTable::FinishLoad() {
  for (auto& [sweep, ids] : sweep_jobs_) {
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  }
  for (const auto& [id, job] : jobs_) {
    if (!active_.contains(id)) evict_candidates_.push_back(id);
  }
}

std::optional<int64_t> JobTable::JobOfRequest(const std::string& request_id) const {
  auto it = request_ids_.find(request_id);
  if (it == request_ids_.end()) return std::nullopt;
  return it->second;
}

const std::vector<int64_t>* JobTable::SweepTrials(const std::string& sweep_id) const {
  auto it = sweep_jobs_.find(sweep_id);
  return it == sweep_jobs_.end() ? nullptr : &it->second;
}

void JobTable::Track(const v1::Job& job) {
  if (!IsRetired(job)) {
    active_.insert(job.id());
  } else if (active_.erase(job.id()) > 0) {
    evict_candidates_.push_back(job.id());
  }
}

void JobTable::CountEdge(const v1::Job& job, v1::JobState from, v1::JobState to) {
  --by_state_[Slot(from)];
  ++by_state_[Slot(to)];
  if (from == v1::JOB_STATE_PENDING) {
    auto it = pending_by_user_.find(job.spec().user());
    if (it != pending_by_user_.end() && --it->second <= 0) pending_by_user_.erase(it);
  }
  if (to == v1::JOB_STATE_PENDING) ++pending_by_user_[job.spec().user()];
  if (IsFinal(to)) deps_.Remove(job.id());
}

void JobTable::NoteStored(int64_t id, const absl::Status& stored) {
  if (stored.ok()) {
    unsaved_.erase(id);
  } else {
    unsaved_.insert(id);
  }
}

void JobTable::Evict(absl::FunctionRef<bool(int64_t)> draining) {
  std::vector<int64_t> keep;
  for (int64_t id : evict_candidates_) {
    auto it = jobs_.find(id);
    if (it == jobs_.end() || active_.contains(id) || !IsRetired(it->second)) continue;
    if (unsaved_.contains(id) || draining(id)) {
      keep.push_back(id);
      continue;
    }
    Retired& e = retired_[id];
    e.user = UserIndex(it->second.spec().user());
    e.state = static_cast<uint8_t>(it->second.state());
    ReleaseSharedEnv(it->second);
    jobs_.erase(it);
  }
  evict_candidates_ = std::move(keep);
}

absl::Status JobTable::CheckPendingLimit(const std::vector<v1::JobSpec>& specs,
                                         int64_t max_pending,
                                         int64_t max_pending_per_user) const {
  const int64_t asked = static_cast<int64_t>(specs.size());
  const int64_t pending = by_state_[v1::JOB_STATE_PENDING];
  if (max_pending > 0 && pending + asked > max_pending) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the cluster has ", pending, " pending jobs and at most ", max_pending,
        " may wait (trainctl-coordinator --max-pending-jobs); this submit asks for ", asked,
        " more: submit again once jobs have started or ended"));
  }
  if (max_pending_per_user <= 0) return absl::OkStatus();
  absl::flat_hash_map<std::string, int64_t> per_user;
  for (const v1::JobSpec& spec : specs) ++per_user[spec.user()];
  for (const auto& [user, n] : per_user) {
    auto it = pending_by_user_.find(user);
    const int64_t mine = it == pending_by_user_.end() ? 0 : it->second;
    if (mine + n > max_pending_per_user) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "user \"", user, "\" has ", mine, " pending jobs and at most ",
          max_pending_per_user,
          " may wait (trainctl-coordinator --max-pending-jobs-per-user, as Slurm's "
          "MaxSubmitJobs); this submit asks for ", n,
          " more: cancel held jobs or submit again once some have started"));
    }
  }
  return absl::OkStatus();
}

const JobTable::Env* JobTable::ExportedEnv(const v1::Job& job) const {
  if (job.exported_env_job_id() == 0) return &job.spec().exported_env();
  auto it = shared_envs_.find(job.exported_env_job_id());
  return it == shared_envs_.end() ? nullptr : &it->second.env;
}

void JobTable::ShareEnv(int64_t holder, const Env& env) { shared_envs_[holder].env = env; }

absl::StatusOr<JobTable::Env> JobTable::HolderEnv(int64_t holder, StateStore& store) const {
  v1::Job scratch;
  absl::StatusOr<const v1::Job*> record = Lookup(holder, &scratch, store);
  if (!record.ok()) {
    return absl::DataLossError(absl::StrCat("the exported environment stored with job ",
                                            holder, " cannot be read: ",
                                            record.status().message()));
  }
  return (*record)->spec().exported_env();
}

absl::Status JobTable::LoadSharedEnvs(StateStore& store) {
  for (auto& [holder, shared] : shared_envs_) {
    if (!shared.env.empty()) continue;
    TC_ASSIGN_OR_RETURN(shared.env, HolderEnv(holder, store));
  }
  return absl::OkStatus();
}

void JobTable::HoldSharedEnv(const v1::Job& job) {
  if (job.exported_env_job_id() != 0) ++shared_envs_[job.exported_env_job_id()].refs;
}

void JobTable::ReleaseSharedEnv(const v1::Job& job) {
  if (job.exported_env_job_id() == 0) return;
  auto it = shared_envs_.find(job.exported_env_job_id());
  if (it != shared_envs_.end() && --it->second.refs <= 0) shared_envs_.erase(it);
}

uint32_t JobTable::UserIndex(const std::string& user) {
  auto [it, added] =
      user_index_.try_emplace(user, static_cast<uint32_t>(user_names_.size()));
  if (added) user_names_.push_back(user);
  return it->second;
}

std::vector<JobTable::Listed> JobTable::Select(const ListFilter& f, StateStore& store) const {
  std::vector<Listed> out;
  const int limit = f.limit;
  const auto user_it = f.user.empty() ? user_index_.end() : user_index_.find(f.user);
  auto keep_job = [&](const v1::Job& job) {
    if (!f.states.empty() && !f.states.contains(job.state())) return false;
    return f.user.empty() || job.spec().user() == f.user;
  };
  auto keep_retired = [&](const Retired& e) {
    if (!f.states.empty() && !f.states.contains(e.state)) return false;
    return f.user.empty() || (user_it != user_index_.end() && e.user == user_it->second);
  };
  // Visits job `id` (newest first); false once `limit` jobs are kept.
  auto visit = [&](int64_t id) {
    if (static_cast<int>(out.size()) >= limit) return false;
    if (auto it = jobs_.find(id); it != jobs_.end()) {
      if (keep_job(it->second)) out.push_back({id, &it->second});
    } else if (auto r = retired_.find(id); r != retired_.end()) {
      if (keep_retired(r->second)) out.push_back({id, nullptr});
    }
    return true;
  };
  if (f.array_job_id > 0) {
    // A job array's tasks have the ids array_job_id .. + task_count - 1.
    v1::Job scratch;
    absl::StatusOr<const v1::Job*> first = Lookup(f.array_job_id, &scratch, store);
    if (!first.ok() || (*first)->spec().array().array_job_id() != f.array_job_id) {
      return out;
    }
    const int64_t count = (*first)->spec().array().task_count();
    for (int64_t id = f.array_job_id + count - 1; id >= f.array_job_id; --id) {
      if (!visit(id)) break;
    }
  } else if (!f.sweep_id.empty()) {
    const std::vector<int64_t>* trials = SweepTrials(f.sweep_id);
    if (trials == nullptr) return out;
    for (auto id = trials->rbegin(); id != trials->rend(); ++id) {
      if (!visit(*id)) break;
    }
  } else {
    // Both maps newest first, merged by id (they hold disjoint ids).
    auto j = jobs_.rbegin();
    auto r = retired_.rbegin();
    while (static_cast<int>(out.size()) < limit &&
           (j != jobs_.rend() || r != retired_.rend())) {
      if (r == retired_.rend() || (j != jobs_.rend() && j->first > r->first)) {
        if (keep_job(j->second)) out.push_back({j->first, &j->second});
        ++j;
      } else {
        if (keep_retired(r->second)) out.push_back({r->first, nullptr});
        ++r;
      }
    }
  }
  return out;
}

void JobTable::FillRetired(const std::vector<RetiredSlot>& slots, StateStore& store,
                           std::vector<v1::Job>& list) {
  if (slots.empty()) return;
  std::vector<int64_t> ids;
  for (const RetiredSlot& r : slots) ids.push_back(r.id);
  absl::StatusOr<std::vector<v1::Job>> read = store.ReadJobs(ids);
  if (!read.ok()) {
    TC_LOG_ERROR("list: could not read {} finished jobs from the store: {}", ids.size(),
                 read.status().ToString());
    read = std::vector<v1::Job>();
  }
  absl::flat_hash_map<int64_t, v1::Job*> by_id;
  for (v1::Job& job : *read) by_id[job.id()] = &job;
  std::vector<bool> missing(list.size(), false);
  for (const RetiredSlot& r : slots) {
    auto it = by_id.find(r.id);
    if (it == by_id.end()) {
      missing[r.index] = true;
      continue;
    }
    v1::Job& slot = list[r.index];
    slot = std::move(*it->second);
    // As users see it; a retired job has no running attempt to count.
    slot.clear_attempt_token();
    if (r.points > 0) slot.set_metric_points(r.points);
  }
  if (std::find(missing.begin(), missing.end(), true) == missing.end()) return;
  std::vector<v1::Job> kept;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!missing[i]) kept.push_back(std::move(list[i]));
  }
  list = std::move(kept);
}

}  // namespace trainctl::coord
