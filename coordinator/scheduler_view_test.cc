#include "coordinator/scheduler_view.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

constexpr int64_t kGiB = 1LL << 30;
constexpr int64_t kNowMs = 1'000'000;

class Conn : public AgentConnection {
 public:
  void Send(v1::CoordinatorMessage) override {}
  void Close(const absl::Status&) override {}
};

// A READY node of `gpus` 80 GiB GPUs named `gpu_name` (of type `gpu_type`)
// offering `features`; connected when `conn` is set.
void AddNode(NodeRegistry& nodes, const std::string& name, int gpus, Conn* conn,
             const std::string& gpu_type = "", std::vector<std::string> features = {}) {
  v1::RegisterNode reg;
  v1::Node* n = reg.mutable_node();
  n->set_name(name);
  n->set_address(name + ".example");
  n->set_port_min(29500);
  n->set_port_max(29599);
  n->set_state(v1::NODE_STATE_READY);
  for (int i = 0; i < gpus; ++i) {
    v1::Gpu* g = n->add_gpus();
    g->set_index(i);
    g->set_memory_total_bytes(80 * kGiB);
    g->set_gpu_type(gpu_type);
  }
  for (std::string& f : features) n->add_features(std::move(f));
  nodes.Admit(reg, *n, conn, absl::FromUnixMillis(kNowMs));
}

v1::Job Pending(int64_t id) {
  v1::Job job;
  job.set_id(id);
  job.set_state(v1::JOB_STATE_PENDING);
  job.set_kind(v1::JOB_KIND_EXPERIMENT);
  job.mutable_spec()->set_gpus(1);
  job.mutable_spec()->set_user("ann");
  job.set_submit_time_ms(kNowMs - 5000);
  return job;
}

TEST(SchedulerViewTest, Snapshot_CountsLiveTasksAndDrainingOnesAndSkipsDisconnectedNodes) {
  Conn conn;
  NodeRegistry nodes(absl::Seconds(1), absl::Seconds(10));
  AddNode(nodes, "a", 2, &conn);
  AddNode(nodes, "b", 2, nullptr);  // its agent is gone
  JobTable jobs;
  v1::Job running = Pending(1);
  running.set_state(v1::JOB_STATE_RUNNING);
  running.set_start_time_ms(kNowMs - 1000);
  running.set_master_port(29501);
  running.set_jax_port(29502);  // JAX's coordinator port is held like MASTER_PORT
  v1::Task* t = running.add_tasks();
  t->set_node("a");
  t->add_gpu_indices(0);
  t->set_state(v1::TASK_STATE_RUNNING);
  t->set_reserved_bytes_per_gpu(20 * kGiB);
  jobs.Add(running);
  DrainingTasks draining;
  DrainingTask d;
  d.job_id = 7;
  d.task.set_node("a");
  d.task.add_gpu_indices(1);
  d.task.set_reserved_bytes_per_gpu(10 * kGiB);
  draining.Add(d);

  SchedulerView view(/*max_tasks_per_gpu=*/4);
  const sched::ClusterSnapshot& snap = view.Snapshot(jobs, nodes, draining, kNowMs);
  ASSERT_EQ(snap.nodes.size(), 2u);
  EXPECT_TRUE(snap.nodes[0].schedulable);
  EXPECT_FALSE(snap.nodes[1].schedulable);
  EXPECT_EQ(snap.nodes[0].gpus[0].reserved_bytes, 20 * kGiB);
  EXPECT_EQ(snap.nodes[0].gpus[1].reserved_bytes, 10 * kGiB);  // still draining
  ASSERT_EQ(snap.running.size(), 1u);
  EXPECT_EQ(snap.running[0].job_id, 1);
  EXPECT_EQ(snap.running[0].user, "ann");
  EXPECT_TRUE(nodes.snapshot_ports().at("a.example").contains(29501));
  EXPECT_TRUE(nodes.snapshot_ports().at("a.example").contains(29502));
  // The task ends: the next snapshot frees its GPU.
  jobs.at(1).mutable_tasks(0)->set_state(v1::TASK_STATE_EXITED);
  EXPECT_EQ(view.Snapshot(jobs, nodes, draining, kNowMs).nodes[0].gpus[0].reserved_bytes, 0);
}

TEST(SchedulerViewTest, Queue_HoldsPendingJobsButAutoPackedAndWaitsSinceSubmit) {
  Conn conn;
  NodeRegistry nodes(absl::Seconds(1), absl::Seconds(10));
  AddNode(nodes, "a", 2, &conn);
  JobTable jobs;
  jobs.Add(Pending(1));
  v1::Job packed = Pending(2);
  packed.mutable_spec()->set_auto_pack(true);
  jobs.Add(packed);
  SchedulerView view(4);
  std::vector<sched::JobRequest> q = view.Queue(jobs, nodes, DrainingTasks(), kNowMs);
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].job_id, 1);
  EXPECT_DOUBLE_EQ(q[0].standing.waited_s, 5.0);
}

