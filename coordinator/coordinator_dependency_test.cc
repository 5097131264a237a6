// Job dependencies through the coordinator core (dependency.h, wired in
// coordinator_jobs.cc): a FakeClock, a MemoryStateStore and fake agent
// connections. What a user sees: a waiting job's reason, when it starts,
// when it ends for a dependency that can never be met, what submit refuses,
// and the same verdicts after a restart over the same store.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/testing/status_matchers.h"
#include "coordinator/coordinator.h"
#include "coordinator/testing/fake_agent_connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::trainctl::testing::StatusIs;

constexpr int64_t kGiB = int64_t{1} << 30;
using FakeConnection = ::trainctl::coord::testing::FakeAgentConnection;

v1::JobSpec Spec(const std::string& dependency = "", const std::string& name = "j") {
  v1::JobSpec spec;
  spec.add_command("true");
  spec.set_gpus(1);
  spec.set_name(name);
  spec.set_user("ann");
  spec.set_dependency(dependency);
  return spec;
}

class DependencyTest : public ::testing::Test {
 protected:
  void SetUp() override { Restart(); }

  // A new coordinator over the same store (as after a crash).
  void Restart() {
    core_.reset();
    auto core = Coordinator::Create(CoordinatorConfig{}, &store_, &clock_);
    ASSERT_THAT(core, ::trainctl::testing::IsOk());
    core_ = std::move(*core);
  }

  FakeConnection& Connect(int gpus) {
    conn_ = std::make_unique<FakeConnection>();
    EXPECT_THAT(core_->RegisterAgent(::trainctl::coord::testing::FakeNodeRegistration(
                                         "a", gpus, 32, 80 * kGiB, "Fake H200"),
                                     conn_.get()),
                ::trainctl::testing::IsOk());
    return *conn_;
  }

  int64_t Submit(const v1::JobSpec& spec) {
    absl::StatusOr<int64_t> id = core_->SubmitJob(spec, "");
    EXPECT_THAT(id, ::trainctl::testing::IsOk());
    return id.ok() ? *id : 0;
  }

  absl::StatusOr<int64_t> SubmitAs(const v1::JobSpec& spec, const SubmitCaller& caller) {
    absl::Notification done;
    absl::StatusOr<int64_t> out;
    core_->SubmitJobAsync(spec, "", [&](absl::StatusOr<int64_t> id) {
      out = std::move(id);
      done.Notify();
    }, caller);
    done.WaitForNotification();
    return out;
  }

  absl::StatusOr<std::vector<int64_t>> SubmitBatch(std::vector<v1::JobSpec> specs) {
    absl::Notification done;
    absl::StatusOr<std::vector<int64_t>> out;
    core_->SubmitJobsAsync(std::move(specs), "", [&](absl::StatusOr<std::vector<int64_t>> ids) {
      out = std::move(ids);
      done.Notify();
    });
    done.WaitForNotification();
    return out;
  }

  // Agent "a" reports the task of job `id` (its latest start) as `state`.
  void Report(int64_t id, v1::TaskState state, int exit_code = 0) {
    for (const v1::StartTask& s : conn_->Starts()) {
      if (s.task().job_id() != id) continue;
      v1::AgentMessage msg;
      *msg.mutable_task_status()->mutable_task() = s.task();
      msg.mutable_task_status()->mutable_task()->set_pid(100);
      msg.mutable_task_status()->set_state(state);
      msg.mutable_task_status()->set_exit_code(exit_code);
      TC_ASSERT_OK(core_->HandleAgentMessage("a", conn_.get(), msg));
    }
  }
  void Finish(int64_t id, int exit_code) {
    Report(id, v1::TASK_STATE_RUNNING);
    Report(id, v1::TASK_STATE_EXITED, exit_code);
  }
  bool Started(int64_t id) {
    for (const v1::StartTask& s : conn_->Starts()) {
      if (s.task().job_id() == id) return true;
    }
    return false;
  }

  v1::Job Job(int64_t id) { return *core_->GetJob(id); }

  FakeClock clock_;
  MemoryStateStore store_;
  std::unique_ptr<Coordinator> core_;
  std::unique_ptr<FakeConnection> conn_;
};

