#include "coordinator/dependency.h"

#include <map>

#include "absl/strings/str_cat.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::HasSubstr;

// A little world of jobs for the evaluation: id -> facts.
class World {
 public:
  void Set(int64_t id, v1::JobState state, bool started = false, const std::string& user = "ann") {
    DepJobFacts f;
    f.state = state;
    f.started = started || state != v1::JOB_STATE_PENDING;
    f.user = user;
    jobs_[id] = f;
  }
  // An array of `n` tasks, ids first..first+n-1, task ids 0..n-1, PENDING.
  void Array(int64_t first, int n) {
    for (int k = 0; k < n; ++k) {
      Set(first + k, v1::JOB_STATE_PENDING);
      jobs_[first + k].array_job_id = first;
      jobs_[first + k].task_id = k;
      jobs_[first + k].task_count = n;
    }
  }
  void State(int64_t id, v1::JobState s) {
    jobs_[id].state = s;
    jobs_[id].started = jobs_[id].started || s != v1::JOB_STATE_PENDING;
  }
  std::optional<DepJobFacts> operator()(int64_t id) const {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::map<int64_t, DepJobFacts> jobs_;
};

Dependency Parse(absl::string_view s) {
  absl::StatusOr<Dependency> d = ParseDependency(s);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : Dependency{};
}

DepVerdict Eval(absl::string_view s, const World& w, DepSelf self = {100, false, 0},
                std::vector<SingletonPeer> peers = {}) {
  return EvaluateDependency(Parse(s), self, [&](int64_t id) { return w(id); }, peers);
}

TEST(ParseDependencyTest, SlurmSyntaxAllOfAndAnyOf) {
  Dependency d = Parse("afterok:12:13,afterany:14,afternotok:15,after:16");
  EXPECT_FALSE(d.any_of);
  ASSERT_EQ(d.conditions.size(), 5u);
  EXPECT_EQ(d.conditions[1], (DepCondition{DepType::kAfterOk, 13}));
  EXPECT_EQ(d.conditions[4], (DepCondition{DepType::kAfter, 16}));
  EXPECT_EQ(FormatDependency(d), "afterok:12,afterok:13,afterany:14,afternotok:15,after:16");
  EXPECT_EQ(d.JobIds(), (std::vector<int64_t>{12, 13, 14, 15, 16}));

  Dependency any = Parse("afterok:20:21?afterany:23");
  EXPECT_TRUE(any.any_of);
  EXPECT_EQ(any.conditions.size(), 3u);
  EXPECT_TRUE(Parse("singleton").HasSingleton());
  EXPECT_TRUE(Parse("").conditions.empty());
  EXPECT_EQ(Parse("aftercorr:7").conditions[0].type, DepType::kAfterCorr);
}

TEST(ParseDependencyTest, RefusesBadSyntaxWithTheReason) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {"afterok:1,afterany:2?afterok:3", "mixes ','"},
           {"afterfoo:1", "unknown dependency type \"afterfoo\""},
           {"afterok", "needs a job id"},
           {"afterok:", "is not a job id"},
           {"afterok:x", "\"x\" is not a job id"},
           {"afterok:0", "is not a job id"},
           {"afterok:-3", "is not a job id"},
           {"afterok:12+5", "+time"},
           {"afterok:12_3", "is not a job id"},
           {"singleton:4", "singleton takes no job id"},
           {"afterok:1,,afterok:2", "empty condition"},
       }) {
    absl::StatusOr<Dependency> d = ParseDependency(c.text);
    ASSERT_FALSE(d.ok()) << c.text;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(d.status().message(), HasSubstr(c.says)) << c.text;
  }
  std::string many = "afterok";
  for (int i = 1; i <= kMaxDependencyJobs + 1; ++i) absl::StrAppend(&many, ":", i);
  EXPECT_THAT(ParseDependency(many).status().message(), HasSubstr("more than"));
}

