#include "worker/agent_client.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/grpc_target.h"
#include "common/logging.h"
#include "trainctl/v1/service.grpc.pb.h"
#include "worker/outbox_queue.h"

namespace trainctl::worker {
namespace {

// The lease, heartbeat and back-off times: monotonic (clock.h), so a step
// of the host's clock neither fences the node early nor keeps its tasks
// past their lease.
absl::Time Now() {
  static const RealClock* const clock = new RealClock();
  return clock->Now();
}

constexpr absl::Duration kMinBackoff = absl::Milliseconds(200);
constexpr absl::Duration kMaxBackoff = absl::Seconds(5);
constexpr absl::Duration kWatchdogPeriod = absl::Milliseconds(100);

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeAgentTlsCredentials(
    const AgentTlsFiles& files) {
  grpc::SslCredentialsOptions options;
  for (auto [path, flag, dest] :
       {std::tuple{&files.cert, "--tls-cert", &options.pem_cert_chain},
        std::tuple{&files.key, "--tls-key", &options.pem_private_key},
        std::tuple{&files.ca, "--tls-ca", &options.pem_root_certs}}) {
    std::ifstream in(*path);
    if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", *path));
    std::stringstream text;
    text << in.rdbuf();
    if (text.str().find("-----BEGIN ") == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": ", *path, " is not a PEM file"));
    }
    *dest = text.str();
  }
  return grpc::SslCredentials(options);
}

std::shared_ptr<grpc::Channel> CoordinatorChannel(
    const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  args.SetMaxSendMessageSize(16 << 20);
  // Reconnect quickly after a coordinator restart.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // A list of coordinators (leader and standbys) becomes one ordered address
  // list; worker/main.cc has validated it. With TLS, every coordinator's
  // certificate must then name the first listed host (make_certs.sh
  // --server-name), which is the name checked for all of them.
  if (credentials != nullptr && address.find(',') != std::string::npos) {
    args.SetSslTargetNameOverride(trainctl::FirstHost(address));
  }
  return grpc::CreateCustomChannel(
      GrpcTargetFor(address).value_or(address),
      credentials != nullptr ? credentials : grpc::InsecureChannelCredentials(), args);
}

GrpcAgentSession::GrpcAgentSession(Agent* agent, std::string coordinator_address,
                                   std::shared_ptr<grpc::ChannelCredentials> credentials,
                                   absl::Duration report_linger)
    : agent_(agent),
      address_(std::move(coordinator_address)),
      report_linger_(report_linger),
      channel_(CoordinatorChannel(address_, std::move(credentials))) {}

void GrpcAgentSession::Watchdog() {
  while (!shutdown_.WaitForNotificationWithTimeout(kWatchdogPeriod)) {
    const absl::Time expiry = lease_.Expiry();
    if (!lease_.ExpiredAt(Now())) continue;
    const int killed = agent_->Fence(absl::StrCat(
        "no lease renewal from the coordinator at ", address_, " since ",
        absl::FormatTime("%H:%M:%E3S", expiry, absl::UTCTimeZone()),
        " UTC (the coordinator counts this node as lost and its tasks as failed)"));
    TC_LOG_WARN("lease with the coordinator at {} ended: fenced {} tasks; "
                "re-registering when it is reachable",
                address_, killed);
    absl::MutexLock lock(&mu_);
    if (current_ != nullptr) current_->TryCancel();
  }
}

void GrpcAgentSession::Run() {
  std::thread watchdog([this] { Watchdog(); });
  absl::Duration backoff = kMinBackoff;
  while (!shutdown_.HasBeenNotified()) {
    grpc::ClientContext ctx;
    {
      absl::MutexLock lock(&mu_);
      current_ = &ctx;
    }
    const absl::Time start = Now();
    ServeOnce(ctx);
    {
      absl::MutexLock lock(&mu_);
      current_ = nullptr;
    }
    if (Now() - start > absl::Seconds(10)) backoff = kMinBackoff;
    if (shutdown_.WaitForNotificationWithTimeout(backoff)) break;
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  watchdog.join();
}

absl::Status GrpcAgentSession::FatalError() const {
  absl::MutexLock lock(&mu_);
  return fatal_;
}

void GrpcAgentSession::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (!shutdown_.HasBeenNotified()) shutdown_.Notify();
  if (current_ != nullptr) current_->TryCancel();
}

bool GrpcAgentSession::WaitRegistered(absl::Duration timeout) {
  return registered_.WaitForNotificationWithTimeout(timeout);
}