TEST_F(DependencyTest, Pipeline_EachStepStartsOnlyAfterThePreviousSucceeded) {
  Connect(4);  // room for all three at once: only the dependencies order them
  const int64_t prep = Submit(Spec());
  const int64_t train = Submit(Spec(absl::StrCat("afterok:", prep)));
  const int64_t eval = Submit(Spec(absl::StrCat("afterok:", train)));
  EXPECT_TRUE(Started(prep));
  EXPECT_FALSE(Started(train));
  EXPECT_EQ(Job(train).state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(Job(train).reason(),
            absl::StrCat("waiting for dependency afterok:", prep, " (job ", prep, " scheduled)"));
  Report(prep, v1::TASK_STATE_RUNNING);
  EXPECT_EQ(Job(train).reason(),
            absl::StrCat("waiting for dependency afterok:", prep, " (job ", prep, " running)"));
  // `why` says the same.
  absl::StatusOr<v1::WhyJobResponse> why = core_->WhyJob(train);
  TC_ASSERT_OK(why);
  EXPECT_THAT(why->summary(), HasSubstr(absl::StrCat("waiting for dependency afterok:", prep)));

  Report(prep, v1::TASK_STATE_EXITED, 0);
  EXPECT_TRUE(Started(train));
  EXPECT_FALSE(Started(eval));
  Finish(train, 0);
  EXPECT_TRUE(Started(eval));
}

TEST_F(DependencyTest, AfterOkOnFailedJob_EndsAtOnceAndCascades_AfterAnyRuns) {
  Connect(4);
  const int64_t a = Submit(Spec());
  const int64_t b = Submit(Spec(absl::StrCat("afterok:", a)));
  const int64_t c = Submit(Spec(absl::StrCat("afterok:", b)));
  const int64_t d = Submit(Spec(absl::StrCat("afterany:", b)));
  const int64_t e = Submit(Spec(absl::StrCat("afternotok:", a)));
  Finish(a, 3);
  EXPECT_EQ(Job(a).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Job(b).state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(Job(b).reason(), absl::StrCat("dependency can never be met: afterok:", a, " (job ",
                                          a, " failed)"));
  EXPECT_EQ(Job(c).state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(Job(c).reason(), absl::StrCat("dependency can never be met: afterok:", b, " (job ",
                                          b, " cancelled)"));
  EXPECT_FALSE(Started(b));
  EXPECT_FALSE(Started(c));
  EXPECT_TRUE(Started(d));
  EXPECT_TRUE(Started(e));
}

TEST_F(DependencyTest, AnyOf_EndsOnlyWhenNoAlternativeCanHold) {
  Connect(4);
  const int64_t a = Submit(Spec());
  const int64_t b = Submit(Spec());
  const int64_t w = Submit(Spec(absl::StrCat("afterok:", a, "?afterok:", b)));
  Finish(a, 1);
  EXPECT_EQ(Job(w).state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(Job(w).reason(),
            absl::StrCat("waiting for dependency afterok:", b, " (job ", b, " scheduled)"));
  ASSERT_THAT(core_->CancelJob(b), ::trainctl::testing::IsOk());
  EXPECT_EQ(Job(w).state(), v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(Job(w).reason(), HasSubstr("can never be met"));
}

TEST_F(DependencyTest, CancelUpstream_CascadesToPendingDependents) {
  // No node: everything stays PENDING.
  const int64_t a = Submit(Spec());
  const int64_t b = Submit(Spec(absl::StrCat("afterok:", a)));
  const int64_t c = Submit(Spec(absl::StrCat("after:", a)));
  ASSERT_THAT(core_->CancelJob(a), ::trainctl::testing::IsOk());
  EXPECT_EQ(Job(b).state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(Job(b).reason(), absl::StrCat("dependency can never be met: afterok:", a, " (job ",
                                          a, " cancelled)"));
  // `after` a cancelled job is met (Slurm: started or cancelled).
  EXPECT_EQ(Job(c).state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(Job(c).reason().find("waiting for dependency"), std::string::npos);
}

TEST_F(DependencyTest, Submit_RefusesUnknownSelfLaterNeverAndOtherUsersJobs) {
  Connect(1);
  EXPECT_THAT(core_->SubmitJob(Spec("afterok:77"), ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("spec.dependency: afterok:77: job 77 does not exist")));
  EXPECT_THAT(core_->SubmitJob(Spec("afterok:1"), ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("may not depend on itself")));
  EXPECT_THAT(core_->SubmitJob(Spec("afterok:1,afterany:2?after:3"), ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("spec.dependency: \"afterok:1,afterany:2?after:3\" mixes")));
  const int64_t a = Submit(Spec());
  Finish(a, 0);
  EXPECT_THAT(core_->SubmitJob(Spec(absl::StrCat("afternotok:", a)), ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat("can never be met: afternotok:", a, " (job ", a,
                                              " succeeded)"))));
  // Another user's job: only an admin may name it.
  EXPECT_THAT(SubmitAs(Spec(absl::StrCat("afterok:", a)), {"bob", false}),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("belongs to user ann")));
  TC_EXPECT_OK(SubmitAs(Spec(absl::StrCat("afterok:", a)), {"root", true}));
  // In one call: an earlier job of the call, not a later one.
  absl::StatusOr<std::vector<int64_t>> ok_batch = SubmitBatch({Spec(), Spec()});
  TC_ASSERT_OK(ok_batch);
  const int64_t first = ok_batch->back() + 1;
  EXPECT_THAT(SubmitBatch({Spec(absl::StrCat("afterok:", first + 1)), Spec()}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("specs[0].dependency: afterok:")));
  EXPECT_THAT(SubmitBatch({Spec(absl::StrCat("afterok:", first + 1)), Spec()}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("only depend on an earlier one")));
  absl::StatusOr<std::vector<int64_t>> chained =
      SubmitBatch({Spec(), Spec(absl::StrCat("afterok:", first))});
  TC_ASSERT_OK(chained);
  EXPECT_EQ(Job(chained->at(1)).state(), v1::JOB_STATE_PENDING);
}

TEST_F(DependencyTest, Singleton_OneJobOfANameAndUserAtATime) {
  Connect(4);
  const int64_t s1 = Submit(Spec("singleton", "nightly"));
  const int64_t s2 = Submit(Spec("singleton", "nightly"));
  const int64_t other = Submit(Spec("singleton", "hourly"));
  EXPECT_TRUE(Started(s1));
  EXPECT_TRUE(Started(other));
  EXPECT_FALSE(Started(s2));
  EXPECT_EQ(Job(s2).reason(),
            absl::StrCat("waiting for dependency singleton (job ", s1, " scheduled)"));
  Finish(s1, 1);  // in any state
  EXPECT_TRUE(Started(s2));
}

TEST_F(DependencyTest, Arrays_AfterOkWaitsForEveryTask_AfterCorrTaskByTask) {
  Connect(8);
  absl::Notification done;
  std::vector<int64_t> up;
  v1::JobSpec spec = Spec();
  core_->SubmitJobArrayAsync(spec, {0, 1}, 0, "", [&](absl::StatusOr<std::vector<int64_t>> r) {
    up = *r;
    done.Notify();
  });
  done.WaitForNotification();
  ASSERT_THAT(up, SizeIs(2));
  const int64_t all = Submit(Spec(absl::StrCat("afterok:", up[0])));
  absl::Notification done2;
  std::vector<int64_t> corr;
  core_->SubmitJobArrayAsync(Spec(absl::StrCat("aftercorr:", up[0])), {0, 1}, 0, "",
                             [&](absl::StatusOr<std::vector<int64_t>> r) {
                               corr = *r;
                               done2.Notify();
                             });
  done2.WaitForNotification();
  ASSERT_THAT(corr, SizeIs(2));
  Finish(up[1], 0);
  EXPECT_FALSE(Started(all));
  EXPECT_FALSE(Started(corr[0]));
  EXPECT_TRUE(Started(corr[1]));
  EXPECT_EQ(Job(all).reason(), absl::StrCat("waiting for dependency afterok:", up[0], " (job ",
                                            up[0], " scheduled)"));
  Finish(up[0], 0);
  EXPECT_TRUE(Started(all));
  EXPECT_TRUE(Started(corr[0]));
}

TEST_F(DependencyTest, Restart_SameVerdictsFromTheStore) {
  const int64_t a = Submit(Spec());
  const int64_t b = Submit(Spec(absl::StrCat("afterok:", a)));
  const int64_t s0 = Submit(Spec("singleton", "nightly"));
  const int64_t s = Submit(Spec("singleton", "nightly"));
  const std::string waiting = Job(b).reason();
  ASSERT_EQ(waiting, absl::StrCat("waiting for dependency afterok:", a, " (job ", a, " pending)"));
  const std::string single = Job(s).reason();
  ASSERT_EQ(single, absl::StrCat("waiting for dependency singleton (job ", s0, " pending)"));

  Restart();
  EXPECT_EQ(Job(b).state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(Job(b).reason(), waiting);
  EXPECT_EQ(Job(b).spec().dependency(), absl::StrCat("afterok:", a));
  EXPECT_EQ(Job(s).reason(), single);
  // Still held back: a node joins, only a (and not b) starts.
  Connect(4);
  EXPECT_TRUE(Started(a));
  EXPECT_FALSE(Started(b));
  ASSERT_THAT(core_->CancelJob(a), ::trainctl::testing::IsOk());
  EXPECT_EQ(Job(b).state(), v1::JOB_STATE_CANCELLED);

  // And once more: the cancel was stored with its reason.
  Restart();
  EXPECT_EQ(Job(b).state(), v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(Job(b).reason(), HasSubstr("can never be met"));
}

}  // namespace
}  // namespace trainctl::coord
