// SubmitJobs: many jobs in one call, all or nothing, in one durable commit;
// job arrays (JobSpec.array): ids, the launch environment, the %P throttle;
// starts and exits reported in one AgentMessage.task_status_batch; starts
// to one agent written as one CoordinatorMessage.start_task_batch. FakeClock
// and a real
// SQLite store in a temp dir (restarted like a crashed coordinator); no
// sleeps.

#include <algorithm>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/testing/status_matchers.h"
#include "coordinator/agent_writes.h"
#include "coordinator/coordinator.h"
#include "coordinator/testing/fake_agent_connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::HasSubstr;
using ::testing::ElementsAre;
using FakeConnection = ::trainctl::coord::testing::FakeAgentConnection;

v1::JobSpec OneGpu(const std::string& name) {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.add_command("python");
  spec.add_command("train.py");
  return spec;
}

// `count` tasks of one array, task ids 0..count-1, at most `max_running`.
std::vector<v1::JobSpec> Array(int count, int max_running) {
  std::vector<v1::JobSpec> specs;
  for (int i = 0; i < count; ++i) {
    v1::JobSpec spec = OneGpu("arr");
    spec.mutable_array()->set_task_id(i);
    spec.mutable_array()->set_task_count(count);
    spec.mutable_array()->set_max_running(max_running);
    specs.push_back(spec);
  }
  return specs;
}

v1::TaskStatus ExitOf(const v1::StartTask& start) {
  v1::TaskStatus st;
  *st.mutable_task() = start.task();
  st.mutable_task()->set_pid(100);
  st.set_state(v1::TASK_STATE_EXITED);
  st.set_exit_code(0);
  return st;
}

v1::AgentMessage Running(const v1::StartTask& start) {
  v1::AgentMessage msg;
  *msg.mutable_task_status()->mutable_task() = start.task();
  msg.mutable_task_status()->mutable_task()->set_pid(100);
  msg.mutable_task_status()->set_state(v1::TASK_STATE_RUNNING);
  return msg;
}

class SubmitJobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = ::testing::TempDir() + "/submit-jobs-" + name;
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    Restart();
  }

  // A new coordinator over the same store file (as after a crash).
  void Restart() {
    core_.reset();
    store_.reset();
    auto s = SqliteStateStore::Open(dir_ + "/state.db");
    ASSERT_THAT(s, ::trainctl::testing::IsOk());
    store_ = std::move(*s);
    auto core = Coordinator::Create(CoordinatorConfig(), store_.get(), &clock_);
    ASSERT_THAT(core, ::trainctl::testing::IsOk());
    core_ = std::move(*core);
  }

  absl::StatusOr<std::vector<int64_t>> Submit(std::vector<v1::JobSpec> specs,
                                              const std::string& request_id = "") {
    absl::Notification done;
    absl::StatusOr<std::vector<int64_t>> result;
    core_->SubmitJobsAsync(std::move(specs), request_id,
                           [&](absl::StatusOr<std::vector<int64_t>> ids) {
                             result = std::move(ids);
                             done.Notify();
                           });
    done.WaitForNotification();
    return result;
  }

  // Jobs of the cluster SCHEDULED or RUNNING now.
  int Active() {
    int n = 0;
    for (const v1::Job& j : core_->ListJobs({}, 0)) {
      n += j.state() == v1::JOB_STATE_SCHEDULED || j.state() == v1::JOB_STATE_RUNNING;
    }
    return n;
  }

  // Plays agent "a" until `total` tasks have started: each round every new
  // StartTask is passed to `seen` and reported RUNNING, then all of them
  // exit in one batch. Fails when a round starts nothing, or when more than
  // `max_active` jobs hold GPUs before or after a round.
  void RunAll(FakeConnection& conn, size_t total, int max_active,
              const std::function<void(const v1::StartTask&)>& seen) {
    size_t handled = 0;
    for (size_t round = 0; round < total && handled < total; ++round) {
      EXPECT_LE(Active(), max_active);
      std::vector<v1::StartTask> starts = conn.Starts();
      ASSERT_GT(starts.size(), handled) << "nothing new started in round " << round;
      v1::AgentMessage batch;
      for (size_t i = handled; i < starts.size(); ++i) {
        seen(starts[i]);
        TC_ASSERT_OK(core_->HandleAgentMessage("a", &conn, Running(starts[i])));
        *batch.mutable_task_status_batch()->add_statuses() = ExitOf(starts[i]);
      }
      EXPECT_LE(Active(), max_active);
      handled = starts.size();
      TC_ASSERT_OK(core_->HandleAgentMessage("a", &conn, batch));
      TC_ASSERT_OK(core_->WaitForWrites());
    }
  }

  std::string dir_;
  FakeClock clock_;
  std::unique_ptr<SqliteStateStore> store_;
  std::unique_ptr<Coordinator> core_;
};

