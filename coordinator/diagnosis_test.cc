#include "coordinator/diagnosis.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kGiB = int64_t{1} << 30;

// `n` samples 2 s apart, as the coordinator records them, of one task on an
// 80 GiB GPU.
std::vector<v1::JobUsageSample> Recorded(int n, double util, int64_t memory,
                                         double cpu_pct) {
  std::vector<v1::JobUsageSample> out;
  for (int i = 0; i < n; ++i) {
    v1::JobUsageSample& s = out.emplace_back();
    s.set_time_ms(1'000'000 + i * 2000);
    s.set_gpu_util_pct(util);
    s.set_device_util_pct(util);
    s.set_gpu_memory_used_bytes(memory);
    s.set_gpu_memory_total_bytes(80 * kGiB);
    s.set_cpu_pct(cpu_pct);
    s.set_cpu_cores(8);
    s.set_tasks_on_gpus(1);
    s.set_tasks(1);
  }
  return out;
}

std::vector<std::string> Codes(const std::vector<v1::UsageFinding>& fs) {
  std::vector<std::string> out;
  for (const auto& f : fs) out.push_back(f.code());
  return out;
}

TEST(DiagnosisTest, Diagnose_BusyGpuWellFed_SaysNothing) {
  // 2 minutes at 95 % util, 60 GiB, one core busy feeding it.
  EXPECT_THAT(Diagnose(Recorded(61, 95, 60 * kGiB, 100), false), IsEmpty());
}

TEST(DiagnosisTest, Diagnose_ShorterThanAMinute_SaysNothing) {
  // 40 s of an idle GPU: still warming up, nothing to say yet.
  EXPECT_THAT(Diagnose(Recorded(21, 0, kGiB, 5), false), IsEmpty());
}

TEST(DiagnosisTest, Diagnose_LowUtilBusyCpu_IsInputBound) {
  // GPU 30 % busy, the task's CPU at 180 % of a core: the loader starves it.
  auto f = Diagnose(Recorded(61, 30, 50 * kGiB, 180), false);
  EXPECT_THAT(Codes(f), ElementsAre("input_bound", "pack_candidate"));
  EXPECT_THAT(f[0].message(), HasSubstr("num_workers"));
  EXPECT_THAT(f[0].message(), HasSubstr("pin_memory"));
  EXPECT_THAT(f[0].message(), HasSubstr("30%"));
}

TEST(DiagnosisTest, Diagnose_LowUtilIdleCpu_IsNotInputBound) {
  // 30 % GPU but the CPU is at 20 %: waiting on something else (I/O, sync).
  EXPECT_THAT(Codes(Diagnose(Recorded(61, 30, 50 * kGiB, 20), false)),
              ElementsAre("pack_candidate"));
}

TEST(DiagnosisTest, Diagnose_SmallFootprint_SaysLargerBatchOrPack) {
  // 85 % busy (not a packing candidate) but 6 of 80 GiB (7.5 %) used.
  auto f = Diagnose(Recorded(61, 85, 6 * kGiB, 100), false);
  EXPECT_THAT(Codes(f), ElementsAre("low_memory"));
  EXPECT_THAT(f[0].message(), HasSubstr("6.0 of 80.0 GiB"));
  EXPECT_THAT(f[0].message(), HasSubstr("larger batch"));
}

TEST(DiagnosisTest, Diagnose_SustainedBelow70_IsPackCandidate) {
  auto samples = Recorded(61, 55, 40 * kGiB, 50);
  auto f = Diagnose(samples, false);
  EXPECT_THAT(Codes(f), ElementsAre("pack_candidate"));
  EXPECT_THAT(f[0].message(), HasSubstr("--auto-pack"));
  // Already auto-packed: the advice says the packer is on it.
  EXPECT_THAT(Diagnose(samples, true)[0].message(), HasSubstr("the packer"));
}

TEST(DiagnosisTest, Diagnose_BriefDipsBelow70_IsNotPackCandidate) {
  // 2 min at 90 % with every fifth sample at 40 %: 80 % of samples above 70 %,
  // not "sustained" below.
  auto samples = Recorded(61, 90, 40 * kGiB, 50);
  for (size_t i = 0; i < samples.size(); i += 5) samples[i].set_gpu_util_pct(40);
  EXPECT_THAT(Diagnose(samples, false), IsEmpty());
}

TEST(DiagnosisTest, Diagnose_IdleGpu_SaysIdleOnly) {
  EXPECT_THAT(Codes(Diagnose(Recorded(61, 0, kGiB, 3), false)), ElementsAre("idle"));
}

TEST(DiagnosisTest, Diagnose_OnlyTheLastFiveMinutesCount) {
  // 10 minutes idle, then 5 minutes at 95 % with 60 GiB: the past is forgiven.
  auto samples = Recorded(301, 0, kGiB, 3);
  auto busy = Recorded(151, 95, 60 * kGiB, 100);
  for (auto& s : busy) {
    s.set_time_ms(s.time_ms() + 601'000);
    samples.push_back(s);
  }
  EXPECT_THAT(Diagnose(samples, false), IsEmpty());
}

TEST(DiagnosisTest, Summarize_GivesMinMeanMax) {
  auto samples = Recorded(3, 0, 0, 0);
  samples[0].set_gpu_util_pct(10);
  samples[1].set_gpu_util_pct(20);
  samples[2].set_gpu_util_pct(60);
  samples[0].set_gpu_memory_used_bytes(2 * kGiB);
  samples[1].set_gpu_memory_used_bytes(4 * kGiB);
  samples[2].set_gpu_memory_used_bytes(6 * kGiB);
  UsageSummary s = Summarize(samples);
  EXPECT_EQ(s.samples, 3);
  EXPECT_EQ(s.span_ms, 4000);
  EXPECT_DOUBLE_EQ(s.util_min, 10);
  EXPECT_DOUBLE_EQ(s.util_mean, 30);
  EXPECT_DOUBLE_EQ(s.util_max, 60);
  EXPECT_EQ(s.memory_mean, 4 * kGiB);
  EXPECT_EQ(s.memory_max, 6 * kGiB);
  EXPECT_EQ(s.memory_total, 80 * kGiB);
}

}  // namespace
}  // namespace trainctl::coord
