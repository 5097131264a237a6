#include "coordinator/dependency_index.h"

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

}  // namespace
}  // namespace trainctl::coord
