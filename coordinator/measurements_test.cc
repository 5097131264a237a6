#include "coordinator/measurements.h"

#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

constexpr int64_t kGiB = 1LL << 30;
const absl::Time kT0 = absl::FromUnixSeconds(1000);

// Job `id`, RUNNING, its rank 0 live on GPU 0 of `node`.
v1::Job Running(int64_t id, const std::string& node, bool auto_pack) {
  v1::Job job;
  job.set_id(id);
  job.set_state(v1::JOB_STATE_RUNNING);
  job.mutable_spec()->set_auto_pack(auto_pack);
  v1::Task* t = job.add_tasks();
  t->set_rank(0);
  t->set_node(node);
  t->add_gpu_indices(0);
  t->set_state(v1::TASK_STATE_RUNNING);
  t->set_reserved_bytes_per_gpu(10 * kGiB);
  t->set_start_time_ms(absl::ToUnixMillis(kT0));
  return job;
}

v1::TaskUsage Usage(int64_t job, int64_t gpu_bytes) {
  v1::TaskUsage u;
  u.set_job_id(job);
  u.set_rank(0);
  u.set_gpu_memory_bytes(gpu_bytes);
  u.set_gpu_memory_known(true);
  return u;
}

Measurements Make() {
  UsageHistoryConfig usage;
  usage.sample_period = absl::Seconds(2);
  return Measurements(usage, sched::PackerConfig());
}

TEST(MeasurementsTest, ANodeMayReportOnlyTheTasksItRuns) {
  Measurements m = Make();
  JobTable jobs;
  jobs.Add(Running(1, "a", false));
  jobs.Add(Running(2, "b", false));
  v1::Heartbeat hb;
  *hb.add_task_usage() = Usage(1, 3 * kGiB);   // a's own task
  *hb.add_task_usage() = Usage(2, 70 * kGiB);  // b's task, forged by a
  *hb.add_task_usage() = Usage(9, 1 * kGiB);   // no such job
  EXPECT_EQ(m.RecordTaskUsage(jobs, "a", hb), 2);
  EXPECT_EQ(m.usage().PeakGpuMemoryBytes(1, 0, 0), 3 * kGiB);
  EXPECT_EQ(m.usage().PeakGpuMemoryBytes(2, 0, 0), 0);  // the forged peak is not kept
}

TEST(MeasurementsTest, SampleDue_OncePerPeriod) {
  Measurements m = Make();
  EXPECT_TRUE(m.SampleDue(kT0));
  EXPECT_FALSE(m.SampleDue(kT0 + absl::Seconds(1)));
  EXPECT_TRUE(m.SampleDue(kT0 + absl::Seconds(2)));
}

TEST(MeasurementsTest, PackGpus_ListsAutoPackedTrialsApartFromOtherReservations) {
  Measurements m = Make();
  JobTable jobs;
  jobs.Add(Running(1, "a", /*auto_pack=*/true));
  jobs.Add(Running(2, "a", /*auto_pack=*/false));
  EXPECT_EQ(Measurements::AutoPackedOnGpu(jobs, "a", 0), 1);
  EXPECT_EQ(Measurements::AutoPackedOnGpu(jobs, "a", 1), 0);
  NodeRegistry nodes(absl::Seconds(1), absl::Seconds(10));
  v1::RegisterNode reg;
  v1::Node* n = reg.mutable_node();
  n->set_name("a");
  v1::Gpu* g = n->add_gpus();
  g->set_index(0);
  g->set_memory_total_bytes(80 * kGiB);
  nodes.Admit(reg, *n, nullptr, kT0);
  sched::ClusterSnapshot snap;
  sched::NodeState& ns = snap.nodes.emplace_back();
  ns.name = "a";
  ns.schedulable = true;
  sched::GpuState& gs = ns.gpus.emplace_back();
  gs.index = 0;
  gs.memory_total_bytes = 80 * kGiB;
  gs.reserved_bytes = 20 * kGiB;  // both jobs' reservations
  std::vector<sched::PackGpu> gpus =
      m.PackGpus(snap, jobs, nodes, absl::ToUnixMillis(kT0 + absl::Seconds(5)));
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].other_reserved_bytes, 10 * kGiB);  // job 2's only
  ASSERT_EQ(gpus[0].trials.size(), 1u);
  EXPECT_EQ(gpus[0].trials[0].job_id, 1);
  EXPECT_EQ(gpus[0].trials[0].reserved_bytes, 10 * kGiB);
}

}  // namespace
}  // namespace trainctl::coord
