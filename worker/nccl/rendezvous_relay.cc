#include "worker/nccl/rendezvous_relay.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/nccl_roots.h"
#include "common/secrets.h"

namespace trainctl::worker {

std::optional<RelayRank> RelayRankFromEnv(
    const google::protobuf::Map<std::string, std::string>& env) {
  RelayRank r;
  auto token = env.find("TRAINCTL_TOKEN");
  auto job = env.find("TRAINCTL_JOB_ID");
  auto attempt = env.find("TRAINCTL_ATTEMPT");
  auto rank = env.find("RANK");
  if (token == env.end() || job == env.end() || attempt == env.end() || rank == env.end() ||
      !absl::SimpleAtoi(job->second, &r.job_id) ||
      !absl::SimpleAtoi(attempt->second, &r.attempt) ||
      !absl::SimpleAtoi(rank->second, &r.rank)) {
    return std::nullopt;
  }
  // A probe's group is its own (TRAINCTL_PREFLIGHT, its run).
  if (auto run = env.find("TRAINCTL_PREFLIGHT");
      run != env.end() && !absl::SimpleAtoi(run->second, &r.probe_run)) {
    return std::nullopt;
  }
  r.token = token->second;
  return r;
}

RendezvousRelay::RendezvousRelay(RendezvousUpstream* upstream,
                                 RendezvousRelayOptions options)
    : upstream_(upstream), options_(options) {}

RendezvousRelay::~RendezvousRelay() {
  AbortAll("the node's rendezvous relay (trainctl-agent) is shutting down");
}

void RendezvousRelay::AbortAll(absl::string_view why) {
  std::vector<UniqueIdsDone> aborted;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, group] : groups_) {
      for (UniqueIdsDone& w : group.waiters) aborted.push_back(std::move(w));
    }
    groups_.clear();
  }
  for (UniqueIdsDone& w : aborted) w(absl::AbortedError(why));
}

void RendezvousRelay::AddRank(int64_t job_id, int attempt, const std::string& token,
                              int rank, int probe_run) {
  absl::MutexLock lock(&mu_);
  Registration& reg = registered_[{job_id, attempt, probe_run}];
  reg.token = token;
  reg.ranks.insert(rank);
}

void RendezvousRelay::RemoveRank(int64_t job_id, int attempt, int rank, int probe_run) {
  std::vector<UniqueIdsDone> aborted;
  {
    absl::MutexLock lock(&mu_);
    auto reg = registered_.find({job_id, attempt, probe_run});
    if (reg == registered_.end()) return;
    reg->second.ranks.erase(rank);
    if (!reg->second.ranks.empty()) return;
    registered_.erase(reg);
    // Every group of the attempt (or probe run), whatever its token.
    auto it = groups_.lower_bound(GroupKey{job_id, attempt, probe_run, ""});
    while (it != groups_.end() && std::get<0>(it->first) == job_id &&
           std::get<1>(it->first) == attempt && std::get<2>(it->first) == probe_run) {
      for (UniqueIdsDone& w : it->second.waiters) aborted.push_back(std::move(w));
      it = groups_.erase(it);
    }
  }
  for (UniqueIdsDone& w : aborted) {
    w(absl::AbortedError(absl::StrCat("job ", job_id, " attempt ", attempt,
                                      " has no rank left on this node")));
  }
}

absl::Status RendezvousRelay::CheckTokenLocked(int64_t job_id, int attempt, int probe_run,
                                               const std::string& token) {
  auto reg = registered_.find({job_id, attempt, probe_run});
  if (reg == registered_.end() || SameSecret(token, reg->second.token)) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "wrong TRAINCTL_TOKEN for job ", job_id, " attempt ", attempt,
      " (refused by this node's rendezvous relay: not the token its ranks "
      "were started with)"));
}

std::vector<UniqueIdsDone> RendezvousRelay::TakeIfHeldLocked(Group& group) {
  if (group.id_count == 0 ||
      std::any_of(group.ids.begin(), group.ids.end(),
                  [](const std::string& id) { return id.empty(); })) {
    return {};
  }
  group.held = true;
  return std::exchange(group.waiters, {});
}

