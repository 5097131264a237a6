#include "coordinator/job_waiters.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

// A waiter that appends `name` to `log` when answered.
JobWaiters::Done Note(std::vector<std::string>* log, std::string name) {
  return [log, name](absl::StatusOr<v1::Job>) { log->push_back(name); };
}

TEST(JobWaitersTest, AJobThatEnds_AnswersAllItsWaitersAndNoOther) {
  JobWaiters w;
  std::vector<std::string> log;
  w.Add(1, kT0 + absl::Seconds(5), Note(&log, "a"));
  w.Add(1, kT0 + absl::Seconds(9), Note(&log, "b"));
  w.Add(2, kT0 + absl::Seconds(5), Note(&log, "c"));
  std::vector<JobWaiters::Done> done = w.TakeAll(1);
  ASSERT_EQ(done.size(), 2u);
  for (auto& d : done) d(v1::Job());
  EXPECT_EQ(log, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(w.size(), 1u);
  EXPECT_TRUE(w.TakeAll(1).empty());  // answered once
}

TEST(JobWaitersTest, Expire_AnswersOnlyWaitersPastTheirDeadline) {
  JobWaiters w;
  std::vector<std::string> log;
  w.Add(7, kT0 + absl::Seconds(5), Note(&log, "early"));
  w.Add(7, kT0 + absl::Seconds(10), Note(&log, "late"));
  w.Add(3, kT0 + absl::Seconds(5), Note(&log, "other job"));
  EXPECT_TRUE(w.Expire(kT0 + absl::Seconds(4)).empty());
  std::vector<JobWaiters::Expired> due = w.Expire(kT0 + absl::Seconds(5));
  ASSERT_EQ(due.size(), 2u);
  EXPECT_EQ(due[0].job_id, 3);  // job id order
  EXPECT_EQ(due[1].job_id, 7);
  for (auto& e : due) e.done(v1::Job());
  EXPECT_EQ(log, (std::vector<std::string>{"other job", "early"}));
  EXPECT_EQ(w.size(), 1u);  // "late" still waits
  ASSERT_EQ(w.TakeAll(7).size(), 1u);
}

}  // namespace
}  // namespace trainctl::coord