TEST_F(SubmitJobsTest, SubmitJobs_ThreeJobs_IdsInOrderInOneCommit) {
  // No node yet: the jobs stay PENDING, and the only write of the call is
  // the three PENDING records, in one transaction.
  TC_ASSERT_OK(core_->WaitForWrites());
  const int64_t commits_before = store_->commit_stats().commits;
  auto ids = Submit({OneGpu("a"), OneGpu("b"), OneGpu("c")});
  ASSERT_THAT(ids, ::trainctl::testing::IsOk());
  ASSERT_EQ(ids->size(), 3u);
  EXPECT_EQ((*ids)[1], (*ids)[0] + 1);
  EXPECT_EQ((*ids)[2], (*ids)[0] + 2);
  EXPECT_EQ(core_->GetJob((*ids)[0])->spec().name(), "a");
  EXPECT_EQ(core_->GetJob((*ids)[2])->spec().name(), "c");
  EXPECT_EQ(store_->commit_stats().commits - commits_before, 1);
}

TEST_F(SubmitJobsTest, SubmitJobs_OneInvalidSpec_NothingAcceptedErrorNamesIndex) {
  std::vector<v1::JobSpec> specs = {OneGpu("a"), OneGpu("b"), OneGpu("c")};
  specs[2].set_gpus(-1);
  EXPECT_THAT(Submit(specs),
              ::trainctl::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("specs[2].gpus")));
  EXPECT_TRUE(core_->ListJobs({}, 0).empty());
  // Nothing was stored either: a restart finds no job.
  Restart();
  EXPECT_TRUE(core_->ListJobs({}, 0).empty());
}

TEST_F(SubmitJobsTest, SubmitJobs_AfterRestart_EveryIdIsThere) {
  auto ids = Submit(Array(50, 0));
  ASSERT_THAT(ids, ::trainctl::testing::IsOk());
  Restart();
  for (size_t i = 0; i < ids->size(); ++i) {
    absl::StatusOr<v1::Job> job = core_->GetJob((*ids)[i]);
    ASSERT_THAT(job, ::trainctl::testing::IsOk()) << "job " << (*ids)[i];
    EXPECT_EQ(job->spec().array().array_job_id(), ids->front());
    EXPECT_EQ(job->spec().array().task_id(), static_cast<int>(i));
    EXPECT_EQ(job->state(), v1::JOB_STATE_PENDING);
  }
  // The array filter lists all 50, newest first.
  std::vector<v1::Job> listed = core_->ListJobs({}, 0, "", "", ids->front());
  ASSERT_EQ(listed.size(), 50u);
  EXPECT_EQ(listed.front().id(), ids->back());
  // New ids continue after the array's.
  auto next = Submit({OneGpu("after")});
  ASSERT_THAT(next, ::trainctl::testing::IsOk());
  EXPECT_EQ(next->front(), ids->back() + 1);
}

TEST_F(SubmitJobsTest, SubmitJobs_RetriedRequestId_ReturnsTheSameIds) {
  auto first = Submit({OneGpu("a"), OneGpu("b")}, "req-1");
  ASSERT_THAT(first, ::trainctl::testing::IsOk());
  auto again = Submit({OneGpu("a"), OneGpu("b")}, "req-1");
  ASSERT_THAT(again, ::trainctl::testing::IsOk());
  EXPECT_EQ(*again, *first);
  EXPECT_EQ(core_->ListJobs({}, 0).size(), 2u);
}

TEST_F(SubmitJobsTest, SubmitJobs_AnotherUsersRequestId_PermissionDenied) {
  // The transport hands the core the authenticated caller; the core checks.
  auto submit = [&](const std::string& user, const SubmitCaller& caller) {
    std::vector<v1::JobSpec> specs = {OneGpu(user)};
    specs[0].set_user(user);
    absl::Notification done;
    absl::StatusOr<std::vector<int64_t>> result;
    core_->SubmitJobsAsync(
        std::move(specs), "req-7",
        [&](absl::StatusOr<std::vector<int64_t>> ids) {
          result = std::move(ids);
          done.Notify();
        },
        caller);
    done.WaitForNotification();
    return result;
  };
  auto first = submit("alice", {"alice", false});
  ASSERT_THAT(first, ::trainctl::testing::IsOk());
  // Bob picks the same request id: he must not get Alice's job.
  EXPECT_THAT(submit("bob", {"bob", false}),
              ::trainctl::testing::StatusIs(
                  absl::StatusCode::kPermissionDenied,
                  HasSubstr("user bob may not reuse the request_id of job")));
  // Alice's own retry, and an admin's, still get it.
  auto again = submit("alice", {"alice", false});
  ASSERT_THAT(again, ::trainctl::testing::IsOk());
  EXPECT_EQ(*again, *first);
  EXPECT_THAT(submit("carol", {"carol", true}), ::trainctl::testing::IsOk());
  EXPECT_EQ(core_->ListJobs({}, 0).size(), 1u);
}

