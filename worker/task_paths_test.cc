#include "worker/task_paths.h"

#include "gtest/gtest.h"

namespace trainctl::worker {
namespace {

// An image that would not pull: podman's own "Error:" line is what the user
// sees instead of a bare "exited with code 125".
TEST(TaskPathsTest, ContainerRuntimeError_TheRuntimesLastErrorLine) {
  EXPECT_EQ(ContainerRuntimeError(
                "Trying to pull nvcr.io/nvidia/pytorch:99...\n"
                "Error: initializing source docker://nvcr.io/nvidia/pytorch:99: "
                "reading manifest 99 in nvcr.io/nvidia/pytorch: manifest unknown\n"),
            "Error: initializing source docker://nvcr.io/nvidia/pytorch:99: reading "
            "manifest 99 in nvcr.io/nvidia/pytorch: manifest unknown");
  EXPECT_EQ(ContainerRuntimeError("INFO: ...\nFATAL:   could not open image x.sif\n"),
            "FATAL:   could not open image x.sif");
  // The program's own output, however it ends, is not the runtime's.
  EXPECT_EQ(ContainerRuntimeError("epoch 3 loss 0.2\nTraceback ...\nValueError: x\n"), "");
}

TEST(TaskPathsTest, LogPath_AProbeHasItsOwnLogBesideItsAttempts) {
  v1::TaskRef ref;
  ref.set_job_id(7);
  ref.set_attempt(2);
  ref.set_rank(1);
  EXPECT_EQ(TaskLogPath("/l", "c", ref), "/l/cluster-c/jobs-0/job-7.attempt-2.rank-1.log");
  EXPECT_EQ(DefaultTaskWorkdir("/l", "c", ref), "/l/cluster-c/work/job-7/attempt-2");
  ref.set_probe_run(1);
  EXPECT_EQ(TaskLogPath("/l", "c", ref), "/l/cluster-c/jobs-0/job-7.preflight-1.rank-1.log");
  EXPECT_EQ(DefaultTaskWorkdir("/l", "c", ref), "/l/cluster-c/work/job-7/attempt-2.preflight-1");
}

}  // namespace
}  // namespace trainctl::worker
