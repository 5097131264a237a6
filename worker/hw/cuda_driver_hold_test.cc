// HoldCudaDriver against stand-in driver libraries (fake_libcuda.cc built
// twice: one whose cuInit succeeds, one that answers CUDA_ERROR_NO_DEVICE),
// so the agent's start-up message is checked without a GPU.
#include "worker/hw/cuda_driver_hold.h"

#include <dlfcn.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::worker {
namespace {

using ::testing::HasSubstr;

TEST(CudaDriverHoldTest, NoDriverLibrary_IsUnavailableNamingTheLibrary) {
  const absl::Status s = HoldCudaDriver("/nonexistent/libcuda.so.1");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent/libcuda.so.1"));
}

TEST(CudaDriverHoldTest, CuInitFails_IsUnavailableWithTheCudaResult) {
  const absl::Status s = HoldCudaDriver(TRAINCTL_FAKE_LIBCUDA_NO_DEVICE);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("CUresult 100"));
}

TEST(CudaDriverHoldTest, CuInitSucceeds_DriverStaysLoadedAndInitialisedOnce) {
  ASSERT_TRUE(HoldCudaDriver(TRAINCTL_FAKE_LIBCUDA_OK).ok());
  // Still loaded: RTLD_NOLOAD finds it without loading it again.
  void* again = dlopen(TRAINCTL_FAKE_LIBCUDA_OK, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(again, nullptr);
  using Calls = int (*)();
  auto calls = reinterpret_cast<Calls>(dlsym(again, "fake_cuinit_calls"));
  ASSERT_NE(calls, nullptr);
  EXPECT_EQ(calls(), 1);
  // A second hold neither loads nor initialises again.
  EXPECT_TRUE(HoldCudaDriver(TRAINCTL_FAKE_LIBCUDA_OK).ok());
  EXPECT_EQ(calls(), 1);
  dlclose(again);
}

}  // namespace
}  // namespace trainctl::worker
