#include "coordinator/job_table.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::Job Job(int64_t id, const std::string& user, v1::JobState state) {
  v1::Job job;
  job.set_id(id);
  job.mutable_spec()->set_user(user);
  job.set_state(state);
  return job;
}

std::vector<int64_t> Ids(const std::vector<JobTable::Listed>& listed) {
  std::vector<int64_t> out;
  for (const JobTable::Listed& l : listed) out.push_back(l.id);
  return out;
}

// Ends job `id` (final, no live task), stores it and lets it retire.
void Retire(JobTable& t, MemoryStateStore& store, int64_t id, v1::JobState to) {
  v1::Job& job = t.at(id);
  t.CountEdge(job, job.state(), to);
  job.set_state(to);
  t.Track(job);
  ASSERT_TRUE(store.PutJob(job).ok());
  t.NoteStored(id, absl::OkStatus());
}

TEST(JobTableTest, Add_CountsStatesAndEachUsersPendingJobs) {
  JobTable t;
  t.Add(Job(1, "ann", v1::JOB_STATE_PENDING));
  t.Add(Job(2, "ann", v1::JOB_STATE_PENDING));
  t.Add(Job(3, "bob", v1::JOB_STATE_RUNNING));
  EXPECT_EQ(t.next_id(), 4);
  EXPECT_EQ(t.by_state()[v1::JOB_STATE_PENDING], 2);
  EXPECT_EQ(t.by_state()[v1::JOB_STATE_RUNNING], 1);
  std::vector<v1::JobSpec> one_more(1);
  one_more[0].set_user("ann");
  absl::Status s = t.CheckPendingLimit(one_more, 0, /*max_pending_per_user=*/2);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("user \"ann\" has 2 pending jobs"));
  one_more[0].set_user("bob");
  EXPECT_TRUE(t.CheckPendingLimit(one_more, 0, 2).ok());
  // Ann's job starts: she may queue one more.
  t.CountEdge(t.at(1), v1::JOB_STATE_PENDING, v1::JOB_STATE_SCHEDULED);
  one_more[0].set_user("ann");
  EXPECT_TRUE(t.CheckPendingLimit(one_more, 0, 2).ok());
  EXPECT_EQ(t.CheckPendingLimit(one_more, /*max_pending=*/1, 0).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(JobTableTest, ARetiredJob_LeavesMemoryButStaysKnownAndReadable) {
  MemoryStateStore store;
  JobTable t;
  t.Add(Job(1, "ann", v1::JOB_STATE_RUNNING));
  EXPECT_THAT(t.active(), ElementsAre(1));
  Retire(t, store, 1, v1::JOB_STATE_SUCCEEDED);
  EXPECT_TRUE(t.active().empty());
  t.Evict([](int64_t) { return false; });
  EXPECT_FALSE(t.contains(1));
  EXPECT_TRUE(t.Known(1));
  EXPECT_EQ(t.by_state()[v1::JOB_STATE_SUCCEEDED], 1);
  v1::Job scratch;
  absl::StatusOr<const v1::Job*> read = t.Lookup(1, &scratch, store);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ((*read)->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(t.Lookup(9, &scratch, store).status().code(), absl::StatusCode::kNotFound);
}

TEST(JobTableTest, Evict_KeepsJobsWhoseWriteFailedOrThatStillDrain) {
  MemoryStateStore store;
  JobTable t;
  t.Add(Job(1, "ann", v1::JOB_STATE_RUNNING));
  t.Add(Job(2, "ann", v1::JOB_STATE_RUNNING));
  Retire(t, store, 1, v1::JOB_STATE_FAILED);
  Retire(t, store, 2, v1::JOB_STATE_FAILED);
  t.NoteStored(1, absl::UnavailableError("disk full"));
  t.Evict([](int64_t id) { return id == 2; });  // job 2 has a task draining
  EXPECT_TRUE(t.contains(1));
  EXPECT_TRUE(t.contains(2));
  t.NoteStored(1, absl::OkStatus());  // a later write succeeded
  t.Evict([](int64_t) { return false; });
  EXPECT_FALSE(t.contains(1));
  EXPECT_FALSE(t.contains(2));
}

TEST(JobTableTest, Select_MergesMemoryAndRetiredNewestFirst_WithFilters) {
  MemoryStateStore store;
  JobTable t;
  for (int64_t id = 1; id <= 5; ++id) {
    t.Add(Job(id, id % 2 == 0 ? "bob" : "ann", v1::JOB_STATE_RUNNING));
  }
  Retire(t, store, 2, v1::JOB_STATE_SUCCEEDED);
  Retire(t, store, 3, v1::JOB_STATE_CANCELLED);
  t.Evict([](int64_t) { return false; });
  JobTable::ListFilter all;
  std::vector<JobTable::Listed> listed = t.Select(all, store);
  EXPECT_THAT(Ids(listed), ElementsAre(5, 4, 3, 2, 1));
  EXPECT_EQ(listed[2].record, nullptr);  // retired: read from the store
  EXPECT_NE(listed[0].record, nullptr);
  JobTable::ListFilter bob;
  bob.user = "bob";
  EXPECT_THAT(Ids(t.Select(bob, store)), ElementsAre(4, 2));
  JobTable::ListFilter finished;
  finished.states = {v1::JOB_STATE_SUCCEEDED, v1::JOB_STATE_CANCELLED};
  finished.limit = 1;
  EXPECT_THAT(Ids(t.Select(finished, store)), ElementsAre(3));
  JobTable::ListFilter nobody;
  nobody.user = "carol";
  EXPECT_TRUE(t.Select(nobody, store).empty());
}

TEST(JobTableTest, RequestIdsAndSweeps_OutliveRetirement) {
  MemoryStateStore store;
  JobTable t;
  v1::Job a = Job(1, "ann", v1::JOB_STATE_RUNNING);
  a.set_request_id("req-1");
  a.mutable_spec()->set_sweep_id("sw");
  t.Add(a);
  v1::Job b = Job(2, "ann", v1::JOB_STATE_PENDING);
  b.mutable_spec()->set_sweep_id("sw");
  t.Add(b);
  Retire(t, store, 1, v1::JOB_STATE_SUCCEEDED);
  t.Evict([](int64_t) { return false; });
  EXPECT_EQ(t.JobOfRequest("req-1"), 1);
  EXPECT_EQ(t.JobOfRequest("req-2"), std::nullopt);
  ASSERT_NE(t.SweepTrials("sw"), nullptr);
  EXPECT_THAT(*t.SweepTrials("sw"), ElementsAre(1, 2));
  JobTable::ListFilter sweep;
  sweep.sweep_id = "sw";
  EXPECT_THAT(Ids(t.Select(sweep, store)), ElementsAre(2, 1));
  sweep.sweep_id = "none";
  EXPECT_TRUE(t.Select(sweep, store).empty());
}

TEST(JobTableTest, ASharedEnvironment_IsKeptOnceAndDroppedWithItsLastJob) {
  MemoryStateStore store;
  JobTable t;
  v1::Job holder = Job(1, "ann", v1::JOB_STATE_RUNNING);
  (*holder.mutable_spec()->mutable_exported_env())["WANDB_PROJECT"] = "p";
  v1::Job other = Job(2, "ann", v1::JOB_STATE_RUNNING);
  other.set_exported_env_job_id(1);
  t.ShareEnv(1, holder.spec().exported_env());
  t.Add(holder);
  t.Add(other);
  const JobTable::Env* env = t.ExportedEnv(t.at(2));
  ASSERT_NE(env, nullptr);
  EXPECT_EQ(env->at("WANDB_PROJECT"), "p");
  Retire(t, store, 1, v1::JOB_STATE_SUCCEEDED);
  Retire(t, store, 2, v1::JOB_STATE_SUCCEEDED);
  t.Evict([](int64_t) { return false; });
  // Gone from memory with its last user, still readable from the holder.
  absl::StatusOr<JobTable::Env> stored = t.HolderEnv(1, store);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->at("WANDB_PROJECT"), "p");
  EXPECT_EQ(t.HolderEnv(7, store).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace trainctl::coord
