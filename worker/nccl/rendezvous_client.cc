#include "worker/nccl/rendezvous_client.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <utility>

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/nccl_roots.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "trainctl/v1/service.grpc.pb.h"

namespace trainctl::worker {

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

namespace {

// "rank 3 of job 42 attempt 0", for messages.
std::string Who(const RankEnv& env) {
  return absl::StrFormat("rank %d of job %d attempt %d", env.rank, env.job_id,
                         env.attempt);
}

absl::Status WithContext(const absl::Status& status, absl::string_view what) {
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

// Capped exponential backoff with +-20% jitter.
class Backoff {
 public:
  Backoff(const GrpcRendezvousOptions& options, uint64_t seed)
      : next_(options.initial_backoff), max_(options.max_backoff), rng_(seed) {}

  absl::Duration Next() {
    std::uniform_real_distribution<double> jitter(0.8, 1.2);
    absl::Duration wait = next_ * jitter(rng_);
    next_ = std::min(next_ * 2, max_);
    return wait;
  }

 private:
  absl::Duration next_;
  absl::Duration max_;
  std::mt19937_64 rng_;
};

}  // namespace

class GrpcRendezvousClient::Impl {
 public:
  Impl(std::string address, GrpcRendezvousOptions options,
       std::shared_ptr<grpc::Channel> channel)
      : address_(std::move(address)),
        options_(options),
        stub_(v1::Rendezvous::NewStub(std::move(channel))) {}

  // Runs `call(context)` until it returns anything but UNAVAILABLE or
  // `deadline` passes. `call` gets a fresh context each time and sets its own
  // gRPC deadline. `seed` spreads the jitter of different ranks.
  absl::Status RetryUnavailable(
      absl::Time deadline, uint64_t seed,
      absl::FunctionRef<grpc::Status(grpc::ClientContext&)> call) {
    Backoff backoff(options_, seed);
    int tries = 0;
    while (true) {
      grpc::ClientContext context;
      absl::Status status = FromGrpcStatus(call(context));
      ++tries;
      if (status.code() != absl::StatusCode::kUnavailable) return status;
      absl::Duration wait = backoff.Next();
      if (absl::Now() + wait >= deadline) {
        return absl::UnavailableError(absl::StrFormat(
            "coordinator at %s unreachable (%d tries; the coordinator or the "
            "network may be down): %s",
            address_, tries, status.message()));
      }
      absl::SleepFor(wait);
    }
  }

  const std::string& address() const { return address_; }
  const GrpcRendezvousOptions& options() const { return options_; }
  v1::Rendezvous::Stub& stub() { return *stub_; }

