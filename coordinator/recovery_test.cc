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

v1::TaskRef Ref(int64_t job, int attempt, int rank, int probe_run = 0) {
  v1::TaskRef r;
  r.set_job_id(job);
  r.set_attempt(attempt);
  r.set_rank(rank);
  r.set_probe_run(probe_run);
  return r;
}

// After a coordinator restart an agent says what it runs: the live task of
// the current attempt is kept (and, when still STARTING, taken as RUNNING);
// a process of an old attempt, and a pre-flight probe beside the job's rank
// of the same attempt, are stopped, without a known reservation; an exit the
// agent sent for a task it no longer runs is replayed.
TEST(RecoveryTest, Reconcile_KeepsCurrentTasks_StopsTheRest) {
  JobTable jobs;
  v1::Job job = Holding(1, 1, 40 * kGiB);
  job.set_attempt(2);
  job.mutable_tasks(0)->set_state(v1::TASK_STATE_STARTING);
  jobs.Add(job);
  v1::RegisterNode reg;
  reg.mutable_node()->set_name("a");
  *reg.add_running_tasks() = Ref(1, 2, 0);
  *reg.add_running_tasks() = Ref(1, 1, 0);                  // an old attempt
  *reg.add_running_tasks() = Ref(1, 2, 0, /*probe_run=*/1);  // an old probe
  v1::TaskStatus exited;
  *exited.mutable_task() = Ref(7, 0, 0);
  exited.set_state(v1::TASK_STATE_EXITED);
  *reg.add_finished_tasks() = exited;
  v1::TaskStatus still_running = exited;
  *still_running.mutable_task() = Ref(1, 2, 0);  // it runs: not replayed
  *reg.add_finished_tasks() = still_running;

  const Reconciliation r = Reconcile(reg, jobs);
  ASSERT_EQ(r.started.size(), 1u);
  EXPECT_EQ(r.started[0].attempt(), 2);
  ASSERT_EQ(r.stop.size(), 2u);
  EXPECT_EQ(r.stop[0].attempt(), 1);
  EXPECT_EQ(r.stop[1].probe_run(), 1);
  EXPECT_EQ(r.unplaced.size(), 2u);
  EXPECT_EQ(r.reported.size(), 3u);
  ASSERT_EQ(r.replay.size(), 1u);
  EXPECT_EQ(r.replay[0].task().job_id(), 7);
}

}  // namespace
}  // namespace trainctl::coord
