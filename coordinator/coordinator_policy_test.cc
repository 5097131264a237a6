// Tier 1 tests of the coordinator core's scheduling policy: preemption with
// a grace period and no ping-pong, --time-limit (TIMEOUT), queues from the
// scheduler config, and WhyJob. A FakeClock, a MemoryStateStore and fake
// agent connections; no network, no threads, no sleeps.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "coordinator/coordinator.h"
#include "coordinator/testing/fake_agent_connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::trainctl::testing::StatusIs;

constexpr int64_t kGiB = int64_t{1} << 30;

using FakeConnection = ::trainctl::coord::testing::FakeAgentConnection;

v1::RegisterNode NodeReg(const std::string& name, int gpus) {
  return ::trainctl::coord::testing::FakeNodeRegistration(name, gpus);
}

v1::JobSpec Gang(int gpus) {
  v1::JobSpec spec;
  spec.add_command("python");
  spec.add_command("train.py");
  spec.set_gpus(gpus);
  return spec;
}

v1::AgentMessage Status(const v1::StartTask& start, v1::TaskState state,
                        int exit_code = 0) {
  v1::AgentMessage msg;
  v1::TaskStatus* st = msg.mutable_task_status();
  *st->mutable_task() = start.task();
  st->mutable_task()->set_pid(100);
  st->set_state(state);
  st->set_exit_code(exit_code);
  return msg;
}

class CoordinatorPolicyTest : public ::testing::Test {
 protected:
  void Start(sched::PolicyConfig policy = {}) {
    CoordinatorConfig config;
    config.scheduler.policy = std::move(policy);
    config.stop_grace = absl::Seconds(30);
    // No heartbeats in these tests: nodes must not time out.
    config.node_timeout = absl::Hours(24);
    auto core = Coordinator::Create(config, &store_, &clock_);
    ASSERT_THAT(core, ::trainctl::testing::IsOk());
    core_ = std::move(*core);
  }

  FakeConnection& Connect(const std::string& name, int gpus) {
    auto& conn = conns_[name];
    conn = std::make_unique<FakeConnection>();
    EXPECT_THAT(core_->RegisterAgent(NodeReg(name, gpus), conn.get()),
                ::trainctl::testing::IsOk());
    return *conn;
  }

  void Report(const std::string& node, const v1::AgentMessage& msg) {
    TC_ASSERT_OK(core_->HandleAgentMessage(node, conns_[node].get(), msg));
  }

  int64_t Submit(const v1::JobSpec& spec) {
    absl::StatusOr<int64_t> id = core_->SubmitJob(spec, "");
    EXPECT_THAT(id, ::trainctl::testing::IsOk());
    return id.value_or(0);
  }

  v1::Job Job(int64_t id) { return *core_->GetJob(id); }

  FakeClock clock_;
  MemoryStateStore store_;
  std::unique_ptr<Coordinator> core_;
  std::map<std::string, std::unique_ptr<FakeConnection>> conns_;
};

