// Scheduling passes are coalesced (Coordinator::RequestScheduleLocked): a
// burst of events that queue for the coordinator's lock while it is busy is
// served by one pass over the pending queue, not one pass each; every
// placement still happens and waiting jobs still get the scheduler's reason.
//
// The burst is made deterministic with a store whose HoldCommits() (called
// under the coordinator's lock at the start of a submit or an agent message)
// blocks on a gate: the first event holds the lock while the test lines up
// the others behind it (Coordinator::EventsWaitingForLock), then opens the
// gate. FakeClock; no sleeps.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/testing/status_matchers.h"
#include "coordinator/coordinator.h"
#include "coordinator/testing/fake_agent_connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

using FakeConnection = ::trainctl::coord::testing::FakeAgentConnection;

// A MemoryStateStore whose next HoldCommits() after Arm() blocks until
// Open().
class GatedStore : public MemoryStateStore {
 public:
  void Arm() {
    absl::MutexLock lock(&gate_mu_);
    armed_ = true;
    blocked_ = false;
    open_ = false;
  }
  // Blocks until an armed HoldCommits() is blocked on the gate.
  void WaitUntilBlocked() {
    absl::MutexLock lock(&gate_mu_);
    gate_mu_.Await(absl::Condition(&blocked_));
  }
  void Open() {
    absl::MutexLock lock(&gate_mu_);
    open_ = true;
  }
  void HoldCommits() override {
    absl::MutexLock lock(&gate_mu_);
    if (!armed_) return;
    armed_ = false;
    blocked_ = true;
    gate_mu_.Await(absl::Condition(&open_));
  }

 private:
  absl::Mutex gate_mu_;
  bool armed_ = false;
  bool blocked_ = false;
  bool open_ = false;
};

v1::JobSpec WholeGpuExperiment() {
  v1::JobSpec spec;
  spec.add_command("python");
  spec.add_command("train.py");
  return spec;
}

v1::AgentMessage Exited(const v1::StartTask& start) {
  v1::AgentMessage msg;
  v1::TaskStatus* st = msg.mutable_task_status();
  *st->mutable_task() = start.task();
  st->mutable_task()->set_pid(100);
  st->set_state(v1::TASK_STATE_EXITED);
  st->set_exit_code(0);
  return msg;
}

class CoalesceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorConfig config;
    config.advertise_address = "coord.example:50051";
    config.hooks.on_schedule_pass = [this](absl::Duration) { passes_.fetch_add(1); };
    auto core = Coordinator::Create(config, &store_, &clock_);
    ASSERT_THAT(core, ::trainctl::testing::IsOk());
    core_ = std::move(*core);
    TC_ASSERT_OK(core_->RegisterAgent(
        ::trainctl::coord::testing::FakeNodeRegistration("a", 4), &conn_));
  }

  // Runs `first` on a thread and lets it block under the coordinator's lock
  // (the gate), starts `rest` on threads of their own, waits until all of
  // them queue for the lock, then opens the gate and joins everything.
  void Burst(std::function<void()> first, std::vector<std::function<void()>> rest) {
    store_.Arm();
    std::vector<std::thread> threads;
    threads.emplace_back(std::move(first));
    store_.WaitUntilBlocked();
    for (auto& fn : rest) threads.emplace_back(std::move(fn));
    // A condition with a deadline (real time only bounds a broken run).
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (core_->EventsWaitingForLock() < static_cast<int>(rest.size()) &&
           absl::Now() < deadline) {
      std::this_thread::yield();
    }
    ASSERT_EQ(core_->EventsWaitingForLock(), static_cast<int>(rest.size()));
    store_.Open();
    for (std::thread& t : threads) t.join();
  }

  v1::Job Job(int64_t id) { return *core_->GetJob(id); }

  FakeClock clock_;
  GatedStore store_;
  FakeConnection conn_;
  std::unique_ptr<Coordinator> core_;
  std::atomic<int> passes_{0};
};