void GrpcAgentSession::ServeOnce(grpc::ClientContext& ctx) {
  if (shutdown_.HasBeenNotified()) return;
  auto stub = v1::AgentService::NewStub(channel_);
  // Wait for the coordinator to come up rather than fail fast while the
  // channel reconnects; Shutdown() cancels the wait.
  ctx.set_wait_for_ready(true);
  std::shared_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::CoordinatorMessage>>
      stream = stub->Connect(&ctx);

  absl::StatusOr<v1::RegisterNode> reg = agent_->Registration();
  if (!reg.ok()) {
    TC_LOG_ERROR("cannot read the GPU inventory: {}", reg.status().ToString());
    ctx.TryCancel();
    stream->Finish().ok();
    return;
  }
  v1::AgentMessage first;
  *first.mutable_register_() = *reg;
  v1::CoordinatorMessage ack;
  const absl::Time register_sent = Now();
  const bool read = stream->Write(first) && stream->Read(&ack);
  if (!read || !ack.has_register_ack()) {
    // When the coordinator ended the stream (refused the registration),
    // Finish returns its status; cancel only a stream it keeps open.
    if (read) ctx.TryCancel();
    grpc::Status s = stream->Finish();
    if (s.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
      TC_LOG_ERROR("the coordinator at {} refused this agent: {}", address_,
                   s.error_message());
      absl::MutexLock lock(&mu_);
      fatal_ = absl::AlreadyExistsError(s.error_message());
      // Under mu_, as in Shutdown(): one Notify() whoever comes first.
      if (!shutdown_.HasBeenNotified()) shutdown_.Notify();
      return;
    }
    if (s.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
        s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
      TC_LOG_ERROR("cannot register with the coordinator at {}: refused: {}",
                   address_, s.error_message());
    } else {
      TC_LOG_WARN("cannot register with the coordinator at {}: {}", address_,
                  s.ok() ? "stream closed" : s.error_message());
    }
    return;
  }
  const absl::Duration interval =
      absl::Milliseconds(std::max<int64_t>(100, ack.register_ack().heartbeat_interval_ms()));
  const bool fences = reg->fences() && ack.register_ack().lease_ms() > 0;
  lease_.Registered(register_sent,
                    fences ? absl::Milliseconds(ack.register_ack().lease_ms())
                           : absl::ZeroDuration());
  TC_LOG_INFO("registered with the coordinator at {} (heartbeat every {}{})", address_,
              absl::FormatDuration(interval),
              fences ? absl::StrCat(", fencing after a lease of ",
                                    absl::FormatDuration(absl::Milliseconds(
                                        ack.register_ack().lease_ms())))
                     : "");

  // One writer thread; the agent and the heartbeat thread only queue (task
  // statuses that pile up meanwhile, or within the linger, go as one batch to
  // a coordinator that takes them).
  OutboxQueue outbox([&stream](const v1::AgentMessage& m) { return stream->Write(m); },
                     ack.register_ack().accepts_task_status_batch(), report_linger_);
  auto write = [&outbox](v1::AgentMessage msg) { outbox.Push(std::move(msg)); };
  agent_->Connected(write, ack.register_ack().cluster_id());
  if (!registered_.HasBeenNotified()) registered_.Notify();

  absl::Notification stream_done;
  std::thread heartbeats([&] {
    while (!stream_done.WaitForNotificationWithTimeout(interval)) {
      absl::StatusOr<v1::Heartbeat> hb = agent_->Heartbeat();
      if (!hb.ok()) {
        TC_LOG_WARN("GPU sample failed: {}", hb.status().ToString());
        continue;
      }
      v1::AgentMessage msg;
      *msg.mutable_heartbeat() = std::move(*hb);
      // Noted before the write, so its grant cannot arrive first.
      if (fences) lease_.HeartbeatSent(Now());
      write(msg);
    }
  });

  v1::CoordinatorMessage msg;
  while (stream->Read(&msg)) {
    if (msg.has_lease_grant()) {
      lease_.Granted(absl::Milliseconds(msg.lease_grant().lease_ms()));
    } else {
      agent_->Handle(msg);
    }
  }

  agent_->Disconnected();
  stream_done.Notify();
  heartbeats.join();
  ctx.TryCancel();
  outbox.Close();
  grpc::Status s = stream->Finish();
  if (!shutdown_.HasBeenNotified()) {
    TC_LOG_WARN("stream to the coordinator ended: {}; reconnecting",
                s.ok() ? "closed" : s.error_message());
  }
}

}  // namespace trainctl::worker