TEST_F(SubmitJobsTest, SubmitJobs_BadArrays_InvalidArgumentNamingTheRule) {
  std::vector<v1::JobSpec> specs = Array(3, 0);
  specs[1].mutable_array()->set_task_count(4);
  EXPECT_THAT(Submit(specs), ::trainctl::testing::StatusIs(
                                 absl::StatusCode::kInvalidArgument,
                                 HasSubstr("specs[1].array.task_count")));
  specs = Array(3, 2);
  specs[2].mutable_array()->set_task_id(0);
  EXPECT_THAT(Submit(specs), ::trainctl::testing::StatusIs(
                                 absl::StatusCode::kInvalidArgument,
                                 HasSubstr("specs[2].array.task_id: 0 appears twice")));
  specs = Array(2, 1);
  specs.push_back(OneGpu("plain"));
  EXPECT_THAT(Submit(specs), ::trainctl::testing::StatusIs(
                                 absl::StatusCode::kInvalidArgument,
                                 HasSubstr("specs[2].array: missing")));
  specs = Array(2, 1);
  for (v1::JobSpec& s : specs) s.set_auto_pack(true);
  EXPECT_THAT(Submit(specs), ::trainctl::testing::StatusIs(
                                 absl::StatusCode::kInvalidArgument,
                                 HasSubstr("specs[0].array.max_running: a limit (%P) cannot "
                                           "apply to auto-packed jobs")));
  specs = Array(2, -1);
  EXPECT_THAT(Submit(specs), ::trainctl::testing::StatusIs(
                                 absl::StatusCode::kInvalidArgument,
                                 HasSubstr("specs[0].array.max_running")));
  EXPECT_TRUE(core_->ListJobs({}, 0).empty());
}

TEST_F(SubmitJobsTest, Array_Throttle3On8Gpus_NeverMoreThan3RunAndAllFinish) {
  // 10 one-GPU tasks, %3, on a node of 8 GPUs: 3 start; each exit (reported
  // as a batch of everything that ended) lets as many more start, never more
  // than 3 at once, until all 10 have succeeded.
  FakeConnection conn;
  TC_ASSERT_OK(core_->RegisterAgent(testing::FakeNodeRegistration("a", 8), &conn));
  auto ids = Submit(Array(10, 3));
  ASSERT_THAT(ids, ::trainctl::testing::IsOk());
  TC_ASSERT_OK(core_->WaitForWrites());
  std::vector<std::string> task_ids;
  RunAll(conn, 10, 3, [&](const v1::StartTask& start) {
    const auto& env = start.env();
    task_ids.push_back(env.at("TRAINCTL_ARRAY_TASK_ID"));
    EXPECT_EQ(env.at("SLURM_ARRAY_TASK_ID"), env.at("TRAINCTL_ARRAY_TASK_ID"));
    EXPECT_EQ(env.at("TRAINCTL_ARRAY_JOB_ID"), absl::StrCat(ids->front()));
    EXPECT_EQ(env.at("SLURM_ARRAY_JOB_ID"), absl::StrCat(ids->front()));
    EXPECT_EQ(env.at("TRAINCTL_ARRAY_TASK_COUNT"), "10");
  });
  std::sort(task_ids.begin(), task_ids.end(),
            [](const std::string& a, const std::string& b) { return std::stoi(a) < std::stoi(b); });
  EXPECT_THAT(task_ids, ElementsAre("0", "1", "2", "3", "4", "5", "6", "7", "8", "9"));
  for (int64_t id : *ids) {
    EXPECT_EQ(core_->GetJob(id)->state(), v1::JOB_STATE_SUCCEEDED) << "job " << id;
  }
}

