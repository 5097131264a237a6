// Tier 1 tests of the pre-flight of gangs (docs/preflight.md) in the
// coordinator core: a FakeClock, a MemoryStateStore and fake agent
// connections. The "probe" is whatever these tests report back for the
// probe tasks the coordinator starts: no process, no NCCL.

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
using FakeConnection = ::trainctl::coord::testing::FakeAgentConnection;

constexpr int64_t kGiB = int64_t{1} << 30;

v1::RegisterNode NodeReg(const std::string& name, int gpus) {
  return ::trainctl::coord::testing::FakeNodeRegistration(name, gpus, /*cpu_count=*/8);
}

// A 2-node gang, one GPU per node.
v1::JobSpec TwoNodeGang() {
  v1::JobSpec spec;
  spec.add_command("python");
  spec.add_command("ddp.py");
  spec.set_nodes(2);
  spec.set_gpus_per_node(1);
  return spec;
}

v1::AgentMessage Running(const v1::StartTask& start) {
  v1::AgentMessage msg;
  *msg.mutable_task_status()->mutable_task() = start.task();
  msg.mutable_task_status()->mutable_task()->set_pid(100 + start.task().rank());
  msg.mutable_task_status()->set_state(v1::TASK_STATE_RUNNING);
  return msg;
}

// A probe's exit with its result line: busbw in GB/s, or an error.
v1::AgentMessage ProbeExit(const v1::StartTask& start, double busbw,
                           const std::string& error = "", bool timed_out = false) {
  v1::AgentMessage msg;
  v1::TaskStatus* st = msg.mutable_task_status();
  *st->mutable_task() = start.task();
  st->set_state(v1::TASK_STATE_EXITED);
  st->set_exit_code(error.empty() ? 0 : 1);
  v1::PreflightProbeResult* r = st->mutable_preflight_result();
  r->set_rank(start.task().rank());
  r->set_comm_ready_ms(error.empty() ? 150 : 0);
  r->set_busbw_gbps(busbw);
  r->set_error(error);
  r->set_timed_out(timed_out);
  return msg;
}

class PreflightTest : public ::testing::Test {
 protected:
  void SetUp() override { Restart(); }

  void Restart() {
    core_.reset();
    CoordinatorConfig config;
    config.advertise_address = "coord.example:50051";
    config.preflight.auto_enabled = true;
    config.preflight.timeout = absl::Seconds(60);
    config.preflight.max_failures = max_failures_;
    auto core = Coordinator::Create(config, &store_, &clock_);
    ASSERT_THAT(core, ::trainctl::testing::IsOk());
    core_ = std::move(*core);
  }

  FakeConnection& Connect(const std::string& name, int gpus = 1,
                          std::vector<v1::TaskRef> running = {},
                          bool probe_tasks = true) {
    auto& conn = conns_[name];
    conn = std::make_unique<FakeConnection>();
    v1::RegisterNode reg = NodeReg(name, gpus);
    reg.set_probe_tasks(probe_tasks);
    for (const v1::TaskRef& r : running) *reg.add_running_tasks() = r;
    EXPECT_THAT(core_->RegisterAgent(reg, conn.get()), ::trainctl::testing::IsOk());
    return *conn;
  }

  void Report(const std::string& node, const v1::AgentMessage& msg) {
    TC_ASSERT_OK(core_->HandleAgentMessage(node, conns_[node].get(), msg));
  }

  // The StartTasks sent to `node` since the last call for it.
  std::vector<v1::StartTask> NewStarts(const std::string& node) {
    std::vector<v1::StartTask> all = conns_[node]->Starts();
    size_t& seen = seen_starts_[node];
    std::vector<v1::StartTask> out(all.begin() + seen, all.end());
    seen = all.size();
    return out;
  }

  v1::Job Job(int64_t id) { return *core_->GetJob(id); }

  // Advances the clock by `d` in 5 s steps, every agent heartbeating and the
  // coordinator ticking at each (nodes stay alive; deadlines fire).
  void PassTime(absl::Duration d) {
    for (absl::Duration done; done < d; done += absl::Seconds(5)) {
      clock_.Advance(absl::Seconds(5));
      for (auto& [name, conn] : conns_) {
        v1::AgentMessage hb;
        hb.mutable_heartbeat();
        Report(name, hb);
      }
      core_->Tick();
    }
  }

