#include "worker/hw/mps_control.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::trainctl::testing::StatusIs;

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(MpsClientEnv, PackedTrial_GetsPipeAndMemoryLimitOfItsReservation) {
  // A trial reserving 11.25 GiB = 11520 MiB on its GPU.
  EXPECT_THAT(MpsClientEnv("/run/mps/gpu-0/pipe", 11520 * kMiB, 0),
              ElementsAre(Pair("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=11520MB"),
                          Pair("CUDA_MPS_PIPE_DIRECTORY", "/run/mps/gpu-0/pipe")));
}

TEST(MpsClientEnv, ThreadPercentageOnlyBetweenOneAndNinetyNine) {
  EXPECT_EQ(MpsClientEnv("/p", 0, 25).at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");
  EXPECT_FALSE(MpsClientEnv("/p", 0, 100).count("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
  EXPECT_FALSE(MpsClientEnv("/p", 0, 0).count("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
  // No reservation: no memory limit.
  EXPECT_FALSE(MpsClientEnv("/p", 0, 0).count("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
}

class DaemonMpsControlTest : public ::testing::Test {
 protected:
  DaemonMpsControlTest() {
    dir_ = ::testing::TempDir() + "/mps-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    // A stand-in control program: records its environment, arguments and
    // standard input, and exits with $FAKE_MPS_EXIT (0 when unset).
    control_ = dir_ + "/fake-mps-control";
    std::ofstream(control_) << "#!/bin/sh\n"
                            << "{ echo \"args=$*\"; echo \"visible=$CUDA_VISIBLE_DEVICES\";"
                            << " echo \"pipe=$CUDA_MPS_PIPE_DIRECTORY\";"
                            << " echo \"log=$CUDA_MPS_LOG_DIRECTORY\";"
                            << " [ -z \"$*\" ] && cat; } >> " << dir_ << "/calls\n"
                            << "exit ${FAKE_MPS_EXIT:-0}\n";
    std::filesystem::permissions(control_, std::filesystem::perms::owner_all);
  }
  std::string Calls() {
    std::ifstream in(dir_ + "/calls");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::string dir_, control_;
};

TEST_F(DaemonMpsControlTest, StartAndStop_RunTheControlProgramPerGpu) {
  auto mps = DaemonMpsControl::Create(dir_ + "/mps", control_);
  TC_ASSERT_OK(mps);
  EXPECT_EQ((*mps)->PipeDirectory(1), "");  // Not started.
  TC_ASSERT_OK((*mps)->Start(1, "GPU-abc"));
  EXPECT_EQ((*mps)->PipeDirectory(1), dir_ + "/mps/gpu-1/pipe");
  EXPECT_TRUE(std::filesystem::is_directory(dir_ + "/mps/gpu-1/log"));
  TC_ASSERT_OK((*mps)->StopAll());
  EXPECT_EQ((*mps)->PipeDirectory(1), "");
  const std::string calls = Calls();
  // Start: `-d` with the GPU alone visible and its own directories; stop:
  // "quit" on standard input with the same pipe directory.
  EXPECT_THAT(calls, HasSubstr(absl::StrCat("args=-d\nvisible=GPU-abc\npipe=", dir_,
                                            "/mps/gpu-1/pipe\nlog=", dir_,
                                            "/mps/gpu-1/log\n")));
  EXPECT_THAT(calls, HasSubstr(absl::StrCat("args=\nvisible=GPU-abc\npipe=", dir_,
                                            "/mps/gpu-1/pipe\nlog=", dir_,
                                            "/mps/gpu-1/log\nquit\n")));
}

TEST_F(DaemonMpsControlTest, Start_ControlProgramFails_IsFailedPreconditionWithStatus) {
  auto mps = DaemonMpsControl::Create(dir_ + "/mps", control_);
  TC_ASSERT_OK(mps);
  setenv("FAKE_MPS_EXIT", "3", 1);
  EXPECT_THAT((*mps)->Start(0, "GPU-x"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("status 3")));
  unsetenv("FAKE_MPS_EXIT");
  EXPECT_EQ((*mps)->PipeDirectory(0), "");
}

TEST_F(DaemonMpsControlTest, Create_MissingProgramOrLongRoot_Refused) {
  EXPECT_THAT(DaemonMpsControl::Create(dir_ + "/mps", dir_ + "/no-such-program"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not found")));
  EXPECT_THAT(DaemonMpsControl::Create("/" + std::string(120, 'x'), control_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too long")));
  EXPECT_THAT(DaemonMpsControl::Create("", control_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
}

}  // namespace
}  // namespace trainctl::worker
