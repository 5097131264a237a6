// A task program for the in-process cluster test: does the NCCL bootstrap
// exchange through the rendezvous (the node's relay when the agent passes
// TRAINCTL_RENDEZVOUS_SOCKET, else the coordinator; rank 0 publishes 128 random
// bytes in place of ncclGetUniqueId; the others fetch), then prints its launch
// environment and the id it holds, one line, for the test to compare.

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/random/random.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "worker/nccl/rank_env.h"
#include "worker/nccl/rendezvous_client.h"

int main() {
  auto env = trainctl::worker::RankEnvFromEnv();
  if (!env.ok()) {
    std::fprintf(stderr, "%s\n", env.status().ToString().c_str());
    return 2;
  }
  // Through the node's relay when the agent passed one, as the real
  // bootstrap goes; RENDEZVOUS_PROBE_DIRECT=1 asks the coordinator directly.
  const char* direct = std::getenv("RENDEZVOUS_PROBE_DIRECT");
  const std::string address = direct != nullptr && std::string(direct) == "1"
                                  ? env->coordinator
                                  : trainctl::worker::RendezvousAddress(*env);
  auto client = trainctl::worker::GrpcRendezvousClient::Create(address);
  if (!client.ok()) return 3;
  absl::BitGen gen;
  auto id = trainctl::worker::ExchangeUniqueId(
      *env, **client,
      [&]() -> absl::StatusOr<std::string> {
        std::string bytes(128, '\0');
        for (char& c : bytes) c = static_cast<char>(absl::Uniform<unsigned char>(gen));
        return bytes;
      },
      absl::Seconds(30));
  if (!id.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", env->rank, id.status().ToString().c_str());
    return 4;
  }
  auto get = [](const char* k) {
    const char* v = std::getenv(k);
    return std::string(v ? v : "");
  };
  std::printf("RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s NODE_RANK=%s MASTER=%s:%s CVD=%s ID=%s VIA=%s\n",
              get("RANK").c_str(), get("WORLD_SIZE").c_str(), get("LOCAL_RANK").c_str(),
              get("NODE_RANK").c_str(), get("MASTER_ADDR").c_str(),
              get("MASTER_PORT").c_str(), get("CUDA_VISIBLE_DEVICES").c_str(),
              absl::BytesToHexString(*id).c_str(), address.c_str());
  return 0;
}