  int max_failures_ = 3;
  FakeClock clock_;
  MemoryStateStore store_;
  std::unique_ptr<Coordinator> core_;
  std::map<std::string, std::unique_ptr<FakeConnection>> conns_;
  std::map<std::string, size_t> seen_starts_;
};

// An agent from before probes were tasks of their own would take a probe
// and the job's rank of the same attempt for one task: a gang with such a
// node starts without a pre-flight, and its ranks run as usual.
TEST_F(PreflightTest, AnOlderAgent_GetsNoProbe_TheGangStartsWithout) {
  Connect("a");
  Connect("b", 1, {}, /*probe_tasks=*/false);
  auto id = core_->SubmitJob(TwoNodeGang(), "");
  TC_ASSERT_OK(id);
  std::vector<v1::StartTask> pa = NewStarts("a"), pb = NewStarts("b");
  ASSERT_THAT(pa, SizeIs(1));
  ASSERT_THAT(pb, SizeIs(1));
  EXPECT_FALSE(pa[0].has_preflight());
  EXPECT_FALSE(pb[0].has_preflight());
  EXPECT_EQ(pb[0].task().probe_run(), 0);
  EXPECT_EQ(Job(*id).preflight().runs_size(), 0);
}

TEST_F(PreflightTest, Pass_JobStartsOnTheSameGpus) {
  Connect("a");
  Connect("b");
  auto id = core_->SubmitJob(TwoNodeGang(), "");
  TC_ASSERT_OK(id);

  // The probes: one per rank, with their own rendezvous key and token.
  std::vector<v1::StartTask> pa = NewStarts("a"), pb = NewStarts("b");
  ASSERT_THAT(pa, SizeIs(1));
  ASSERT_THAT(pb, SizeIs(1));
  EXPECT_TRUE(pa[0].has_preflight());
  // The probe is a task of its own beside the job's rank 0 of attempt 0:
  // run 1's probe, with the job's attempt number.
  EXPECT_EQ(pa[0].task().attempt(), 0);
  EXPECT_EQ(pa[0].task().probe_run(), 1);
  EXPECT_EQ(pa[0].env().at("TRAINCTL_ATTEMPT"), "0");
  EXPECT_EQ(pa[0].env().at("TRAINCTL_PREFLIGHT"), "1");
  EXPECT_EQ(pa[0].env().at("CUDA_VISIBLE_DEVICES"), "GPU-a-0");
  EXPECT_EQ(pa[0].preflight().timeout_ms(), 45000);  // 3/4 of 60 s
  const std::string probe_token = pa[0].env().at("TRAINCTL_TOKEN");

  // Running probes do not make the job RUNNING.
  Report("a", Running(pa[0]));
  Report("b", Running(pb[0]));
  EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_THAT(Job(*id).reason(), HasSubstr("pre-flight 1"));

  Report("a", ProbeExit(pa[0], 40));
  EXPECT_THAT(NewStarts("a"), SizeIs(0));  // b's probe still runs
  Report("b", ProbeExit(pb[0], 42));

  // Passed: the job's own processes, same GPUs, attempt 0, its own token.
  std::vector<v1::StartTask> ja = NewStarts("a"), jb = NewStarts("b");
  ASSERT_THAT(ja, SizeIs(1));
  ASSERT_THAT(jb, SizeIs(1));
  EXPECT_FALSE(ja[0].has_preflight());
  EXPECT_EQ(ja[0].task().attempt(), 0);
  EXPECT_THAT(ja[0].argv(), ElementsAre("python", "ddp.py"));
  EXPECT_EQ(ja[0].env().at("CUDA_VISIBLE_DEVICES"), "GPU-a-0");
  EXPECT_EQ(jb[0].env().at("CUDA_VISIBLE_DEVICES"), "GPU-b-0");
  EXPECT_EQ(ja[0].env().at("TRAINCTL_ATTEMPT"), "0");
  EXPECT_NE(ja[0].env().at("TRAINCTL_TOKEN"), probe_token);

  v1::Job job = Job(*id);
  ASSERT_THAT(job.preflight().runs(), SizeIs(1));
  const v1::PreflightRun& run = job.preflight().runs(0);
  EXPECT_EQ(run.verdict(), v1::PREFLIGHT_VERDICT_PASSED);
  EXPECT_THAT(run.nodes(), ElementsAre("a", "b"));
  EXPECT_EQ(run.token(), "");  // a secret: users never see it
  ASSERT_THAT(run.links(), SizeIs(1));
  EXPECT_EQ(run.links(0).link_class(), v1::LINK_CLASS_NETWORK);
  EXPECT_DOUBLE_EQ(run.links(0).median_busbw_gbps(), 41);
  EXPECT_DOUBLE_EQ(run.comm_ready_max_ms(), 150);

  Report("a", Running(ja[0]));
  Report("b", Running(jb[0]));
  EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_RUNNING);
}

