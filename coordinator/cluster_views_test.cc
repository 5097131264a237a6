#include "coordinator/cluster_views.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

constexpr int64_t kGiB = 1LL << 30;
const absl::Time kT0 = absl::FromUnixSeconds(1000);

class Conn : public AgentConnection {
 public:
  void Send(v1::CoordinatorMessage) override {}
  void Close(const absl::Status&) override {}
};

struct Cluster {
  Cluster() : nodes(absl::Seconds(1), absl::Seconds(10)) {
    v1::RegisterNode reg;
    v1::Node* n = reg.mutable_node();
    n->set_name("a");
    n->set_state(v1::NODE_STATE_READY);
    for (int i = 0; i < 3; ++i) {
      v1::Gpu* g = n->add_gpus();
      g->set_index(i);
      g->set_memory_total_bytes(80 * kGiB);
      g->set_utilization_pct(i == 0 ? 90 : 0);
    }
    nodes.Admit(reg, *n, &conn, kT0);
    v1::Job running;
    running.set_id(1);
    running.set_state(v1::JOB_STATE_RUNNING);
    running.mutable_spec()->set_name("train");
    v1::Task* t = running.add_tasks();
    t->set_node("a");
    t->add_gpu_indices(0);
    t->set_state(v1::TASK_STATE_RUNNING);
    t->set_reserved_bytes_per_gpu(40 * kGiB);
    jobs.Add(running);
    v1::Job pending;
    pending.set_id(2);
    pending.set_state(v1::JOB_STATE_PENDING);
    pending.mutable_spec()->set_queue("prod");
    jobs.Add(pending);
    DrainingTask d;
    d.job_id = 1;
    d.task.set_node("a");
    d.task.add_gpu_indices(1);
    d.task.set_state(v1::TASK_STATE_STOPPING);
    draining.Add(d);
  }
  Conn conn;
  NodeRegistry nodes;
  JobTable jobs;
  DrainingTasks draining;
};

TEST(ClusterViewsTest, CollectStats_CountsQueuesGpusHeldAndJobUtilization) {
  Cluster c;
  sched::PolicyConfig policy;
  policy.queues.push_back({});
  policy.queues.back().name = "dev";
  const CoordinatorStats s = CollectStats(c.jobs, c.nodes, c.draining, policy);
  EXPECT_EQ(s.pending_jobs, 1);
  EXPECT_EQ(s.jobs_by_state[v1::JOB_STATE_RUNNING], 1);
  EXPECT_EQ(s.pending_by_queue.at("prod"), 1);
  EXPECT_EQ(s.pending_by_queue.at("dev"), 0);  // listed although empty
  EXPECT_EQ(s.pending_by_queue.at("default"), 0);
  EXPECT_EQ(s.nodes_ready, 1);
  ASSERT_EQ(s.gpus.size(), 3u);
  EXPECT_TRUE(s.gpus[0].allocated);
  EXPECT_TRUE(s.gpus[1].allocated);  // an earlier attempt's task drains there
  EXPECT_FALSE(s.gpus[2].allocated);
  ASSERT_EQ(s.jobs.size(), 1u);
  EXPECT_EQ(s.jobs[0].job_name, "train");
  EXPECT_EQ(s.jobs[0].gpus, 1);
  EXPECT_DOUBLE_EQ(s.jobs[0].utilization_pct, 90);
}

TEST(ClusterViewsTest, NodeViews_ListTheTasksHoldingEachGpu) {
  Cluster c;
  std::vector<v1::NodeView> views = NodeViews(c.jobs, c.nodes, c.draining);
  ASSERT_EQ(views.size(), 1u);
  ASSERT_EQ(views[0].gpu_tasks_size(), 3);
  ASSERT_EQ(views[0].gpu_tasks(0).tasks_size(), 1);
  EXPECT_EQ(views[0].gpu_tasks(0).tasks(0).job_id(), 1);
  EXPECT_EQ(views[0].gpu_tasks(0).tasks(0).reserved_bytes(), 40 * kGiB);
  EXPECT_EQ(views[0].gpu_tasks(1).tasks_size(), 1);  // the draining task
  EXPECT_EQ(views[0].gpu_tasks(2).tasks_size(), 0);
  EXPECT_EQ(views[0].node().last_heartbeat_ms(), absl::ToUnixMillis(kT0));
}

}  // namespace
}  // namespace trainctl::coord
