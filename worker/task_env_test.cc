#include "worker/task_env.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

TEST(PassThroughEnvTest, PassesSiteSettingsAndNeverTheAgentsSecrets) {
  const char* env[] = {"PATH=/usr/bin",
                       "LC_ALL=C.UTF-8",
                       "NCCL_NVLS_ENABLE=0",
                       "CUDA_HOME=/usr/local/cuda",
                       "TRAINCTL_AUTH_TOKEN=admin-secret",
                       "AWS_SECRET_ACCESS_KEY=xyz",
                       "HOME=/root",
                       "HF_HOME=/data/hf",
                       "HF_TOKEN=hf-secret",
                       "NOEQUALS",
                       nullptr};
  EXPECT_THAT(PassThroughEnv(env, {}),
              ElementsAre(Pair("CUDA_HOME", "/usr/local/cuda"), Pair("LC_ALL", "C.UTF-8"),
                          Pair("NCCL_NVLS_ENABLE", "0"), Pair("PATH", "/usr/bin")));
  // --task-env: exact names, and prefixes with a trailing '*'.
  EXPECT_THAT(PassThroughEnv(env, {"HF_HOME"}),
              ::testing::Contains(Pair("HF_HOME", "/data/hf")));
  EXPECT_THAT(PassThroughEnv(env, {"HF_HOME"}),
              ::testing::Not(::testing::Contains(Pair("HF_TOKEN", "hf-secret"))));
  EXPECT_THAT(PassThroughEnv(env, {"HF_*"}),
              ::testing::Contains(Pair("HF_TOKEN", "hf-secret")));
}

}  // namespace
}  // namespace trainctl::worker
