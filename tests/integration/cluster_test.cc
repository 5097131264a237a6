// Tier 3: an in-process cluster. One coordinator (core + gRPC services on a
// loopback port) and two agents with fake GPUs that launch real processes,
// all in this test process; the test speaks to the coordinator through the
// same gRPC API as the CLI. Waits are on conditions with deadlines: WaitJob
// long-polls, and Eventually() re-checks a condition until a deadline.

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "coordinator/coordinator.h"
#include "coordinator/grpc_service.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "trainctl/v1/service.grpc.pb.h"
#include "worker/agent.h"
#include "worker/agent_client.h"
#include "worker/hw/fake_gpu_inventory.h"
#include "worker/hw/posix_process_launcher.h"

extern char** environ;

namespace trainctl {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

constexpr absl::Duration kDeadline = absl::Seconds(60);

// Re-checks `condition` until it holds or `timeout` passes.
bool Eventually(const std::function<bool()>& condition,
                absl::Duration timeout = kDeadline) {
  const absl::Time end = absl::Now() + timeout;
  absl::Notification never;
  while (absl::Now() < end) {
    if (condition()) return true;
    never.WaitForNotificationWithTimeout(absl::Milliseconds(10));
  }
  return condition();
}

// One agent with its own fake GPUs, launcher and stream.
struct TestAgent {
  TestAgent(const std::string& name, int gpus, const std::string& log_dir,
            const std::string& coordinator)
      : inventory(worker::FakeGpuSpec{gpus, "Fake H200", int64_t{141} << 30}, name) {
    worker::AgentConfig config;
    config.node_name = name;
    config.address = "127.0.0.1";
    config.log_dir = log_dir;
    config.fake_gpus = true;
    config.cpu_count = 4;
    for (char** e = environ; *e != nullptr; ++e) {
      std::pair<std::string, std::string> kv =
          absl::StrSplit(*e, absl::MaxSplits('=', 1));
      config.base_env.insert(kv);
    }
    launcher = std::make_unique<worker::PosixProcessLauncher>();
    agent = std::make_unique<worker::Agent>(config, &inventory, launcher.get());
    session = std::make_unique<worker::GrpcAgentSession>(agent.get(), coordinator);
    thread = std::thread([this] { session->Run(); });
  }
  ~TestAgent() {
    session->Shutdown();
    thread.join();
    // The launcher kills what still runs and reports the exits to the agent:
    // it goes first.
    launcher.reset();
  }
  worker::FakeGpuInventory inventory;
  std::unique_ptr<worker::PosixProcessLauncher> launcher;
  std::unique_ptr<worker::Agent> agent;
  std::unique_ptr<worker::GrpcAgentSession> session;
  std::thread thread;
};

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/cluster-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    coord::CoordinatorConfig config;
    config.stop_grace = absl::Seconds(2);
    auto core = coord::Coordinator::Create(config, &store_, &clock_);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
    services_ = std::make_unique<coord::GrpcCoordinatorServices>(core_.get());
    int port = 0;
    auto server = coord::StartCoordinatorServer(*services_, "127.0.0.1:0", &port);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    address_ = absl::StrCat("127.0.0.1:", port);
    core_->SetAdvertiseAddress(address_);
    ticker_ = std::thread([this] {
      while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(50))) core_->Tick();
    });
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
    agents_.push_back(std::make_unique<TestAgent>("node-a", 2, dir_ + "/a", address_));
    agents_.push_back(std::make_unique<TestAgent>("node-b", 2, dir_ + "/b", address_));
    for (auto& a : agents_) ASSERT_TRUE(a->session->WaitRegistered(kDeadline));
  }

  void TearDown() override {
    agents_.clear();
    if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    if (!stop_.HasBeenNotified()) stop_.Notify();
    if (ticker_.joinable()) ticker_.join();
  }

  grpc::Status Submit(const v1::JobSpec& spec, int64_t* id) {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    v1::SubmitJobResponse resp;
    grpc::Status s = stub_->SubmitJob(&ctx, req, &resp);
    *id = resp.job_id();
    return s;
  }

  v1::Job Get(int64_t id) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::GetJobResponse resp;
    EXPECT_TRUE(stub_->GetJob(&ctx, req, &resp).ok());
    return resp.job();
  }

  // Long-polls until the job is final (or the test deadline).
  v1::Job Wait(int64_t id) {
    const absl::Time end = absl::Now() + kDeadline;
    v1::WaitJobResponse resp;
    while (absl::Now() < end) {
      grpc::ClientContext ctx;
      v1::WaitJobRequest req;
      req.set_job_id(id);
      req.set_timeout_ms(5000);
      EXPECT_TRUE(stub_->WaitJob(&ctx, req, &resp).ok());
      if (resp.done()) break;
    }
    return resp.job();
  }

  std::string Logs(int64_t id, int rank) {
    grpc::ClientContext ctx;
    v1::GetLogsRequest req;
    req.set_job_id(id);
    req.set_rank(rank);
    v1::GetLogsResponse resp;
    grpc::Status s = stub_->GetLogs(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.data();
  }

  static v1::JobSpec Shell(const std::string& script) {
    v1::JobSpec spec;
    spec.add_command("/bin/sh");
    spec.add_command("-c");
    spec.add_command(script);
    return spec;
  }

  std::string dir_;
  RealClock clock_;
  coord::MemoryStateStore store_;
  std::unique_ptr<coord::Coordinator> core_;
  std::unique_ptr<coord::GrpcCoordinatorServices> services_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  absl::Notification stop_;
  std::thread ticker_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::vector<std::unique_ptr<TestAgent>> agents_;
};

