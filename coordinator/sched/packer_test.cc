#include "coordinator/sched/packer.h"

#include <vector>

#include "gtest/gtest.h"

namespace trainctl::sched {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kSec = 1000;

PackGpu Gpu(std::string node, int index, int64_t total = 80 * kGiB) {
  PackGpu g;
  g.node = std::move(node);
  g.index = index;
  g.memory_total_bytes = total;
  return g;
}

PackedTrial Trial(int64_t job, int64_t start_ms, int64_t peak) {
  return PackedTrial{job, start_ms, peak};
}

TEST(PackerTest, Choose_EmptyGpu_TakesFirstTrialWithSmallReservation) {
  Packer packer;
  PackChoice c = packer.Choose({Gpu("a", 0)}, 0, 0);
  ASSERT_TRUE(c.gpu.has_value());
  EXPECT_EQ(*c.gpu, 0u);
  // 5 % of 80 GiB = 4 GiB, bookkeeping only.
  EXPECT_EQ(c.reserved_bytes, 4 * kGiB);
}

TEST(PackerTest, Choose_NewestTrialStillSettling_WaitsThenAdmits) {
  Packer packer;  // settle 20 s, util target 90 %.
  PackGpu g = Gpu("a", 0);
  g.util_pct = 35;
  g.memory_used_bytes = 6 * kGiB;
  g.trials = {Trial(1, 0, 6 * kGiB)};
  // 10 s after the first trial started: not measured yet.
  PackChoice c = packer.Choose({g}, 0, 10 * kSec);
  EXPECT_FALSE(c.gpu.has_value());
  EXPECT_NE(c.reason.find("settle"), std::string::npos) << c.reason;
  // 25 s: settled at 35 % util and 6 GiB: a second trial fits; its estimate
  // is 6 GiB x 1.25 = 7.5 GiB.
  c = packer.Choose({g}, 0, 25 * kSec);
  ASSERT_TRUE(c.gpu.has_value());
  EXPECT_EQ(c.reserved_bytes, 6 * kGiB + 6 * kGiB / 4);
}

TEST(PackerTest, Choose_GpuBusyAboveTarget_AdmitsNothing) {
  Packer packer;
  PackGpu g = Gpu("a", 0);
  g.util_pct = 93;  // >= 90 %.
  g.memory_used_bytes = 10 * kGiB;
  g.trials = {Trial(1, 0, 5 * kGiB), Trial(2, 0, 5 * kGiB)};
  PackChoice c = packer.Choose({g}, 0, 60 * kSec);
  EXPECT_FALSE(c.gpu.has_value());
  EXPECT_NE(c.reason.find("93%"), std::string::npos) << c.reason;
}

TEST(PackerTest, Choose_BusyButThroughputStillGrowing_ProbesOneMore) {
  Packer packer;
  PackGpu g = Gpu("a", 0);
  g.util_pct = 95;  // NVML says busy: a launch-bound small training.
  g.memory_used_bytes = 4 * kGiB;
  g.trials = {Trial(1, 0, 4 * kGiB)};
  EXPECT_FALSE(packer.Choose({g}, 0, 60 * kSec).gpu.has_value());
  // With one trial measured at 1000 samples/s, the packer probes a second.
  packer.ObserveThroughput("a", 0, 1, 1000);
  EXPECT_TRUE(packer.Choose({g}, 0, 60 * kSec).gpu.has_value());
  // Two gave 1700 (+70 %): a third is worth trying.
  g.trials.push_back(Trial(2, 0, 4 * kGiB));
  g.memory_used_bytes = 8 * kGiB;
  packer.ObserveThroughput("a", 0, 2, 1700);
  EXPECT_TRUE(packer.Choose({g}, 0, 60 * kSec).gpu.has_value());
  // Three gave 1720 (+1 %): capped at two, nothing more.
  g.trials.push_back(Trial(3, 0, 4 * kGiB));
  g.memory_used_bytes = 12 * kGiB;
  packer.ObserveThroughput("a", 0, 3, 1720);
  EXPECT_EQ(packer.Cap("a", 0), 2);
  EXPECT_FALSE(packer.Choose({g}, 0, 60 * kSec).gpu.has_value());
}

TEST(PackerTest, Choose_MeasuredMemoryFull_AdmitsNothing) {
  Packer packer;
  // 80 GiB GPU, 8 GiB headroom; 3 trials peaking at 20 GiB use 60 GiB.
  // A fourth needs 25 GiB; 80 - 8 - 60 = 12 GiB free: no.
  PackGpu g = Gpu("a", 0);
  g.util_pct = 50;
  g.memory_used_bytes = 60 * kGiB;
  g.trials = {Trial(1, 0, 20 * kGiB), Trial(2, 0, 20 * kGiB), Trial(3, 0, 20 * kGiB)};
  PackChoice c = packer.Choose({g}, 0, 60 * kSec);
  EXPECT_FALSE(c.gpu.has_value());
  EXPECT_NE(c.reason.find("GiB"), std::string::npos) << c.reason;
}

TEST(PackerTest, Choose_NoPerProcessMemory_SplitsGpuUseEvenly) {
  Packer packer;
  // Two trials, no per-process figures, the GPU uses 40 GiB: 20 GiB each,
  // estimate 25 GiB; 80 - 8 - 40 = 32 GiB free: admitted.
  PackGpu g = Gpu("a", 0);
  g.util_pct = 40;
  g.memory_used_bytes = 40 * kGiB;
  g.trials = {Trial(1, 0, 0), Trial(2, 0, 0)};
  PackChoice c = packer.Choose({g}, 0, 60 * kSec);
  ASSERT_TRUE(c.gpu.has_value());
  EXPECT_EQ(c.reserved_bytes, 25 * kGiB);
}

TEST(PackerTest, Choose_PrefersLoadedGpuOverEmptyOne) {
  Packer packer;
  PackGpu empty = Gpu("a", 0);
  PackGpu loaded = Gpu("a", 1);
  loaded.util_pct = 30;
  loaded.memory_used_bytes = 4 * kGiB;
  loaded.trials = {Trial(1, 0, 4 * kGiB)};
  PackChoice c = packer.Choose({empty, loaded}, 0, 60 * kSec);
  ASSERT_TRUE(c.gpu.has_value());
  EXPECT_EQ(*c.gpu, 1u);
  // While the loaded GPU's trial settles, the empty GPU takes the trial.
  c = packer.Choose({empty, loaded}, 0, 5 * kSec);
  ASSERT_TRUE(c.gpu.has_value());
  EXPECT_EQ(*c.gpu, 0u);
}

TEST(PackerTest, Choose_GpuSharedWithFractionJobs_JudgedByMeasurement) {
  Packer packer;
  // No trial yet, but a --gpu-fraction job reserves 40 GiB and keeps the GPU
  // 95 % busy: not "empty", and too busy.
  PackGpu g = Gpu("a", 0);
  g.other_reserved_bytes = 40 * kGiB;
  g.memory_used_bytes = 30 * kGiB;
  g.util_pct = 95;
  EXPECT_FALSE(packer.Choose({g}, 0, 60 * kSec).gpu.has_value());
  // At 30 % busy it takes a trial with the initial 4 GiB reservation.
  g.util_pct = 30;
  PackChoice c = packer.Choose({g}, 0, 60 * kSec);
  ASSERT_TRUE(c.gpu.has_value());
  EXPECT_EQ(c.reserved_bytes, 4 * kGiB);
}

TEST(PackerTest, Choose_ReservationsWouldPassGpuMemory_AdmitsNothing) {
  Packer packer;
  // 80 GiB GPU: two 24 GiB experiments reserve 48 GiB; one settled trial
  // reserves 20 GiB (raised after an out-of-memory error) and peaked at
  // 10 GiB; the GPU measures 34 GiB used, 60 % busy. By measurement a new
  // trial fits: it needs 10 x 1.25 = 12.5 GiB and 80 - 8 (headroom) -
  // max(34, 48) = 24 GiB is free. By reservation it does not: 48 + 20 +
  // 12.5 = 80.5 GiB > 80 GiB, so it is refused.
  PackGpu g = Gpu("a", 0);
  g.other_reserved_bytes = 48 * kGiB;
  g.memory_used_bytes = 34 * kGiB;
  g.util_pct = 60;
  PackedTrial t = Trial(1, 0, 10 * kGiB);
  t.reserved_bytes = 20 * kGiB;
  g.trials = {t};
  PackChoice c = packer.Choose({g}, 0, 60 * kSec);
  EXPECT_FALSE(c.gpu.has_value());
  EXPECT_NE(c.reason.find("reservations leave 12.0 GiB"), std::string::npos) << c.reason;
  // With the trial reserving 16 GiB instead: 48 + 16 + 12.5 = 76.5 GiB fits.
  g.trials[0].reserved_bytes = 16 * kGiB;
  c = packer.Choose({g}, 0, 60 * kSec);
  ASSERT_TRUE(c.gpu.has_value());
  EXPECT_EQ(c.reserved_bytes, static_cast<int64_t>(12.5 * kGiB));
}

TEST(PackerTest, OnOutOfMemory_CapsGpuAndDoublesRequest) {
  Packer packer;
  // Trial peaked at 12 GiB with 4 trials on the GPU, then ran out of memory.
  const int64_t next = packer.OnOutOfMemory("a", 0, 4, 12 * kGiB, 0, 80 * kGiB);
  EXPECT_EQ(next, 24 * kGiB);
  EXPECT_EQ(packer.Cap("a", 0), 3);
  // The GPU holds 3 settled trials with room by measurement, but the cap says
  // no.
  PackGpu g = Gpu("a", 0);
  g.util_pct = 50;
  g.memory_used_bytes = 12 * kGiB;
  g.trials = {Trial(1, 0, 4 * kGiB), Trial(2, 0, 4 * kGiB), Trial(3, 0, 4 * kGiB)};
  EXPECT_FALSE(packer.Choose({g}, 0, 60 * kSec).gpu.has_value());
  // The requeued trial asks for 24 GiB; another GPU with 2 settled trials
  // using 10 GiB fits it (24 <= 80 - 8 - 10).
  PackGpu other = Gpu("a", 1);
  other.util_pct = 50;
  other.memory_used_bytes = 10 * kGiB;
  other.trials = {Trial(4, 0, 5 * kGiB), Trial(5, 0, 5 * kGiB)};
  PackChoice c = packer.Choose({g, other}, next, 60 * kSec);
  ASSERT_TRUE(c.gpu.has_value());
  EXPECT_EQ(*c.gpu, 1u);
  EXPECT_EQ(c.reserved_bytes, 24 * kGiB);
}

TEST(PackerTest, OnOutOfMemory_NeverAsksForMoreThanTheGpu) {
  Packer packer;
  EXPECT_EQ(packer.OnOutOfMemory("a", 0, 1, 70 * kGiB, 0, 80 * kGiB), 80 * kGiB);
  EXPECT_EQ(packer.Cap("a", 0), 1);
}

TEST(PackerTest, ObserveThroughput_FlatGain_CapsAtPreviousK) {
  Packer packer;  // min gain 5 %.
  // 1 trial: 1000 samples/s; 2: 1800 (+80 %); 3: 2300 (+28 %); 4: 2350 (+2 %).
  EXPECT_FALSE(packer.ObserveThroughput("a", 0, 1, 1000));
  EXPECT_FALSE(packer.ObserveThroughput("a", 0, 2, 1800));
  EXPECT_FALSE(packer.ObserveThroughput("a", 0, 3, 2300));
  EXPECT_EQ(packer.Cap("a", 0), 0);
  EXPECT_TRUE(packer.ObserveThroughput("a", 0, 4, 2350));
  EXPECT_EQ(packer.Cap("a", 0), 3);
  // Other GPUs keep learning on their own.
  EXPECT_EQ(packer.Cap("a", 1), 0);
}

TEST(PackerTest, ObserveThroughput_Drop_CapsAndKeepsLowestCap) {
  Packer packer;
  packer.ObserveThroughput("a", 0, 1, 1000);
  EXPECT_TRUE(packer.ObserveThroughput("a", 0, 2, 900));  // Worse than one.
  EXPECT_EQ(packer.Cap("a", 0), 1);
  packer.OnOutOfMemory("a", 0, 3, kGiB, 0, 80 * kGiB);  // Would be 2: stays 1.
  EXPECT_EQ(packer.Cap("a", 0), 1);
}

}  // namespace
}  // namespace trainctl::sched
