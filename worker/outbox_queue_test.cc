// The agent's send queue: exits that end together go as one batch message,
// in order, and only to a coordinator that takes batches.

#include "worker/outbox_queue.h"

#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace trainctl::worker {
namespace {

v1::AgentMessage Status(int64_t job, v1::TaskState state) {
  v1::AgentMessage m;
  m.mutable_task_status()->mutable_task()->set_job_id(job);
  m.mutable_task_status()->set_state(state);
  return m;
}

v1::AgentMessage Beat() {
  v1::AgentMessage m;
  m.mutable_heartbeat();
  return m;
}

TEST(CoalesceTaskExitsTest, Coalesce_RunOfExits_OneBatchInOrder) {
  // RUNNING 1, exits 2 3 4, heartbeat, exit 5: the run of three becomes one
  // batch; the lone exit after the heartbeat stays a plain task_status.
  std::vector<v1::AgentMessage> in = {
      Status(1, v1::TASK_STATE_RUNNING), Status(2, v1::TASK_STATE_EXITED),
      Status(3, v1::TASK_STATE_START_FAILED), Status(4, v1::TASK_STATE_EXITED),
      Beat(), Status(5, v1::TASK_STATE_EXITED)};
  std::vector<v1::AgentMessage> out = CoalesceTaskExits(in);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_TRUE(out[0].has_task_status());
  ASSERT_TRUE(out[1].has_task_status_batch());
  ASSERT_EQ(out[1].task_status_batch().statuses_size(), 3);
  EXPECT_EQ(out[1].task_status_batch().statuses(0).task().job_id(), 2);
  EXPECT_EQ(out[1].task_status_batch().statuses(2).task().job_id(), 4);
  EXPECT_TRUE(out[2].has_heartbeat());
  EXPECT_EQ(out[3].task_status().task().job_id(), 5);
}

// A writer that blocks on its first write until released, recording what it
// was given.
struct GatedWriter {
  absl::Mutex mu;
  std::vector<v1::AgentMessage> written ABSL_GUARDED_BY(mu);
  absl::Notification first_started;
  absl::Notification release;

  bool Write(const v1::AgentMessage& m) {
    bool first = false;
    {
      absl::MutexLock lock(&mu);
      first = written.empty();
      written.push_back(m);
    }
    if (first) {
      first_started.Notify();
      release.WaitForNotification();
    }
    return true;
  }
};

TEST(OutboxQueueTest, Push_ExitsWhileAWriteIsInFlight_GoAsOneBatch) {
  GatedWriter w;
  {
    OutboxQueue q([&w](const v1::AgentMessage& m) { return w.Write(m); },
                  /*batch_exits=*/true);
    q.Push(Beat());
    w.first_started.WaitForNotification();
    // The heartbeat's write is in flight: 10 exits pile up meanwhile.
    for (int64_t job = 1; job <= 10; ++job) q.Push(Status(job, v1::TASK_STATE_EXITED));
    w.release.Notify();
  }  // Close(): writes what is queued.
  absl::MutexLock lock(&w.mu);
  ASSERT_EQ(w.written.size(), 2u);
  ASSERT_TRUE(w.written[1].has_task_status_batch());
  ASSERT_EQ(w.written[1].task_status_batch().statuses_size(), 10);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(w.written[1].task_status_batch().statuses(i).task().job_id(), i + 1);
  }
}

TEST(OutboxQueueTest, Push_CoordinatorWithoutBatches_GetsOneMessagePerExit) {
  GatedWriter w;
  {
    OutboxQueue q([&w](const v1::AgentMessage& m) { return w.Write(m); },
                  /*batch_exits=*/false);
    q.Push(Beat());
    w.first_started.WaitForNotification();
    for (int64_t job = 1; job <= 3; ++job) q.Push(Status(job, v1::TASK_STATE_EXITED));
    w.release.Notify();
  }
  absl::MutexLock lock(&w.mu);
  ASSERT_EQ(w.written.size(), 4u);
  for (size_t i = 1; i < 4; ++i) EXPECT_TRUE(w.written[i].has_task_status());
}

}  // namespace
}  // namespace trainctl::worker
