#include "coordinator/rendezvous.h"

#include <algorithm>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/nccl_roots.h"
#include "common/secrets.h"
#include "common/status_macros.h"

namespace trainctl::coord {

std::string GroupRef::ToString() const {
  return probe_run == 0 ? absl::StrCat("attempt ", attempt)
                        : absl::StrCat("attempt ", attempt, " pre-flight ", probe_run);
}

namespace {

int DefaultFanoutThreads() {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores, 1, RendezvousTable::kDefaultFanoutThreads);
}

}  // namespace

RendezvousTable::RendezvousTable(int fanout_threads)
    : fanout_threads_(fanout_threads > 0 ? fanout_threads : DefaultFanoutThreads()) {}

void RendezvousTable::AnswerAll(std::vector<Waiter>& ready,
                                const std::vector<std::string>& ids) const {
  const int n = static_cast<int>(ready.size());
  const int threads = std::clamp(n / kWaitersPerFanoutThread, 1, fanout_threads_);
  // Slice t is [n * t / threads, n * (t + 1) / threads); the calling thread
  // takes slice 0.
  auto answer = [&ready, &ids, n, threads](int t) {
    const int end = static_cast<int>(int64_t{n} * (t + 1) / threads);
    for (int i = static_cast<int>(int64_t{n} * t / threads); i < end; ++i) {
      ready[i].done(ids);
    }
  };
  // A fork-join of a few threads per publish (no pool: publishes are one per
  // job attempt, and a thread start is cheap next to 128 gRPC replies).
  std::vector<std::thread> helpers;
  helpers.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) {
    try {
      helpers.emplace_back(answer, t);
    } catch (const std::system_error&) {
      answer(t);  // no thread to be had (process limit): answer it here
    }
  }
  answer(0);
  for (std::thread& h : helpers) h.join();
}

void RendezvousTable::Open(int64_t job_id, GroupRef ref, std::string token,
                           std::vector<std::string> rank_hosts,
                           std::optional<absl::Time> opened_at) {
  std::vector<Waiter> aborted;
  {
    absl::MutexLock lock(&mu_);
    Group& g = groups_[Key{job_id, ref}];
    aborted = std::move(g.waiters);
    g = Group{};
    g.token = std::move(token);
    g.rank_hosts = std::move(rank_hosts);
    g.opened_at = opened_at;
  }
  for (Waiter& w : aborted) {
    w.done(absl::AbortedError("the rendezvous was reopened"));
  }
}

void RendezvousTable::Close(int64_t job_id, GroupRef ref, absl::string_view why) {
  std::vector<Waiter> aborted;
  {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find(Key{job_id, ref});
    if (it == groups_.end()) return;
    aborted = std::move(it->second.waiters);
    groups_.erase(it);
  }
  for (Waiter& w : aborted) {
    w.done(absl::AbortedError(absl::StrCat("job ", job_id, " ", ref.ToString(),
                                           " ended before its ncclUniqueId was "
                                           "published: ",
                                           why)));
  }
}

absl::StatusOr<RendezvousTable::Group*> RendezvousTable::FindLocked(
    int64_t job_id, GroupRef ref, int rank, absl::string_view token) {
  if (ref.probe_run < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("probe_run: ", ref.probe_run, " is negative (0 for a job's ranks, "
                     "n for the probes of pre-flight run n)"));
  }
  auto it = groups_.find(Key{job_id, ref});
  if (it == groups_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "job ", job_id, " ", ref.ToString(),
        " has no rendezvous: it is not running (finished, cancelled, or a newer "
        "attempt replaced it)"));
  }
  Group& g = it->second;
  if (!SameSecret(token, g.token)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "wrong TRAINCTL_TOKEN for job ", job_id, " ", ref.ToString()));
  }
  if (rank < 0 || rank >= static_cast<int>(g.rank_hosts.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank: must be in [0, ", g.rank_hosts.size(), "), got ", rank));
  }
  return &g;
}

absl::Status RendezvousTable::CheckIdCountLocked(Group& group, int requested) {
  const int want = requested <= 0 ? 1 : requested;
  const int ranks = static_cast<int>(group.rank_hosts.size());
  if (group.id_count == 0) {
    if (want > std::max(ranks, 1) || want > kMaxNcclUniqueIds) {
      return absl::InvalidArgumentError(absl::StrCat(
          "id_count: must be in [1, ", std::min(ranks, kMaxNcclUniqueIds),
          "] (one id per root rank), got ", want, " (TRAINCTL_NCCL_UNIQUE_IDS)"));
    }
    group.id_count = want;
    group.ids.assign(want, "");
    return absl::OkStatus();
  }
  if (want != group.id_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "id_count: this attempt uses ", group.id_count,
        " ncclUniqueIds (set by its first call), got ", want,
        "; TRAINCTL_NCCL_UNIQUE_IDS must be the same for every rank"));
  }
  return absl::OkStatus();
}