TEST_F(CoordinatorPolicyTest, Preemption_HigherPriorityGang_StopsVictimWithGraceAndRequeues) {
  Start();
  FakeConnection& a = Connect("a", 2);
  v1::JobSpec low = Gang(2);
  low.set_preemptible(true);
  const int64_t victim = Submit(low);
  for (const v1::StartTask& s : a.Starts()) Report("a", Status(s, v1::TASK_STATE_RUNNING));
  ASSERT_EQ(Job(victim).state(), v1::JOB_STATE_RUNNING);
  clock_.Advance(absl::Seconds(10));

  // A priority-5 gang needs both GPUs: the victim's two ranks get StopTask
  // with the 30 s grace; it is requeued as attempt 1, preempted once, for
  // the new job. Its 10 s on 2 GPUs count as attained service (20 GPU-s).
  v1::JobSpec high = Gang(2);
  high.set_priority(5);
  const int64_t boss = Submit(high);
  ASSERT_THAT(a.Stops(), SizeIs(2));
  EXPECT_EQ(a.Stops()[0].grace_ms(), 30000);
  v1::Job v = Job(victim);
  EXPECT_EQ(v.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(v.attempt(), 1);
  EXPECT_EQ(v.preemptions(), 1);
  EXPECT_EQ(v.preempted_for_job_id(), boss);
  EXPECT_EQ(v.attained_gpu_ms(), 20000);
  EXPECT_THAT(v.reason(), HasSubstr(absl::StrCat("preempted for job ", boss)));
  // Counted as a preemption, not as a restart.
  EXPECT_EQ(core_->Stats().counters.preemptions, 1);
  EXPECT_EQ(core_->Stats().counters.restarts, 0);
  // The preemptor waits for the victim's GPUs; nothing more is preempted.
  EXPECT_EQ(Job(boss).state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(a.Starts(), SizeIs(2));

  // The victim's ranks exit (SIGTERM): the preemptor starts on both GPUs.
  const std::vector<v1::StartTask> first = a.Starts();
  Report("a", Status(first[0], v1::TASK_STATE_EXITED, 143));
  EXPECT_EQ(Job(boss).state(), v1::JOB_STATE_PENDING);
  Report("a", Status(first[1], v1::TASK_STATE_EXITED, 143));
  EXPECT_EQ(Job(boss).state(), v1::JOB_STATE_SCHEDULED);
  ASSERT_THAT(a.Starts(), SizeIs(4));
  EXPECT_EQ(a.Starts()[2].task().job_id(), boss);
  // Placed: the victim waits for it no longer (the no-ping-pong rule: a job
  // preempted for X is not restarted until X is placed or gone); had the
  // preemptor been preempted in turn and queued again, the victim could start
  // on the first free GPUs.
  EXPECT_EQ(Job(victim).preempted_for_job_id(), 0);

  // The preemptor ends: the victim restarts as attempt 1. The preemption did
  // not use up a restart (max_restarts is 0).
  for (int i = 2; i < 4; ++i) Report("a", Status(a.Starts()[i], v1::TASK_STATE_EXITED, 0));
  EXPECT_EQ(Job(boss).state(), v1::JOB_STATE_SUCCEEDED);
  v = Job(victim);
  EXPECT_EQ(v.state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(v.attempt(), 1);
  EXPECT_EQ(v.preempted_for_job_id(), 0);
  EXPECT_EQ(a.Starts()[4].task().attempt(), 1);
  // Placements: the victim twice, the preemptor once.
  EXPECT_EQ(core_->Stats().counters.placements, 3);
  EXPECT_EQ(core_->Stats().counters.preemptions, 1);
}

TEST_F(CoordinatorPolicyTest, Preemption_NotPreemptible_HigherPriorityWaits) {
  Start();
  Connect("a", 1);
  const int64_t running = Submit(Gang(1));
  v1::JobSpec high = Gang(1);
  high.set_priority(5);
  const int64_t waiting = Submit(high);
  EXPECT_EQ(Job(running).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(Job(waiting).state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(Job(running).preemptions(), 0);
}

TEST_F(CoordinatorPolicyTest, TimeLimit_PastLimit_StoppedAndFailedWithTimeout) {
  Start();
  FakeConnection& a = Connect("a", 1);
  v1::JobSpec spec = Gang(1);
  spec.set_time_limit_ms(60'000);
  const int64_t id = Submit(spec);
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_RUNNING));
  clock_.Advance(absl::Seconds(59));
  core_->Tick();
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_RUNNING);
  clock_.Advance(absl::Seconds(1));
  core_->Tick();
  v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("TIMEOUT: ran past its time limit of 1m"));
  ASSERT_THAT(a.Stops(), SizeIs(1));
  EXPECT_EQ(a.Stops()[0].task().job_id(), id);
}

TEST_F(CoordinatorPolicyTest, SubmitJob_UnknownQueue_InvalidArgumentNamingQueues) {
  sched::PolicyConfig policy;
  policy.queues = {{"default", 1}, {"prod", 3}};
  Start(policy);
  Connect("a", 1);
  v1::JobSpec spec = Gang(1);
  spec.set_queue("nope");
  EXPECT_THAT(core_->SubmitJob(spec, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("spec.queue: no queue \"nope\" on this "
                                 "coordinator (it has: default, prod)")));
  spec.set_queue("prod");
  EXPECT_THAT(core_->SubmitJob(spec, ""), ::trainctl::testing::IsOk());
}

TEST_F(CoordinatorPolicyTest, WhyJob_BlockedGang_NodesReservationAndEta) {
  Start();
  FakeConnection& a = Connect("a", 8);
  // 6 GPUs busy for 1 h (time limit); the 4-GPU gang waits and holds the
  // reservation, estimated to start when that job's limit ends.
  v1::JobSpec busy = Gang(6);
  busy.set_time_limit_ms(3'600'000);
  const int64_t first = Submit(busy);
  for (const v1::StartTask& s : a.Starts()) Report("a", Status(s, v1::TASK_STATE_RUNNING));
  clock_.Advance(absl::Minutes(10));
  const int64_t id = Submit(Gang(4));
  absl::StatusOr<v1::WhyJobResponse> why = core_->WhyJob(id);
  TC_ASSERT_OK(why);
  EXPECT_EQ(why->state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(why->position(), 1);
  EXPECT_EQ(why->queue(), "default");
  EXPECT_THAT(why->nodes(), ElementsAre("a: 2 of 8 GPUs free, needs 4"));
  EXPECT_EQ(why->reservation_job_id(), id);
  EXPECT_EQ(why->reservation(), "node a");
  // 50 minutes of job 1's hour are left.
  EXPECT_EQ(why->reservation_eta_ms(),
            ToUnixMs(clock_.Now() + absl::Minutes(50)));
  EXPECT_THAT(why->summary(), HasSubstr("estimated start in 50m"));

  absl::StatusOr<v1::WhyJobResponse> running = core_->WhyJob(first);
  TC_ASSERT_OK(running);
  EXPECT_THAT(running->summary(), HasSubstr("is not waiting: it is running"));
  EXPECT_THAT(core_->WhyJob(999), StatusIs(absl::StatusCode::kNotFound, HasSubstr("999")));
}

TEST_F(CoordinatorPolicyTest, ReservationMinWait_GangReservesOnceOldEnoughByTheClock) {
  // reservation_min_wait_s = 600. Node a, 8 GPUs; a 6-GPU job runs, so 2
  // are free. The 4-GPU gang is submitted at t = 0 and cannot start.
  // - t = 0: the gang has waited 0 s < 600 s, so it holds no reservation
  //   and a 1-GPU job submitted now takes one of the 2 free GPUs.
  // - t = 600 s (the coordinator's clock): the gang has waited 600 s, so it
  //   holds node a and the next 1-GPU job waits for it, although a GPU is
  //   free.
  sched::PolicyConfig policy;
  policy.reservation_min_wait_s = 600;
  Start(policy);
  FakeConnection& a = Connect("a", 8);
  Submit(Gang(6));
  for (const v1::StartTask& s : a.Starts()) Report("a", Status(s, v1::TASK_STATE_RUNNING));
  const int64_t gang = Submit(Gang(4));
  absl::StatusOr<v1::WhyJobResponse> why = core_->WhyJob(gang);
  TC_ASSERT_OK(why);
  EXPECT_EQ(why->reservation_job_id(), 0);
  const int64_t early = Submit(Gang(1));
  EXPECT_EQ(Job(early).state(), v1::JOB_STATE_SCHEDULED);

  clock_.Advance(absl::Seconds(600));
  const int64_t late = Submit(Gang(1));
  EXPECT_EQ(Job(late).state(), v1::JOB_STATE_PENDING);
  why = core_->WhyJob(gang);
  TC_ASSERT_OK(why);
  EXPECT_EQ(why->reservation_job_id(), gang);
  EXPECT_EQ(Job(gang).state(), v1::JOB_STATE_PENDING);
}

TEST_F(CoordinatorPolicyTest, WhyJob_UserQuota_SaysWhichQuota) {
  sched::PolicyConfig policy;
  policy.user_gpu_quota = {{"alice", 2}};
  Start(policy);
  Connect("a", 8);
  v1::JobSpec spec = Gang(4);
  spec.set_user("alice");
  const int64_t id = Submit(spec);
  absl::StatusOr<v1::WhyJobResponse> why = core_->WhyJob(id);
  TC_ASSERT_OK(why);
  EXPECT_EQ(why->quota(),
            "user alice: quota 2 GPUs, 0 GPUs in use, this job needs 4 GPUs");
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_PENDING);
}

// ------------------------------------------------ node drain / down / resume

v1::UpdateNodesRequest NodeAction(v1::NodeAction action, const std::string& node,
                                  const std::string& reason = "", int64_t deadline_s = 0) {
  v1::UpdateNodesRequest req;
  req.add_nodes(node);
  req.set_action(action);
  req.set_reason(reason);
  req.set_deadline_s(deadline_s);
  return req;
}

TEST_F(CoordinatorPolicyTest, Drain_RunningJobFinishes_NewJobGoesElsewhere_ThenDrained) {
  Start();
  FakeConnection& a = Connect("a", 1);
  const int64_t running = Submit(Gang(1));
  ASSERT_THAT(a.Starts(), SizeIs(1));
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_RUNNING));
  FakeConnection& b = Connect("b", 1);

  absl::StatusOr<v1::UpdateNodesResponse> views =
      core_->UpdateNodes(NodeAction(v1::NODE_ACTION_DRAIN, "a", "swap PSU"), "ops");
  TC_ASSERT_OK(views);
  ASSERT_THAT(views->nodes(), SizeIs(1));
  EXPECT_EQ(views->nodes(0).service_state(), v1::NODE_SERVICE_STATE_DRAINING);
  EXPECT_EQ(views->nodes(0).node().admin().by(), "ops");
  // The running job is left alone; nothing is stopped.
  EXPECT_THAT(a.Stops(), SizeIs(0));
  EXPECT_EQ(Job(running).state(), v1::JOB_STATE_RUNNING);

  // A new job starts on b although a would have been first in name order.
  const int64_t next = Submit(Gang(1));
  ASSERT_THAT(b.Starts(), SizeIs(1));
  EXPECT_EQ(b.Starts()[0].task().job_id(), next);
  // Another, with b full, waits, and `why` names the drain.
  const int64_t waits = Submit(Gang(1));
  EXPECT_EQ(Job(waits).state(), v1::JOB_STATE_PENDING);
  absl::StatusOr<v1::WhyJobResponse> why = core_->WhyJob(waits);
  TC_ASSERT_OK(why);
  EXPECT_THAT(why->drained_nodes(), ElementsAre(HasSubstr("a: DRAIN by ops")));
  EXPECT_THAT(why->nodes(), ::testing::Contains(HasSubstr("a: out of service (DRAIN by ops")))
      << why->DebugString();

  // The running job ends: a is DRAINED and still takes nothing.
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_EXITED, 0));
  EXPECT_EQ(Job(running).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_THAT(a.Starts(), SizeIs(1));
  EXPECT_EQ(core_->ListNodes()[0].service_state(), v1::NODE_SERVICE_STATE_DRAINED);

  // Resumed: the waiting job starts there.
  TC_ASSERT_OK(core_->UpdateNodes(NodeAction(v1::NODE_ACTION_RESUME, "a"), "ops"));
  ASSERT_THAT(a.Starts(), SizeIs(2));
  EXPECT_EQ(a.Starts()[1].task().job_id(), waits);
  EXPECT_EQ(core_->ListNodes()[0].service_state(), v1::NODE_SERVICE_STATE_IN_SERVICE);
}