// Two 2-node gangs that each need every GPU of the cluster: while the first
// is in pre-flight, its probes ending one by one must not free its GPUs for
// the second, since a passing pre-flight starts the first gang's own ranks on
// exactly those GPUs.
TEST_F(PreflightTest, ProbesExitOneByOne_SecondGangWaitsForTheGpus) {
  Connect("a");
  Connect("b");
  auto first = core_->SubmitJob(TwoNodeGang(), "");
  TC_ASSERT_OK(first);
  auto second = core_->SubmitJob(TwoNodeGang(), "");
  TC_ASSERT_OK(second);
  std::vector<v1::StartTask> pa = NewStarts("a"), pb = NewStarts("b");
  ASSERT_THAT(pa, SizeIs(1));
  ASSERT_THAT(pb, SizeIs(1));
  EXPECT_EQ(pa[0].task().job_id(), *first);

  // a's probe ends first: its GPU still belongs to the first gang.
  Report("a", Running(pa[0]));
  Report("b", Running(pb[0]));
  Report("a", ProbeExit(pa[0], 40));
  EXPECT_THAT(NewStarts("a"), SizeIs(0));
  EXPECT_THAT(NewStarts("b"), SizeIs(0));
  EXPECT_EQ(Job(*second).state(), v1::JOB_STATE_PENDING);
  for (const v1::NodeView& n : core_->ListNodes()) {
    ASSERT_THAT(n.gpu_tasks(), SizeIs(1));
    ASSERT_THAT(n.gpu_tasks(0).tasks(), SizeIs(1)) << n.node().name();
    EXPECT_EQ(n.gpu_tasks(0).tasks(0).job_id(), *first);
  }

  // The pre-flight passes: the first gang's ranks start, the second waits.
  Report("b", ProbeExit(pb[0], 42));
  std::vector<v1::StartTask> ja = NewStarts("a"), jb = NewStarts("b");
  ASSERT_THAT(ja, SizeIs(1));
  ASSERT_THAT(jb, SizeIs(1));
  EXPECT_EQ(ja[0].task().job_id(), *first);
  EXPECT_EQ(jb[0].task().job_id(), *first);
  EXPECT_EQ(Job(*second).state(), v1::JOB_STATE_PENDING);
}

TEST_F(PreflightTest, SingleNodeGang_NoPreflightUnlessAsked) {
  Connect("a", 2);
  v1::JobSpec spec = TwoNodeGang();
  spec.set_nodes(0);
  spec.set_gpus_per_node(0);
  spec.set_gpus(2);
  TC_ASSERT_OK(core_->SubmitJob(spec, ""));
  std::vector<v1::StartTask> s = NewStarts("a");
  ASSERT_THAT(s, SizeIs(2));
  EXPECT_FALSE(s[0].has_preflight());

  spec.set_preflight(v1::PREFLIGHT_MODE_ON);
  Connect("b", 2);
  TC_ASSERT_OK(core_->SubmitJob(spec, ""));
  s = NewStarts("b");
  ASSERT_THAT(s, SizeIs(2));
  EXPECT_TRUE(s[0].has_preflight());
}

