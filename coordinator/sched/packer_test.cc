#include "coordinator/sched/packer.h"

#include <vector>

#include "gtest/gtest.h"

namespace trainctl::sched {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kSec = 1000;

PackGpu Gpu(std::string node, int index, int64_t total = 80 * kGiB) {
  PackGpu g;
  g.node = std::move(node);
  g.index = index;
  g.memory_total_bytes = total;
  return g;
}

PackedTrial Trial(int64_t job, int64_t start_ms, int64_t peak) {
  PackedTrial t;
  t.job_id = job;
  t.start_ms = start_ms;
  t.peak_memory_bytes = peak;
  return t;
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

// One GPU of an H100-like host running trials of sweep "s", with GPM.
PackGpu SweepGpu(double sm, double dram, int64_t used) {
  PackGpu g = Gpu("a", 0);
  g.gpm = true;
  g.sm_active_pct = sm;
  g.dram_bw_pct = dram;
  g.util_pct = 97;  // NVML "utilization": a kernel runs almost all the time.
  g.memory_used_bytes = used;
  return g;
}

PackedTrial SweepTrial(int64_t job, int64_t start_ms, int64_t peak, int64_t reserved) {
  PackedTrial t = Trial(job, start_ms, peak);
  t.reserved_bytes = reserved;
  t.group = "s";
  return t;
}

TEST(PackerTest, Predict_FirstTrialFootprint_TakesSmallestResourceLimit) {
  Packer packer;  // headroom 10 %, safety x1.25, SM target 90 %, DRAM 80 %.
  // The first trial peaks at 9 GiB of 80 GiB with 18 % SM activity and 10 %
  // DRAM bandwidth:
  //   memory: floor(0.9 x 80 / (9 x 1.25)) = floor(72 / 11.25) = 6
  //   SM:     floor(90 / 18)               = 5
  //   DRAM:   floor(80 / 10)               = 8
  //   k = min(6, 5, 8) = 5.
  PackGpu g = SweepGpu(18, 10, 9 * kGiB);
  g.trials = {SweepTrial(1, 0, 9 * kGiB, 4 * kGiB)};
  const RampPrediction p = packer.Predict(g);
  EXPECT_EQ(p.by_memory, 6);
  EXPECT_EQ(p.by_sm, 5);
  EXPECT_EQ(p.by_dram, 8);
  EXPECT_EQ(p.k, 5);
  // Two trials measured together at 36 % SM: 18 % each, the same 5.
  g.trials.push_back(SweepTrial(2, 0, 9 * kGiB, 11 * kGiB));
  g.sm_active_pct = 36;
  g.dram_bw_pct = 20;
  EXPECT_EQ(packer.Predict(g).k, 5);
}

TEST(PackerTest, Predict_WithoutGpm_UsesUtilizationShare) {
  Packer packer;
  // No GPM: utilization 30 % for one trial: floor(90 / 30) = 3; memory
  // 4 GiB x 1.25 = 5 GiB a trial: floor(72 / 5) = 14, limited to 8.
  PackGpu g = Gpu("a", 0);
  g.util_pct = 30;
  g.memory_used_bytes = 4 * kGiB;
  g.trials = {Trial(1, 0, 4 * kGiB)};
  const RampPrediction p = packer.Predict(g);
  EXPECT_EQ(p.by_util, 3);
  EXPECT_EQ(p.by_memory, 8);
  EXPECT_EQ(p.k, 3);
}

TEST(PackerTest, Observe_FlatCounters_SettlesBeforeSettleTimeAndRampsAtOnce) {
  Packer packer;  // plateau: 5 samples, memory within 5 %, SM within 5 points.
  PackGpu g = SweepGpu(18, 10, 9 * kGiB);
  g.trials = {SweepTrial(1, 0, 9 * kGiB, 4 * kGiB)};
  // Samples every 2 s from t = 2 s: at t = 8 s only 4 flat samples, not yet.
  for (int64_t t = 2; t <= 8; t += 2) packer.Observe({g}, t * kSec);
  EXPECT_FALSE(packer.Settled("a", 0, 1, 0, 8 * kSec));
  EXPECT_FALSE(packer.Choose({g}, 0, 8 * kSec, "s").gpu.has_value());
  // t = 10 s: 5 flat samples (18 % SM, 9 GiB): settled, 10 s before the
  // 20 s settle time, and the plan is Predict()'s k = 5.
  packer.Observe({g}, 10 * kSec);
  EXPECT_TRUE(packer.Settled("a", 0, 1, 0, 10 * kSec));
  EXPECT_EQ(packer.Planned("a", 0), 5);
  // The next four trials of the sweep are admitted at once, each reserving
  // 9 x 1.25 = 11.25 GiB; none has to settle first. Memory after the fourth:
  // 9 GiB measured + 4 x 11.25 GiB they may grow into = 54 GiB <= 72 GiB.
  for (int64_t job = 2; job <= 5; ++job) {
    PackChoice c = packer.Choose({g}, 0, 10 * kSec, "s");
    ASSERT_TRUE(c.gpu.has_value()) << "trial " << job << ": " << c.reason;
    EXPECT_EQ(c.reserved_bytes, static_cast<int64_t>(11.25 * kGiB));
    g.trials.push_back(SweepTrial(job, 10 * kSec, 0, c.reserved_bytes));
  }
  // Five run: the sixth waits for them to settle.
  PackChoice c = packer.Choose({g}, 0, 10 * kSec, "s");
  EXPECT_FALSE(c.gpu.has_value());
  EXPECT_NE(c.reason.find("settle"), std::string::npos) << c.reason;
}

TEST(PackerTest, Observe_AnotherSweep_GetsNoRampOnThatGpu) {
  Packer packer;
  PackGpu g = SweepGpu(18, 10, 9 * kGiB);
  g.trials = {SweepTrial(1, 0, 9 * kGiB, 4 * kGiB)};
  for (int64_t t = 2; t <= 10; t += 2) packer.Observe({g}, t * kSec);
  ASSERT_EQ(packer.Planned("a", 0), 5);
  // A trial of sweep "t" is admitted by rule 2 (settled, SM 18 % < 90 %)...
  PackChoice c = packer.Choose({g}, 0, 10 * kSec, "t");
  ASSERT_TRUE(c.gpu.has_value());
  PackedTrial other = Trial(2, 10 * kSec, 0);
  other.reserved_bytes = c.reserved_bytes;
  other.group = "t";
  g.trials.push_back(other);
  // ...and then nothing more until it settles: the plan was for "s".
  EXPECT_FALSE(packer.Choose({g}, 0, 10 * kSec, "s").gpu.has_value());
  EXPECT_FALSE(packer.Choose({g}, 0, 10 * kSec, "t").gpu.has_value());
}

TEST(PackerTest, Observe_RisingCounters_NoPlateauUntilSettleTime) {
  Packer packer;
  PackGpu g = SweepGpu(0, 0, kGiB);
  g.trials = {SweepTrial(1, 0, kGiB, 4 * kGiB)};
  // Memory grows 1, 3, 5, ... GiB while the trial warms up: no plateau.
  for (int64_t t = 2; t <= 18; t += 2) {
    g.trials[0].peak_memory_bytes = (t - 1) * kGiB;
    g.sm_active_pct = 2 * t;
    packer.Observe({g}, t * kSec);
  }
  EXPECT_FALSE(packer.Settled("a", 0, 1, 0, 18 * kSec));
  EXPECT_EQ(packer.Planned("a", 0), 0);
  // At 20 s it counts as settled by time (today's rule), and the next
  // sample makes the plan: 17 GiB x 1.25 = 21.25 GiB: floor(72 / 21.25) = 3;
  // SM 36 %: floor(90 / 36) = 2 -> k = 2.
  packer.Observe({g}, 20 * kSec);
  EXPECT_TRUE(packer.Settled("a", 0, 1, 0, 20 * kSec));
  EXPECT_EQ(packer.Planned("a", 0), 2);
}

TEST(PackerTest, Observe_Idle_FlatAtZeroIsNoPlateau) {
  Packer packer;
  // A trial still loading its data: 500 MiB of CUDA context, 0 % SM.
  PackGpu g = SweepGpu(0, 0, kGiB / 2);
  g.trials = {SweepTrial(1, 0, kGiB / 2, 4 * kGiB)};
  for (int64_t t = 2; t <= 12; t += 2) packer.Observe({g}, t * kSec);
  EXPECT_FALSE(packer.Settled("a", 0, 1, 0, 12 * kSec));
}

TEST(PackerTest, Observe_LaunchBoundAtTwoPercentSm_SettlesAndRampsToTheSweep) {
  // Measured on an H100: a small MLP on tabular rows (many tiny kernels)
  // trains at 2 % SM activity and 0 % DRAM bandwidth with 0.9 GiB, 15 s per
  // trial alone. A 5 % floor never called that a plateau, so the sweep ran
  // one trial at a time (104 s for 6) where all 6 at once took 18 s.
  Packer packer;
  PackGpu g = SweepGpu(2, 0, 900 * kMiB);
  g.trials = {SweepTrial(1, 0, 900 * kMiB, 4 * kGiB)};
  for (int64_t t = 2; t <= 10; t += 2) packer.Observe({g}, t * kSec);
  EXPECT_TRUE(packer.Settled("a", 0, 1, 0, 10 * kSec));
  // SM 2 %: floor(90 / 2) = 45; memory 0.9 GiB x 1.25: floor(72 / 1.1) = 65;
  // DRAM 0 %: no limit -> k = 45: the whole sweep at once.
  EXPECT_GE(packer.Planned("a", 0), 6);
  for (int64_t job = 2; job <= 6; ++job) {
    PackChoice c = packer.Choose({g}, 0, 10 * kSec, "s");
    ASSERT_TRUE(c.gpu.has_value()) << "trial " << job << ": " << c.reason;
    g.trials.push_back(SweepTrial(job, 10 * kSec, 0, c.reserved_bytes));
  }
}

TEST(PackerTest, Observe_AfterRamp_CorrectsPlanByOne) {
  Packer packer;
  PackGpu g = SweepGpu(18, 10, 9 * kGiB);
  g.trials = {SweepTrial(1, 0, 9 * kGiB, 4 * kGiB)};
  for (int64_t t = 2; t <= 10; t += 2) packer.Observe({g}, t * kSec);
  ASSERT_EQ(packer.Planned("a", 0), 5);
  for (int64_t job = 2; job <= 5; ++job) {
    g.trials.push_back(SweepTrial(job, 10 * kSec, 9 * kGiB, 11 * kGiB));
  }
  // Five trials settle at 60 % SM (12 % each: floor(90 / 12) = 7) and 45 GiB:
  // the plan moves up by one only, to 6.
  g.sm_active_pct = 60;
  g.dram_bw_pct = 50;
  g.memory_used_bytes = 45 * kGiB;
  for (int64_t t = 12; t <= 20; t += 2) packer.Observe({g}, t * kSec);
  EXPECT_EQ(packer.Planned("a", 0), 6);
  // One more is admitted without waiting, reserving 11.25 GiB:
  // 45 + 11.25 <= 72 GiB.
  EXPECT_TRUE(packer.Choose({g}, 0, 20 * kSec, "s").gpu.has_value());
}

TEST(PackerTest, Observe_AfterRamp_SaturatedSmLowersPlanByOne) {
  Packer packer;
  PackGpu g = SweepGpu(18, 10, 9 * kGiB);
  g.trials = {SweepTrial(1, 0, 9 * kGiB, 4 * kGiB)};
  for (int64_t t = 2; t <= 10; t += 2) packer.Observe({g}, t * kSec);
  for (int64_t job = 2; job <= 5; ++job) {
    g.trials.push_back(SweepTrial(job, 10 * kSec, 9 * kGiB, 11 * kGiB));
  }
  // Five settle at 99 % SM (19.8 % each: floor(90 / 19.8) = 4): the plan
  // drops by one to 4, and rule 2 finds no room either (SM 99 % >= 90 %,
  // utilization 99 % >= 90 %): nothing more while five run.
  g.sm_active_pct = 99;
  g.dram_bw_pct = 50;
  g.util_pct = 99;
  g.memory_used_bytes = 45 * kGiB;
  for (int64_t t = 12; t <= 20; t += 2) packer.Observe({g}, t * kSec);
  EXPECT_EQ(packer.Planned("a", 0), 4);
  PackChoice c = packer.Choose({g}, 0, 20 * kSec, "s");
  EXPECT_FALSE(c.gpu.has_value());
  EXPECT_NE(c.reason.find("SM activity 99%"), std::string::npos) << c.reason;
}

TEST(PackerTest, Choose_GpmRoomOverrulesBusyUtilization) {
  Packer packer;
  // NVML utilization 97 % (a kernel always runs) but GPM shows 40 % of SMs
  // busy and 30 % of DRAM bandwidth: room, a settled GPU takes another.
  PackGpu g = SweepGpu(40, 30, 8 * kGiB);
  g.trials = {Trial(1, 0, 8 * kGiB)};
  EXPECT_TRUE(packer.Choose({g}, 0, 60 * kSec).gpu.has_value());
  // DRAM bandwidth at 85 % >= 80 %: no room.
  g.dram_bw_pct = 85;
  PackChoice c = packer.Choose({g}, 0, 60 * kSec);
  EXPECT_FALSE(c.gpu.has_value());
  EXPECT_NE(c.reason.find("DRAM bandwidth 85%"), std::string::npos) << c.reason;
}

TEST(PackerTest, Choose_GpmSaysFullButUtilizationHasRoom_StillAdmitsAsBefore) {
  Packer packer;
  // SM activity 95 % (>= 90 %), but NVML utilization 60 % (< 90 %): the rule
  // before GPM admits, and GPM never admits fewer than it did.
  PackGpu g = SweepGpu(95, 50, 8 * kGiB);
  g.util_pct = 60;
  g.trials = {Trial(1, 0, 8 * kGiB)};
  EXPECT_TRUE(packer.Choose({g}, 0, 60 * kSec).gpu.has_value());
}

TEST(PackerTest, Choose_RampNeverPassesMemoryHeadroom) {
  PackerConfig config;
  config.memory_safety_factor = 1.0;
  Packer packer(config);
  // First trial: 20 GiB peak, 10 % SM. Memory: floor(72 / 20) = 3; SM:
  // floor(90 / 10) = 9 -> limited to 8; DRAM 5 %: 16 -> 8. k = 3.
  PackGpu g = SweepGpu(10, 5, 20 * kGiB);
  g.trials = {SweepTrial(1, 0, 20 * kGiB, 4 * kGiB)};
  for (int64_t t = 2; t <= 10; t += 2) packer.Observe({g}, t * kSec);
  ASSERT_EQ(packer.Planned("a", 0), 3);
  // Trial 2: 20 measured + 0 growth; 20 GiB fits in 72 - 20 = 52.
  // Trial 3: 20 measured + 20 trial 2 may grow into; fits in 72 - 40 = 32.
  for (int64_t job = 2; job <= 3; ++job) {
    PackChoice c = packer.Choose({g}, 0, 10 * kSec, "s");
    ASSERT_TRUE(c.gpu.has_value()) << c.reason;
    g.trials.push_back(SweepTrial(job, 10 * kSec, 0, c.reserved_bytes));
  }
  // A fourth would need 20 of 72 - 60 = 12 GiB, and the plan is 3 anyway.
  EXPECT_FALSE(packer.Choose({g}, 0, 10 * kSec, "s").gpu.has_value());
}

TEST(PackerTest, Observe_MemoryPastHeadroom_CapsOneFewer) {
  Packer packer;
  PackGpu g = Gpu("a", 0);
  g.util_pct = 50;
  // Four settled trials grew to 76 GiB together: past 72 GiB. Cap: 3.
  g.memory_used_bytes = 76 * kGiB;
  g.trials = {Trial(1, 0, 19 * kGiB), Trial(2, 0, 19 * kGiB), Trial(3, 0, 19 * kGiB),
              Trial(4, 0, 19 * kGiB)};
  packer.Observe({g}, 60 * kSec);
  EXPECT_EQ(packer.Cap("a", 0), 3);
}

TEST(PackerTest, ObserveThroughput_RampSkippedK_ComparesWithBestSmaller) {
  Packer packer;
  // One trial gave 1000 samples/s; the ramp went straight to 5, which gave
  // 1030 (+3 % over the best smaller k): capped at 4, one down.
  packer.ObserveThroughput("a", 0, 1, 1000);
  EXPECT_TRUE(packer.ObserveThroughput("a", 0, 5, 1030));
  EXPECT_EQ(packer.Cap("a", 0), 4);
}

TEST(PackerTest, Choose_DeclaredSize_AdmitsTheSweepAtOnceUpToMemory) {
  Packer packer;  // headroom 10 % of 80 GiB = 8 GiB; max 8 trials per GPU.
  // Trials declared at 16 GiB each (`--gpu-memory 16GiB`). Nothing measured
  // yet: each admitted trial may grow into its whole 16 GiB, so after k of
  // them 80 - 8 - 16k GiB is free: k = 1, 2, 3, 4 fit (72 - 64 = 8 left),
  // a fifth (16 > 8) does not.
  PackGpu g = SweepGpu(0, 0, 0);
  for (int64_t job = 1; job <= 4; ++job) {
    PackChoice c = packer.Choose({g}, 16 * kGiB, 0, "s", /*declared=*/true);
    ASSERT_TRUE(c.gpu.has_value()) << "trial " << job << ": " << c.reason;
    EXPECT_EQ(c.reserved_bytes, 16 * kGiB);
    g.trials.push_back(SweepTrial(job, 0, 0, c.reserved_bytes));
  }
  PackChoice c = packer.Choose({g}, 16 * kGiB, 0, "s", /*declared=*/true);
  EXPECT_FALSE(c.gpu.has_value());
  EXPECT_NE(c.reason.find("16.0 GiB"), std::string::npos) << c.reason;
}

TEST(PackerTest, Choose_SameSizeNotDeclared_WaitsForTheFirstToSettle) {
  Packer packer;
  // The same request learned, not declared (a raised request after an
  // out-of-memory error): rule 1 admits the first, the second waits.
  PackGpu g = SweepGpu(0, 0, 0);
  g.trials = {SweepTrial(1, 0, 0, 16 * kGiB)};
  PackChoice c = packer.Choose({g}, 16 * kGiB, 0, "s", /*declared=*/false);
  EXPECT_FALSE(c.gpu.has_value());
  EXPECT_NE(c.reason.find("settle"), std::string::npos) << c.reason;
}

TEST(PackerTest, Choose_DeclaredSize_AnotherSweepOnTheGpuStillWaits) {
  Packer packer;
  PackGpu g = SweepGpu(0, 0, 0);
  g.trials = {SweepTrial(1, 0, 0, 4 * kGiB)};
  g.trials[0].group = "other";
  PackChoice c = packer.Choose({g}, 4 * kGiB, 0, "s", /*declared=*/true);
  EXPECT_FALSE(c.gpu.has_value());
  EXPECT_NE(c.reason.find("settle"), std::string::npos) << c.reason;
}

TEST(PackerTest, Observe_DeclaredBatchSettled_PlanHoldsNewTrialsToSm) {
  Packer packer;  // SM target 90 %.
  // Four declared 4 GiB trials started at once; they settle at 80 % SM
  // activity together (20 % each) and 3 GiB each. Predict: SM allows
  // floor(90 / 20) = 4, memory floor(72 / 3.75) = 19 -> 8: the plan is 4.
  PackGpu g = SweepGpu(80, 20, 12 * kGiB);
  for (int64_t job = 1; job <= 4; ++job) {
    g.trials.push_back(SweepTrial(job, 0, 3 * kGiB, 4 * kGiB));
  }
  for (int64_t t = 2; t <= 10; t += 2) packer.Observe({g}, t * kSec);
  EXPECT_EQ(packer.Planned("a", 0), 4);
  // A fifth declared trial is no longer admitted on its declaration: the
  // plan is full and SM activity (80 %) leaves room only by rule 2, which
  // still admits one more below the 90 % target, as without a declaration.
  g.sm_active_pct = 92;
  PackChoice c = packer.Choose({g}, 4 * kGiB, 10 * kSec, "s", /*declared=*/true);
  EXPECT_FALSE(c.gpu.has_value());
  EXPECT_NE(c.reason.find("SM activity 92%"), std::string::npos) << c.reason;
}

}  // namespace
}  // namespace trainctl::sched