TEST_F(CoordinatorPolicyTest, DrainDeadline_RequeuesWhatStillRuns_RestartBudgetIntact) {
  Start();
  FakeConnection& a = Connect("a", 1);
  v1::JobSpec spec = Gang(1);
  spec.set_max_restarts(0);  // a restart spent would fail it
  const int64_t id = Submit(spec);
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_RUNNING));
  TC_ASSERT_OK(core_->UpdateNodes(NodeAction(v1::NODE_ACTION_DRAIN, "a", "kernel update", 600),
                                  "ops"));
  clock_.Advance(absl::Seconds(599));
  core_->Tick();
  EXPECT_THAT(a.Stops(), SizeIs(0));
  clock_.Advance(absl::Seconds(1));
  core_->Tick();
  // At the deadline: the preemption notice (SIGTERM, the stop grace), and the
  // job is requeued, counted as a preemption, naming the drain.
  ASSERT_THAT(a.Stops(), SizeIs(1));
  EXPECT_EQ(a.Stops()[0].grace_ms(), 30000);
  v1::Job j = Job(id);
  EXPECT_EQ(j.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(j.preemptions(), 1);
  ASSERT_THAT(j.attempts(), SizeIs(1));
  EXPECT_THAT(j.attempts(0).reason(), HasSubstr("node a was drained by ops (kernel update) and its drain "
                                    "deadline passed"));
  // Not sent twice at the next tick.
  core_->Tick();
  EXPECT_THAT(a.Stops(), SizeIs(1));
  // It runs elsewhere and can still succeed: no restart was used.
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_EXITED, 143));
  FakeConnection& b = Connect("b", 1);
  ASSERT_THAT(b.Starts(), SizeIs(1));
  Report("b", Status(b.Starts()[0], v1::TASK_STATE_RUNNING));
  Report("b", Status(b.Starts()[0], v1::TASK_STATE_EXITED, 1));
  // max_restarts 0: this failure ends it, but it was its first failure.
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(core_->Stats().counters.restarts, 0);
}