TEST_F(PreflightTest, PreflightOnForExperiment_InvalidArgument) {
  v1::JobSpec spec;
  spec.add_command("python");
  spec.set_preflight(v1::PREFLIGHT_MODE_ON);
  EXPECT_THAT(core_->SubmitJob(spec, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spec.preflight")));
  spec.set_preflight(static_cast<v1::PreflightMode>(9));
  EXPECT_THAT(core_->SubmitJob(spec, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spec.preflight")));
}

TEST_F(PreflightTest, SlowNode_ExcludedAndGangPlacedOnAnother) {
  Connect("a");
  Connect("b");
  Connect("c");
  auto id = core_->SubmitJob(TwoNodeGang(), "");  // max_restarts 0
  TC_ASSERT_OK(id);
  v1::Job job = Job(*id);
  const std::string first = job.tasks(0).node(), second = job.tasks(1).node();
  const std::string spare = first != "c" && second != "c" ? "c" : "b";
  std::vector<v1::StartTask> p1 = NewStarts(first), p2 = NewStarts(second);
  ASSERT_THAT(p1, SizeIs(1));
  ASSERT_THAT(p2, SizeIs(1));

  // 100 vs 10 GB/s: the second node's rank is below 50 % of its peer's 100.
  Report(first, ProbeExit(p1[0], 100));
  Report(second, ProbeExit(p2[0], 10));

  job = Job(*id);
  ASSERT_THAT(job.preflight().excluded(), SizeIs(1));
  EXPECT_EQ(job.preflight().excluded(0).node(), second);
  EXPECT_THAT(job.preflight().excluded(0).reason(), HasSubstr("is slow"));
  EXPECT_EQ(job.preflight().runs(0).verdict(), v1::PREFLIGHT_VERDICT_FAILED);
  // Placed again at once, on the first node and the spare, as attempt 1,
  // though max_restarts is 0: a failed pre-flight is not a failed run.
  EXPECT_EQ(job.state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_THAT(NewStarts(second), SizeIs(0));
  std::vector<v1::StartTask> q1 = NewStarts(first), q2 = NewStarts(spare);
  ASSERT_THAT(q1, SizeIs(1));
  ASSERT_THAT(q2, SizeIs(1));
  EXPECT_EQ(q1[0].task().attempt(), 1);
  EXPECT_EQ(q1[0].task().probe_run(), 2);

  Report(first, ProbeExit(q1[0], 100));
  Report(spare, ProbeExit(q2[0], 95));
  std::vector<v1::StartTask> j1 = NewStarts(first), j2 = NewStarts(spare);
  ASSERT_THAT(j1, SizeIs(1));
  ASSERT_THAT(j2, SizeIs(1));
  EXPECT_FALSE(j2[0].has_preflight());
  EXPECT_EQ(j2[0].env().at("CUDA_VISIBLE_DEVICES"), absl::StrCat("GPU-", spare, "-0"));
  Report(first, Running(j1[0]));
  Report(spare, Running(j2[0]));
  EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Job(*id).preflight().runs(1).verdict(), v1::PREFLIGHT_VERDICT_PASSED);
  // One run of each verdict counted; the failed one's requeue is no restart.
  const CoordinatorCounters c = core_->Stats().counters;
  EXPECT_EQ(c.preflight_runs[v1::PREFLIGHT_VERDICT_FAILED], 1);
  EXPECT_EQ(c.preflight_runs[v1::PREFLIGHT_VERDICT_PASSED], 1);
  EXPECT_EQ(c.preflight_runs[v1::PREFLIGHT_VERDICT_ABORTED], 0);
  EXPECT_EQ(c.restarts, 0);
  EXPECT_EQ(c.placements, 2);
}

TEST_F(PreflightTest, ProbeHangs_DeadlineExcludesItsNode) {
  Connect("a");
  Connect("b");
  Connect("c");
  auto id = core_->SubmitJob(TwoNodeGang(), "");
  TC_ASSERT_OK(id);
  v1::Job job = Job(*id);
  const std::string ok = job.tasks(0).node(), hung = job.tasks(1).node();
  std::vector<v1::StartTask> p1 = NewStarts(ok), p2 = NewStarts(hung);
  Report(ok, Running(p1[0]));
  Report(hung, Running(p2[0]));
  // The healthy rank gives up waiting (its own timeout); the hung one says
  // nothing.
  Report(ok, ProbeExit(p1[0], 0, "timed out waiting for the communicator",
                       /*timed_out=*/true));
  PassTime(absl::Seconds(55));
  EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_SCHEDULED);  // before the deadline
  EXPECT_THAT(Job(*id).preflight().excluded(), SizeIs(0));

  PassTime(absl::Seconds(10));  // 65 s > --preflight-timeout 60 s
  job = Job(*id);
  ASSERT_THAT(job.preflight().excluded(), SizeIs(1));
  EXPECT_EQ(job.preflight().excluded(0).node(), hung);
  EXPECT_THAT(job.preflight().excluded(0).reason(), HasSubstr("did not finish"));
  // The hung probe is told to stop.
  ASSERT_THAT(conns_[hung]->Stops(), SizeIs(1));
  EXPECT_EQ(conns_[hung]->Stops()[0].task().attempt(), 0);
  EXPECT_EQ(conns_[hung]->Stops()[0].task().probe_run(), 1);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SCHEDULED);  // placed again
  for (const v1::Task& t : job.tasks()) EXPECT_NE(t.node(), hung);
}

TEST_F(PreflightTest, RankErrors_OthersStoppedNotBlamed) {
  Connect("a");
  Connect("b");
  auto id = core_->SubmitJob(TwoNodeGang(), "");
  TC_ASSERT_OK(id);
  std::vector<v1::StartTask> pa = NewStarts("a"), pb = NewStarts("b");
  Report("a", Running(pa[0]));
  Report("b", Running(pb[0]));
  Report("b", ProbeExit(pb[0], 0, "ncclCommInitRank failed: unhandled system error"));

  // a's probe would only wait for b: stopped at once.
  ASSERT_THAT(conns_["a"]->Stops(), SizeIs(1));
  v1::Job job = Job(*id);
  ASSERT_THAT(job.preflight().excluded(), SizeIs(1));
  EXPECT_EQ(job.preflight().excluded(0).node(), "b");
  EXPECT_THAT(job.preflight().excluded(0).reason(), HasSubstr("unhandled system error"));
  EXPECT_EQ(job.preflight().runs(0).ranks(0).status(), v1::PREFLIGHT_RANK_STATUS_STOPPED);
  EXPECT_FALSE(job.preflight().runs(0).ranks(0).blamed());

  // No placement is left without b: the job waits and says why.
  EXPECT_EQ(job.state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(job.reason(), HasSubstr("excluded by pre-flight: b"));
  auto why = core_->WhyJob(*id);
  TC_ASSERT_OK(why);
  EXPECT_THAT(why->excluded_nodes(), ElementsAre(HasSubstr("b: pre-flight 1: rank 1 errored")));
  EXPECT_THAT(why->nodes(), ::testing::Contains("b: excluded for this job by a pre-flight"));
}

// Three gangs in a row exclude b (the default: 3 within an hour): b is
// drained automatically, with the count and the last verdict, by
// "trainctl"; the exclusions of the first two leave it in service.
TEST_F(PreflightTest, RepeatedExclusions_DrainTheNodeAutomatically) {
  Connect("a");
  Connect("b");
  for (int i = 0; i < 3; ++i) {
    auto id = core_->SubmitJob(TwoNodeGang(), "");
    TC_ASSERT_OK(id);
    std::vector<v1::StartTask> pa = NewStarts("a"), pb = NewStarts("b");
    ASSERT_THAT(pb, SizeIs(1)) << "gang " << i;
    Report("a", Running(pa[0]));
    Report("b", Running(pb[0]));
    Report("b", ProbeExit(pb[0], 0, "ncclCommInitRank failed: unhandled system error"));
    v1::AgentMessage stopped = Running(pa[0]);  // a's probe ends on its SIGTERM
    stopped.mutable_task_status()->set_state(v1::TASK_STATE_EXITED);
    stopped.mutable_task_status()->set_exit_code(143);
    Report("a", stopped);
    const v1::NodeAdmin admin = core_->ListNodes()[1].node().admin();
    if (i < 2) {
      EXPECT_EQ(admin.state(), v1::NODE_ADMIN_STATE_UNSPECIFIED) << "after gang " << i;
    } else {
      EXPECT_EQ(admin.state(), v1::NODE_ADMIN_STATE_DRAIN);
      EXPECT_TRUE(admin.automatic());
      EXPECT_EQ(admin.by(), "trainctl");
      EXPECT_THAT(admin.reason(), HasSubstr("excluded by pre-flights 3 times within 1h; last: "));
      EXPECT_THAT(admin.reason(), HasSubstr("unhandled system error"));
    }
    TC_ASSERT_OK(core_->CancelJob(*id));
  }
}

v1::UpdateNodesRequest NodeRequest(v1::NodeAction action, const std::string& node,
                                   bool verify = false) {
  v1::UpdateNodesRequest req;
  req.add_nodes(node);
  req.set_action(action);
  if (action != v1::NODE_ACTION_RESUME) req.set_reason("bad GPU");
  req.set_verify(verify);
  return req;
}

v1::AgentMessage Exited(const v1::StartTask& start, int code) {
  v1::AgentMessage msg = Running(start);
  msg.mutable_task_status()->set_state(v1::TASK_STATE_EXITED);
  msg.mutable_task_status()->set_exit_code(code);
  return msg;
}

// `node resume --verify`: the node's probe runs as a job of its own on all
// its GPUs although it is drained; it passes, the job runs `true`, and the
// node is back in service.
TEST_F(PreflightTest, ResumeVerify_ProbePasses_NodeResumes) {
  Connect("a", 2);
  TC_ASSERT_OK(core_->UpdateNodes(NodeRequest(v1::NODE_ACTION_DRAIN, "a"), "ops"));
  absl::StatusOr<v1::UpdateNodesResponse> r =
      core_->UpdateNodes(NodeRequest(v1::NODE_ACTION_RESUME, "a", true), "ops");
  TC_ASSERT_OK(r);
  ASSERT_EQ(r->verify_jobs().count("a"), 1u);
  const int64_t id = r->verify_jobs().at("a");
  EXPECT_EQ(r->nodes(0).node().admin().state(), v1::NODE_ADMIN_STATE_DRAIN);
  EXPECT_EQ(r->nodes(0).node().admin().verify_job_id(), id);
  EXPECT_EQ(Job(id).spec().verify_node(), "a");
  std::vector<v1::StartTask> probes = NewStarts("a");
  ASSERT_THAT(probes, SizeIs(2));
  for (const v1::StartTask& p : probes) {
    EXPECT_EQ(p.task().job_id(), id);
    EXPECT_EQ(p.task().probe_run(), 1);
    Report("a", Running(p));
  }
  for (const v1::StartTask& p : probes) Report("a", ProbeExit(p, 100));
  std::vector<v1::StartTask> ranks = NewStarts("a");
  ASSERT_THAT(ranks, SizeIs(2));
  for (const v1::StartTask& t : ranks) Report("a", Running(t));
  for (const v1::StartTask& t : ranks) Report("a", Exited(t, 0));
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_SUCCEEDED);
  const v1::NodeView view = core_->ListNodes()[0];
  EXPECT_EQ(view.node().admin().state(), v1::NODE_ADMIN_STATE_UNSPECIFIED);
  EXPECT_EQ(view.service_state(), v1::NODE_SERVICE_STATE_IN_SERVICE);
  // And it takes work again.
  v1::JobSpec one;
  one.add_command("true");
  one.set_gpus(1);
  TC_ASSERT_OK(core_->SubmitJob(one, ""));
  EXPECT_THAT(NewStarts("a"), SizeIs(1));
}

// A probe that fails fails the verify job (no second try elsewhere) and
// leaves the node drained, its reason followed by the verdict.
TEST_F(PreflightTest, ResumeVerify_ProbeFails_NodeStaysDrainedWithTheVerdict) {
  Connect("a", 1);
  Connect("b", 1);
  TC_ASSERT_OK(core_->UpdateNodes(NodeRequest(v1::NODE_ACTION_DRAIN, "a"), "ops"));
  absl::StatusOr<v1::UpdateNodesResponse> r =
      core_->UpdateNodes(NodeRequest(v1::NODE_ACTION_RESUME, "a", true), "ops");
  TC_ASSERT_OK(r);
  const int64_t id = r->verify_jobs().at("a");
  std::vector<v1::StartTask> probes = NewStarts("a");
  ASSERT_THAT(probes, SizeIs(1));
  Report("a", Running(probes[0]));
  Report("a", ProbeExit(probes[0], 0, "ncclCommInitRank failed: unhandled cuda error"));
  const v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("unhandled cuda error"));
  EXPECT_THAT(NewStarts("b"), SizeIs(0));  // never tried on another node
  const v1::NodeAdmin admin = core_->ListNodes()[0].node().admin();
  EXPECT_EQ(admin.state(), v1::NODE_ADMIN_STATE_DRAIN);
  EXPECT_EQ(admin.verify_job_id(), 0);
  EXPECT_THAT(admin.reason(), HasSubstr(absl::StrCat("bad GPU; resume --verify failed (job ", id,
                                                     "): ")));
  EXPECT_THAT(admin.reason(), HasSubstr("unhandled cuda error"));
}

// A drain's deadline spares the node's own verify job; a DOWN stops it and
// fails it (it has nowhere else to go), leaving the node down with why.
TEST_F(PreflightTest, ResumeVerify_DeadlineSparesIt_DownFailsIt) {
  Connect("a", 1);
  v1::UpdateNodesRequest drain = NodeRequest(v1::NODE_ACTION_DRAIN, "a");
  drain.set_deadline_s(10);
  TC_ASSERT_OK(core_->UpdateNodes(drain, "ops"));
  absl::StatusOr<v1::UpdateNodesResponse> r =
      core_->UpdateNodes(NodeRequest(v1::NODE_ACTION_RESUME, "a", true), "ops");
  TC_ASSERT_OK(r);
  const int64_t id = r->verify_jobs().at("a");
  ASSERT_THAT(NewStarts("a"), SizeIs(1));
  PassTime(absl::Seconds(15));  // past the deadline, heartbeating
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_THAT(conns_["a"]->Stops(), SizeIs(0));
  TC_ASSERT_OK(core_->UpdateNodes(NodeRequest(v1::NODE_ACTION_DOWN, "a"), "ops"));
  EXPECT_THAT(conns_["a"]->Stops(), SizeIs(1));
  const v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("the verify of node a was interrupted: node a was set DOWN"));
  // The DOWN record replaced the one that named the verify job: its end
  // leaves the node as the admin set it.
  const v1::NodeAdmin admin = core_->ListNodes()[0].node().admin();
  EXPECT_EQ(admin.state(), v1::NODE_ADMIN_STATE_DOWN);
  EXPECT_EQ(admin.verify_job_id(), 0);
}