 private:
  const std::string address_;
  const GrpcRendezvousOptions options_;
  const std::unique_ptr<v1::Rendezvous::Stub> stub_;
};

GrpcRendezvousClient::GrpcRendezvousClient(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

GrpcRendezvousClient::~GrpcRendezvousClient() = default;

absl::StatusOr<std::unique_ptr<GrpcRendezvousClient>>
GrpcRendezvousClient::Create(const std::string& address,
                             GrpcRendezvousOptions options) {
  if (address.empty()) {
    return absl::InvalidArgumentError(
        "coordinator address is empty: expected host:port "
        "(TRAINCTL_COORDINATOR)");
  }
  grpc::ChannelArguments args;
  // Reconnect about as eagerly as we retry, so a coordinator that comes back
  // is found within one backoff step rather than gRPC's default 1-120 s.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.initial_backoff)));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.initial_backoff)));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.max_backoff)));
  std::string ca_file = options.tls_ca_file;
  if (const char* env = std::getenv("TRAINCTL_TLS_CA"); ca_file.empty() && env != nullptr) {
    ca_file = env;
  }
  // A node relay's local socket: plaintext (the token authorizes the call).
  if (absl::StartsWith(address, "unix:")) ca_file.clear();
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::InsecureChannelCredentials();
  if (!ca_file.empty()) {
    std::ifstream in(ca_file);
    if (!in) {
      return absl::NotFoundError(absl::StrCat(
          "cannot read the coordinator's CA certificate ", ca_file,
          " (TRAINCTL_TLS_CA)"));
    }
    std::stringstream pem;
    pem << in.rdbuf();
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = pem.str();
    credentials = grpc::SslCredentials(ssl);
  }
  auto channel = grpc::CreateCustomChannel(address, credentials, args);
  return std::unique_ptr<GrpcRendezvousClient>(new GrpcRendezvousClient(
      std::make_unique<Impl>(address, options, std::move(channel))));
}

absl::Status GrpcRendezvousClient::Publish(const RankEnv& env,
                                           absl::string_view id) {
  v1::PublishUniqueIdRequest request;
  request.set_job_id(env.job_id);
  request.set_attempt(env.attempt);
  request.set_probe_run(env.probe_run);
  request.set_rank(env.rank);
  request.set_token(env.token);
  request.set_unique_id(std::string(id));
  if (env.nccl_unique_ids > 1) {
    const int index = NcclIdIndexOfRank(env.rank, env.world_size, env.nccl_unique_ids);
    if (index < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s is not a root of the %d ncclUniqueIds (TRAINCTL_NCCL_UNIQUE_IDS) of "
          "%d ranks: it has no id to publish",
          Who(env), env.nccl_unique_ids, env.world_size));
    }
    request.set_id_index(index);
    request.set_id_count(env.nccl_unique_ids);
  }
  const absl::Time deadline = absl::Now() + impl_->options().publish_timeout;
  absl::Status status = impl_->RetryUnavailable(
      deadline, static_cast<uint64_t>(env.rank),
      [&](grpc::ClientContext& context) {
        context.set_deadline(absl::ToChronoTime(deadline));
        v1::PublishUniqueIdResponse response;
        return impl_->stub().PublishUniqueId(&context, request, &response);
      });
  if (!status.ok()) {
    return WithContext(status,
                       absl::StrCat(Who(env), ": publishing the NCCL unique id "
                                              "on coordinator ",
                                    impl_->address()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> GrpcRendezvousClient::Fetch(
    const RankEnv& env, absl::Duration timeout) {
  TC_ASSIGN_OR_RETURN(std::vector<std::string> ids, FetchAll(env, timeout));
  if (ids.empty()) {
    return absl::InternalError(absl::StrCat(Who(env), ": the rendezvous returned no id"));
  }
  return std::move(ids.front());
}

absl::StatusOr<std::vector<std::string>> GrpcRendezvousClient::FetchAll(
    const RankEnv& env, absl::Duration timeout) {
  v1::FetchUniqueIdRequest request;
  request.set_job_id(env.job_id);
  request.set_attempt(env.attempt);
  request.set_probe_run(env.probe_run);
  request.set_rank(env.rank);
  request.set_token(env.token);
  if (env.nccl_unique_ids > 1) request.set_id_count(env.nccl_unique_ids);
  const absl::Time deadline = absl::Now() + timeout;
  v1::FetchUniqueIdResponse response;
  absl::Status status = impl_->RetryUnavailable(
      deadline, static_cast<uint64_t>(env.rank),
      [&](grpc::ClientContext& context) {
        // The server long-polls for what is left of our timeout (at least
        // 1 ms: 0 would mean its default of 120 s); our own deadline is a
        // little later so its DEADLINE_EXCEEDED, which names the missing
        // ranks, reaches us.
        const absl::Duration left =
            std::max(deadline - absl::Now(), absl::Milliseconds(1));
        request.set_timeout_ms(
            std::max<int64_t>(1, absl::ToInt64Milliseconds(left)));
        context.set_deadline(absl::ToChronoTime(
            absl::Now() + left + impl_->options().deadline_grace));
        response.Clear();
        return impl_->stub().FetchUniqueId(&context, request, &response);
      });
  if (!status.ok()) {
    return WithContext(
        status,
        absl::StrFormat("%s: fetching the NCCL unique id from coordinator %s "
                        "(waited up to %s)",
                        Who(env), impl_->address(),
                        absl::FormatDuration(timeout)));
  }
  if (response.unique_ids_size() > 0) {
    return std::vector<std::string>(response.unique_ids().begin(),
                                    response.unique_ids().end());
  }
  return std::vector<std::string>{std::move(*response.mutable_unique_id())};
}

std::string RendezvousAddress(const RankEnv& env) {
  struct stat st;
  if (!env.rendezvous_socket.empty() && stat(env.rendezvous_socket.c_str(), &st) == 0 &&
      S_ISSOCK(st.st_mode)) {
    return absl::StrCat("unix:", env.rendezvous_socket);
  }
  return env.coordinator;
}

absl::StatusOr<std::vector<std::string>> ExchangeUniqueIds(
    const RankEnv& env, UniqueIdExchange& exchange,
    absl::FunctionRef<absl::StatusOr<std::string>()> make_id,
    absl::Duration timeout) {
  if (env.nccl_unique_ids <= 1) {
    TC_ASSIGN_OR_RETURN(std::string id, ExchangeUniqueId(env, exchange, make_id, timeout));
    return std::vector<std::string>{std::move(id)};
  }
  if (NcclIdIndexOfRank(env.rank, env.world_size, env.nccl_unique_ids) >= 0) {
    absl::StatusOr<std::string> made = make_id();
    if (!made.ok()) {
      return WithContext(made.status(),
                         absl::StrCat(Who(env), ": making the NCCL unique id"));
    }
    if (made->size() != kNcclUniqueIdBytes) {
      return absl::InternalError(absl::StrFormat(
          "%s: the NCCL unique id made here is %d bytes, expected %d", Who(env),
          made->size(), kNcclUniqueIdBytes));
    }
    TC_RETURN_IF_ERROR(exchange.Publish(env, *made));
  }
  TC_ASSIGN_OR_RETURN(std::vector<std::string> ids, exchange.FetchAll(env, timeout));
  if (static_cast<int>(ids.size()) != env.nccl_unique_ids) {
    return absl::InternalError(absl::StrFormat(
        "%s: the rendezvous returned %d NCCL unique ids, expected %d "
        "(TRAINCTL_NCCL_UNIQUE_IDS; coordinator and worker versions may differ)",
        Who(env), ids.size(), env.nccl_unique_ids));
  }
  for (const std::string& id : ids) {
    if (id.size() != kNcclUniqueIdBytes) {
      return absl::InternalError(absl::StrFormat(
          "%s: the rendezvous returned a %d-byte NCCL unique id, expected %d",
          Who(env), id.size(), kNcclUniqueIdBytes));
    }
  }
  return ids;
}

absl::StatusOr<std::string> ExchangeUniqueId(
    const RankEnv& env, UniqueIdExchange& exchange,
    absl::FunctionRef<absl::StatusOr<std::string>()> make_id,
    absl::Duration timeout) {
  std::string id;
  if (env.rank == 0) {
    absl::StatusOr<std::string> made = make_id();
    if (!made.ok()) {
      return WithContext(made.status(),
                         absl::StrCat(Who(env), ": making the NCCL unique id"));
    }
    id = std::move(made).value();
    if (id.size() != kNcclUniqueIdBytes) {
      return absl::InternalError(absl::StrFormat(
          "%s: the NCCL unique id made here is %d bytes, expected %d",
          Who(env), id.size(), kNcclUniqueIdBytes));
    }
    TC_RETURN_IF_ERROR(exchange.Publish(env, id));
  } else {
    TC_ASSIGN_OR_RETURN(id, exchange.Fetch(env, timeout));
    if (id.size() != kNcclUniqueIdBytes) {
      return absl::InternalError(absl::StrFormat(
          "%s: the coordinator returned a %d-byte NCCL unique id, expected %d "
          "(coordinator and worker versions may differ)",
          Who(env), id.size(), kNcclUniqueIdBytes));
    }
  }
  return id;
}

}  // namespace trainctl::worker