TEST_F(SubmitJobsTest, Array_SameExportedEnv_StoredOnceAndEveryTaskStartsWithIt) {
  // 5 tasks, one at a time, exporting one shell's environment, but task 3
  // exports another (a client that builds its specs one by one).
  std::vector<v1::JobSpec> specs = Array(5, 1);
  for (v1::JobSpec& spec : specs) {
    spec.set_export_policy("ALL");
    (*spec.mutable_exported_env())["VIRTUAL_ENV"] = "/home/alice/venv";
    (*spec.mutable_exported_env())["PATH"] = "/home/alice/venv/bin:/usr/bin";
  }
  (*specs[3].mutable_exported_env())["ONLY_TASK_3"] = "yes";
  auto ids = Submit(specs);
  ASSERT_THAT(ids, ::trainctl::testing::IsOk());
  TC_ASSERT_OK(core_->WaitForWrites());
  const int64_t first = ids->front();

  // The records: the first holds the environment; the others that exported
  // the same refer to it and hold none; task 3 keeps its own.
  absl::StatusOr<std::vector<v1::Job>> records = store_->ReadJobs(*ids);
  ASSERT_THAT(records, ::trainctl::testing::IsOk());
  ASSERT_EQ(records->size(), 5u);
  for (const v1::Job& r : *records) {
    const int index = static_cast<int>(r.id() - first);
    if (index == 0) {
      EXPECT_EQ(r.exported_env_job_id(), 0);
      EXPECT_EQ(r.spec().exported_env_size(), 2);
    } else if (index == 3) {
      EXPECT_EQ(r.exported_env_job_id(), 0);
      EXPECT_EQ(r.spec().exported_env_size(), 3);
    } else {
      EXPECT_EQ(r.exported_env_job_id(), first) << "job " << r.id();
      EXPECT_EQ(r.spec().exported_env_size(), 0) << "job " << r.id();
    }
  }
  // GetJob answers with the whole environment.
  for (int64_t id : *ids) {
    absl::StatusOr<v1::Job> job = core_->GetJob(id);
    ASSERT_THAT(job, ::trainctl::testing::IsOk());
    EXPECT_EQ(job->spec().exported_env().at("VIRTUAL_ENV"), "/home/alice/venv") << id;
  }

  auto expect_env = [&](const v1::StartTask& start) {
    const auto& env = start.env();
    const int64_t id = start.task().job_id();
    EXPECT_EQ(env.at("VIRTUAL_ENV"), "/home/alice/venv") << "job " << id;
    EXPECT_EQ(env.at("PATH"), "/home/alice/venv/bin:/usr/bin") << "job " << id;
    EXPECT_EQ(env.count("ONLY_TASK_3"), id == first + 3 ? 1u : 0u) << "job " << id;
  };
  // Task 0 (the holder) runs and finishes, and its record leaves memory;
  // task 1 starts. The coordinator then restarts over the store with the
  // holder retired; the agent registers again with task 1 still running.
  v1::StartTask second;
  {
    FakeConnection conn;
    TC_ASSERT_OK(core_->RegisterAgent(testing::FakeNodeRegistration("a", 8), &conn));
    TC_ASSERT_OK(core_->WaitForWrites());
    ASSERT_EQ(conn.Starts().size(), 1u);
    const v1::StartTask start = conn.Starts()[0];
    expect_env(start);
    TC_ASSERT_OK(core_->HandleAgentMessage("a", &conn, Running(start)));
    v1::AgentMessage exit;
    *exit.mutable_task_status() = ExitOf(start);
    TC_ASSERT_OK(core_->HandleAgentMessage("a", &conn, exit));
    TC_ASSERT_OK(core_->WaitForWrites());
    core_->Tick();
    EXPECT_EQ(core_->GetJob(first)->state(), v1::JOB_STATE_SUCCEEDED);
    ASSERT_EQ(conn.Starts().size(), 2u);
    second = conn.Starts()[1];
    expect_env(second);
    TC_ASSERT_OK(core_->HandleAgentMessage("a", &conn, Running(second)));
    TC_ASSERT_OK(core_->WaitForWrites());
  }
  Restart();
  EXPECT_EQ(core_->GetJob((*ids)[4])->spec().exported_env().at("VIRTUAL_ENV"),
            "/home/alice/venv");
  FakeConnection conn;
  v1::RegisterNode again = testing::FakeNodeRegistration("a", 8);
  *again.add_running_tasks() = Running(second).task_status().task();
  TC_ASSERT_OK(core_->RegisterAgent(again, &conn));
  v1::AgentMessage exit;
  *exit.mutable_task_status() = ExitOf(second);
  TC_ASSERT_OK(core_->HandleAgentMessage("a", &conn, exit));
  TC_ASSERT_OK(core_->WaitForWrites());
  RunAll(conn, 3, 1, expect_env);
  for (int64_t id : *ids) {
    EXPECT_EQ(core_->GetJob(id)->state(), v1::JOB_STATE_SUCCEEDED) << "job " << id;
  }
}