TEST(SchedulerViewTest, Queue_CutsALongArrayToWhatOnePassCanPlace) {
  Conn conn;
  NodeRegistry nodes(absl::Seconds(1), absl::Seconds(10));
  AddNode(nodes, "a", 2, &conn);
  JobTable jobs;
  for (int64_t id = 1; id <= 10; ++id) {
    v1::Job task = Pending(id);
    task.mutable_spec()->mutable_array()->set_array_job_id(1);
    task.mutable_spec()->mutable_array()->set_task_id(static_cast<int>(id - 1));
    task.mutable_spec()->mutable_array()->set_task_count(10);
    jobs.Add(task);
  }
  SchedulerView view(4);
  absl::flat_hash_map<int64_t, TrimmedArray> trimmed;
  std::vector<sched::JobRequest> q =
      view.Queue(jobs, nodes, DrainingTasks(), kNowMs, &trimmed);
  // Whole GPUs: one task per schedulable GPU, plus one.
  EXPECT_EQ(q.size(), 3u);
  ASSERT_TRUE(trimmed.contains(1));
  EXPECT_EQ(trimmed[1].last_included, 3);
  EXPECT_EQ(trimmed[1].trimmed.size(), 7u);
  EXPECT_FALSE(view.TrimReasonUnchanged(1, 3, "waiting"));
  view.SetTrimReasons({{1, {3, "waiting"}}});
  EXPECT_TRUE(view.TrimReasonUnchanged(1, 3, "waiting"));
  EXPECT_FALSE(view.TrimReasonUnchanged(1, 4, "waiting"));  // another cut
}

TEST(SchedulerViewTest, Why_APendingJobThatFits_AndOneThatDoesNotWait) {
  Conn conn;
  NodeRegistry nodes(absl::Seconds(1), absl::Seconds(10));
  AddNode(nodes, "a", 1, &conn);
  JobTable jobs;
  jobs.Add(Pending(1));
  v1::Job done = Pending(2);
  done.set_state(v1::JOB_STATE_SUCCEEDED);
  jobs.Add(done);
  SchedulerView view(4);
  const sched::Scheduler scheduler{sched::SchedulerConfig()};
  const absl::Time now = absl::FromUnixMillis(kNowMs);
  v1::WhyJobResponse why = view.Why(jobs.at(1), scheduler, jobs, nodes, DrainingTasks(), now);
  EXPECT_EQ(why.summary(), "it fits now and starts at the next scheduling pass");
  EXPECT_EQ(why.queue(), "default");
  why = view.Why(jobs.at(2), scheduler, jobs, nodes, DrainingTasks(), now);
  EXPECT_EQ(why.summary(), "job 2 is not waiting: it is succeeded");
}

TEST(SchedulerViewTest, Snapshot_CarriesGpuTypesAndFeatures_WhyNamesTheConstraint) {
  Conn conn;
  NodeRegistry nodes(absl::Seconds(1), absl::Seconds(10));
  AddNode(nodes, "a", 1, &conn, "a100");
  AddNode(nodes, "h", 1, &conn, "h100", {"ib", "nvlink"});
  JobTable jobs;
  v1::Job running = Pending(1);
  running.set_state(v1::JOB_STATE_RUNNING);
  v1::Task* t = running.add_tasks();
  t->set_node("h");
  t->add_gpu_indices(0);
  t->set_state(v1::TASK_STATE_RUNNING);
  t->set_whole_gpus(true);
  jobs.Add(running);
  v1::Job waiting = Pending(2);
  waiting.mutable_spec()->add_gpu_types("h100");
  jobs.Add(waiting);

  SchedulerView view(4);
  const sched::ClusterSnapshot& snap = view.Snapshot(jobs, nodes, DrainingTasks(), kNowMs);
  ASSERT_EQ(snap.nodes.size(), 2u);
  EXPECT_EQ(snap.nodes[0].gpus[0].gpu_type, "a100");
  EXPECT_EQ(snap.nodes[1].gpus[0].gpu_type, "h100");
  EXPECT_EQ(snap.nodes[1].features, (std::vector<std::string>{"ib", "nvlink"}));

  const sched::Scheduler scheduler{sched::SchedulerConfig()};
  v1::WhyJobResponse why = view.Why(jobs.at(2), scheduler, jobs, nodes, DrainingTasks(),
                                    absl::FromUnixMillis(kNowMs));
  ASSERT_EQ(why.constraints_size(), 1) << why.ShortDebugString();
  EXPECT_EQ(why.constraints(0), "--gpu-type h100: rules out a (a100)");
  EXPECT_THAT(why.summary(), ::testing::HasSubstr("rules out 1 of 2 nodes"));
}

}  // namespace
}  // namespace trainctl::coord
