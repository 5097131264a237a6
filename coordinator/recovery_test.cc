#include "coordinator/recovery.h"

#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

constexpr int64_t kGiB = 1LL << 30;

NodeRegistry OneGpuNode() {
  NodeRegistry nodes(absl::Seconds(1), absl::Seconds(10));
  v1::RegisterNode reg;
  v1::Node* n = reg.mutable_node();
  n->set_name("a");
  v1::Gpu* g = n->add_gpus();
  g->set_index(0);
  g->set_memory_total_bytes(80 * kGiB);
  nodes.Admit(reg, *n, nullptr, absl::UnixEpoch());
  return nodes;
}

v1::Job Holding(int64_t id, int64_t seq, int64_t bytes) {
  v1::Job job;
  job.set_id(id);
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_placement_seq(seq);
  v1::Task* t = job.add_tasks();
  t->set_node("a");
  t->add_gpu_indices(0);
  t->set_state(v1::TASK_STATE_RUNNING);
  t->set_reserved_bytes_per_gpu(bytes);
  return job;
}

TEST(RecoveryTest, ClaimsThatFit_AreNotStale) {
  NodeRegistry nodes = OneGpuNode();
  JobTable jobs;
  jobs.Add(Holding(1, 1, 40 * kGiB));
  jobs.Add(Holding(2, 2, 40 * kGiB));
  EXPECT_FALSE(FindStaleClaim(jobs, DrainingTasks(), nodes).has_value());
}

TEST(RecoveryTest, AnOverbookedGpu_TheEarliestPlacementIsStale) {
  NodeRegistry nodes = OneGpuNode();
  JobTable jobs;
  jobs.Add(Holding(1, /*seq=*/5, 60 * kGiB));
  jobs.Add(Holding(2, /*seq=*/3, 60 * kGiB));  // placed first: its end was lost
  std::optional<StaleClaim> c = FindStaleClaim(jobs, DrainingTasks(), nodes);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->job_id, 2);
  EXPECT_FALSE(c->draining);
  EXPECT_EQ(c->where, "a GPU 0");
}

TEST(RecoveryTest, ADrainingTaskCanBeTheStaleClaim) {
  NodeRegistry nodes = OneGpuNode();
  JobTable jobs;
  jobs.Add(Holding(2, 9, 60 * kGiB));
  DrainingTasks draining;
  DrainingTask d;
  d.job_id = 1;
  d.placement_seq = 4;
  d.task = Holding(1, 4, 60 * kGiB).tasks(0);
  draining.Add(d);
  std::optional<StaleClaim> c = FindStaleClaim(jobs, draining, nodes);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->job_id, 1);
  EXPECT_TRUE(c->draining);
}

}  // namespace
}  // namespace trainctl::coord
