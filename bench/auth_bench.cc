// What security costs a user-API call: GetJob over loopback gRPC against a
// coordinator (MemoryStateStore, one job) in three modes, on a channel kept
// open (the CLI and the gateway keep theirs for a whole command/request):
//   mode:0  plaintext, no tokens (insecure mode)
//   mode:1  TLS (the coordinator's certificate, client certificates
//           requested), no tokens
//   mode:2  TLS and a bearer token checked on every call (tokens file of
//           `users` entries)
// and BM_NewTlsConnection: a new channel per call (TLS handshake included),
// what one `trainctl` invocation pays once. The time is per call (us).
// Certificates come from deploy/make_certs.sh at start-up.
//
// Flags (besides Google Benchmark's): --smoke: tiny sizes for the ctest
// entry.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "common/clock.h"
#include "common/logging.h"
#include "coordinator/auth.h"
#include "coordinator/coordinator.h"
#include "coordinator/grpc_service.h"
#include "coordinator/state_store.h"
#include "grpcpp/grpcpp.h"
#include "trainctl/v1/service.grpc.pb.h"

namespace trainctl::bench {
namespace {

std::string g_certs;
int g_users = 1000;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string TokenOf(int i) { return absl::StrCat("bench-token-", 1000000 + i); }

// A coordinator with one job of user u0, served with or without TLS and
// tokens.
class Server {
 public:
  Server(bool tls, bool tokens) {
    if (tokens) {
      std::string text;
      for (int i = 0; i < g_users; ++i) {
        absl::StrAppend(&text, "tokens { token: \"", TokenOf(i), "\" user: \"u", i,
                        "\" }\n");
      }
      tokens_ = std::move(*coord::TokenAuthenticator::FromText(text));
    }
    core_ = std::move(*coord::Coordinator::Create({}, &store_, &clock_));
    coord::SecurityConfig security;
    security.tokens = tokens_.get();
    security.require_agent_cert = tls;
    services_ = std::make_unique<coord::GrpcCoordinatorServices>(core_.get(), security);
    std::shared_ptr<grpc::ServerCredentials> creds;
    if (tls) {
      creds = *coord::MakeServerTlsCredentials({g_certs + "/coordinator.crt",
                                                g_certs + "/coordinator.key",
                                                g_certs + "/ca.crt"});
    }
    int port = 0;
    server_ = std::move(
        *coord::StartCoordinatorServer(*services_, "127.0.0.1:0", &port, creds));
    address_ = absl::StrCat("127.0.0.1:", port);
    v1::JobSpec spec;
    spec.add_command("true");
    spec.set_user("u0");
    job_id_ = *core_->SubmitJob(spec, "");
  }
  ~Server() { server_->Shutdown(); }

  std::shared_ptr<grpc::Channel> Channel(bool tls) const {
    if (!tls) return grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(g_certs + "/ca.crt");
    // A fresh channel, not one shared from gRPC's subchannel pool.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(address_, grpc::SslCredentials(ssl), args);
  }
  int64_t job_id() const { return job_id_; }

 private:
  FakeClock clock_;
  coord::MemoryStateStore store_;
  std::unique_ptr<coord::TokenAuthenticator> tokens_;
  std::unique_ptr<coord::Coordinator> core_;
  std::unique_ptr<coord::GrpcCoordinatorServices> services_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int64_t job_id_ = 0;
};

bool GetJob(v1::Coordinator::Stub& stub, int64_t id, bool token) {
  grpc::ClientContext ctx;
  if (token) ctx.AddMetadata("authorization", absl::StrCat("Bearer ", TokenOf(0)));
  v1::GetJobRequest req;
  req.set_job_id(id);
  v1::GetJobResponse resp;
  return stub.GetJob(&ctx, req, &resp).ok();
}

void BM_GetJob(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  Server server(/*tls=*/mode >= 1, /*tokens=*/mode == 2);
  auto stub = v1::Coordinator::NewStub(server.Channel(mode >= 1));
  if (!GetJob(*stub, server.job_id(), mode == 2)) state.SkipWithError("GetJob failed");
  for (auto _ : state) {
    if (!GetJob(*stub, server.job_id(), mode == 2)) {
      state.SkipWithError("GetJob failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(mode == 0 ? "plaintext" : mode == 1 ? "tls" : "tls+token");
}
BENCHMARK(BM_GetJob)->ArgName("mode")->DenseRange(0, 2)->UseRealTime()->Unit(
    benchmark::kMicrosecond);

void BM_NewTlsConnection(benchmark::State& state) {
  Server server(/*tls=*/true, /*tokens=*/true);
  for (auto _ : state) {
    auto stub = v1::Coordinator::NewStub(server.Channel(true));
    if (!GetJob(*stub, server.job_id(), true)) {
      state.SkipWithError("GetJob failed");
      break;
    }
  }
  state.SetLabel("new channel + TLS handshake + GetJob");
}
BENCHMARK(BM_NewTlsConnection)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace trainctl::bench

int main(int argc, char** argv) {
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--smoke") smoke = true;
  }
  trainctl::InitLogging("bench", "error");
  trainctl::bench::g_certs =
      (std::filesystem::temp_directory_path() / "trainctl-auth-bench-certs").string();
  std::filesystem::remove_all(trainctl::bench::g_certs);
  const std::string make = absl::StrCat(TRAINCTL_SOURCE_DIR "/deploy/make_certs.sh ",
                                        trainctl::bench::g_certs, " > /dev/null");
  if (std::system(make.c_str()) != 0) {
    std::fprintf(stderr, "deploy/make_certs.sh failed\n");
    return 1;
  }
  if (smoke) trainctl::bench::g_users = 10;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) != "--smoke") args.push_back(argv[i]);
  }
  std::string min_time = "--benchmark_min_time=0.01";
  if (smoke) args.push_back(min_time.data());
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  benchmark::RunSpecifiedBenchmarks();
  std::filesystem::remove_all(trainctl::bench::g_certs);
  return 0;
}