TEST_F(CoalesceTest, SubmitJob_BurstOfSeven_OnePassPlacesFourAndExplainsThree) {
  // 4 whole GPUs on node a; 7 one-GPU experiments submitted at once: the
  // first holds the lock while the other 6 queue behind it.
  std::vector<int64_t> ids(7, 0);
  auto submit = [&](int i) {
    return [&, i] {
      absl::StatusOr<int64_t> id = core_->SubmitJob(WholeGpuExperiment(), "");
      ASSERT_THAT(id, ::trainctl::testing::IsOk());
      ids[i] = *id;
    };
  };
  std::vector<std::function<void()>> rest;
  for (int i = 1; i < 7; ++i) rest.push_back(submit(i));
  const int before = passes_.load();
  Burst(submit(0), std::move(rest));

  // The first submit left its pass to the queued ones, each of those to the
  // next, and the last ran one pass for all seven (not seven passes).
  EXPECT_EQ(passes_.load() - before, 1);
  TC_ASSERT_OK(core_->WaitForWrites());
  EXPECT_THAT(conn_.Starts(), SizeIs(4));
  int scheduled = 0;
  for (int64_t id : ids) {
    const v1::Job job = Job(id);
    if (job.state() == v1::JOB_STATE_SCHEDULED) {
      ++scheduled;
      continue;
    }
    // Waiting jobs carry the pass's reason, not the submit's placeholder.
    EXPECT_EQ(job.state(), v1::JOB_STATE_PENDING);
    EXPECT_THAT(job.reason(), HasSubstr("waiting for a whole free GPU"));
  }
  EXPECT_EQ(scheduled, 4);
}

TEST_F(CoalesceTest, HandleAgentMessage_BurstOfExits_OnePassStartsTheWaitingJobs) {
  // 6 experiments on 4 GPUs: 4 run, 2 wait (one pass each, no burst).
  std::vector<int64_t> ids;
  for (int i = 0; i < 6; ++i) {
    absl::StatusOr<int64_t> id = core_->SubmitJob(WholeGpuExperiment(), "");
    TC_ASSERT_OK(id);
    ids.push_back(*id);
  }
  TC_ASSERT_OK(core_->WaitForWrites());
  const std::vector<v1::StartTask> running = conn_.Starts();
  ASSERT_THAT(running, SizeIs(4));
  EXPECT_EQ(Job(ids[5]).state(), v1::JOB_STATE_PENDING);

  // The 4 running tasks exit at once: one pass serves the 4 exits.
  auto exit = [&](int i) {
    return [&, i] {
      TC_ASSERT_OK(core_->HandleAgentMessage("a", &conn_, Exited(running[i])));
    };
  };
  const int before = passes_.load();
  Burst(exit(0), {exit(1), exit(2), exit(3)});

  EXPECT_EQ(passes_.load() - before, 1);
  TC_ASSERT_OK(core_->WaitForWrites());
  EXPECT_THAT(conn_.Starts(), SizeIs(6));
  EXPECT_EQ(Job(ids[4]).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(Job(ids[5]).state(), v1::JOB_STATE_SCHEDULED);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Job(ids[i]).state(), v1::JOB_STATE_SUCCEEDED);
  }
}

TEST_F(CoalesceTest, SubmitJob_PassLeftToAFailingEvent_RunsAsItsLockIsReleased) {
  // The submit holds the lock while an agent message from a stream that is
  // not registered queues behind it. The submit leaves its pass to that
  // message and returns without waiting; the message fails before it could
  // run the pass in its section, and runs it as its lock is released.
  int64_t id = 0;
  FakeConnection stranger;
  Burst(
      [&] {
        absl::StatusOr<int64_t> got = core_->SubmitJob(WholeGpuExperiment(), "");
        ASSERT_THAT(got, ::trainctl::testing::IsOk());
        id = *got;
      },
      {[&] {
        EXPECT_THAT(core_->HandleAgentMessage("a", &stranger, v1::AgentMessage()),
                    ::trainctl::testing::StatusIs(absl::StatusCode::kFailedPrecondition,
                                                  HasSubstr("not registered")));
      }});
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_SCHEDULED);
}

TEST_F(CoalesceTest, SubmitJob_NothingQueued_PlacesBeforeReturning) {
  // Alone, an event runs its pass inline, as before coalescing: the job is
  // placed when SubmitJob returns.
  const int before = passes_.load();
  absl::StatusOr<int64_t> id = core_->SubmitJob(WholeGpuExperiment(), "");
  TC_ASSERT_OK(id);
  EXPECT_EQ(passes_.load() - before, 1);
  EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_SCHEDULED);
}

}  // namespace
}  // namespace trainctl::coord
