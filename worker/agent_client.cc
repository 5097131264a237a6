#include "worker/agent_client.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/grpc_target.h"
#include "common/logging.h"
#include "trainctl/v1/service.grpc.pb.h"

namespace trainctl::worker {
namespace {

constexpr absl::Duration kMinBackoff = absl::Milliseconds(200);
constexpr absl::Duration kMaxBackoff = absl::Seconds(5);

}  // namespace

GrpcAgentSession::GrpcAgentSession(Agent* agent, std::string coordinator_address)
    : agent_(agent), address_(std::move(coordinator_address)) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  args.SetMaxSendMessageSize(16 << 20);
  // Reconnect quickly after a coordinator restart.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // A list of coordinators (leader and standbys) becomes one ordered address
  // list; worker/main.cc has validated it.
  channel_ = grpc::CreateCustomChannel(GrpcTargetFor(address_).value_or(address_),
                                       grpc::InsecureChannelCredentials(), args);
}

void GrpcAgentSession::Run() {
  absl::Duration backoff = kMinBackoff;
  while (!shutdown_.HasBeenNotified()) {
    grpc::ClientContext ctx;
    {
      absl::MutexLock lock(&mu_);
      current_ = &ctx;
    }
    const absl::Time start = absl::Now();
    ServeOnce(ctx);
    {
      absl::MutexLock lock(&mu_);
      current_ = nullptr;
    }
    if (absl::Now() - start > absl::Seconds(10)) backoff = kMinBackoff;
    if (shutdown_.WaitForNotificationWithTimeout(backoff)) break;
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

void GrpcAgentSession::Shutdown() {
  shutdown_.Notify();
  absl::MutexLock lock(&mu_);
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
  if (!stream->Write(first) || !stream->Read(&ack) || !ack.has_register_ack()) {
    ctx.TryCancel();
    grpc::Status s = stream->Finish();
    TC_LOG_WARN("cannot register with the coordinator at {}: {}", address_,
                s.ok() ? "stream closed" : s.error_message());
    return;
  }
  const absl::Duration interval =
      absl::Milliseconds(std::max<int64_t>(100, ack.register_ack().heartbeat_interval_ms()));
  TC_LOG_INFO("registered with the coordinator at {} (heartbeat every {})", address_,
              absl::FormatDuration(interval));

  absl::Mutex write_mu;
  auto write = [&](const v1::AgentMessage& msg) {
    absl::MutexLock lock(&write_mu);
    stream->Write(msg);
  };
  agent_->Connected(write);
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
      write(msg);
    }
  });

  v1::CoordinatorMessage msg;
  while (stream->Read(&msg)) agent_->Handle(msg);

  agent_->Disconnected();
  stream_done.Notify();
  heartbeats.join();
  ctx.TryCancel();
  grpc::Status s = stream->Finish();
  if (!shutdown_.HasBeenNotified()) {
    TC_LOG_WARN("stream to the coordinator ended: {}; reconnecting",
                s.ok() ? "closed" : s.error_message());
  }
}

}  // namespace trainctl::worker