absl::Status RendezvousTable::Publish(int64_t job_id, GroupRef ref, int rank,
                                      absl::string_view token,
                                      std::string unique_id, int id_index,
                                      int id_count) {
  if (unique_id.size() != kNcclUniqueIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("unique_id: must be ", kNcclUniqueIdBytes, " bytes, got ",
                     unique_id.size()));
  }
  std::vector<Waiter> ready;
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    auto g = FindLocked(job_id, ref, rank, token);
    if (!g.ok()) return g.status();
    Group& group = **g;
    TC_RETURN_IF_ERROR(CheckIdCountLocked(group, id_count));
    const int nranks = static_cast<int>(group.rank_hosts.size());
    if (id_index < 0 || id_index >= group.id_count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "id_index: must be in [0, ", group.id_count, "), got ", id_index));
    }
    const int root = NcclIdRootRank(id_index, nranks, group.id_count);
    if (rank != root) {
      if (group.id_count == 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rank: only rank 0 publishes the ncclUniqueId, got rank ", rank));
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "rank: id ", id_index, " of ", group.id_count, " is published by rank ",
          root, " (NCCL's root of that id for ", nranks, " ranks), got rank ", rank));
    }
    std::string& slot = group.ids[id_index];
    if (!slot.empty()) {
      if (slot == unique_id) return absl::OkStatus();
      return absl::AlreadyExistsError(absl::StrCat(
          "job ", job_id, " ", ref.ToString(),
          " already has a different ncclUniqueId",
          group.id_count > 1 ? absl::StrCat(" of index ", id_index) : "",
          " (an id serves one communicator)"));
    }
    slot = std::move(unique_id);
    ++group.published_ids;
    group.arrived.insert(rank);
    if (!group.published()) return absl::OkStatus();
    ready = std::move(group.waiters);
    group.waiters.clear();
    ids = group.ids;
  }
  AnswerAll(ready, ids);
  return absl::OkStatus();
}

void RendezvousTable::FetchAsync(int64_t job_id, GroupRef ref, int rank,
                                 absl::string_view token, absl::Time now,
                                 absl::Duration timeout, FetchDone done) {
  FetchIdsAsync(job_id, ref, rank, token, now, timeout, FetchOptions{},
                [done = std::move(done)](
                    absl::StatusOr<std::vector<std::string>> ids) mutable {
                  if (!ids.ok()) {
                    done(ids.status());
                  } else {
                    done(ids->empty() ? std::string() : std::move(ids->front()));
                  }
                });
}

void RendezvousTable::FetchIdsAsync(int64_t job_id, GroupRef ref, int rank,
                                    absl::string_view token, absl::Time now,
                                    absl::Duration timeout,
                                    const FetchOptions& options,
                                    FetchIdsDone done) {
  absl::StatusOr<std::vector<std::string>> result;
  {
    absl::MutexLock lock(&mu_);
    auto g = FindLocked(job_id, ref, rank, token);
    if (!g.ok()) {
      result = g.status();
    } else if (absl::Status k = CheckIdCountLocked(**g, options.id_count); !k.ok()) {
      result = k;
    } else {
      Group& group = **g;
      const int nranks = static_cast<int>(group.rank_hosts.size());
      absl::Status relayed_ok;
      for (int r : options.relayed_ranks) {
        if (r < 0 || r >= nranks) {
          relayed_ok = absl::InvalidArgumentError(absl::StrCat(
              "relayed_ranks: must be in [0, ", nranks, "), got ", r));
          break;
        }
      }
      if (!relayed_ok.ok()) {
        result = relayed_ok;
      } else {
        group.arrived.insert(rank);
        group.arrived.insert(options.relayed_ranks.begin(),
                             options.relayed_ranks.end());
        if (group.published()) {
          result = group.ids;
        } else if (options.arrivals_only) {
          result = std::vector<std::string>{};
        } else {
          group.waiters.push_back(
              Waiter{rank, timeout, now + timeout, std::move(done)});
          return;
        }
      }
    }
  }
  done(std::move(result));
}

