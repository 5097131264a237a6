#include "coordinator/dependency_index.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace trainctl::coord {

std::string DependencyIndex::GroupKey(const v1::Job& job) {
  return absl::StrCat(job.spec().user(), std::string(1, '\0'), job.spec().name());
}

void DependencyIndex::Add(const v1::Job& job) {
  const int64_t id = job.id();
  if (entries_.contains(id)) return;
  Entry& e = entries_[id];
  e.group = GroupKey(job);
  groups_[e.group].insert(id);
  if (job.spec().dependency().empty()) return;
  absl::StatusOr<Dependency> dep = ParseDependency(job.spec().dependency());
  if (dep.ok()) {
    e.dep = *std::move(dep);
  } else {
    e.parse_error = absl::StrCat("\"", job.spec().dependency(),
                                 "\" does not parse: ", dep.status().message());
  }
  e.is_array_task = job.spec().has_array();
  e.task_id = job.spec().array().task_id();
  for (int64_t target : e.dep.JobIds()) waiters_[target].insert(id);
  if (e.dep.HasSingleton()) singletons_[e.group].insert(id);
  blocked_.insert(id);
}

void DependencyIndex::Remove(int64_t id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  for (int64_t target : it->second.dep.JobIds()) {
    auto w = waiters_.find(target);
    if (w == waiters_.end()) continue;
    w->second.erase(id);
    if (w->second.empty()) waiters_.erase(w);
  }
  for (auto* groups : {&groups_, &singletons_}) {
    auto g = groups->find(it->second.group);
    if (g == groups->end()) continue;
    g->second.erase(id);
    if (g->second.empty()) groups->erase(g);
  }
  blocked_.erase(id);
  entries_.erase(it);
}

const Dependency* DependencyIndex::DependencyOf(int64_t id) const {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.dep.conditions.empty()) {
    // A registered job whose string did not parse is still "with a
    // dependency": its evaluation must end it.
    return nullptr;
  }
  return &it->second.dep;
}

std::vector<int64_t> DependencyIndex::Affected(const v1::Job& changed) const {
  absl::btree_set<int64_t> out;
  auto add_waiters = [&](int64_t target) {
    auto w = waiters_.find(target);
    if (w != waiters_.end()) out.insert(w->second.begin(), w->second.end());
  };
  add_waiters(changed.id());
  const int64_t array = changed.spec().array().array_job_id();
  if (array != 0 && array != changed.id()) add_waiters(array);
  auto s = singletons_.find(GroupKey(changed));
  if (s != singletons_.end()) out.insert(s->second.begin(), s->second.end());
  out.erase(changed.id());
  return {out.begin(), out.end()};
}

std::vector<int64_t> DependencyIndex::WithDependency() const {
  std::vector<int64_t> out;
  for (int64_t id : blocked_) out.push_back(id);
  for (const auto& [id, e] : entries_) {
    if (!e.dep.conditions.empty() && !blocked_.contains(id)) out.push_back(id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int64_t> DependencyIndex::GroupOf(int64_t id) const {
  auto it = entries_.find(id);
  if (it == entries_.end()) return {id};
  auto g = groups_.find(it->second.group);
  if (g == groups_.end()) return {id};
  return {g->second.begin(), g->second.end()};
}

void DependencyIndex::SetBlocked(int64_t id, bool blocked) {
  if (blocked) {
    blocked_.insert(id);
  } else {
    blocked_.erase(id);
  }
}

void DependencyIndex::MarkDirty(const std::vector<int64_t>& ids) {
  for (int64_t id : ids) {
    if (dirty_set_.insert(id).second) dirty_.push_back(id);
  }
}

std::optional<DependencyIndex::Judgement> DependencyIndex::JudgeNext(StateFn state,
                                                                    DepFactsFn facts) {
  for (int64_t id = TakeDirty(); id != 0; id = TakeDirty()) {
    if (state(id) != v1::JOB_STATE_PENDING) continue;
    auto entry = entries_.find(id);
    if (entry == entries_.end()) continue;
    const Entry& e = entry->second;
    Judgement j;
    j.id = id;
    if (!e.parse_error.empty()) {
      j.verdict = {DepOutcome::kNever,
                   absl::StrCat("dependency can never be met: ", e.parse_error)};
    } else if (!e.dep.conditions.empty()) {
      std::vector<SingletonPeer> peers;
      if (e.dep.HasSingleton()) {
        for (int64_t peer : GroupOf(id)) {
          std::optional<v1::JobState> s = state(peer);
          if (!s.has_value()) continue;
          const Dependency* pd = DependencyOf(peer);
          peers.push_back({peer, *s, pd != nullptr && pd->HasSingleton()});
        }
      }
      j.verdict = EvaluateDependency(e.dep, DepSelf{id, e.is_array_task, e.task_id}, facts,
                                     peers);
    }  // else no dependency: satisfied
    switch (j.verdict.outcome) {
      case DepOutcome::kSatisfied:
        j.unblocked = Blocked(id);
        SetBlocked(id, false);
        break;
      case DepOutcome::kWaiting:
        SetBlocked(id, true);
        break;
      case DepOutcome::kNever:
        break;
    }
    return j;
  }
  return std::nullopt;
}

int64_t DependencyIndex::TakeDirty() {
  if (dirty_.empty()) return 0;
  const int64_t id = dirty_.front();
  dirty_.pop_front();
  dirty_set_.erase(id);
  return id;
}

}  // namespace trainctl::coord
