// CommitQueueStore (the simulation's kill -9 model of a group-committing
// store), and the coordinator's promise it lets a test break: an end a client
// saw (GetJob, WaitJob) was stored first, so killing the coordinator right
// after never takes it back. FakeClock; no threads, no sleeps.

#include "tests/sim/commit_queue_store.h"

#include <memory>
#include <optional>
#include <vector>

#include "common/clock.h"
#include "common/testing/status_matchers.h"
#include "coordinator/coordinator.h"
#include "coordinator/testing/fake_agent_connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::sim {
namespace {

using ::trainctl::testing::IsOk;

v1::Job JobWithId(int64_t id, v1::JobState state) {
  v1::Job job;
  job.set_id(id);
  job.set_state(state);
  return job;
}

// State of job `id` in the durable store; nullopt when it holds none.
std::optional<v1::JobState> Stored(coord::MemoryStateStore& durable, int64_t id) {
  absl::StatusOr<std::vector<v1::Job>> jobs = durable.ReadJobs({id});
  if (!jobs.ok() || jobs->empty()) return std::nullopt;
  return jobs->front().state();
}

TEST(CommitQueueStoreTest, Crash_WaitedWritesKeptQueuedOnesLost) {
  FakeClock clock;
  coord::MemoryStateStore durable;
  CommitQueueStore store(&durable, &clock);
  absl::StatusOr<coord::WriteTicket> first =
      store.EnqueuePutJob(JobWithId(1, v1::JOB_STATE_PENDING));
  ASSERT_THAT(first, IsOk());
  TC_ASSERT_OK(store.WaitDurable(*first));
  ASSERT_THAT(store.EnqueuePutJob(JobWithId(2, v1::JOB_STATE_PENDING)), IsOk());
  ASSERT_THAT(store.EnqueuePutJob(JobWithId(1, v1::JOB_STATE_RUNNING)), IsOk());

  EXPECT_EQ(store.Crash(), 2);
  EXPECT_EQ(Stored(durable, 1), v1::JOB_STATE_PENDING);
  EXPECT_EQ(Stored(durable, 2), std::nullopt);
  // Nothing is written or acknowledged after the kill.
  EXPECT_EQ(store.EnqueuePutJob(JobWithId(3, v1::JOB_STATE_PENDING)).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(CommitQueueStoreTest, CommitThreadTurn_LazyWriteWaitsForAnotherOrTheFlush) {
  FakeClock clock;
  coord::MemoryStateStore durable;
  CommitQueueStore store(&durable, &clock);
  ASSERT_THAT(store.EnqueuePutJobLazily(JobWithId(1, v1::JOB_STATE_RUNNING)), IsOk());
  TC_ASSERT_OK(store.CommitThreadTurn());
  EXPECT_EQ(Stored(durable, 1), std::nullopt);
  // A write behind it commits it too, in order.
  ASSERT_THAT(store.EnqueuePutJob(JobWithId(2, v1::JOB_STATE_PENDING)), IsOk());
  TC_ASSERT_OK(store.CommitThreadTurn());
  EXPECT_EQ(Stored(durable, 1), v1::JOB_STATE_RUNNING);
  // Alone, it is committed once kLazyFlush old.
  ASSERT_THAT(store.EnqueuePutJobLazily(JobWithId(3, v1::JOB_STATE_RUNNING)), IsOk());
  clock.Advance(coord::StateStore::kLazyFlush);
  TC_ASSERT_OK(store.CommitThreadTurn());
  EXPECT_EQ(Stored(durable, 3), v1::JOB_STATE_RUNNING);
}

// A one-GPU cluster whose coordinator can be killed (kill -9) and restarted
// over what its store committed.
class KilledCoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }

  void Start() {
    store_ = std::make_unique<CommitQueueStore>(&durable_, &clock_);
    auto core = coord::Coordinator::Create(coord::CoordinatorConfig(), store_.get(), &clock_);
    ASSERT_THAT(core, IsOk());
    core_ = std::move(*core);
    conn_ = std::make_unique<coord::testing::FakeAgentConnection>();
    TC_ASSERT_OK(core_->RegisterAgent(coord::testing::FakeNodeRegistration("a", 1),
                                      conn_.get()));
  }

  void Kill() {
    store_->Crash();
    core_.reset();
    conn_.reset();
  }

  // Submits a one-GPU job; returns its id once its StartTask went out.
  int64_t SubmitStarted() {
    v1::JobSpec spec;
    spec.set_name("train");
    spec.add_command("python");
    absl::StatusOr<int64_t> id = core_->SubmitJob(spec, "");
    EXPECT_THAT(id, IsOk());
    EXPECT_EQ(conn_->Starts().size(), 1u);
    return id.value_or(0);
  }

  // The agent reports the task RUNNING, then its exit with code 0, `ran`
  // later; nobody waits for the writes.
  void ReportRanAndExited(absl::Duration ran) {
    const v1::StartTask start = conn_->Starts().front();
    v1::AgentMessage running;
    *running.mutable_task_status()->mutable_task() = start.task();
    running.mutable_task_status()->mutable_task()->set_pid(100);
    running.mutable_task_status()->set_state(v1::TASK_STATE_RUNNING);
    TC_ASSERT_OK(core_->HandleAgentMessage("a", conn_.get(), running));
    clock_.Advance(ran);
    v1::AgentMessage exited = running;
    exited.mutable_task_status()->set_state(v1::TASK_STATE_EXITED);
    exited.mutable_task_status()->set_exit_code(0);
    TC_ASSERT_OK(core_->HandleAgentMessage("a", conn_.get(), exited));
  }

  FakeClock clock_;
  coord::MemoryStateStore durable_;
  std::unique_ptr<CommitQueueStore> store_;
  std::unique_ptr<coord::Coordinator> core_;
  std::unique_ptr<coord::testing::FakeAgentConnection> conn_;
};

TEST_F(KilledCoordinatorTest, GetJobShowedSucceeded_KilledRightAfter_StillSucceeded) {
  const int64_t id = SubmitStarted();
  ReportRanAndExited(absl::Seconds(7));
  absl::StatusOr<v1::Job> seen = core_->GetJob(id);
  ASSERT_THAT(seen, IsOk());
  ASSERT_EQ(seen->state(), v1::JOB_STATE_SUCCEEDED);

  Kill();
  Start();
  absl::StatusOr<v1::Job> after = core_->GetJob(id);
  ASSERT_THAT(after, IsOk());
  EXPECT_EQ(after->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(after->end_time_ms(), seen->end_time_ms());
}

TEST_F(KilledCoordinatorTest, WaitJob_AnsweredOnlyOnceTheEndIsStored) {
  const int64_t id = SubmitStarted();
  std::optional<v1::JobState> answered, stored_then;
  core_->WaitJobAsync(id, absl::Hours(1), [&](absl::StatusOr<v1::Job> job) {
    ASSERT_THAT(job, IsOk());
    answered = job->state();
    stored_then = Stored(durable_, id);
  });
  EXPECT_EQ(answered, std::nullopt);
  ReportRanAndExited(absl::Seconds(3));
  EXPECT_EQ(answered, v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(stored_then, v1::JOB_STATE_SUCCEEDED);
}

TEST_F(KilledCoordinatorTest, EndNobodySaw_LostInTheKill_TheAgentReportsItAgain) {
  // The exit's write was still queued at the kill. The agent's registration
  // lists the exit (RegisterNode.finished_tasks): the job ends again.
  const int64_t id = SubmitStarted();
  const v1::StartTask start = conn_->Starts().front();
  ReportRanAndExited(absl::Seconds(3));
  Kill();
  store_ = std::make_unique<CommitQueueStore>(&durable_, &clock_);
  auto core = coord::Coordinator::Create(coord::CoordinatorConfig(), store_.get(), &clock_);
  ASSERT_THAT(core, IsOk());
  core_ = std::move(*core);
  conn_ = std::make_unique<coord::testing::FakeAgentConnection>();
  v1::RegisterNode again = coord::testing::FakeNodeRegistration("a", 1);
  v1::TaskStatus* done = again.add_finished_tasks();
  *done->mutable_task() = start.task();
  done->mutable_task()->set_pid(100);
  done->set_state(v1::TASK_STATE_EXITED);
  done->set_exit_code(0);
  TC_ASSERT_OK(core_->RegisterAgent(again, conn_.get()));
  absl::StatusOr<v1::Job> job = core_->GetJob(id);
  ASSERT_THAT(job, IsOk());
  EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_THAT(conn_->Starts(), ::testing::IsEmpty());
}

}  // namespace
}  // namespace trainctl::sim
