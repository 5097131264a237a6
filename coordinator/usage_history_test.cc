// Tier 1 tests of UsageHistory on its own: per-task usage and peak memory,
// sampling into bounded per-job histories, the kept histories of finished
// jobs, throughput, and the GetJobUsage assembly. Live tasks are plain values
// (what the Coordinator hands in); times are plain Unix ms.

#include "coordinator/usage_history.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <optional>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Optional;
using ::testing::SizeIs;
using ::trainctl::testing::StatusIs;

constexpr int64_t kGiB = int64_t{1} << 30;

// Job `id`, attempt `attempt`, one live rank 0 alone on GPU 0 of node "a"
// (80 GiB, `util` % busy, `used` bytes used), 8 CPU cores.
UsageJob OneTask(int64_t id, int attempt = 0, int util = 50, int64_t used = 10 * kGiB) {
  UsageJob job{id, attempt, {}};
  UsageTask& t = job.tasks.emplace_back();
  t.rank = 0;
  t.cpu_cores = 8;
  t.gpus.push_back({"a", 0, util, used, 80 * kGiB, 1});
  return job;
}

v1::TaskUsage Usage(int64_t job, int attempt, int rank, double cpu, int64_t gpu_memory,
                    int gpu_util = -1) {
  v1::TaskUsage u;
  u.set_job_id(job);
  u.set_attempt(attempt);
  u.set_rank(rank);
  u.set_cpu_pct(cpu);
  u.set_gpu_memory_bytes(gpu_memory);
  u.set_gpu_memory_known(gpu_memory > 0);
  u.set_gpu_util_pct(gpu_util);
  return u;
}

bool AllActive(int64_t) { return true; }

std::vector<v1::JobUsage> UsageOf(const UsageHistory& h, std::vector<int64_t> ids,
                                  int max_samples = 0) {
  std::vector<UsageJobLabel> labels;
  for (int64_t id : ids) labels.push_back({id, "job", false});
  auto out = h.GetJobUsage(labels, max_samples);
  EXPECT_THAT(out, ::trainctl::testing::IsOk());
  return out.ok() ? *out : std::vector<v1::JobUsage>{};
}

TEST(UsageHistoryTest, RecordTaskUsage_PeakIsTheLargestPerProcessMemorySeen) {
  UsageHistory h({});
  h.RecordTaskUsage(Usage(1, 0, 0, 100, 6 * kGiB));
  h.RecordTaskUsage(Usage(1, 0, 0, 100, 9 * kGiB));
  // A sample without a per-process figure leaves the peak alone.
  h.RecordTaskUsage(Usage(1, 0, 0, 100, 0));
  EXPECT_EQ(h.PeakGpuMemoryBytes(1, 0, 0), 9 * kGiB);
  EXPECT_EQ(h.PeakGpuMemoryBytes(1, 1, 0), 0);  // another attempt
  EXPECT_EQ(h.PeakGpuMemoryBytes(2, 0, 0), 0);
}

TEST(UsageHistoryTest, Sample_OwnUtilAndMemory_FromTheTasksWhereKnown) {
  UsageHistory h({});
  // The GPU is 80 % busy with 30 GiB used; the process itself reports 60 %
  // and 12 GiB.
  h.RecordTaskUsage(Usage(1, 0, 0, 150, 12 * kGiB, 60));
  h.Sample(1000, {OneTask(1, 0, 80, 30 * kGiB)}, AllActive);
  std::vector<v1::JobUsage> u = UsageOf(h, {1});
  ASSERT_THAT(u, SizeIs(1));
  ASSERT_THAT(u[0].samples(), SizeIs(1));
  const v1::JobUsageSample& s = u[0].samples(0);
  EXPECT_EQ(s.time_ms(), 1000);
  EXPECT_EQ(s.gpu_util_pct(), 60);
  EXPECT_EQ(s.device_util_pct(), 80);
  EXPECT_EQ(s.gpu_memory_used_bytes(), 12 * kGiB);
  EXPECT_EQ(s.gpu_memory_total_bytes(), 80 * kGiB);
  EXPECT_EQ(s.cpu_pct(), 150);
  EXPECT_EQ(s.cpu_cores(), 8);
  EXPECT_EQ(s.tasks(), 1);
  EXPECT_EQ(s.tasks_on_gpus(), 1);
}

