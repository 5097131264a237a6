#include "coordinator/dependency_index.h"

#include "absl/container/flat_hash_map.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

v1::Job MakeJob(int64_t id, const std::string& dependency, const std::string& name = "j",
                const std::string& user = "ann", int64_t array = 0) {
  v1::Job job;
  job.set_id(id);
  job.set_state(v1::JOB_STATE_PENDING);
  job.mutable_spec()->set_name(name);
  job.mutable_spec()->set_user(user);
  job.mutable_spec()->set_dependency(dependency);
  if (array != 0) job.mutable_spec()->mutable_array()->set_array_job_id(array);
  return job;
}

TEST(DependencyIndexTest, DependentsOfAJobAndOfItsArray) {
  DependencyIndex idx;
  idx.Add(MakeJob(1, "", "a"));
  idx.Add(MakeJob(2, "", "a", "ann", /*array=*/1));
  idx.Add(MakeJob(3, "afterok:1", "b"));
  idx.Add(MakeJob(4, "afterany:2?after:1", "c"));
  // A job with a dependency starts blocked until it is evaluated.
  EXPECT_TRUE(idx.Blocked(3));
  EXPECT_FALSE(idx.Blocked(1));
  EXPECT_THAT(idx.Affected(MakeJob(1, "", "a")), ElementsAre(3, 4));
  // Task 2 of array 1: those waiting on it and on the array.
  EXPECT_THAT(idx.Affected(MakeJob(2, "", "a", "ann", 1)), ElementsAre(3, 4));
  EXPECT_THAT(idx.WithDependency(), ElementsAre(3, 4));
  ASSERT_NE(idx.DependencyOf(4), nullptr);
  EXPECT_TRUE(idx.DependencyOf(4)->any_of);
  EXPECT_EQ(idx.DependencyOf(1), nullptr);

  // An ended dependent leaves the index.
  idx.Remove(3);
  EXPECT_FALSE(idx.Blocked(3));
  EXPECT_THAT(idx.Affected(MakeJob(1, "", "a")), ElementsAre(4));
  idx.Remove(4);
  EXPECT_THAT(idx.Affected(MakeJob(1, "", "a")), IsEmpty());
}

TEST(DependencyIndexTest, SingletonGroupsAreNameAndUser) {
  DependencyIndex idx;
  idx.Add(MakeJob(1, "", "train"));
  idx.Add(MakeJob(2, "singleton", "train"));
  idx.Add(MakeJob(3, "singleton", "train", "bob"));
  idx.Add(MakeJob(4, "singleton", "eval"));
  EXPECT_THAT(idx.GroupOf(2), ElementsAre(1, 2));
  EXPECT_THAT(idx.GroupOf(3), ElementsAre(3));
  // A change of job 1 concerns the singleton jobs of ann's "train" only.
  EXPECT_THAT(idx.Affected(MakeJob(1, "", "train")), ElementsAre(2));
  idx.Remove(1);
  EXPECT_THAT(idx.GroupOf(2), ElementsAre(2));
}

TEST(DependencyIndexTest, WorklistKeepsEachJobOnceInOrder) {
  DependencyIndex idx;
  idx.MarkDirty({5, 3, 5});
  idx.MarkDirty({3, 7});
  EXPECT_EQ(idx.TakeDirty(), 5);
  EXPECT_EQ(idx.TakeDirty(), 3);
  EXPECT_EQ(idx.TakeDirty(), 7);
  EXPECT_EQ(idx.TakeDirty(), 0);
  idx.SetBlocked(9, true);
  EXPECT_EQ(idx.blocked_count(), 1u);
  idx.SetBlocked(9, false);
  EXPECT_EQ(idx.blocked_count(), 0u);
}

// Job 3 waits for job 1 (afterok); job 4 has a string no parser takes (a
// record written without submit's checks); job 5 is a singleton behind a
// running job of its group; job 6 is not pending any more.
TEST(DependencyIndexTest, JudgeNextEvaluatesRecordsAndSaysWhatToDo) {
  DependencyIndex idx;
  absl::flat_hash_map<int64_t, v1::JobState> states = {
      {1, v1::JOB_STATE_RUNNING}, {2, v1::JOB_STATE_RUNNING}, {3, v1::JOB_STATE_PENDING},
      {4, v1::JOB_STATE_PENDING}, {5, v1::JOB_STATE_PENDING}, {6, v1::JOB_STATE_SUCCEEDED}};
  idx.Add(MakeJob(1, "", "a"));
  idx.Add(MakeJob(2, "", "seg"));
  idx.Add(MakeJob(3, "afterok:1", "b"));
  idx.Add(MakeJob(4, "afterok:", "c"));
  idx.Add(MakeJob(5, "singleton", "seg"));
  idx.Add(MakeJob(6, "afterok:1", "d"));
  auto state = [&](int64_t id) -> std::optional<v1::JobState> {
    auto it = states.find(id);
    if (it == states.end()) return std::nullopt;
    return it->second;
  };
  auto facts = [&](int64_t id) -> std::optional<DepJobFacts> {
    auto it = states.find(id);
    if (it == states.end()) return std::nullopt;
    DepJobFacts f;
    f.state = it->second;
    f.started = it->second != v1::JOB_STATE_PENDING;
    f.user = "ann";
    return f;
  };
  idx.MarkDirty({6, 3, 4, 5});
  // 6 is not pending: skipped. 3 waits (and stays blocked).
  std::optional<DependencyIndex::Judgement> j = idx.JudgeNext(state, facts);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->id, 3);
  EXPECT_EQ(j->verdict.outcome, DepOutcome::kWaiting);
  EXPECT_EQ(j->verdict.reason, "waiting for dependency afterok:1 (job 1 running)");
  EXPECT_TRUE(idx.Blocked(3));
  j = idx.JudgeNext(state, facts);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->id, 4);
  EXPECT_EQ(j->verdict.outcome, DepOutcome::kNever);
  EXPECT_THAT(j->verdict.reason, ::testing::StartsWith(
                                     "dependency can never be met: \"afterok:\" does not parse"));
  j = idx.JudgeNext(state, facts);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->id, 5);
  EXPECT_EQ(j->verdict.outcome, DepOutcome::kWaiting);
  EXPECT_FALSE(idx.JudgeNext(state, facts).has_value());

  // Job 1 succeeds: job 3 is satisfied and unblocked, once.
  states[1] = v1::JOB_STATE_SUCCEEDED;
  idx.MarkDirty({3});
  j = idx.JudgeNext(state, facts);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->verdict.outcome, DepOutcome::kSatisfied);
  EXPECT_TRUE(j->unblocked);
  EXPECT_FALSE(idx.Blocked(3));
  idx.MarkDirty({3});
  j = idx.JudgeNext(state, facts);
  ASSERT_TRUE(j.has_value());
  EXPECT_FALSE(j->unblocked);
}

}  // namespace
}  // namespace trainctl::coord