std::string RendezvousTable::MissingRanksMessage(int64_t job_id, GroupRef ref,
                                                 const Group& group,
                                                 absl::Duration waited) {
  std::vector<std::string> missing;
  int count = 0;
  for (int r = 0; r < static_cast<int>(group.rank_hosts.size()); ++r) {
    if (group.arrived.contains(r)) continue;
    ++count;
    if (missing.size() < 3) {
      missing.push_back(absl::StrCat(r, " (", group.rank_hosts[r], ")"));
    }
  }
  std::string msg;
  if (group.id_count <= 1) {
    msg = absl::StrCat("job ", job_id, " ", ref.ToString(), ": rank 0 (",
                       group.rank_hosts.empty() ? "?" : group.rank_hosts[0],
                       ") did not publish its ncclUniqueId within ",
                       absl::FormatDuration(waited));
  } else {
    // Roots of the ids not yet published, capped at 3 like the ranks below.
    std::vector<std::string> roots;
    int unpublished = 0;
    const int nranks = static_cast<int>(group.rank_hosts.size());
    for (int i = 0; i < group.id_count; ++i) {
      if (!group.ids[i].empty()) continue;
      ++unpublished;
      const int root = NcclIdRootRank(i, nranks, group.id_count);
      if (roots.size() < 3 && root >= 0) {
        roots.push_back(absl::StrCat(root, " (", group.rank_hosts[root], ")"));
      }
    }
    msg = absl::StrCat("job ", job_id, " ", ref.ToString(), ": ", unpublished,
                       " of ", group.id_count,
                       " ncclUniqueIds not published within ",
                       absl::FormatDuration(waited), " by root ranks ",
                       absl::StrJoin(roots, ", "),
                       unpublished > 3 ? absl::StrCat(" and ", unpublished - 3, " more")
                                       : "");
  }
  if (count > 0) {
    absl::StrAppend(&msg, "; ranks that never arrived: ", absl::StrJoin(missing, ", "),
                    count > 3 ? absl::StrCat(" and ", count - 3, " more") : "");
  }
  absl::StrAppend(&msg, "; see `trainctl logs ", job_id, " --rank 0`");
  return msg;
}

void RendezvousTable::Expire(absl::Time now) {
  std::vector<std::pair<Waiter, std::string>> expired;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, group] : groups_) {
      auto& ws = group.waiters;
      auto keep = std::partition(ws.begin(), ws.end(),
                                 [now](const Waiter& w) { return w.deadline > now; });
      for (auto it = keep; it != ws.end(); ++it) {
        std::string msg =
            MissingRanksMessage(key.first, key.second, group, it->timeout);
        expired.emplace_back(std::move(*it), std::move(msg));
      }
      ws.erase(keep, ws.end());
    }
  }
  for (auto& [w, msg] : expired) w.done(absl::DeadlineExceededError(msg));
}

std::optional<absl::Duration> RendezvousTable::TakeTimeToPublish(int64_t job_id,
                                                                GroupRef ref,
                                                                absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = groups_.find(Key{job_id, ref});
  if (it == groups_.end() || !it->second.opened_at.has_value()) return std::nullopt;
  const absl::Duration took = now - *it->second.opened_at;
  it->second.opened_at.reset();
  return took;
}

void RendezvousTable::CountFetch(const FetchOptions& options) {
  if (!options.arrivals_only) {
    (options.relayed_ranks.empty() ? fetches_direct_ : fetches_relayed_)
        .fetch_add(1, std::memory_order_relaxed);
  }
  ranks_relayed_.fetch_add(static_cast<int64_t>(options.relayed_ranks.size()),
                           std::memory_order_relaxed);
}

RendezvousTable::FetchCounts RendezvousTable::fetch_counts() const {
  return {fetches_direct_.load(std::memory_order_relaxed),
          fetches_relayed_.load(std::memory_order_relaxed),
          ranks_relayed_.load(std::memory_order_relaxed)};
}

int RendezvousTable::OpenGroups() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(groups_.size());
}

absl::Status RendezvousTable::PublishRequest(
    const v1::PublishUniqueIdRequest& req, absl::Time now,
    const std::function<void(absl::Duration)>& on_published) {
  const GroupRef ref(req.attempt(), req.probe_run());
  TC_RETURN_IF_ERROR(Publish(req.job_id(), ref, req.rank(), req.token(), req.unique_id(),
                             req.id_index(), req.id_count()));
  // Absent: published before (a repeat), or a group restored at start-up.
  if (std::optional<absl::Duration> took = TakeTimeToPublish(req.job_id(), ref, now);
      took.has_value() && on_published) {
    on_published(*took);
  }
  return absl::OkStatus();
}

void RendezvousTable::FetchRequest(const v1::FetchUniqueIdRequest& req, absl::Time now,
                                   FetchIdsDone done) {
  if (req.timeout_ms() < 0) {
    done(absl::InvalidArgumentError("timeout_ms: must not be negative"));
    return;
  }
  const absl::Duration timeout =
      req.timeout_ms() == 0
          ? absl::Seconds(120)
          : std::min(absl::Milliseconds(req.timeout_ms()), absl::Seconds(3600));
  FetchOptions options;
  options.relayed_ranks.assign(req.relayed_ranks().begin(), req.relayed_ranks().end());
  options.id_count = req.id_count();
  options.arrivals_only = req.arrivals_only();
  CountFetch(options);
  FetchIdsAsync(req.job_id(), {req.attempt(), req.probe_run()}, req.rank(), req.token(), now,
                timeout, options, std::move(done));
}

}  // namespace trainctl::coord
