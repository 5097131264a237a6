#include "coordinator/rendezvous.h"

#include <algorithm>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/secrets.h"

namespace trainctl::coord {

namespace {

int DefaultFanoutThreads() {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores, 1, RendezvousTable::kDefaultFanoutThreads);
}

}  // namespace

RendezvousTable::RendezvousTable(int fanout_threads)
    : fanout_threads_(fanout_threads > 0 ? fanout_threads : DefaultFanoutThreads()) {}

void RendezvousTable::AnswerAll(std::vector<Waiter>& ready,
                                const std::string& unique_id) const {
  const int n = static_cast<int>(ready.size());
  const int threads = std::clamp(n / kWaitersPerFanoutThread, 1, fanout_threads_);
  // Slice t is [n * t / threads, n * (t + 1) / threads); the calling thread
  // takes slice 0.
  auto answer = [&ready, &unique_id, n, threads](int t) {
    const int end = static_cast<int>(int64_t{n} * (t + 1) / threads);
    for (int i = static_cast<int>(int64_t{n} * t / threads); i < end; ++i) {
      ready[i].done(unique_id);
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

void RendezvousTable::Open(int64_t job_id, int attempt, std::string token,
                           std::vector<std::string> rank_hosts) {
  std::vector<Waiter> aborted;
  {
    absl::MutexLock lock(&mu_);
    Group& g = groups_[{job_id, attempt}];
    aborted = std::move(g.waiters);
    g = Group{};
    g.token = std::move(token);
    g.rank_hosts = std::move(rank_hosts);
  }
  for (Waiter& w : aborted) {
    w.done(absl::AbortedError("the rendezvous was reopened"));
  }
}

void RendezvousTable::Close(int64_t job_id, int attempt, absl::string_view why) {
  std::vector<Waiter> aborted;
  {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find(Key{job_id, attempt});
    if (it == groups_.end()) return;
    aborted = std::move(it->second.waiters);
    groups_.erase(it);
  }
  for (Waiter& w : aborted) {
    w.done(absl::AbortedError(absl::StrCat("job ", job_id, " attempt ", attempt,
                                           " ended before its ncclUniqueId was "
                                           "published: ",
                                           why)));
  }
}

absl::StatusOr<RendezvousTable::Group*> RendezvousTable::FindLocked(
    int64_t job_id, int attempt, int rank, absl::string_view token) {
  auto it = groups_.find(Key{job_id, attempt});
  if (it == groups_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "job ", job_id, " attempt ", attempt,
        " has no rendezvous: it is not running (finished, cancelled, or a newer "
        "attempt replaced it)"));
  }
  Group& g = it->second;
  if (!SameSecret(token, g.token)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "wrong TRAINCTL_TOKEN for job ", job_id, " attempt ", attempt));
  }
  if (rank < 0 || rank >= static_cast<int>(g.rank_hosts.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank: must be in [0, ", g.rank_hosts.size(), "), got ", rank));
  }
  return &g;
}

absl::Status RendezvousTable::Publish(int64_t job_id, int attempt, int rank,
                                      absl::string_view token,
                                      std::string unique_id) {
  if (unique_id.size() != kNcclUniqueIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("unique_id: must be ", kNcclUniqueIdBytes, " bytes, got ",
                     unique_id.size()));
  }
  std::vector<Waiter> ready;
  {
    absl::MutexLock lock(&mu_);
    auto g = FindLocked(job_id, attempt, rank, token);
    if (!g.ok()) return g.status();
    Group& group = **g;
    if (rank != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank: only rank 0 publishes the ncclUniqueId, got rank ", rank));
    }
    if (group.published) {
      if (group.unique_id == unique_id) return absl::OkStatus();
      return absl::AlreadyExistsError(absl::StrCat(
          "job ", job_id, " attempt ", attempt,
          " already has a different ncclUniqueId (an id serves one communicator)"));
    }
    group.published = true;
    group.unique_id = std::move(unique_id);
    group.arrived.insert(0);
    ready = std::move(group.waiters);
    group.waiters.clear();
    unique_id = group.unique_id;
  }
  AnswerAll(ready, unique_id);
  return absl::OkStatus();
}

void RendezvousTable::FetchAsync(int64_t job_id, int attempt, int rank,
                                 absl::string_view token, absl::Time now,
                                 absl::Duration timeout, FetchDone done) {
  absl::StatusOr<std::string> result;
  {
    absl::MutexLock lock(&mu_);
    auto g = FindLocked(job_id, attempt, rank, token);
    if (!g.ok()) {
      result = g.status();
    } else {
      Group& group = **g;
      group.arrived.insert(rank);
      if (!group.published) {
        group.waiters.push_back(Waiter{rank, timeout, now + timeout, std::move(done)});
        return;
      }
      result = group.unique_id;
    }
  }
  done(std::move(result));
}

std::string RendezvousTable::MissingRanksMessage(int64_t job_id, int attempt,
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
  std::string msg = absl::StrCat(
      "job ", job_id, " attempt ", attempt, ": rank 0 (",
      group.rank_hosts.empty() ? "?" : group.rank_hosts[0],
      ") did not publish its ncclUniqueId within ", absl::FormatDuration(waited));
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

int RendezvousTable::OpenGroups() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(groups_.size());
}

}  // namespace trainctl::coord
