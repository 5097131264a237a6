// CommitQueueStore, the simulation's kill -9 model of a group-committing
// store. FakeClock; no threads, no sleeps.

#include "tests/sim/commit_queue_store.h"

#include <optional>
#include <vector>

#include "common/clock.h"
#include "common/testing/status_matchers.h"
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

}  // namespace
}  // namespace trainctl::sim