TEST(EvaluateDependencyTest, EachTypeHasSlurmsMeaning) {
  World w;
  w.Set(12, v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Eval("afterok:12", w).outcome, DepOutcome::kWaiting);
  EXPECT_EQ(Eval("afterok:12", w).reason,
            "waiting for dependency afterok:12 (job 12 running)");
  EXPECT_EQ(Eval("after:12", w).outcome, DepOutcome::kSatisfied);
  EXPECT_EQ(Eval("afterany:12", w).outcome, DepOutcome::kWaiting);

  w.Set(13, v1::JOB_STATE_PENDING);
  EXPECT_EQ(Eval("after:13", w).outcome, DepOutcome::kWaiting);

  w.State(12, v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Eval("afterok:12", w).outcome, DepOutcome::kSatisfied);
  EXPECT_EQ(Eval("afterany:12", w).outcome, DepOutcome::kSatisfied);
  const DepVerdict never = Eval("afternotok:12", w);
  EXPECT_EQ(never.outcome, DepOutcome::kNever);
  EXPECT_EQ(never.reason, "dependency can never be met: afternotok:12 (job 12 succeeded)");

  w.Set(14, v1::JOB_STATE_FAILED);
  EXPECT_EQ(Eval("afternotok:14", w).outcome, DepOutcome::kSatisfied);
  EXPECT_EQ(Eval("afterok:14", w).reason,
            "dependency can never be met: afterok:14 (job 14 failed)");
  w.Set(15, v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(Eval("afternotok:15", w).outcome, DepOutcome::kSatisfied);
  EXPECT_EQ(Eval("after:15", w).outcome, DepOutcome::kSatisfied);
  EXPECT_EQ(Eval("afterok:15", w).outcome, DepOutcome::kNever);
  EXPECT_EQ(Eval("afterok:99", w).outcome, DepOutcome::kNever);
}

TEST(EvaluateDependencyTest, AllOfEndsAtOnceAnyOfOnlyWithoutAlternative) {
  World w;
  w.Set(1, v1::JOB_STATE_RUNNING);
  w.Set(2, v1::JOB_STATE_FAILED);
  w.Set(3, v1::JOB_STATE_SUCCEEDED);
  // `,`: one never-satisfiable condition ends it although another waits.
  EXPECT_EQ(Eval("afterany:1,afterok:2", w).outcome, DepOutcome::kNever);
  // `?`: an alternative that can still hold keeps it waiting.
  const DepVerdict waits = Eval("afterok:2?afterok:1", w);
  EXPECT_EQ(waits.outcome, DepOutcome::kWaiting);
  EXPECT_EQ(waits.reason, "waiting for dependency afterok:1 (job 1 running)");
  EXPECT_EQ(Eval("afterok:2?afterok:3", w).outcome, DepOutcome::kSatisfied);
  w.State(1, v1::JOB_STATE_CANCELLED);
  const DepVerdict never = Eval("afterok:2?afterok:1", w);
  EXPECT_EQ(never.outcome, DepOutcome::kNever);
  EXPECT_THAT(never.reason, HasSubstr("afterok:2 (job 2 failed); afterok:1 (job 1 cancelled)"));
  EXPECT_EQ(Eval("afterok:3,afterany:2", w).outcome, DepOutcome::kSatisfied);
}

TEST(EvaluateDependencyTest, ArrayIdMeansEveryTaskAndAftercorrTheSameIndex) {
  World w;
  w.Array(10, 3);  // jobs 10, 11, 12
  w.State(10, v1::JOB_STATE_SUCCEEDED);
  w.State(11, v1::JOB_STATE_RUNNING);
  const DepVerdict v = Eval("afterok:10", w);
  EXPECT_EQ(v.outcome, DepOutcome::kWaiting);
  EXPECT_EQ(v.reason, "waiting for dependency afterok:10 (job 11 of array 10 running)");
  // Task 0 of another array waits only for task 0 of array 10.
  EXPECT_EQ(Eval("aftercorr:10", w, {50, true, 0}).outcome, DepOutcome::kSatisfied);
  EXPECT_EQ(Eval("aftercorr:10", w, {51, true, 1}).outcome, DepOutcome::kWaiting);
  EXPECT_EQ(Eval("aftercorr:10", w, {59, true, 7}).outcome, DepOutcome::kNever);
  w.State(11, v1::JOB_STATE_SUCCEEDED);
  w.State(12, v1::JOB_STATE_FAILED);
  EXPECT_EQ(Eval("afterok:10", w).reason,
            "dependency can never be met: afterok:10 (job 12 of array 10 failed)");
  EXPECT_EQ(Eval("afterany:10", w).outcome, DepOutcome::kSatisfied);
  EXPECT_EQ(Eval("aftercorr:10", w, {51, true, 1}).outcome, DepOutcome::kSatisfied);
  EXPECT_EQ(Eval("aftercorr:10", w, {52, true, 2}).outcome, DepOutcome::kNever);
  // A task of the array named by its own id is that task only.
  EXPECT_EQ(Eval("afterok:11", w).outcome, DepOutcome::kSatisfied);
}

TEST(EvaluateDependencyTest, SingletonWaitsForRunningAndEarlierSingletons) {
  World w;
  const DepSelf self{20, false, 0};
  EXPECT_EQ(Eval("singleton", w, self, {{20, v1::JOB_STATE_PENDING, true}}).outcome,
            DepOutcome::kSatisfied);
  const DepVerdict v =
      Eval("singleton", w, self, {{7, v1::JOB_STATE_RUNNING, false}, {20, v1::JOB_STATE_PENDING, true}});
  EXPECT_EQ(v.outcome, DepOutcome::kWaiting);
  EXPECT_EQ(v.reason, "waiting for dependency singleton (job 7 running)");
  EXPECT_EQ(Eval("singleton", w, self, {{8, v1::JOB_STATE_PENDING, true}}).outcome,
            DepOutcome::kWaiting);
  // A later singleton, or an earlier job that waits without singleton, does
  // not hold it back.
  EXPECT_EQ(Eval("singleton", w, self,
                 {{30, v1::JOB_STATE_PENDING, true}, {9, v1::JOB_STATE_PENDING, false}})
                .outcome,
            DepOutcome::kSatisfied);
}

TEST(CheckDependencyAtSubmitTest, RefusesWhatSlurmRefuses) {
  World w;
  w.Set(5, v1::JOB_STATE_RUNNING, false, "ann");
  w.Set(6, v1::JOB_STATE_RUNNING, false, "bob");
  w.Set(7, v1::JOB_STATE_FAILED, false, "ann");
  w.Set(8, v1::JOB_STATE_PENDING, false, "ann");
  auto check = [&](absl::string_view s, DepSelf self, bool admin = false) {
    return CheckDependencyAtSubmit(Parse(s), self, [&](int64_t id) { return w(id); }, "ann",
                                   admin);
  };
  EXPECT_TRUE(check("afterok:5", {10}).ok());
  absl::Status unknown = check("afterok:9", {10});
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.message(), HasSubstr("spec.dependency: afterok:9: job 9 does not exist"));
  EXPECT_THAT(check("afterok:10", {10}).message(), HasSubstr("may not depend on itself"));
  EXPECT_THAT(check("afterok:11", {10}).message(), HasSubstr("only depend on an earlier one"));
  absl::Status other = check("afterok:6", {10});
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(other.message(), HasSubstr("belongs to user bob"));
  EXPECT_TRUE(check("afterok:6", {10}, /*admin=*/true).ok());
  absl::Status never = check("afterok:7", {10});
  EXPECT_EQ(never.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(never.message(), HasSubstr("can never be met: afterok:7 (job 7 failed)"));
  // With an alternative that can still hold, it is accepted.
  EXPECT_TRUE(check("afterok:7?afterok:5", {10}).ok());
  EXPECT_THAT(check("aftercorr:5", {10}).message(), HasSubstr("needs the dependent job to be an array"));
  EXPECT_THAT(check("aftercorr:5", {10, true, 0}).message(), HasSubstr("is not a job array"));
  EXPECT_TRUE(check("singleton", {10}).ok());
}

}  // namespace
}  // namespace trainctl::coord