TEST_F(SubmitJobsTest, SubmitJobArray_OneSpec_OneJobPerTaskIdEnvironmentStoredOnce) {
  v1::JobSpec spec = OneGpu("sweep-eval");
  spec.set_export_policy("ALL");
  (*spec.mutable_exported_env())["VIRTUAL_ENV"] = "/home/bob/venv";
  absl::Notification done;
  absl::StatusOr<std::vector<int64_t>> ids;
  core_->SubmitJobArrayAsync(spec, {4, 0, 9}, 2, "", [&](absl::StatusOr<std::vector<int64_t>> r) {
    ids = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  ASSERT_THAT(ids, ::trainctl::testing::IsOk());
  ASSERT_EQ(ids->size(), 3u);
  TC_ASSERT_OK(core_->WaitForWrites());
  // Jobs in task_ids order, each with its JobArray; the environment stored
  // with the first only.
  absl::StatusOr<std::vector<v1::Job>> records = store_->ReadJobs(*ids);
  ASSERT_THAT(records, ::trainctl::testing::IsOk());
  ASSERT_EQ(records->size(), 3u);
  std::sort(records->begin(), records->end(),
            [](const v1::Job& a, const v1::Job& b) { return a.id() < b.id(); });
  const std::vector<int> task_ids = {4, 0, 9};
  for (int i = 0; i < 3; ++i) {
    const v1::Job& r = (*records)[i];
    EXPECT_EQ(r.spec().name(), "sweep-eval");
    EXPECT_EQ(r.spec().array().array_job_id(), ids->front());
    EXPECT_EQ(r.spec().array().task_id(), task_ids[i]);
    EXPECT_EQ(r.spec().array().task_count(), 3);
    EXPECT_EQ(r.spec().array().max_running(), 2);
    EXPECT_EQ(r.spec().exported_env_size(), i == 0 ? 1 : 0);
    EXPECT_EQ(r.exported_env_job_id(), i == 0 ? 0 : ids->front());
  }
  FakeConnection conn;
  TC_ASSERT_OK(core_->RegisterAgent(testing::FakeNodeRegistration("a", 8), &conn));
  TC_ASSERT_OK(core_->WaitForWrites());
  RunAll(conn, 3, 2, [&](const v1::StartTask& start) {
    EXPECT_EQ(start.env().at("VIRTUAL_ENV"), "/home/bob/venv") << start.task().job_id();
  });
}

TEST_F(SubmitJobsTest, SubmitJobArray_BadRequest_InvalidArgumentNamingTheField) {
  auto submit = [&](v1::JobSpec spec, std::vector<int> task_ids, int max_running) {
    absl::StatusOr<std::vector<int64_t>> ids;
    core_->SubmitJobArrayAsync(std::move(spec), task_ids, max_running, "",
                               [&](absl::StatusOr<std::vector<int64_t>> r) { ids = std::move(r); });
    return ids;
  };
  using ::trainctl::testing::StatusIs;
  const auto invalid = absl::StatusCode::kInvalidArgument;
  v1::JobSpec with_array = OneGpu("x");
  with_array.mutable_array()->set_task_id(1);
  EXPECT_THAT(submit(with_array, {0, 1}, 0), StatusIs(invalid, HasSubstr("spec.array: must be unset")));
  EXPECT_THAT(submit(OneGpu("x"), {}, 0), StatusIs(invalid, HasSubstr("task_ids: empty")));
  EXPECT_THAT(submit(OneGpu("x"), {0, 3, 3}, 0),
              StatusIs(invalid, HasSubstr("task_ids[2]: 3 appears twice")));
  EXPECT_THAT(submit(OneGpu("x"), {0, -1}, 0), StatusIs(invalid, HasSubstr("task_ids[1]: -1 is negative")));
  EXPECT_THAT(submit(OneGpu("x"), {0}, -2), StatusIs(invalid, HasSubstr("max_running: -2")));
  v1::JobSpec packed = OneGpu("x");
  packed.set_auto_pack(true);
  EXPECT_THAT(submit(packed, {0, 1}, 1), StatusIs(invalid, HasSubstr("max_running: a limit (%P)")));
  v1::JobSpec bad = OneGpu("x");
  bad.set_gpus(-1);
  EXPECT_THAT(submit(bad, {0, 1}, 0), StatusIs(invalid, HasSubstr("spec.gpus")));
  EXPECT_TRUE(core_->ListJobs({}, 0).empty());
}

TEST_F(SubmitJobsTest, Array_WaitingTask_ReasonNamesTheThrottle) {
  FakeConnection conn;
  TC_ASSERT_OK(core_->RegisterAgent(testing::FakeNodeRegistration("a", 8), &conn));
  auto ids = Submit(Array(3, 1));
  ASSERT_THAT(ids, ::trainctl::testing::IsOk());
  absl::StatusOr<v1::Job> waiting = core_->GetJob((*ids)[2]);
  ASSERT_THAT(waiting, ::trainctl::testing::IsOk());
  EXPECT_EQ(waiting->state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(waiting->reason(),
              HasSubstr(absl::StrCat("array ", ids->front(), ": 1 of at most 1")));
}

// `count` trials of sweep "s1" (parameter i = 0..count-1), one GPU each.
std::vector<v1::JobSpec> Sweep(int count) {
  std::vector<v1::JobSpec> specs;
  for (int i = 0; i < count; ++i) {
    v1::JobSpec spec = OneGpu("trial");
    spec.set_sweep_id("s1");
    (*spec.mutable_params())["i"] = std::to_string(i);
    (*spec.mutable_env())["TRIAL"] = std::to_string(i);
    specs.push_back(spec);
  }
  return specs;
}

class BatchLargerThanClusterTest : public SubmitJobsTest,
                                   public ::testing::WithParamInterface<bool> {};

TEST_P(BatchLargerThanClusterTest, TasksStartInOrderAndWaitersShowWhy) {
  // 40 one-GPU tasks of an array (or trials of a sweep) on 2 GPUs. A pass
  // sees only the first tasks it could place (PendingQueueLocked); the rest
  // still get the reason of the first waiting one, and all 40 run, in
  // submit order, 2 at a time.
  const bool sweep = GetParam();
  FakeConnection conn;
  TC_ASSERT_OK(core_->RegisterAgent(testing::FakeNodeRegistration("a", 2), &conn));
  auto ids = Submit(sweep ? Sweep(40) : Array(40, 0));
  ASSERT_THAT(ids, ::trainctl::testing::IsOk());
  TC_ASSERT_OK(core_->WaitForWrites());
  ASSERT_EQ(conn.Starts().size(), 2u);
  const std::string third = core_->GetJob((*ids)[2])->reason();
  EXPECT_THAT(third, HasSubstr("GPU"));
  EXPECT_EQ(core_->GetJob((*ids)[39])->reason(), third);
  std::vector<int> order;
  RunAll(conn, 40, 2, [&](const v1::StartTask& start) {
    order.push_back(std::stoi(start.env().at(sweep ? "TRIAL" : "TRAINCTL_ARRAY_TASK_ID")));
  });
  ASSERT_EQ(order.size(), 40u);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(order[i], i);
  for (int64_t id : *ids) {
    EXPECT_EQ(core_->GetJob(id)->state(), v1::JOB_STATE_SUCCEEDED) << "job " << id;
  }
}

INSTANTIATE_TEST_SUITE_P(ArrayOrSweep, BatchLargerThanClusterTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Sweep" : "Array";
                         });

TEST_F(SubmitJobsTest, Array_NeverFits_EveryTaskFailsNotOnlyThoseAPassSaw) {
  // Accepted before any node joined; then a 2-GPU node joins and the tasks
  // (4 GPUs each) can never run: all 10 fail with the reason, the ones a
  // pass left out included.
  std::vector<v1::JobSpec> specs = Array(10, 0);
  for (v1::JobSpec& spec : specs) spec.set_gpus(4);
  auto ids = Submit(std::move(specs));
  ASSERT_THAT(ids, ::trainctl::testing::IsOk());
  FakeConnection conn;
  TC_ASSERT_OK(core_->RegisterAgent(testing::FakeNodeRegistration("a", 2), &conn));
  TC_ASSERT_OK(core_->WaitForWrites());
  for (int64_t id : *ids) {
    absl::StatusOr<v1::Job> job = core_->GetJob(id);
    ASSERT_THAT(job, ::trainctl::testing::IsOk());
    EXPECT_EQ(job->state(), v1::JOB_STATE_FAILED) << "job " << id;
    EXPECT_THAT(job->reason(), HasSubstr("cannot run on this cluster")) << "job " << id;
  }
  EXPECT_THAT(conn.Starts(), ::testing::SizeIs(0));
}

TEST_F(SubmitJobsTest, SingleTaskStatus_FromAnOlderAgent_StillHandled) {
  FakeConnection conn;
  TC_ASSERT_OK(core_->RegisterAgent(testing::FakeNodeRegistration("a", 1), &conn));
  ASSERT_TRUE(conn.sent[0].register_ack().accepts_task_status_batch());
  auto ids = Submit({OneGpu("a")});
  ASSERT_THAT(ids, ::trainctl::testing::IsOk());
  ASSERT_EQ(conn.Starts().size(), 1u);
  TC_ASSERT_OK(core_->HandleAgentMessage("a", &conn, Running(conn.Starts()[0])));
  v1::AgentMessage exited;
  *exited.mutable_task_status() = ExitOf(conn.Starts()[0]);
  TC_ASSERT_OK(core_->HandleAgentMessage("a", &conn, exited));
  EXPECT_EQ(core_->GetJob(ids->front())->state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(SubmitJobsTest, TaskStatusBatch_StartAndExitOfOneTask_RecordsBoth) {
  // A short task's RUNNING and its exit, written together by the agent.
  FakeConnection conn;
  TC_ASSERT_OK(core_->RegisterAgent(testing::FakeNodeRegistration("a", 1), &conn));
  clock_.Advance(absl::Seconds(5));
  auto ids = Submit({OneGpu("a")});
  ASSERT_THAT(ids, ::trainctl::testing::IsOk());
  ASSERT_EQ(conn.Starts().size(), 1u);
  v1::AgentMessage batch;
  *batch.mutable_task_status_batch()->add_statuses() =
      Running(conn.Starts()[0]).task_status();
  *batch.mutable_task_status_batch()->add_statuses() = ExitOf(conn.Starts()[0]);
  TC_ASSERT_OK(core_->HandleAgentMessage("a", &conn, batch));
  TC_ASSERT_OK(core_->WaitForWrites());
  absl::StatusOr<v1::Job> job = core_->GetJob(ids->front());
  ASSERT_THAT(job, ::trainctl::testing::IsOk());
  EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_GT(job->tasks(0).start_time_ms(), 0);
  EXPECT_EQ(job->tasks(0).pid(), 100);
}

TEST_F(SubmitJobsTest, Restart_RunningReportNeverStored_RegistrationMakesTheJobRunning) {
  // The task started, but its RUNNING never reached the store (lost with the
  // coordinator, or a lazy write not yet committed): after the restart the
  // record says SCHEDULED. The agent's registration lists the task as
  // running: the job is RUNNING again, with a start time, and ends as usual.
  v1::StartTask start;
  int64_t id = 0;
  {
    FakeConnection conn;
    TC_ASSERT_OK(core_->RegisterAgent(testing::FakeNodeRegistration("a", 1), &conn));
    auto ids = Submit({OneGpu("a")});
    ASSERT_THAT(ids, ::trainctl::testing::IsOk());
    id = ids->front();
    TC_ASSERT_OK(core_->WaitForWrites());
    ASSERT_EQ(conn.Starts().size(), 1u);
    start = conn.Starts()[0];
  }
  Restart();
  EXPECT_EQ(core_->GetJob(id)->state(), v1::JOB_STATE_SCHEDULED);
  clock_.Advance(absl::Seconds(3));
  FakeConnection conn;
  v1::RegisterNode again = testing::FakeNodeRegistration("a", 1);
  *again.add_running_tasks() = Running(start).task_status().task();
  TC_ASSERT_OK(core_->RegisterAgent(again, &conn));
  absl::StatusOr<v1::Job> job = core_->GetJob(id);
  ASSERT_THAT(job, ::trainctl::testing::IsOk());
  EXPECT_EQ(job->state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(job->tasks(0).state(), v1::TASK_STATE_RUNNING);
  EXPECT_EQ(job->tasks(0).pid(), 100);
  EXPECT_GT(job->tasks(0).start_time_ms(), 0);
  EXPECT_THAT(conn.Stops(), ::testing::SizeIs(0));
  v1::AgentMessage exited;
  *exited.mutable_task_status() = ExitOf(start);
  TC_ASSERT_OK(core_->HandleAgentMessage("a", &conn, exited));
  TC_ASSERT_OK(core_->WaitForWrites());
  EXPECT_EQ(core_->GetJob(id)->state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(SubmitJobsTest, RunningReport_StoredWithTheNextCommit) {
  // A RUNNING report starts no commit of its own (the flush is set past the
  // test's life); the task's exit commits it too. Restarted, the record has
  // the start time.
  store_->SetLazyFlush(absl::Hours(1));
  FakeConnection conn;
  TC_ASSERT_OK(core_->RegisterAgent(testing::FakeNodeRegistration("a", 1), &conn));
  clock_.Advance(absl::Seconds(5));
  auto ids = Submit({OneGpu("a")});
  ASSERT_THAT(ids, ::trainctl::testing::IsOk());
  TC_ASSERT_OK(core_->WaitForWrites());
  ASSERT_EQ(conn.Starts().size(), 1u);
  const int64_t before = store_->commit_stats().commits;
  TC_ASSERT_OK(core_->HandleAgentMessage("a", &conn, Running(conn.Starts()[0])));
  clock_.Advance(absl::Seconds(2));
  v1::AgentMessage exited;
  *exited.mutable_task_status() = ExitOf(conn.Starts()[0]);
  TC_ASSERT_OK(core_->HandleAgentMessage("a", &conn, exited));
  TC_ASSERT_OK(core_->WaitForWrites());
  EXPECT_EQ(store_->commit_stats().commits - before, 1);
  Restart();
  absl::StatusOr<v1::Job> job = core_->GetJob(ids->front());
  ASSERT_THAT(job, ::trainctl::testing::IsOk());
  EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job->tasks(0).end_time_ms() - job->tasks(0).start_time_ms(), 2000);
}

v1::CoordinatorMessage StartOf(int64_t job, size_t env_bytes = 0) {
  v1::CoordinatorMessage msg;
  msg.mutable_start_task()->mutable_task()->set_job_id(job);
  if (env_bytes > 0) {
    (*msg.mutable_start_task()->mutable_env())["BIG"] = std::string(env_bytes, 'x');
  }
  return msg;
}

TEST(CoalesceLeadingStartsTest, RunOfStarts_OneBatchInOrderThenTheRest) {
  std::deque<v1::CoordinatorMessage> queue = {StartOf(1), StartOf(2), StartOf(3)};
  queue.emplace_back().mutable_stop_task()->mutable_task()->set_job_id(9);
  queue.push_back(StartOf(4));
  EXPECT_EQ(CoalesceLeadingStarts(queue), 3);
  ASSERT_EQ(queue.size(), 3u);
  ASSERT_TRUE(queue[0].has_start_task_batch());
  ASSERT_EQ(queue[0].start_task_batch().starts_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(queue[0].start_task_batch().starts(i).task().job_id(), i + 1);
  }
  // A StopTask is never moved ahead of or behind the starts around it.
  EXPECT_TRUE(queue[1].has_stop_task());
  EXPECT_EQ(queue[2].start_task().task().job_id(), 4);
}

TEST(CoalesceLeadingStartsTest, LoneStartOrOtherFront_LeftAsItIs) {
  std::deque<v1::CoordinatorMessage> lone = {StartOf(1)};
  lone.emplace_back().mutable_stop_task();
  EXPECT_EQ(CoalesceLeadingStarts(lone), 0);
  EXPECT_TRUE(lone[0].has_start_task());
  std::deque<v1::CoordinatorMessage> ack(1);
  ack[0].mutable_register_ack();
  ack.push_back(StartOf(1));
  ack.push_back(StartOf(2));
  EXPECT_EQ(CoalesceLeadingStarts(ack), 0);
  EXPECT_TRUE(ack[0].has_register_ack());
  EXPECT_EQ(ack.size(), 3u);
}

TEST(CoalesceLeadingStartsTest, LongOrLargeRun_SplitWithinTheLimits) {
  std::deque<v1::CoordinatorMessage> many;
  for (int i = 0; i < kMaxStartsPerBatch + 10; ++i) many.push_back(StartOf(i));
  EXPECT_EQ(CoalesceLeadingStarts(many), kMaxStartsPerBatch);
  ASSERT_EQ(many.size(), 11u);
  EXPECT_EQ(many[1].start_task().task().job_id(), kMaxStartsPerBatch);
  // Three starts of 400 KiB of environment each: two fit in 1 MiB.
  std::deque<v1::CoordinatorMessage> large = {StartOf(1, 400 << 10), StartOf(2, 400 << 10),
                                              StartOf(3, 400 << 10)};
  EXPECT_EQ(CoalesceLeadingStarts(large), 2);
  ASSERT_EQ(large.size(), 2u);
  EXPECT_LE(large[0].ByteSizeLong(), kMaxStartBatchBytes + 64);
  EXPECT_EQ(large[1].start_task().task().job_id(), 3);
}

}  // namespace
}  // namespace trainctl::coord
