// Tests of the GPU inventories: the fake (always) and NVML (skips itself
// where it cannot run).

#include <dlfcn.h>

#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/hw/fake_gpu_inventory.h"
#include "worker/hw/nvml_gpu_inventory.h"

namespace trainctl::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::trainctl::testing::StatusIs;

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(ParseFakeGpuSpec, CountOnly_UsesDefaultModelAndMemory) {
  absl::StatusOr<FakeGpuSpec> spec = ParseFakeGpuSpec("8");
  TC_ASSERT_OK(spec);
  EXPECT_EQ(spec->count, 8);
  EXPECT_EQ(spec->model, "Fake GPU");
  EXPECT_EQ(spec->memory_bytes, 80 * kGiB);
}

TEST(ParseFakeGpuSpec, CountModelMemory_AreAllTaken) {
  absl::StatusOr<FakeGpuSpec> spec = ParseFakeGpuSpec("4:H100:80GiB");
  TC_ASSERT_OK(spec);
  EXPECT_EQ(spec->count, 4);
  EXPECT_EQ(spec->model, "H100");
  EXPECT_EQ(spec->memory_bytes, 80 * kGiB);

  spec = ParseFakeGpuSpec("2:NVIDIA H200:141G");
  TC_ASSERT_OK(spec);
  EXPECT_EQ(spec->model, "NVIDIA H200");
  EXPECT_EQ(spec->memory_bytes, 141 * kGiB);
}

TEST(ParseFakeGpuSpec, CountAndModel_KeepsDefaultMemory) {
  absl::StatusOr<FakeGpuSpec> spec = ParseFakeGpuSpec("1:A100");
  TC_ASSERT_OK(spec);
  EXPECT_EQ(spec->count, 1);
  EXPECT_EQ(spec->model, "A100");
  EXPECT_EQ(spec->memory_bytes, 80 * kGiB);
}

TEST(ParseFakeGpuSpec, CountAtLimits_IsAccepted) {
  TC_EXPECT_OK(ParseFakeGpuSpec("1"));
  TC_EXPECT_OK(ParseFakeGpuSpec("64"));
}

TEST(ParseFakeGpuSpec, BadText_IsInvalidArgumentWithReason) {
  const struct {
    const char* text;
    const char* reason;
  } kCases[] = {
      {"", "not a number"},
      {"eight", "not a number"},
      {"0", "outside 1..64"},
      {"65", "outside 1..64"},
      {"-2", "outside 1..64"},
      {"4::80GiB", "MODEL is empty"},
      {"4:H100:80Q", "unknown unit"},
      {"4:H100:0", "positive"},
      {"4:H100:80GiB:islands=2:x", "too many"},
      {"4:H100:80GiB:x", "is not islands=K"},
      {"4:H100:80GiB:islands=3", "must be in 1..4 and divide 4"},
      {"4:H100:80GiB:islands=0", "must be in 1..4"},
  };
  for (const auto& c : kCases) {
    EXPECT_THAT(ParseFakeGpuSpec(c.text),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(HasSubstr("--fake-gpus"),
                                          HasSubstr(c.reason))))
        << "input: \"" << c.text << "\"";
  }
}

TEST(FakeGpuInventory, ListGpus_TwoIslands_PeersOnlyWithinIsland) {
  absl::StatusOr<FakeGpuSpec> spec = ParseFakeGpuSpec("8:H100:80GiB:islands=2");
  TC_ASSERT_OK(spec);
  EXPECT_EQ(spec->nvlink_islands, 2);
  FakeGpuInventory inventory(*spec, "node-a");
  absl::StatusOr<std::vector<GpuInfo>> gpus = inventory.ListGpus();
  TC_ASSERT_OK(gpus);
  // GPUs 0-3 and 4-7: GPU 1 is joined to 0, 2, 3; GPU 6 to 4, 5, 7.
  EXPECT_THAT((*gpus)[1].nvlink_peers, ::testing::ElementsAre(0, 2, 3));
  EXPECT_THAT((*gpus)[6].nvlink_peers, ::testing::ElementsAre(4, 5, 7));
}