void RendezvousRelay::FetchAsync(const v1::FetchUniqueIdRequest& request,
                                 absl::Time now, UniqueIdsDone done) {
  if (request.timeout_ms() < 0) {
    done(absl::InvalidArgumentError("timeout_ms: must not be negative"));
    return;
  }
  if (request.id_count() < 0 || request.id_count() > kMaxNcclUniqueIds) {
    done(absl::InvalidArgumentError(absl::StrCat(
        "id_count: must be in [0, ", kMaxNcclUniqueIds, "], got ", request.id_count())));
    return;
  }
  const GroupKey key{request.job_id(), request.attempt(), request.probe_run(),
                     request.token()};
  std::optional<v1::FetchUniqueIdRequest> upstream;
  absl::StatusOr<std::vector<std::string>> now_result;
  bool answer_now = false;
  {
    absl::MutexLock lock(&mu_);
    ++stats_.local_fetches;
    if (absl::Status s = CheckTokenLocked(request.job_id(), request.attempt(),
                                          request.probe_run(), request.token());
        !s.ok()) {
      ++stats_.refused;
      now_result = s;
      answer_now = true;
    } else {
      Group& g = groups_[key];
      const int k = std::max(1, request.id_count());
      if (g.id_count == 0) {
        g.id_count = k;
        g.ids.assign(k, "");
      }
      if (g.id_count != k) {
        now_result = absl::InvalidArgumentError(absl::StrCat(
            "id_count: ranks of this attempt on this node asked for ", g.id_count,
            " ncclUniqueIds, this one for ", k,
            "; TRAINCTL_NCCL_UNIQUE_IDS must be the same for every rank"));
        answer_now = true;
      } else if (g.held) {
        now_result = g.ids;
        answer_now = true;
      } else {
        g.waiters.push_back(std::move(done));
        if (!g.fetching) {
          g.fetching = true;
          g.fetch_sent = now;
          g.timeout_ms = request.timeout_ms();
          g.reported.insert(g.unreported.begin(), g.unreported.end());
          g.unreported.clear();
          g.reported.insert(request.rank());
          upstream = request;
          upstream->clear_relayed_ranks();
          upstream->set_arrivals_only(false);
          for (int r : g.reported) upstream->add_relayed_ranks(r);
          ++stats_.upstream_fetches;
        } else if (!g.reported.contains(request.rank())) {
          g.unreported.insert(request.rank());
        }
      }
    }
  }
  if (answer_now) {
    done(std::move(now_result));
    return;
  }
  if (upstream.has_value()) {
    upstream_->FetchAsync(*upstream,
                          [this, key](absl::StatusOr<std::vector<std::string>> ids) {
                            OnUpstreamFetch(key, std::move(ids));
                          });
  }
}

void RendezvousRelay::OnUpstreamFetch(const GroupKey& key,
                                      absl::StatusOr<std::vector<std::string>> ids) {
  std::vector<UniqueIdsDone> waiters;
  absl::StatusOr<std::vector<std::string>> result = std::move(ids);
  {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find(key);
    if (it == groups_.end()) return;  // dropped meanwhile; waiters were told
    Group& g = it->second;
    g.fetching = false;
    if (result.ok()) {
      if (static_cast<int>(result->size()) != g.id_count) {
        result = absl::InternalError(absl::StrCat(
            "the coordinator returned ", result->size(), " ncclUniqueIds, expected ",
            g.id_count, " (coordinator and agent versions may differ)"));
      } else {
        g.ids = *result;
      }
    }
    waiters = result.ok() ? TakeIfHeldLocked(g) : std::exchange(g.waiters, {});
    // Ids of an attempt the agent did not start are not kept: nothing would
    // ever drop them.
    const bool registered =
        registered_.count({std::get<0>(key), std::get<1>(key), std::get<2>(key)}) > 0;
    if (!registered && !g.reporting) groups_.erase(it);
  }
  for (UniqueIdsDone& w : waiters) w(result);
}