TEST_F(ClusterTest, Experiment_RunsRealProcess_LogComesBack) {
  int64_t id;
  ASSERT_TRUE(Submit(Shell("echo hello from rank $RANK on $CUDA_VISIBLE_DEVICES; "
                           "echo to-stderr >&2"),
                     &id)
                  .ok());
  v1::Job job = Wait(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason();
  ASSERT_THAT(job.tasks(), SizeIs(1));
  EXPECT_EQ(job.tasks(0).exit_code(), 0);
  const std::string log = Logs(id, 0);
  EXPECT_THAT(log, HasSubstr("hello from rank 0 on GPU-fake-node-"));
  EXPECT_THAT(log, HasSubstr("to-stderr"));
}

TEST_F(ClusterTest, Gang_FourRanksOverTwoAgents_DistinctRanksSameMasterSameId) {
  v1::JobSpec spec;
  spec.add_command(TRAINCTL_PROBE_PATH);
  spec.set_nodes(2);
  spec.set_gpus_per_node(2);
  int64_t id;
  ASSERT_TRUE(Submit(spec, &id).ok());
  v1::Job job = Wait(id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason();

  std::set<std::string> ranks, masters, ids, nodes;
  for (int r = 0; r < 4; ++r) {
    const std::string line = Logs(id, r);
    std::map<std::string, std::string> kv;
    for (absl::string_view part : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      std::pair<std::string, std::string> p =
          absl::StrSplit(absl::StripAsciiWhitespace(part), absl::MaxSplits('=', 1));
      kv.insert(p);
    }
    EXPECT_EQ(kv["RANK"], absl::StrCat(r)) << line;
    EXPECT_EQ(kv["WORLD_SIZE"], "4");
    ranks.insert(kv["RANK"]);
    masters.insert(kv["MASTER"]);
    ids.insert(kv["ID"]);
    nodes.insert(kv["NODE_RANK"]);
    EXPECT_EQ(kv["ID"].size(), 256u) << "a 128-byte ncclUniqueId in hex";
  }
  EXPECT_THAT(ranks, SizeIs(4));
  EXPECT_THAT(masters, SizeIs(1)) << "every rank gets rank 0's MASTER_ADDR:PORT";
  EXPECT_THAT(ids, SizeIs(1)) << "every rank holds the id rank 0 published";
  EXPECT_THAT(nodes, SizeIs(2));
  // Ranks 0-1 on one node, 2-3 on the other.
  EXPECT_EQ(job.tasks(0).node(), job.tasks(1).node());
  EXPECT_NE(job.tasks(0).node(), job.tasks(2).node());
}

TEST_F(ClusterTest, Cancel_RunningJobWithChildren_NoProcessLeft) {
  int64_t id;
  // A task with a background child: both must go.
  ASSERT_TRUE(Submit(Shell("sleep 1000 & sleep 1000"), &id).ok());
  ASSERT_TRUE(Eventually([&] { return Get(id).state() == v1::JOB_STATE_RUNNING; }));
  const int pgid = Get(id).tasks(0).pid();
  ASSERT_GT(pgid, 0);
  ASSERT_EQ(kill(-pgid, 0), 0) << "the task's process group runs";

  grpc::ClientContext ctx;
  v1::CancelJobRequest req;
  req.set_job_id(id);
  v1::CancelJobResponse resp;
  ASSERT_TRUE(stub_->CancelJob(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.job().state(), v1::JOB_STATE_CANCELLED);
  // The agent reports the exit once the group is gone (SIGTERM ends sh and
  // the launcher kills what is left in the group).
  ASSERT_TRUE(Eventually(
      [&] { return Get(id).tasks(0).state() == v1::TASK_STATE_EXITED; }));
  EXPECT_EQ(kill(-pgid, 0), -1);
  EXPECT_EQ(errno, ESRCH) << "no process of the task's group is left";
}

TEST_F(ClusterTest, SubmitJob_BadSpec_InvalidArgumentNamingField) {
  v1::JobSpec spec = Shell("true");
  spec.set_gpu_fraction(2);
  int64_t id;
  grpc::Status s = Submit(spec, &id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("spec.gpu_fraction"));

  v1::JobSpec empty;
  s = Submit(empty, &id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("spec.command"));
}

TEST_F(ClusterTest, SubmitJob_MoreGpusThanCluster_RefusedWithReason) {
  v1::JobSpec spec = Shell("true");
  spec.set_gpus(5);
  int64_t id;
  grpc::Status s = Submit(spec, &id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("cannot run on this cluster"));
}

TEST_F(ClusterTest, SubmitJob_MissingProgram_FailsWithStartError) {
  v1::JobSpec spec;
  spec.add_command("no-such-program-trainctl");
  int64_t id;
  ASSERT_TRUE(Submit(spec, &id).ok());
  v1::Job job = Wait(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("could not start"));
  EXPECT_THAT(job.reason(), HasSubstr("no-such-program-trainctl"));
}

TEST_F(ClusterTest, ListNodes_TwoAgents_GpusAndPackedExperiments) {
  v1::JobSpec spec = Shell("sleep 1000");
  spec.set_gpu_fraction(0.25);
  std::vector<int64_t> ids(4);
  for (auto& id : ids) ASSERT_TRUE(Submit(spec, &id).ok());
  ASSERT_TRUE(Eventually([&] {
    for (int64_t id : ids) {
      if (Get(id).state() != v1::JOB_STATE_RUNNING) return false;
    }
    return true;
  }));
  grpc::ClientContext ctx;
  v1::ListNodesResponse resp;
  ASSERT_TRUE(stub_->ListNodes(&ctx, v1::ListNodesRequest(), &resp).ok());
  ASSERT_THAT(resp.nodes(), SizeIs(2));
  // Best fit: the four quarter-GPU experiments share one GPU.
  int busy_gpus = 0;
  for (const auto& view : resp.nodes()) {
    EXPECT_EQ(view.node().gpus_size(), 2);
    EXPECT_TRUE(view.node().fake_gpus());
    for (const auto& g : view.gpu_tasks()) {
      if (g.tasks_size() > 0) {
        ++busy_gpus;
        EXPECT_EQ(g.tasks_size(), 4);
      }
    }
  }
  EXPECT_EQ(busy_gpus, 1);
}

// StreamLogs with follow, opened right after submit (before the job is
// placed): it waits for placement, sends the output as the rank writes it,
// and ends OK once the job is final and the whole log was sent.
TEST_F(ClusterTest, StreamLogs_FollowFromSubmit_WholeLogThenEnds) {
  int64_t id;
  ASSERT_TRUE(Submit(Shell("echo first; sleep 0.3; echo second; sleep 0.3; echo third"), &id).ok());
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kDeadline));
  v1::StreamLogsRequest req;
  req.set_job_id(id);
  req.set_follow(true);
  auto reader = stub_->StreamLogs(&ctx, req);
  std::string log;
  v1::StreamLogsResponse chunk;
  int chunks = 0;
  bool eof = false;
  while (reader->Read(&chunk)) {
    // Chunks are contiguous: each starts where the previous one ended.
    EXPECT_EQ(chunk.offset(), static_cast<int64_t>(log.size()));
    log += chunk.data();
    EXPECT_EQ(chunk.next_offset(), static_cast<int64_t>(log.size()));
    eof = chunk.eof();
    ++chunks;
  }
  grpc::Status s = reader->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(log, "first\nsecond\nthird\n");
  EXPECT_TRUE(eof) << "the last chunk says the log is complete";
  EXPECT_GE(chunks, 1);
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_SUCCEEDED);
}

