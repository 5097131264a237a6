// The agent's send queue: task statuses that pile up together go as one
// batch message, in order, and only to a coordinator that takes batches.

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

TEST(CoalesceTaskStatusesTest, Coalesce_RunOfStatuses_OneBatchInOrder) {
  // RUNNING 1, exits 2 3, RUNNING 4, heartbeat, exit 5: the run of four
  // (starts and exits alike) becomes one batch; the lone exit after the
  // heartbeat stays a plain task_status.
  std::vector<v1::AgentMessage> in = {
      Status(1, v1::TASK_STATE_RUNNING), Status(2, v1::TASK_STATE_EXITED),
      Status(3, v1::TASK_STATE_START_FAILED), Status(4, v1::TASK_STATE_RUNNING),
      Beat(), Status(5, v1::TASK_STATE_EXITED)};
  std::vector<v1::AgentMessage> out = CoalesceTaskStatuses(in);
  ASSERT_EQ(out.size(), 3u);
  ASSERT_TRUE(out[0].has_task_status_batch());
  ASSERT_EQ(out[0].task_status_batch().statuses_size(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out[0].task_status_batch().statuses(i).task().job_id(), i + 1);
  }
  EXPECT_EQ(out[0].task_status_batch().statuses(3).state(), v1::TASK_STATE_RUNNING);
  EXPECT_TRUE(out[1].has_heartbeat());
  EXPECT_EQ(out[2].task_status().task().job_id(), 5);
}

TEST(CoalesceTaskStatusesTest, Coalesce_OneTasksStartAndExit_RunningFirst) {
  // A task that ended before its RUNNING was written: both in one batch,
  // RUNNING first (the coordinator records the start, then the end).
  std::vector<v1::AgentMessage> out = CoalesceTaskStatuses(
      {Status(7, v1::TASK_STATE_RUNNING), Status(7, v1::TASK_STATE_EXITED)});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].task_status_batch().statuses_size(), 2);
  EXPECT_EQ(out[0].task_status_batch().statuses(0).state(), v1::TASK_STATE_RUNNING);
  EXPECT_EQ(out[0].task_status_batch().statuses(1).state(), v1::TASK_STATE_EXITED);
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
                  /*batch_statuses=*/true);
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
                  /*batch_statuses=*/false);
    q.Push(Beat());
    w.first_started.WaitForNotification();
    for (int64_t job = 1; job <= 3; ++job) q.Push(Status(job, v1::TASK_STATE_EXITED));
    w.release.Notify();
  }
  absl::MutexLock lock(&w.mu);
  ASSERT_EQ(w.written.size(), 4u);
  for (size_t i = 1; i < 4; ++i) EXPECT_TRUE(w.written[i].has_task_status());
}

// A writer that records what it was given, for tests that wait on it.
struct RecordingWriter {
  absl::Mutex mu;
  std::vector<v1::AgentMessage> written ABSL_GUARDED_BY(mu);

  bool Write(const v1::AgentMessage& m) {
    absl::MutexLock lock(&mu);
    written.push_back(m);
    return true;
  }
  // Waits (at most 60 s) until `n` messages were written; false if not.
  bool AwaitWritten(size_t n) {
    absl::MutexLock lock(&mu);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return written.size() >= n;
    };
    return mu.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(60));
  }
};

TEST(OutboxQueueTest, Linger_FirstStatusAtOnceThenFollowersTogether) {
  RecordingWriter w;
  // A linger no test outlives: after the first status, only another kind of
  // message, the batch limit or Close() can write the next ones.
  OutboxQueue q([&w](const v1::AgentMessage& m) { return w.Write(m); },
                /*batch_statuses=*/true, absl::Hours(1));
  // Nothing written for a while: the first status does not wait.
  q.Push(Status(1, v1::TASK_STATE_RUNNING));
  ASSERT_TRUE(w.AwaitWritten(1));
  q.Push(Status(1, v1::TASK_STATE_EXITED));
  q.Push(Status(2, v1::TASK_STATE_RUNNING));
  q.Push(Status(3, v1::TASK_STATE_RUNNING));
  {
    absl::MutexLock lock(&w.mu);
    EXPECT_EQ(w.written.size(), 1u);
  }
  // The heartbeat does not wait, and takes the statuses with it, in order.
  q.Push(Beat());
  ASSERT_TRUE(w.AwaitWritten(3));
  absl::MutexLock lock(&w.mu);
  ASSERT_EQ(w.written.size(), 3u);
  EXPECT_EQ(w.written[0].task_status().state(), v1::TASK_STATE_RUNNING);
  ASSERT_TRUE(w.written[1].has_task_status_batch());
  ASSERT_EQ(w.written[1].task_status_batch().statuses_size(), 3);
  EXPECT_EQ(w.written[1].task_status_batch().statuses(0).state(), v1::TASK_STATE_EXITED);
  EXPECT_EQ(w.written[1].task_status_batch().statuses(2).task().job_id(), 3);
  EXPECT_TRUE(w.written[2].has_heartbeat());
}

TEST(OutboxQueueTest, Linger_FullBatch_WrittenWithoutWaiting) {
  RecordingWriter w;
  OutboxQueue q([&w](const v1::AgentMessage& m) { return w.Write(m); },
                /*batch_statuses=*/true, absl::Hours(1));
  q.Push(Status(0, v1::TASK_STATE_RUNNING));
  ASSERT_TRUE(w.AwaitWritten(1));
  for (size_t i = 1; i <= OutboxQueue::kMaxLingerStatuses; ++i) {
    q.Push(Status(static_cast<int64_t>(i), v1::TASK_STATE_EXITED));
  }
  ASSERT_TRUE(w.AwaitWritten(2));
  absl::MutexLock lock(&w.mu);
  ASSERT_TRUE(w.written[1].has_task_status_batch());
  EXPECT_EQ(w.written[1].task_status_batch().statuses_size(),
            static_cast<int>(OutboxQueue::kMaxLingerStatuses));
}

TEST(OutboxQueueTest, Linger_NothingFollows_StatusWrittenOnceItEnds) {
  RecordingWriter w;
  OutboxQueue q([&w](const v1::AgentMessage& m) { return w.Write(m); },
                /*batch_statuses=*/true, absl::Milliseconds(5));
  q.Push(Status(1, v1::TASK_STATE_RUNNING));
  ASSERT_TRUE(w.AwaitWritten(1));
  // Within the linger after that write, and nothing else is pushed: the exit
  // still goes, once the linger ends.
  q.Push(Status(1, v1::TASK_STATE_EXITED));
  ASSERT_TRUE(w.AwaitWritten(2));
  absl::MutexLock lock(&w.mu);
  EXPECT_EQ(w.written[1].task_status().state(), v1::TASK_STATE_EXITED);
}

TEST(OutboxQueueTest, Linger_CoordinatorWithoutBatches_NoWait) {
  RecordingWriter w;
  // An older coordinator takes no batches: nothing to wait for.
  OutboxQueue q([&w](const v1::AgentMessage& m) { return w.Write(m); },
                /*batch_statuses=*/false, absl::Hours(1));
  q.Push(Status(1, v1::TASK_STATE_EXITED));
  ASSERT_TRUE(w.AwaitWritten(1));
}

}  // namespace
}  // namespace trainctl::worker