TEST_F(PreflightTest, ResumeVerify_NodeStillRunningOrNotProbing_FailedPrecondition) {
  Connect("a", 1);
  v1::JobSpec one;
  one.add_command("sleep");
  one.set_gpus(1);
  TC_ASSERT_OK(core_->SubmitJob(one, ""));
  TC_ASSERT_OK(core_->UpdateNodes(NodeRequest(v1::NODE_ACTION_DRAIN, "a"), "ops"));
  EXPECT_THAT(core_->UpdateNodes(NodeRequest(v1::NODE_ACTION_RESUME, "a", true), "ops"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("still runs 1 job")));
  Connect("old", 1, {}, /*probe_tasks=*/false);
  TC_ASSERT_OK(core_->UpdateNodes(NodeRequest(v1::NODE_ACTION_DRAIN, "old"), "ops"));
  EXPECT_THAT(core_->UpdateNodes(NodeRequest(v1::NODE_ACTION_RESUME, "old", true), "ops"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("older than probe tasks")));
  // A user may not submit a verify job of their own.
  one.set_verify_node("a");
  EXPECT_THAT(core_->SubmitJob(one, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("verify_node")));
}

// An agent whose --preflight-probe is missing (the quickstart
// built none) said so at registration. That is the agent's configuration,
// not its GPUs: the gang starts on it unprobed, nothing is excluded, and
// `why` names the agent's error.
TEST_F(PreflightTest, AgentWithoutItsProbe_GangStartsUnprobed_WhySaysWhy) {
  Connect("a");
  auto& conn = conns_["b"];
  conn = std::make_unique<FakeConnection>();
  v1::RegisterNode reg = NodeReg("b", 1);
  reg.mutable_node()->set_preflight_probe_error(
      "pre-flight program /opt/bin/trainctl-fake-preflight-probe does not exist");
  TC_ASSERT_OK(core_->RegisterAgent(reg, conn.get()));
  auto id = core_->SubmitJob(TwoNodeGang(), "");
  TC_ASSERT_OK(id);

  std::vector<v1::StartTask> ja = NewStarts("a"), jb = NewStarts("b");
  ASSERT_THAT(ja, SizeIs(1));
  ASSERT_THAT(jb, SizeIs(1));
  EXPECT_FALSE(ja[0].has_preflight());  // the job's own ranks, at once
  EXPECT_FALSE(jb[0].has_preflight());
  EXPECT_THAT(ja[0].argv(), ElementsAre("python", "ddp.py"));
  Report("a", Running(ja[0]));
  Report("b", Running(jb[0]));
  v1::Job job = Job(*id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  EXPECT_THAT(job.preflight().excluded(), SizeIs(0));
  auto why = core_->WhyJob(*id);
  TC_ASSERT_OK(why);
  EXPECT_THAT(why->agent_errors(),
              ElementsAre("b: agent configuration error: pre-flight program "
                          "/opt/bin/trainctl-fake-preflight-probe does not exist"));
}

TEST_F(PreflightTest, RestartMidPreflight_JobRequeuedAndProbedAgain) {
  Connect("a");
  Connect("b");
  auto id = core_->SubmitJob(TwoNodeGang(), "");
  TC_ASSERT_OK(id);
  std::vector<v1::StartTask> pa = NewStarts("a"), pb = NewStarts("b");
  Report("a", Running(pa[0]));
  Report("b", Running(pb[0]));

  Restart();
  v1::Job job = Job(*id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_PENDING);  // not lost, not failed
  EXPECT_THAT(job.reason(), HasSubstr("restarted during pre-flight 1"));
  EXPECT_EQ(job.preflight().runs(0).verdict(), v1::PREFLIGHT_VERDICT_ABORTED);
  EXPECT_THAT(job.preflight().excluded(), SizeIs(0));
  // The new process aborted it at load: its first counted event.
  EXPECT_EQ(core_->Stats().counters.preflight_runs[v1::PREFLIGHT_VERDICT_ABORTED], 1);

  // The agents come back still running the old probes: they are told to
  // stop them, and their GPUs stay held until they exit.
  seen_starts_.clear();
  v1::TaskRef ra = pa[0].task(), rb = pb[0].task();
  ra.set_pid(100);
  rb.set_pid(101);
  Connect("a", 1, {ra});
  Connect("b", 1, {rb});
  EXPECT_THAT(conns_["a"]->Stops(), SizeIs(1));
  EXPECT_THAT(NewStarts("a"), SizeIs(0));
  v1::AgentMessage gone_a = ProbeExit(pa[0], 0, "killed");
  gone_a.mutable_task_status()->clear_preflight_result();
  v1::AgentMessage gone_b = ProbeExit(pb[0], 0, "killed");
  gone_b.mutable_task_status()->clear_preflight_result();
  Report("a", gone_a);
  Report("b", gone_b);

  // Placed again with a new pre-flight (run 2), which passes.
  std::vector<v1::StartTask> qa = NewStarts("a"), qb = NewStarts("b");
  ASSERT_THAT(qa, SizeIs(1));
  ASSERT_THAT(qb, SizeIs(1));
  EXPECT_EQ(qa[0].task().probe_run(), 2);
  Report("a", ProbeExit(qa[0], 40));
  Report("b", ProbeExit(qb[0], 40));
  std::vector<v1::StartTask> ja = NewStarts("a");
  ASSERT_THAT(ja, SizeIs(1));
  EXPECT_FALSE(ja[0].has_preflight());
  EXPECT_EQ(Job(*id).attempt(), 1);
}

TEST_F(PreflightTest, CapReached_JobFailsWithClearMessage) {
  max_failures_ = 1;
  Restart();
  Connect("a");
  Connect("b");
  auto id = core_->SubmitJob(TwoNodeGang(), "");
  TC_ASSERT_OK(id);
  std::vector<v1::StartTask> pa = NewStarts("a"), pb = NewStarts("b");
  Report("a", ProbeExit(pa[0], 0, "CUDA error: no CUDA-capable device"));
  Report("b", ProbeExit(pb[0], 0, "timed out", /*timed_out=*/true));
  v1::Job job = Job(*id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("pre-flight failed 1 times"));
  EXPECT_THAT(job.reason(), HasSubstr("no CUDA-capable device"));
}

TEST_F(PreflightTest, Cancel_MidPreflight_ProbesStoppedAndGpusFreedOnExit) {
  Connect("a");
  Connect("b");
  auto id = core_->SubmitJob(TwoNodeGang(), "");
  TC_ASSERT_OK(id);
  std::vector<v1::StartTask> pa = NewStarts("a"), pb = NewStarts("b");
  Report("a", Running(pa[0]));
  Report("b", Running(pb[0]));
  TC_ASSERT_OK(core_->CancelJob(*id));
  ASSERT_THAT(conns_["a"]->Stops(), SizeIs(1));
  EXPECT_EQ(conns_["a"]->Stops()[0].task().attempt(), 0);
  EXPECT_EQ(conns_["a"]->Stops()[0].task().probe_run(), 1);
  EXPECT_EQ(Job(*id).preflight().runs(0).verdict(), v1::PREFLIGHT_VERDICT_ABORTED);
  // The probes' exits free their GPUs: a new gang fits again.
  v1::AgentMessage ea = ProbeExit(pa[0], 0, "killed"), eb = ProbeExit(pb[0], 0, "killed");
  Report("a", ea);
  Report("b", eb);
  auto next = core_->SubmitJob(TwoNodeGang(), "");
  TC_ASSERT_OK(next);
  EXPECT_EQ(Job(*next).state(), v1::JOB_STATE_SCHEDULED);
}

}  // namespace
}  // namespace trainctl::coord
