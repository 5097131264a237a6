// InitNcclCommFromEnv and the C ABI against an in-process fake rendezvous.
// Label `gpu`: the communicator tests skip themselves where no GPU is visible;
// the launch-environment error paths need none.

#include "worker/nccl/nccl_bootstrap.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "cuda_runtime_api.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nccl.h"
#include "worker/nccl/rendezvous_client.h"
#include "worker/nccl/testing/fake_rendezvous.h"
#include "worker/nccl/trainctl_nccl.h"

namespace trainctl::worker {
namespace {

using ::testing::HasSubstr;
using ::trainctl::testing::IsOk;
using ::trainctl::testing::StatusIs;

constexpr char kToken[] = "tok-7-0";

int GpuCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

// Sets this process's launch environment for a 1-rank job 7 at `address`.
void SetSingleRankEnv(const std::string& address) {
  setenv("TRAINCTL_COORDINATOR", address.c_str(), 1);
  setenv("TRAINCTL_JOB_ID", "7", 1);
  setenv("TRAINCTL_ATTEMPT", "0", 1);
  setenv("TRAINCTL_TOKEN", kToken, 1);
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("LOCAL_RANK", "0", 1);
  setenv("LOCAL_WORLD_SIZE", "1", 1);
}

TEST(TrainctlNcclCAbi, InitWithoutLaunchEnv_FailedPreconditionMessage) {
  unsetenv("RANK");
  setenv("TRAINCTL_COORDINATOR", "127.0.0.1:1", 1);
  setenv("TRAINCTL_JOB_ID", "7", 1);
  setenv("TRAINCTL_ATTEMPT", "0", 1);
  setenv("TRAINCTL_TOKEN", kToken, 1);
  setenv("WORLD_SIZE", "1", 1);
  void* comm = nullptr;
  char err[256];
  EXPECT_EQ(trainctl_init_nccl_comm(&comm, err, sizeof(err)),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(err), HasSubstr("RANK is not set"));
  EXPECT_EQ(comm, nullptr);
}

TEST(TrainctlNcclCAbi, ErrorMessage_TruncatedToBuffer) {
  unsetenv("TRAINCTL_COORDINATOR");
  char id[TRAINCTL_NCCL_UNIQUE_ID_BYTES] = {};
  char err[8];
  EXPECT_NE(trainctl_exchange_unique_id(id, err, sizeof(err)), 0);
  EXPECT_EQ(std::strlen(err), sizeof(err) - 1);
}

TEST(TrainctlNcclCAbi, ExchangeRank0_PublishesOwnId) {
  testing::FakeRendezvousServer server(kToken);
  ASSERT_TRUE(server.ok());
  SetSingleRankEnv(server.address());
  setenv("WORLD_SIZE", "2", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  char id[TRAINCTL_NCCL_UNIQUE_ID_BYTES];
  for (int i = 0; i < TRAINCTL_NCCL_UNIQUE_ID_BYTES; ++i) id[i] = char(i);
  char err[256] = {};
  ASSERT_EQ(trainctl_exchange_unique_id(id, err, sizeof(err)), 0) << err;

  // Rank 1 (through the C++ API, same fake) gets those bytes.
  auto client = GrpcRendezvousClient::Create(server.address());
  ASSERT_THAT(client, IsOk());
  RankEnv env;
  env.job_id = 7;
  env.token = kToken;
  env.rank = 1;
  env.world_size = 2;
  absl::StatusOr<std::string> got = (*client)->Fetch(env, absl::Seconds(5));
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(*got, std::string(id, sizeof(id)));
}

TEST(InitNcclCommFromEnv, SingleRank_CommunicatorWorks) {
  if (GpuCount() < 1) GTEST_SKIP() << "no GPU visible";
  testing::FakeRendezvousServer server(kToken);
  ASSERT_TRUE(server.ok());
  SetSingleRankEnv(server.address());
  absl::StatusOr<ncclComm_t> comm = InitNcclCommFromEnv(absl::Seconds(30));
  ASSERT_THAT(comm, IsOk());
  int count = 0;
  ASSERT_EQ(ncclCommCount(*comm, &count), ncclSuccess);
  EXPECT_EQ(count, 1);
  ncclCommDestroy(*comm);
}

TEST(InitNcclCommFromEnv, LocalRankBeyondDevices_FailedPreconditionNamesRank) {
  const int gpus = GpuCount();
  if (gpus < 1) GTEST_SKIP() << "no GPU visible";
  testing::FakeRendezvousServer server(kToken);
  ASSERT_TRUE(server.ok());
  SetSingleRankEnv(server.address());
  const std::string n = absl::StrCat(gpus);
  const std::string n1 = absl::StrCat(gpus + 1);
  setenv("RANK", n.c_str(), 1);
  setenv("WORLD_SIZE", n1.c_str(), 1);
  setenv("LOCAL_RANK", n.c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", n1.c_str(), 1);
  EXPECT_THAT(InitNcclCommFromEnv(absl::Seconds(1)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(absl::StrCat("rank ", gpus, " of job 7"))));
}

// Two ranks in two threads of this process, one GPU each, through the real
// exchange and ncclCommInitRank; then an all-reduce of one float.
TEST(ExchangeUniqueId, TwoRanksTwoGpus_AllReduceSums) {
  if (GpuCount() < 2) GTEST_SKIP() << "needs 2 GPUs";
  testing::FakeRendezvousServer server(kToken);
  ASSERT_TRUE(server.ok());
  auto client = GrpcRendezvousClient::Create(server.address());
  ASSERT_THAT(client, IsOk());
  std::vector<float> result(2, 0);
  std::vector<std::string> errors(2);
  auto rank_main = [&](int rank) {
    RankEnv env;
    env.coordinator = server.address();
    env.job_id = 7;
    env.token = kToken;
    env.rank = env.local_rank = rank;
    env.world_size = env.local_world_size = 2;
    if (cudaSetDevice(rank) != cudaSuccess) {
      errors[rank] = "cudaSetDevice";
      return;
    }
    absl::StatusOr<std::string> id =
        ExchangeUniqueId(env, **client, NcclGetUniqueIdBytes, absl::Seconds(30));
    if (!id.ok()) {
      errors[rank] = id.status().ToString();
      return;
    }
    ncclUniqueId nid;
    std::memcpy(nid.internal, id->data(), sizeof(nid.internal));
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, 2, nid, rank) != ncclSuccess) {
      errors[rank] = "ncclCommInitRank";
      return;
    }
    float* buf = nullptr;
    float value = static_cast<float>(rank + 1);
    cudaMalloc(&buf, sizeof(float));
    cudaMemcpy(buf, &value, sizeof(float), cudaMemcpyHostToDevice);
    if (ncclAllReduce(buf, buf, 1, ncclFloat, ncclSum, comm, nullptr) !=
        ncclSuccess) {
      errors[rank] = "ncclAllReduce";
    }
    cudaStreamSynchronize(nullptr);
    cudaMemcpy(&result[rank], buf, sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(buf);
    ncclCommDestroy(comm);
  };
  std::thread r1(rank_main, 1);
  std::thread r0(rank_main, 0);
  r0.join();
  r1.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(result[0], 3.0f);
  EXPECT_EQ(result[1], 3.0f);
}

}  // namespace
}  // namespace trainctl::worker