TEST(UsageHistoryTest, Sample_NoPerProcessFigures_SplitsTheGpuOverItsTasks) {
  UsageHistory h({});
  // Two ranks of job 1 on one 40 GiB-used GPU shared with a third task
  // (another job's): each rank counts 40 / 3 GiB; nothing per-process, so
  // utilization is the device's.
  UsageJob job{1, 0, {}};
  for (int rank = 0; rank < 2; ++rank) {
    UsageTask& t = job.tasks.emplace_back();
    t.rank = rank;
    t.gpus.push_back({"a", 0, 90, 42 * kGiB, 80 * kGiB, 3});
    h.RecordTaskUsage(Usage(1, 0, rank, 100, 0));
  }
  h.Sample(1000, {job}, AllActive);
  const v1::JobUsageSample s = UsageOf(h, {1})[0].samples(0);
  EXPECT_EQ(s.gpu_memory_used_bytes(), 2 * (42 * kGiB / 3));
  // The shared GPU counts once for the total.
  EXPECT_EQ(s.gpu_memory_total_bytes(), 80 * kGiB);
  EXPECT_EQ(s.gpu_util_pct(), 90);
  EXPECT_EQ(s.device_util_pct(), 90);
  EXPECT_EQ(s.tasks(), 2);
  EXPECT_EQ(s.tasks_on_gpus(), 3);
}

TEST(UsageHistoryTest, Sample_TaskWithoutKnownGpu_NoSample) {
  UsageHistory h({});
  UsageJob job = OneTask(1);
  job.tasks[0].gpus.clear();  // its node no longer reports the GPU
  h.Sample(1000, {job}, AllActive);
  EXPECT_THAT(h.JobsWithHistory(), IsEmpty());
}

TEST(UsageHistoryTest, Sample_HistoryKeepsTheNewestSamples) {
  UsageHistoryConfig config;
  config.history_samples = 3;
  config.sample_period = absl::Seconds(2);
  UsageHistory h(config);
  // Utilization 10, 20, ... 50 %, 2 s apart: the newest 3 stay.
  for (int i = 1; i <= 5; ++i) h.Sample(2000 * i, {OneTask(1, 0, 10 * i)}, AllActive);
  std::vector<v1::JobUsage> u = UsageOf(h, {1});
  EXPECT_EQ(u[0].sample_period_ms(), 2000);
  ASSERT_THAT(u[0].samples(), SizeIs(3));
  EXPECT_EQ(u[0].samples(0).device_util_pct(), 30);
  EXPECT_EQ(u[0].samples(2).device_util_pct(), 50);
  // max_samples trims to the newest.
  ASSERT_THAT(UsageOf(h, {1}, 1)[0].samples(), SizeIs(1));
  EXPECT_EQ(UsageOf(h, {1}, 1)[0].samples(0).device_util_pct(), 50);
}

TEST(UsageHistoryTest, Sample_FinishedJobs_NewestKeptUpToTheBound) {
  UsageHistoryConfig config;
  config.finished_jobs = 2;
  UsageHistory h(config);
  h.Sample(1000, {OneTask(1), OneTask(2), OneTask(3)}, AllActive);
  EXPECT_THAT(h.JobsWithHistory(), ElementsAre(1, 2, 3));
  // Job 1 ends, then job 2, then job 3: two finished histories are kept,
  // the oldest finished one (job 1) goes.
  h.Sample(2000, {OneTask(2), OneTask(3)}, AllActive);
  h.Sample(3000, {OneTask(3)}, AllActive);
  EXPECT_THAT(h.JobsWithHistory(), ElementsAre(1, 2, 3));
  h.Sample(4000, {}, AllActive);
  EXPECT_THAT(h.JobsWithHistory(), ElementsAre(2, 3));
  // Job 2 runs again (a new attempt): no longer finished.
  h.Sample(5000, {OneTask(2, 1)}, AllActive);
  h.Sample(6000, {OneTask(2, 1), OneTask(4)}, AllActive);
  EXPECT_THAT(h.JobsWithHistory(), ElementsAre(2, 3, 4));
}

TEST(UsageHistoryTest, Sample_ForgetsUsageOfTasksNoLongerLive) {
  UsageHistory h({});
  h.RecordTaskUsage(Usage(1, 0, 0, 100, 9 * kGiB));
  h.RecordTaskUsage(Usage(2, 0, 0, 100, 5 * kGiB));
  // Job 1 moved to attempt 1: attempt 0's usage goes; job 2 still runs.
  h.Sample(1000, {OneTask(1, 1), OneTask(2)}, AllActive);
  EXPECT_EQ(h.PeakGpuMemoryBytes(1, 0, 0), 0);
  EXPECT_EQ(h.PeakGpuMemoryBytes(2, 0, 0), 5 * kGiB);
}

