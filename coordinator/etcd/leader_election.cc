#include "coordinator/etcd/leader_election.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace trainctl::coord {

absl::StatusOr<std::unique_ptr<LeaderElection>> LeaderElection::Create(
    EtcdConnection* conn, std::string name, absl::Duration ttl) {
  if (name.empty()) return absl::InvalidArgumentError("election name is empty");
  if (ttl < absl::Seconds(2)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "leader lease must be at least 2s (etcd's minimum lease TTL), got ",
        absl::FormatDuration(ttl)));
  }
  etcdserverpb::LeaseGrantRequest req;
  req.set_ttl(absl::ToInt64Seconds(ttl));
  etcdserverpb::LeaseGrantResponse resp;
  grpc::ClientContext ctx;
  SetEtcdDeadline(&ctx);
  grpc::Status s = conn->lease->LeaseGrant(&ctx, req, &resp);
  if (!s.ok()) return EtcdError(s, "grant leader lease");
  if (!resp.error().empty()) {
    return absl::UnavailableError(absl::StrCat("grant leader lease: ", resp.error()));
  }
  return std::unique_ptr<LeaderElection>(
      new LeaderElection(conn, std::move(name), ttl, resp.id()));
}

LeaderElection::LeaderElection(EtcdConnection* conn, std::string name,
                               absl::Duration ttl, int64_t lease_id)
    : conn_(conn), name_(std::move(name)), ttl_(ttl), lease_id_(lease_id) {
  keepalive_ = std::thread([this] { KeepAliveLoop(); });
}

LeaderElection::~LeaderElection() {
  Cancel();
  stop_.Notify();
  keepalive_.join();
  v3electionpb::LeaderKey key;
  bool leader;
  {
    absl::MutexLock lock(&mu_);
    leader = leader_;
    key = leader_key_;
  }
  if (leader && !lost_.HasBeenNotified()) {
    v3electionpb::ResignRequest req;
    *req.mutable_leader() = key;
    v3electionpb::ResignResponse resp;
    grpc::ClientContext ctx;
    SetEtcdDeadline(&ctx, absl::Seconds(2));
    conn_->election->Resign(&ctx, req, &resp);
  }
  etcdserverpb::LeaseRevokeRequest req;
  req.set_id(lease_id_);
  etcdserverpb::LeaseRevokeResponse resp;
  grpc::ClientContext ctx;
  SetEtcdDeadline(&ctx, absl::Seconds(2));
  conn_->lease->LeaseRevoke(&ctx, req, &resp);
}

bool LeaderElection::RenewOnce() {
  grpc::ClientContext ctx;
  // One short stream per renewal: a hung etcd cannot block us past ttl/3.
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + ttl_ / 3));
  auto stream = conn_->lease->LeaseKeepAlive(&ctx);
  etcdserverpb::LeaseKeepAliveRequest req;
  req.set_id(lease_id_);
  etcdserverpb::LeaseKeepAliveResponse resp;
  bool renewed = false;
  if (stream->Write(req) && stream->Read(&resp)) {
    if (resp.ttl() <= 0) {
      TC_LOG_ERROR("leader lease {:x} expired in etcd", lease_id_);
      lost_.Notify();
    } else {
      renewed = true;
    }
  }
  stream->WritesDone();
  ctx.TryCancel();
  stream->Finish();
  return renewed;
}

void LeaderElection::KeepAliveLoop() {
  absl::Time last_renewal_sent = absl::Now();
  while (!stop_.HasBeenNotified() && !lost_.HasBeenNotified()) {
    const absl::Time sent = absl::Now();
    if (RenewOnce()) {
      last_renewal_sent = sent;
    } else if (!lost_.HasBeenNotified() && absl::Now() - last_renewal_sent >= ttl_) {
      TC_LOG_ERROR("leader lease {:x} not renewed for {}; giving it up", lease_id_,
                   absl::FormatDuration(ttl_));
      lost_.Notify();
    }
    if (lost_.HasBeenNotified()) {
      absl::MutexLock lock(&mu_);
      if (campaign_ctx_ != nullptr) campaign_ctx_->TryCancel();
      break;
    }
    stop_.WaitForNotificationWithTimeout(ttl_ / 3);
  }
}

absl::Status LeaderElection::Campaign(const std::string& value) {
  grpc::ClientContext ctx;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return absl::CancelledError("campaign cancelled");
    campaign_ctx_ = &ctx;
  }
  v3electionpb::CampaignRequest req;
  req.set_name(name_);
  req.set_lease(lease_id_);
  req.set_value(value);
  v3electionpb::CampaignResponse resp;
  grpc::Status s = conn_->election->Campaign(&ctx, req, &resp);
  absl::MutexLock lock(&mu_);
  campaign_ctx_ = nullptr;
  if (lost_.HasBeenNotified()) {
    return absl::FailedPreconditionError("leader lease lost while campaigning");
  }
  if (cancelled_) return absl::CancelledError("campaign cancelled");
  if (!s.ok()) return EtcdError(s, "campaign for leadership");
  leader_ = true;
  leader_key_ = resp.leader();
  return absl::OkStatus();
}

void LeaderElection::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (campaign_ctx_ != nullptr) campaign_ctx_->TryCancel();
}

LeaderFence LeaderElection::fence() const {
  absl::MutexLock lock(&mu_);
  return LeaderFence{leader_key_.key(), leader_key_.rev()};
}

absl::StatusOr<std::string> LeaderElection::CurrentLeader() {
  v3electionpb::LeaderRequest req;
  req.set_name(name_);
  v3electionpb::LeaderResponse resp;
  grpc::ClientContext ctx;
  SetEtcdDeadline(&ctx);
  grpc::Status s = conn_->election->Leader(&ctx, req, &resp);
  if (!s.ok()) {
    if (s.error_message().find("no leader") != std::string::npos) {
      return absl::NotFoundError(absl::StrCat("election ", name_, " has no leader"));
    }
    return EtcdError(s, "read the leader");
  }
  return resp.kv().value();
}

}  // namespace trainctl::coord
