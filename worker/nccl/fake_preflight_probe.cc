// trainctl-fake-preflight-probe: the pre-flight probe of agents with fake
// GPUs (docs/preflight.md). It does what trainctl-nccl-allreduce --preflight
// does up to the NCCL calls: reads the launch environment, exchanges a
// (random, 128-byte) id through the coordinator's rendezvous under the
// probe's own key and token (rank 0 publishes, the others fetch), then
// prints the result line instead of running an all-reduce:
//
//   trainctl-preflight: {"rank":0,"comm_ready_ms":12.5,"busbw_gbps":100,...}
//
// TRAINCTL_FAKE_PROBE (from the agent's environment) makes it misbehave, for
// tests of the exclusion logic:
//   ok (default)  busbw TRAINCTL_FAKE_PROBE_BUSBW GB/s (default 100)
//   slow          busbw 10 GB/s
//   fail          an error result, exit 1
//   hang          never finishes (until killed)
//   exit          exit 3 without a result line
// To make one node misbehave, start only that node's agent with it set.

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"
#include "trainctl/v1/preflight.pb.h"
#include "worker/nccl/rank_env.h"
#include "worker/nccl/rendezvous_client.h"

namespace {

int Print(const trainctl::v1::PreflightProbeResult& result, int code) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(result, &json, options).ok()) {
    std::cerr << "cannot print the result" << std::endl;
    return 2;
  }
  std::cout << "trainctl-preflight: " << json << std::endl;
  return code;
}

std::string Env(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::string(v);
}

}  // namespace

int main(int argc, char** argv) {
  const absl::Time start = absl::Now();
  CLI::App app{"fake pre-flight probe (agents with --fake-gpus)"};
  bool preflight = false;
  std::string bytes;
  int iters = 0, warmup = 0;
  int64_t timeout_ms = 45000;
  app.add_flag("--preflight", preflight, "pre-flight mode (the only one)");
  app.add_option("--bytes", bytes, "ignored");
  app.add_option("--iters", iters, "ignored");
  app.add_option("--warmup", warmup, "ignored");
  app.add_option("--timeout-ms", timeout_ms, "give up waiting for peers after this");
  CLI11_PARSE(app, argc, argv);

  trainctl::v1::PreflightProbeResult result;
  absl::StatusOr<trainctl::worker::RankEnv> env = trainctl::worker::RankEnvFromEnv();
  if (!env.ok()) {
    result.set_error(std::string(env.status().message()));
    return Print(result, 1);
  }
  result.set_rank(env->rank);

  const std::string mode = Env("TRAINCTL_FAKE_PROBE", "ok");
  std::cerr << "fake pre-flight probe: rank " << env->rank << " of "
            << env->world_size << ", mode " << mode << std::endl;
  if (mode == "hang") {
    for (;;) pause();
  }
  if (mode == "exit") return 3;
  if (mode == "fail") {
    result.set_error("the fake probe was told to fail (TRAINCTL_FAKE_PROBE=fail)");
    return Print(result, 1);
  }

  // The node's relay when the agent passed one, else the coordinator.
  const std::string address = trainctl::worker::RendezvousAddress(*env);
  std::cerr << "fake pre-flight probe: rendezvous via " << address << std::endl;
  auto client = trainctl::worker::GrpcRendezvousClient::Create(address);
  if (!client.ok()) {
    result.set_error(std::string(client.status().message()));
    return Print(result, 1);
  }
  const absl::Duration timeout = absl::Milliseconds(timeout_ms);
  if (env->rank == 0) {
    absl::BitGen gen;
    std::string id(trainctl::worker::kNcclUniqueIdBytes, '\0');
    for (char& c : id) c = static_cast<char>(absl::Uniform<int>(gen, 0, 256));
    if (absl::Status s = (*client)->Publish(*env, id); !s.ok()) {
      result.set_error(absl::StrCat("publish: ", s.message()));
      return Print(result, 1);
    }
  } else {
    absl::StatusOr<std::string> id = (*client)->Fetch(*env, timeout);
    if (!id.ok()) {
      result.set_error(absl::StrCat("fetch: ", id.status().message()));
      result.set_timed_out(absl::IsDeadlineExceeded(id.status()));
      return Print(result, 1);
    }
  }
  result.set_comm_ready_ms(absl::ToDoubleMilliseconds(absl::Now() - start));
  double busbw = 100;
  if (!absl::SimpleAtod(Env("TRAINCTL_FAKE_PROBE_BUSBW", "100"), &busbw)) busbw = 100;
  if (mode == "slow") busbw = 10;
  result.set_busbw_gbps(busbw);
  return Print(result, 0);
}