TEST(UsageHistoryTest, ReportThroughput_KeptWhileActive_BadValuesRefused) {
  UsageHistory h({});
  TC_ASSERT_OK(h.ReportThroughput(1, 1000));
  TC_ASSERT_OK(h.ReportThroughput(1, 1200));
  TC_ASSERT_OK(h.ReportThroughput(2, 50));
  EXPECT_THAT(h.ReportThroughput(1, -1),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(h.ReportThroughput(1, std::nan("")),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(h.Throughput(1), Optional(1200.0));
  // Job 2 is no longer active at the next sample: its throughput goes.
  h.Sample(1000, {}, [](int64_t id) { return id == 1; });
  EXPECT_THAT(h.Throughput(1), Optional(1200.0));
  EXPECT_EQ(h.Throughput(2), std::nullopt);
}

// Used GPU-seconds per node: activity (GPM SM-active where reported, else
// utilization) x the task's share x the sample period, each GPU once.
TEST(UsageHistoryTest, TakeUsedGpuSeconds_ActivityTimesShareTimesPeriod) {
  UsageHistoryConfig config;
  config.sample_period = absl::Seconds(2);
  UsageHistory h(config);
  // Job 1: one whole GPU at 50 % utilization.
  const UsageJob whole = OneTask(1, 0, 50);
  // Job 2: a quarter of a GPU whose GPM says 40 % SM-active (utilization 100).
  UsageJob quarter = OneTask(2, 0, 100);
  quarter.tasks[0].gpus[0].gpm = true;
  quarter.tasks[0].gpus[0].sm_active_pct = 40;
  quarter.tasks[0].gpus[0].share = 0.25;
  // Job 3: a gang, two ranks on node a sharing GPUs 0 and 1 (each rank lists
  // both) and one on node b, all at 100 %.
  UsageJob gang{3, 1, {}};
  for (int rank = 0; rank < 3; ++rank) {
    UsageTask& t = gang.tasks.emplace_back();
    t.rank = rank;
    const std::string node = rank < 2 ? "a" : "b";
    t.gpus.push_back({node, 0, 100, kGiB, 80 * kGiB, 2});
    if (rank < 2) t.gpus.push_back({node, 1, 100, kGiB, 80 * kGiB, 2});
  }
  for (int i = 1; i <= 3; ++i) h.Sample(2000 * i, {whole, quarter, gang}, AllActive);
  EXPECT_THAT(h.TakeUsedGpuSeconds(1, 0), ElementsAre(std::pair<const std::string, double>("a", 3.0)));
  const std::map<std::string, double> q = h.TakeUsedGpuSeconds(2, 0);
  ASSERT_THAT(q, SizeIs(1));
  EXPECT_NEAR(q.at("a"), 3 * 0.4 * 0.25 * 2, 1e-12);
  const std::map<std::string, double> g = h.TakeUsedGpuSeconds(3, 1);
  EXPECT_NEAR(g.at("a"), 3 * 2 * 2.0, 1e-12);
  EXPECT_NEAR(g.at("b"), 3 * 1 * 2.0, 1e-12);
  // Taken once; another attempt of the job has its own.
  EXPECT_THAT(h.TakeUsedGpuSeconds(1, 0), IsEmpty());
  EXPECT_THAT(h.TakeUsedGpuSeconds(3, 0), IsEmpty());
  // An inactive job's are forgotten at the next sample.
  h.Sample(8000, {whole}, AllActive);
  h.Sample(10000, {}, [](int64_t) { return false; });
  EXPECT_THAT(h.TakeUsedGpuSeconds(1, 0), IsEmpty());
}

TEST(UsageHistoryTest, GetJobUsage_LabelsInOrder_NoHistoryNoSamples) {
  UsageHistory h({});
  h.Sample(1000, {OneTask(7)}, AllActive);
  auto u = h.GetJobUsage({{9, "waiting", false}, {7, "running", true}}, 0);
  TC_ASSERT_OK(u);
  ASSERT_THAT(*u, SizeIs(2));
  EXPECT_EQ((*u)[0].job_id(), 9);
  EXPECT_EQ((*u)[0].job_name(), "waiting");
  EXPECT_THAT((*u)[0].samples(), IsEmpty());
  EXPECT_EQ((*u)[1].job_name(), "running");
  EXPECT_THAT((*u)[1].samples(), SizeIs(1));
  EXPECT_THAT(h.GetJobUsage({}, -1),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("max_samples")));
}

TEST(UsageHistoryTest, GetJobUsage_LongIdleHistory_Diagnosed) {
  UsageHistory h({});
  // Two minutes of samples of an idle GPU (0 %): "idle".
  for (int i = 0; i <= 60; ++i) h.Sample(2000 * i, {OneTask(1, 0, 0, kGiB)}, AllActive);
  std::vector<v1::JobUsage> u = UsageOf(h, {1});
  ASSERT_THAT(u[0].findings(), SizeIs(1));
  EXPECT_EQ(u[0].findings(0).code(), "idle");
}

}  // namespace
}  // namespace trainctl::coord
