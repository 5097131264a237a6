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

TEST(DiagnosisTest, Diagnose_ShorterThanAMinute_SaysHowLongItNeeds) {
  // 20 samples 2 s apart span 19 x 2 = 38 s of an idle GPU: still warming
  // up; the window must span 60 s before anything is judged.
  auto f = Diagnose(Recorded(20, 0, kGiB, 5), false);
  EXPECT_THAT(Codes(f), ElementsAre("not_enough_samples"));
  EXPECT_EQ(f[0].message(), "not enough samples yet (needs 60 s, has 38 s)");
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

TEST(DiagnosisTest, Diagnose_IdleGpuNoMemory_SaysIdleOnly) {
  // 0 % util and no GPU memory at all for 2 min: the job never touched it.
  auto f = Diagnose(Recorded(61, 0, 0, 100), false);
  EXPECT_THAT(Codes(f), ElementsAre("idle"));
  EXPECT_THAT(f[0].message(), HasSubstr("no GPU memory"));
}

TEST(DiagnosisTest, Diagnose_IdleGpuHoldingMemoryBusyCpu_IsInputBoundNotIdle) {
  // 2 % util, 12 GiB of GPU memory held, the task's CPU at 98 % of a core
  // (>= 90 %): the Python process decodes and augments batches on the CPU
  // while the GPU waits. Input-pipeline bound, with the remedies; not idle.
  auto f = Diagnose(Recorded(61, 2, 12 * kGiB, 98), false);
  EXPECT_THAT(Codes(f), ElementsAre("input_bound"));
  EXPECT_THAT(f[0].message(), HasSubstr("nearly idle (2% mean utilization)"));
  EXPECT_THAT(f[0].message(), HasSubstr("12.0 GiB"));
  EXPECT_THAT(f[0].message(), HasSubstr("98% of a core"));
  EXPECT_THAT(f[0].message(), HasSubstr("num_workers"));
  EXPECT_THAT(f[0].message(), HasSubstr("pin_memory=True"));
  EXPECT_THAT(f[0].message(), HasSubstr("prefetch"));
}

TEST(DiagnosisTest, Diagnose_IdleGpuHoldingMemoryIdleCpu_IsStalled) {
  // 0 % util, 1 GiB held, CPU at 3 %: neither computes; it waits.
  auto f = Diagnose(Recorded(61, 0, kGiB, 3), false);
  EXPECT_THAT(Codes(f), ElementsAre("stalled"));
  EXPECT_THAT(f[0].message(), HasSubstr("1.0 GiB"));
}

// Samples with GPM counters: SM activity `sm` %, DRAM bandwidth `dram` %.
std::vector<v1::JobUsageSample> WithGpm(std::vector<v1::JobUsageSample> samples,
                                        double sm, double dram) {
  for (v1::JobUsageSample& s : samples) {
    s.set_activity_source(v1::GPU_ACTIVITY_SOURCE_GPM);
    s.set_sm_active_pct(sm);
    s.set_dram_bw_pct(dram);
  }
  return samples;
}

TEST(DiagnosisTest, Diagnose_Gpm_BusyByUtilizationButFewSms_IsPackCandidate) {
  // NVML utilization 96 % (a kernel nearly always runs) but only 22 % of the
  // SMs are busy on average: with GPM the packing advice looks at SM
  // activity, 22 % < 70 % in every sample.
  auto f = Diagnose(WithGpm(Recorded(61, 96, 40 * kGiB, 100), 22, 10), false);
  EXPECT_THAT(Codes(f), ElementsAre("pack_candidate"));
  EXPECT_THAT(f[0].message(), HasSubstr("SM activity below 70%"));
  EXPECT_THAT(f[0].message(), HasSubstr("mean 22%"));
}

TEST(DiagnosisTest, Diagnose_Gpm_NearlyNoSmActivity_IsInputBound) {
  // Utilization says 40 % (short kernels now and then), GPM says 3 % of SMs
  // busy (<= 5 %: nearly idle), 10 GiB held, CPU 100 %: input bound.
  auto f = Diagnose(WithGpm(Recorded(61, 40, 10 * kGiB, 100), 3, 1), false);
  EXPECT_THAT(Codes(f), ElementsAre("input_bound"));
  EXPECT_THAT(f[0].message(), HasSubstr("3% mean SM activity"));
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
  EXPECT_FALSE(s.gpm);  // No sample carries GPM counters.
  // With GPM on every sample: SM activity 10, 20, 30 -> mean 20.
  samples = WithGpm(samples, 0, 40);
  samples[0].set_sm_active_pct(10);
  samples[1].set_sm_active_pct(20);
  samples[2].set_sm_active_pct(30);
  s = Summarize(samples);
  EXPECT_TRUE(s.gpm);
  EXPECT_DOUBLE_EQ(s.sm_active_mean, 20);
  EXPECT_DOUBLE_EQ(s.sm_active_max, 30);
  EXPECT_DOUBLE_EQ(s.dram_bw_mean, 40);
}

}  // namespace
}  // namespace trainctl::coord
