#include "coordinator/etcd/etcd_client.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_target.h"

namespace trainctl::coord {

absl::StatusOr<std::unique_ptr<EtcdConnection>> ConnectEtcd(
    absl::string_view endpoints, absl::Duration timeout) {
  absl::StatusOr<std::string> target = GrpcTargetFor(endpoints);
  if (!target.ok()) return target.status();
  grpc::ChannelArguments args;
  // A full state load can be large: page size bounds it, this bounds a page.
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto conn = std::make_unique<EtcdConnection>();
  conn->channel =
      grpc::CreateCustomChannel(*target, grpc::InsecureChannelCredentials(), args);
  if (!conn->channel->WaitForConnected(absl::ToChronoTime(absl::Now() + timeout))) {
    return absl::UnavailableError(absl::StrCat(
        "etcd at ", endpoints, " did not answer within ", absl::FormatDuration(timeout)));
  }
  conn->kv = etcdserverpb::KV::NewStub(conn->channel);
  conn->lease = etcdserverpb::Lease::NewStub(conn->channel);
  conn->election = v3electionpb::Election::NewStub(conn->channel);
  return conn;
}

void SetEtcdDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  ctx->set_wait_for_ready(true);
}

absl::Status EtcdError(const grpc::Status& status, absl::string_view what) {
  const std::string message =
      absl::StrCat(what, ": etcd: ", status.error_message());
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::CANCELLED:
      return absl::UnavailableError(message);
    default:
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()), message);
  }
}

std::string PrefixRangeEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

}  // namespace trainctl::coord