void RendezvousRelay::PublishAsync(const v1::PublishUniqueIdRequest& request,
                                   absl::AnyInvocable<void(absl::Status)> done) {
  absl::Status allowed;
  {
    absl::MutexLock lock(&mu_);
    ++stats_.local_publishes;
    allowed = CheckTokenLocked(request.job_id(), request.attempt(), request.probe_run(),
                               request.token());
    if (!allowed.ok()) ++stats_.refused;
  }
  if (!allowed.ok()) {
    done(allowed);
    return;
  }
  const GroupKey key{request.job_id(), request.attempt(), request.probe_run(),
                     request.token()};
  // Out of range: the coordinator refuses it, and nothing is held here.
  const int id_count = std::clamp(request.id_count(), 1, kMaxNcclUniqueIds);
  const int index = request.id_index();
  upstream_->PublishAsync(
      request, [this, key, id_count, index, id = request.unique_id(),
                done = std::move(done)](absl::Status status) mutable {
        if (status.ok()) OnPublished(key, id_count, index, std::move(id));
        done(status);
      });
}

void RendezvousRelay::OnPublished(const GroupKey& key, int id_count, int index,
                                  std::string id) {
  std::vector<UniqueIdsDone> waiters;
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    if (registered_.count({std::get<0>(key), std::get<1>(key), std::get<2>(key)}) == 0) return;
    Group& g = groups_[key];
    if (g.id_count == 0) {
      g.id_count = id_count;
      g.ids.assign(id_count, "");
    }
    if (g.id_count != id_count || index < 0 || index >= g.id_count) return;
    g.ids[index] = std::move(id);
    waiters = TakeIfHeldLocked(g);
    ids = g.ids;
  }
  for (UniqueIdsDone& w : waiters) w(ids);
}

void RendezvousRelay::Tick(absl::Time now) {
  std::vector<std::pair<GroupKey, v1::FetchUniqueIdRequest>> reports;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, g] : groups_) {
      if (!g.fetching || g.reporting || g.unreported.empty() ||
          now - g.fetch_sent < options_.arrival_report_delay) {
        continue;
      }
      v1::FetchUniqueIdRequest report;
      report.set_job_id(std::get<0>(key));
      report.set_attempt(std::get<1>(key));
      report.set_probe_run(std::get<2>(key));
      report.set_token(std::get<3>(key));
      report.set_rank(*g.unreported.begin());
      report.set_id_count(g.id_count);
      report.set_arrivals_only(true);
      for (int r : g.unreported) report.add_relayed_ranks(r);
      g.reported.insert(g.unreported.begin(), g.unreported.end());
      g.unreported.clear();
      g.reporting = true;
      ++stats_.upstream_reports;
      reports.emplace_back(key, std::move(report));
    }
  }
  for (auto& [key, report] : reports) {
    upstream_->FetchAsync(report, [this, key = key](
                                      absl::StatusOr<std::vector<std::string>> ids) {
      std::vector<UniqueIdsDone> waiters;
      std::vector<std::string> held;
      {
        absl::MutexLock lock(&mu_);
        auto it = groups_.find(key);
        if (it == groups_.end()) return;
        Group& g = it->second;
        g.reporting = false;
        if (ids.ok() && static_cast<int>(ids->size()) == g.id_count) {
          g.ids = *ids;
          waiters = TakeIfHeldLocked(g);
          held = g.ids;
        }
        if (!g.fetching &&
            registered_.count({std::get<0>(key), std::get<1>(key), std::get<2>(key)}) == 0) {
          groups_.erase(it);
        }
      }
      for (UniqueIdsDone& w : waiters) w(held);
    });
  }
}

RendezvousRelayStats RendezvousRelay::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

int RendezvousRelay::Groups() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(groups_.size());
}

}  // namespace trainctl::worker