TEST_F(CoordinatorPolicyTest, Down_StopsAndRequeuesAtOnce_SurvivesAgentAndCoordinatorRestart) {
  Start();
  FakeConnection& a = Connect("a", 1);
  const int64_t id = Submit(Gang(1));
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_RUNNING));
  EXPECT_THAT(core_->UpdateNodes(NodeAction(v1::NODE_ACTION_DOWN, "a", ""), "ops"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("reason:")));
  EXPECT_THAT(core_->UpdateNodes(NodeAction(v1::NODE_ACTION_DOWN, "zz", "x"), "ops"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no node zz")));
  TC_ASSERT_OK(core_->UpdateNodes(NodeAction(v1::NODE_ACTION_DOWN, "a", "PSU"), "ops"));
  ASSERT_THAT(a.Stops(), SizeIs(1));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(Job(id).attempts(0).reason(), HasSubstr("node a was set DOWN by ops (PSU)"));
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_EXITED, 143));

  // The agent restarts: the node stays down, the job stays pending.
  core_->AgentDisconnected("a", &a);
  FakeConnection& again = Connect("a", 1);
  EXPECT_THAT(again.Starts(), SizeIs(0));
  EXPECT_EQ(core_->ListNodes()[0].service_state(), v1::NODE_SERVICE_STATE_DOWN);
  // So does a coordinator restart (the state is stored with the node).
  Start();
  ASSERT_THAT(core_->ListNodes(), SizeIs(1));
  EXPECT_EQ(core_->ListNodes()[0].node().admin().state(), v1::NODE_ADMIN_STATE_DOWN);
  EXPECT_EQ(core_->ListNodes()[0].node().admin().reason(), "PSU");
  FakeConnection& after = Connect("a", 1);
  EXPECT_THAT(after.Starts(), SizeIs(0));
  TC_ASSERT_OK(core_->UpdateNodes(NodeAction(v1::NODE_ACTION_RESUME, "a"), "ops"));
  ASSERT_THAT(after.Starts(), SizeIs(1));
  EXPECT_EQ(after.Starts()[0].task().job_id(), id);
}

TEST_F(CoordinatorPolicyTest, GpuMissingAtRegistration_DrainsTheNodeAutomatically) {
  Start();
  core_->AgentDisconnected("a", &Connect("a", 2));
  FakeConnection& again = Connect("a", 1);  // GPU 1 fell off the bus
  const v1::NodeView view = core_->ListNodes()[0];
  EXPECT_EQ(view.service_state(), v1::NODE_SERVICE_STATE_DRAINED);
  EXPECT_TRUE(view.node().admin().automatic());
  EXPECT_EQ(view.node().admin().by(), "trainctl");
  EXPECT_THAT(view.node().admin().reason(), HasSubstr("GPU lost: GPU 1 (GPU-a-1)"));
  Submit(Gang(1));
  EXPECT_THAT(again.Starts(), SizeIs(0));
}

}  // namespace
}  // namespace trainctl::coord