TEST(FakeGpuInventory, ListGpus_ReportsSpecWithDeterministicUuids) {
  FakeGpuInventory inventory(FakeGpuSpec{3, "H100", 80 * kGiB}, "node-a");
  absl::StatusOr<std::vector<GpuInfo>> gpus = inventory.ListGpus();
  TC_ASSERT_OK(gpus);
  ASSERT_EQ(gpus->size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*gpus)[i].index, i);
    EXPECT_EQ((*gpus)[i].uuid, "GPU-fake-node-a-" + std::to_string(i));
    EXPECT_EQ((*gpus)[i].name, "H100");
    EXPECT_EQ((*gpus)[i].memory_total_bytes, 80 * kGiB);
    EXPECT_FALSE((*gpus)[i].mig_enabled);
  }
  // A second inventory of the same node (an agent restart) gives the same
  // UUIDs; another node gives different ones.
  FakeGpuInventory restarted(FakeGpuSpec{3, "H100", 80 * kGiB}, "node-a");
  EXPECT_EQ((*restarted.ListGpus())[2].uuid, (*gpus)[2].uuid);
  FakeGpuInventory other(FakeGpuSpec{3, "H100", 80 * kGiB}, "node-b");
  EXPECT_NE((*other.ListGpus())[2].uuid, (*gpus)[2].uuid);
}

TEST(FakeGpuInventory, ListGpus_AllGpusFormOneNvlinkIsland) {
  FakeGpuInventory inventory(FakeGpuSpec{4}, "n");
  absl::StatusOr<std::vector<GpuInfo>> gpus = inventory.ListGpus();
  TC_ASSERT_OK(gpus);
  EXPECT_THAT((*gpus)[0].nvlink_peers, ElementsAre(1, 2, 3));
  EXPECT_THAT((*gpus)[2].nvlink_peers, ElementsAre(0, 1, 3));
  EXPECT_THAT((*gpus)[3].nvlink_peers, ElementsAre(0, 1, 2));
}

TEST(FakeGpuInventory, Sample_Unscripted_IsZeroForEveryGpu) {
  FakeGpuInventory inventory(FakeGpuSpec{2}, "n");
  absl::StatusOr<std::vector<GpuSample>> samples = inventory.Sample();
  TC_ASSERT_OK(samples);
  ASSERT_EQ(samples->size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ((*samples)[i].index, i);
    EXPECT_EQ((*samples)[i].memory_used_bytes, 0);
    EXPECT_EQ((*samples)[i].utilization_pct, 0);
    EXPECT_EQ((*samples)[i].temperature_c, 0);
    EXPECT_EQ((*samples)[i].power_w, 0);
  }
}

TEST(FakeGpuInventory, Sample_Scripted_ReturnsScriptedValuesForThatGpuOnly) {
  FakeGpuInventory inventory(FakeGpuSpec{2}, "n");
  GpuSample busy;
  busy.index = 1;
  busy.memory_used_bytes = 10 * kGiB;
  busy.utilization_pct = 97;
  busy.temperature_c = 71;
  busy.power_w = 612.5;
  inventory.SetSample(busy);
  GpuSample out_of_range;
  out_of_range.index = 7;  // Ignored.
  inventory.SetSample(out_of_range);

  absl::StatusOr<std::vector<GpuSample>> samples = inventory.Sample();
  TC_ASSERT_OK(samples);
  ASSERT_EQ(samples->size(), 2u);
  EXPECT_EQ((*samples)[0].utilization_pct, 0);
  EXPECT_EQ((*samples)[1].index, 1);
  EXPECT_EQ((*samples)[1].memory_used_bytes, 10 * kGiB);
  EXPECT_EQ((*samples)[1].utilization_pct, 97);
  EXPECT_EQ((*samples)[1].temperature_c, 71);
  EXPECT_EQ((*samples)[1].power_w, 612.5);
}