// SIGTERM with a dashboard open on a running job: its followed log (no new
// output, so the stream waits on the core's long poll) and a WaitJob long
// poll are in flight. ShutdownServer ends them and returns; the core's
// ticker is stopped first, as in trainctl-coordinator, whose main loop stops
// ticking to shut down (the server then waited forever).
TEST_F(ClusterTest, ShutdownServer_FollowedLogAndLongPollInFlight_Returns) {
  int64_t id;
  ASSERT_TRUE(Submit(Shell("echo started; sleep 300"), &id).ok());
  grpc::ClientContext log_ctx;
  v1::StreamLogsRequest req;
  req.set_job_id(id);
  req.set_follow(true);
  auto reader = stub_->StreamLogs(&log_ctx, req);
  v1::StreamLogsResponse chunk;
  ASSERT_TRUE(reader->Read(&chunk));  // the stream is up and caught up
  EXPECT_EQ(chunk.data(), "started\n");
  std::thread poll([this, id] {
    grpc::ClientContext ctx;
    v1::WaitJobRequest wait;
    wait.set_job_id(id);
    wait.set_timeout_ms(600'000);
    v1::WaitJobResponse resp;
    stub_->WaitJob(&ctx, wait, &resp);
  });
  stop_.Notify();
  ticker_.join();
  absl::Notification returned;
  std::thread shutdown([&] {
    coord::ShutdownServer(*server_, *core_, absl::Milliseconds(200));
    returned.Notify();
  });
  const bool in_time = returned.WaitForNotificationWithTimeout(absl::Seconds(30));
  if (!in_time) {
    ADD_FAILURE() << "ShutdownServer did not return in 30 s with a followed log in flight";
    std::fflush(nullptr);
    std::_Exit(1);  // the server would hold the test forever
  }
  shutdown.join();
  poll.join();
  while (reader->Read(&chunk)) {
  }
  EXPECT_FALSE(reader->Finish().ok());  // cancelled by the shutdown
  server_.reset();
}

// Without follow the stream ends at what is there now; bad requests fail
// with the code a REST client sees as 404 / 400.
TEST_F(ClusterTest, StreamLogs_UnknownJobOrBadOffset_Errors) {
  grpc::ClientContext ctx;
  v1::StreamLogsRequest req;
  req.set_job_id(987654);
  req.set_follow(true);
  auto reader = stub_->StreamLogs(&ctx, req);
  v1::StreamLogsResponse chunk;
  EXPECT_FALSE(reader->Read(&chunk));
  grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("987654"));

  grpc::ClientContext ctx2;
  req.set_offset(-1);
  auto reader2 = stub_->StreamLogs(&ctx2, req);
  EXPECT_FALSE(reader2->Read(&chunk));
  s = reader2->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("offset"));
}

}  // namespace
}  // namespace trainctl
