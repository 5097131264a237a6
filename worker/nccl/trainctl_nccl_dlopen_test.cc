// libtrainctl_nccl.so as a ctypes user sees it: loadable on its own, exports
// exactly the C ABI, and reports launch-environment errors through err_buf.

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/nccl/trainctl_nccl.h"

namespace {

using ::testing::HasSubstr;

TEST(TrainctlNcclSo, Dlopen_ExportsCAbi_ReportsMissingEnv) {
  void* lib = dlopen(TRAINCTL_NCCL_SO, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto* init = reinterpret_cast<decltype(&trainctl_init_nccl_comm)>(
      dlsym(lib, "trainctl_init_nccl_comm"));
  auto* exchange = reinterpret_cast<decltype(&trainctl_exchange_unique_id)>(
      dlsym(lib, "trainctl_exchange_unique_id"));
  ASSERT_NE(init, nullptr);
  ASSERT_NE(exchange, nullptr);
  // The version script hides everything else.
  EXPECT_EQ(dlsym(lib, "_ZN8trainctl6worker14RankEnvFromEnvEN4absl7debian311FunctionRefIFPKcS5_EEE"),
            nullptr);

  unsetenv("TRAINCTL_COORDINATOR");
  char id[TRAINCTL_NCCL_UNIQUE_ID_BYTES] = {};
  char err[256] = {};
  EXPECT_EQ(exchange(id, err, sizeof(err)), 9);  // FAILED_PRECONDITION
  EXPECT_THAT(std::string(err), HasSubstr("TRAINCTL_COORDINATOR is not set"));
  void* comm = nullptr;
  EXPECT_EQ(init(&comm, err, sizeof(err)), 9);
  EXPECT_EQ(comm, nullptr);

  // Metrics: exported, and outside a task they say why.
  auto* report = reinterpret_cast<decltype(&trainctl_report_metric)>(
      dlsym(lib, "trainctl_report_metric"));
  auto* last_error = reinterpret_cast<decltype(&trainctl_metrics_last_error)>(
      dlsym(lib, "trainctl_metrics_last_error"));
  ASSERT_NE(report, nullptr);
  ASSERT_NE(last_error, nullptr);
  ASSERT_NE(dlsym(lib, "trainctl_report_metrics"), nullptr);
  ASSERT_NE(dlsym(lib, "trainctl_flush_metrics"), nullptr);
  EXPECT_EQ(report("loss", 0.5, 1), 9);  // FAILED_PRECONDITION
  EXPECT_GT(last_error(err, sizeof(err)), 0u);
  EXPECT_THAT(std::string(err), HasSubstr("TRAINCTL_COORDINATOR is not set"));
  dlclose(lib);
}

}  // namespace