TEST(FakeGpuInventory, Failing_BothCallsAreUnavailableUntilCleared) {
  FakeGpuInventory inventory(FakeGpuSpec{2}, "node-a");
  inventory.SetFailing(true);
  EXPECT_THAT(inventory.ListGpus(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("node-a")));
  EXPECT_THAT(inventory.Sample(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("node-a")));
  inventory.SetFailing(false);
  TC_EXPECT_OK(inventory.ListGpus());
  TC_EXPECT_OK(inventory.Sample());
}

bool NvmlLoads() {
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return false;
  dlclose(library);
  return true;
}

TEST(NvmlGpuInventory, Create_WithoutLibrary_IsUnavailableNamingIt) {
  if (NvmlLoads()) GTEST_SKIP() << "libnvidia-ml.so.1 is present on this host";
  EXPECT_THAT(NvmlGpuInventory::Create(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("libnvidia-ml.so.1")));
}

// On a GPU host: the real driver answers with plausible values.
TEST(NvmlGpuInventory, ListGpusAndSample_OnGpuHost_ArePlausible) {
  if (!NvmlLoads()) GTEST_SKIP() << "no libnvidia-ml.so.1 on this host";
  absl::StatusOr<std::unique_ptr<NvmlGpuInventory>> inventory =
      NvmlGpuInventory::Create();
  TC_ASSERT_OK(inventory);
  absl::StatusOr<std::vector<GpuInfo>> gpus = (*inventory)->ListGpus();
  TC_ASSERT_OK(gpus);
  ASSERT_FALSE(gpus->empty());
  std::set<std::string> uuids;
  for (int i = 0; i < static_cast<int>(gpus->size()); ++i) {
    const GpuInfo& gpu = (*gpus)[i];
    EXPECT_EQ(gpu.index, i);
    EXPECT_THAT(gpu.uuid, ::testing::StartsWith("GPU-"));
    uuids.insert(gpu.uuid);
    EXPECT_FALSE(gpu.name.empty());
    EXPECT_GT(gpu.memory_total_bytes, kGiB);
    for (int peer : gpu.nvlink_peers) {
      EXPECT_NE(peer, i);
      EXPECT_LT(peer, static_cast<int>(gpus->size()));
    }
    std::string peers;
    for (int peer : gpu.nvlink_peers) peers += " " + std::to_string(peer);
    std::printf("GPU %d %s %s mem=%lld mig=%d peers:%s\n", i, gpu.uuid.c_str(),
                gpu.name.c_str(), static_cast<long long>(gpu.memory_total_bytes),
                gpu.mig_enabled, peers.c_str());
  }
  EXPECT_EQ(uuids.size(), gpus->size());

  absl::StatusOr<std::vector<GpuSample>> samples = (*inventory)->Sample();
  TC_ASSERT_OK(samples);
  ASSERT_EQ(samples->size(), gpus->size());
  for (int i = 0; i < static_cast<int>(samples->size()); ++i) {
    const GpuSample& s = (*samples)[i];
    EXPECT_EQ(s.index, i);
    EXPECT_GE(s.memory_used_bytes, 0);
    EXPECT_LE(s.memory_used_bytes, (*gpus)[i].memory_total_bytes);
    EXPECT_GE(s.utilization_pct, 0);
    EXPECT_LE(s.utilization_pct, 100);
    EXPECT_GT(s.temperature_c, 0);
    EXPECT_LT(s.temperature_c, 120);
    EXPECT_GE(s.power_w, 0);
    EXPECT_LT(s.power_w, 2000);
    std::printf("GPU %d used=%lld util=%d%% temp=%dC power=%.1fW\n", i,
                static_cast<long long>(s.memory_used_bytes), s.utilization_pct,
                s.temperature_c, s.power_w);
  }
}

}  // namespace
}  // namespace trainctl::worker
