// The finished history out of memory (at most 1 GiB for 1M finished jobs,
// bench/README.md "Memory"): once a job is
// retired (final, no live task, stored) Tick() drops its record from the
// coordinator's memory and keeps a summary; every read (GetJob, ListJobs with
// its filters, sweeps, CancelJob, WaitJobAsync, WhyJob, idempotent submit)
// must answer exactly as before, also after a restart over SQLite.
// Tier 1: FakeClock, fake agents, no threads, no sleeps.

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "coordinator/coordinator.h"
#include "coordinator/testing/fake_agent_connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::HasSubstr;
using ::testing::ElementsAre;
using ::testing::SizeIs;
using ::trainctl::testing::StatusIs;
using FakeConnection = ::trainctl::coord::testing::FakeAgentConnection;

constexpr int64_t kGiB = int64_t{1} << 30;

v1::RegisterNode NodeReg(const std::string& name, int gpus) {
  return ::trainctl::coord::testing::FakeNodeRegistration(name, gpus, 32, int64_t{80} << 30, "Fake H200");
}

v1::JobSpec Spec(const std::string& user, const std::string& sweep = "") {
  v1::JobSpec spec;
  spec.add_command("python");
  spec.add_command("train.py");
  spec.set_name(absl::StrCat("job-of-", user));
  spec.set_user(user);
  spec.set_sweep_id(sweep);
  return spec;
}

v1::AgentMessage Status(const v1::TaskRef& task, v1::TaskState state, int exit_code = 0) {
  v1::AgentMessage msg;
  v1::TaskStatus* st = msg.mutable_task_status();
  *st->mutable_task() = task;
  st->mutable_task()->set_pid(100 + static_cast<int>(task.job_id()));
  st->set_state(state);
  st->set_exit_code(exit_code);
  return msg;
}

// What a user can see: every job in full for each listing, and
// GetJob of each id.
// With `blank_pending_reason`, a PENDING job's reason is left out: the
// scheduler rewrites it in memory on every pass without storing it, so it
// reads "waiting to be scheduled" again after a restart (as before this
// change).
std::string Shown(v1::Job job, bool blank_pending_reason) {
  if (blank_pending_reason && job.state() == v1::JOB_STATE_PENDING) job.clear_reason();
  return job.ShortDebugString();
}

std::vector<std::string> Serialized(const std::vector<v1::Job>& jobs,
                                    bool blank_pending_reason) {
  std::vector<std::string> out;
  for (const v1::Job& j : jobs) out.push_back(Shown(j, blank_pending_reason));
  return out;
}

std::vector<int64_t> Ids(const std::vector<v1::Job>& jobs) {
  std::vector<int64_t> out;
  for (const v1::Job& j : jobs) out.push_back(j.id());
  return out;
}

// Members are public: the scenario helper RunHistory drives them.
class HistoryTest : public ::testing::TestWithParam<std::string> {
 public:
  void SetUp() override {
    if (GetParam() == "sqlite") {
      std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
      std::replace(name.begin(), name.end(), '/', '-');
      dir_ = ::testing::TempDir() + "/history-" + name;
      std::filesystem::remove_all(dir_);
      std::filesystem::create_directories(dir_);
    }
    Restart();
  }

  // A new coordinator over the same store (as after a crash).
  void Restart() {
    core_.reset();
    conns_.clear();
    if (GetParam() == "sqlite") {
      sqlite_.reset();
      auto s = SqliteStateStore::Open(dir_ + "/state.db", SqliteStateStore::Sync::kNormal);
      ASSERT_THAT(s, ::trainctl::testing::IsOk());
      sqlite_ = std::move(*s);
      store_ = sqlite_.get();
    } else {
      store_ = &memory_;
    }
    CoordinatorConfig config;
    auto core = Coordinator::Create(config, store_, &clock_);
    ASSERT_THAT(core, ::trainctl::testing::IsOk());
    core_ = std::move(*core);
  }

  FakeConnection& Connect(const std::string& name, int gpus) {
    auto& conn = conns_[name];
    conn = std::make_unique<FakeConnection>();
    EXPECT_THAT(core_->RegisterAgent(NodeReg(name, gpus), conn.get()),
                ::trainctl::testing::IsOk());
    return *conn;
  }

  void Report(const std::string& node, const v1::AgentMessage& msg) {
    TC_ASSERT_OK(core_->HandleAgentMessage(node, conns_[node].get(), msg));
  }

  // The task the coordinator started for job `id` on `node`.
  v1::TaskRef Started(const std::string& node, int64_t id) {
    // With SQLite, a StartTask goes out once its write is durable (group
    // commit), possibly after the call that placed the job returned.
    TC_EXPECT_OK(core_->WaitForWrites());
    for (const v1::StartTask& s : conns_[node]->Starts()) {
      if (s.task().job_id() == id) return s.task();
    }
    ADD_FAILURE() << "job " << id << " was not started on " << node;
    return {};
  }

  // Every listing the CLI and the web client make, and every job by id.
  std::vector<std::vector<std::string>> Views(int64_t max_id,
                                              bool blank_pending_reason = false) {
    const bool b = blank_pending_reason;
    std::vector<std::vector<std::string>> views;
    const std::vector<std::vector<v1::JobState>> filters = {
        {},
        {v1::JOB_STATE_SUCCEEDED},
        {v1::JOB_STATE_FAILED, v1::JOB_STATE_CANCELLED},
        {v1::JOB_STATE_PENDING, v1::JOB_STATE_RUNNING, v1::JOB_STATE_SCHEDULED}};
    for (const auto& states : filters) {
      for (int limit : {0, 1, 3, 5}) {
        for (const char* user : {"", "alice", "bob", "nobody"}) {
          views.push_back(Serialized(core_->ListJobs(states, limit, "", user), b));
          views.push_back(Serialized(core_->ListJobs(states, limit, "sw", user), b));
        }
      }
    }
    std::vector<std::string> by_id;
    for (int64_t id = 1; id <= max_id; ++id) {
      auto job = core_->GetJob(id);
      by_id.push_back(job.ok() ? Shown(*job, b) : job.status().ToString());
    }
    views.push_back(by_id);
    return views;
  }

  std::string dir_;
  FakeClock clock_;
  MemoryStateStore memory_;
  std::unique_ptr<SqliteStateStore> sqlite_;
  StateStore* store_ = nullptr;
  std::unique_ptr<Coordinator> core_;
  std::map<std::string, std::unique_ptr<FakeConnection>> conns_;
};

// Eight jobs on a 2-GPU node, users alternating alice/bob, 3-6 in sweep
// "sw":
//   1 SUCCEEDED  2 FAILED (exit 3)  3 CANCELLED while running  4 SUCCEEDED
//   5 CANCELLED while pending  6 RUNNING  7 SCHEDULED  8 PENDING (no GPU left)
// So ids 1-5 retire; 6-8 stay in memory. Returns the agent's node name.
std::string RunHistory(HistoryTest& t, Coordinator& core) {
  t.Connect("a", 2);
  // The first Tick takes a usage sample and retries packing (which rewrites
  // pending jobs' reasons); later Ticks at this clock reading only evict.
  core.Tick();
  std::vector<int64_t> ids;
  for (int i = 1; i <= 8; ++i) {
    const std::string user = i % 2 ? "alice" : "bob";
    auto id = core.SubmitJob(Spec(user, i >= 3 && i <= 6 ? "sw" : ""),
                             absl::StrCat("req-", i));
    EXPECT_THAT(id, ::trainctl::testing::IsOk());
    ids.push_back(*id);
    if (i == 1 || i == 2) {
      // Runs at once (2 GPUs) and ends.
      t.Report("a", Status(t.Started("a", i), v1::TASK_STATE_RUNNING));
      t.Report("a", Status(t.Started("a", i), v1::TASK_STATE_EXITED, i == 1 ? 0 : 3));
    }
  }
  // Now 3 and 4 hold the GPUs (SCHEDULED); 5-8 wait.
  EXPECT_THAT(core.CancelJob(5), ::trainctl::testing::IsOk());  // while pending
  t.Report("a", Status(t.Started("a", 3), v1::TASK_STATE_RUNNING));
  // Cancelled while running: CANCELLED at once, retired once its task exits.
  EXPECT_THAT(core.CancelJob(3), ::trainctl::testing::IsOk());
  t.Report("a", Status(t.Started("a", 3), v1::TASK_STATE_EXITED, 0));
  t.Report("a", Status(t.Started("a", 4), v1::TASK_STATE_RUNNING));
  t.Report("a", Status(t.Started("a", 4), v1::TASK_STATE_EXITED, 0));
  // 6 and 7 were placed on the freed GPUs; 6 runs, 7 is still starting.
  t.Report("a", Status(t.Started("a", 6), v1::TASK_STATE_RUNNING));
  return "a";
}

TEST_P(HistoryTest, Tick_RetiredJobs_EvictedAndListedAndDescribedIdentically) {
  RunHistory(*this, *core_);
  EXPECT_EQ(core_->GetJob(1)->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(core_->GetJob(2)->state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(core_->GetJob(3)->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(core_->GetJob(5)->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(core_->GetJob(6)->state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(core_->GetJob(7)->state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(core_->GetJob(8)->state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(core_->Stats().jobs_in_memory, 8);
  const auto before = Views(9);
  const auto stats_before = core_->Stats().jobs_by_state;

  core_->Tick();
  // Jobs 1-5 are retired: only 6, 7, 8 keep their records in memory.
  EXPECT_EQ(core_->Stats().jobs_in_memory, 3);
  EXPECT_EQ(Views(9), before);
  EXPECT_EQ(core_->Stats().jobs_by_state, stats_before);
  EXPECT_THAT(core_->GetJob(9), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_P(HistoryTest, ListJobs_LimitAcrossActiveAndFinished_NewestFirstMerged) {
  RunHistory(*this, *core_);
  core_->Tick();
  // In memory: 6, 7, 8. Retired: 1-5. Pages of 2 walk across the boundary.
  EXPECT_THAT(Ids(core_->ListJobs({}, 2)), ElementsAre(8, 7));
  EXPECT_THAT(Ids(core_->ListJobs({}, 4)), ElementsAre(8, 7, 6, 5));
  EXPECT_THAT(Ids(core_->ListJobs({}, 0)), ElementsAre(8, 7, 6, 5, 4, 3, 2, 1));
  // bob: 2, 4, 6, 8; the newest three straddle memory (8, 6) and store (4).
  EXPECT_THAT(Ids(core_->ListJobs({}, 3, "", "bob")), ElementsAre(8, 6, 4));
  // The sweep (3-6): 6 in memory, 5-3 retired.
  EXPECT_THAT(Ids(core_->ListJobs({}, 0, "sw")), ElementsAre(6, 5, 4, 3));
  EXPECT_THAT(Ids(core_->ListJobs({v1::JOB_STATE_CANCELLED}, 0, "sw", "alice")),
              ElementsAre(5, 3));
  // A user with no jobs sees none, also among retired ones.
  EXPECT_THAT(core_->ListJobs({}, 0, "", "nobody"), SizeIs(0));
}

TEST_P(HistoryTest, RetiredJob_CancelWaitWhy_AnswerAsBefore) {
  RunHistory(*this, *core_);
  const v1::Job before = *core_->GetJob(2);
  core_->Tick();
  // Cancelling a retired job is refused naming its final state, as for a
  // job still in memory, and changes nothing.
  EXPECT_THAT(core_->CancelJob(2),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("job 2 has already ended: failed")));
  EXPECT_EQ(core_->GetJob(2)->reason(), before.reason());
  // Waiting on it returns at once.
  std::vector<v1::JobState> seen;
  core_->WaitJobAsync(2, absl::Seconds(30),
                      [&](absl::StatusOr<v1::Job> j) { seen.push_back(j->state()); });
  EXPECT_THAT(seen, ElementsAre(v1::JOB_STATE_FAILED));
  auto why = core_->WhyJob(2);
  TC_ASSERT_OK(why);
  EXPECT_EQ(why->state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(why->summary(), ::testing::HasSubstr("is not waiting: it is failed"));
  // Metrics of a retired job: known, no points.
  v1::GetMetricsRequest req;
  req.set_job_id(2);
  TC_EXPECT_OK(core_->GetMetrics(req));
  req.set_job_id(99);
  EXPECT_THAT(core_->GetMetrics(req), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_P(HistoryTest, GetLogsAsync_RetiredJob_AsksItsAgentForTheRankLog) {
  RunHistory(*this, *core_);
  core_->Tick();
  const size_t sent = conns_["a"]->sent.size();
  bool answered = false;
  core_->GetLogsAsync(2, 0, 0, 0, [&](absl::StatusOr<v1::GetLogsResponse>) {
    answered = true;
  });
  // The record read from the store names rank 0's node: its agent is asked.
  ASSERT_EQ(conns_["a"]->sent.size(), sent + 1);
  const v1::CoordinatorMessage& msg = conns_["a"]->sent.back();
  ASSERT_TRUE(msg.has_read_log());
  EXPECT_EQ(msg.read_log().task().job_id(), 2);
  EXPECT_EQ(msg.read_log().task().rank(), 0);
  EXPECT_FALSE(answered);
  // A rank the job never had is bad input (a follower must not wait on it).
  absl::Status missing;
  core_->GetLogsAsync(2, 5, 0, 0, [&](absl::StatusOr<v1::GetLogsResponse> r) {
    missing = r.status();
  });
  EXPECT_THAT(missing,
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("no rank 5")));
}

TEST_P(HistoryTest, SubmitJob_RequestIdOfRetiredJob_ReturnsItAlsoAfterRestart) {
  RunHistory(*this, *core_);
  core_->Tick();
  EXPECT_EQ(*core_->SubmitJob(Spec("alice"), "req-1"), 1);
  Restart();
  EXPECT_EQ(*core_->SubmitJob(Spec("alice"), "req-4"), 4);
  // A new request gets a new id after all the old ones.
  EXPECT_EQ(*core_->SubmitJob(Spec("alice"), "req-new"), 9);
}

TEST_P(HistoryTest, Restart_RetiredJobsLoadedAsSummaries_SameViews) {
  RunHistory(*this, *core_);
  core_->Tick();
  const auto before = Views(9, /*blank_pending_reason=*/true);
  const auto stats_before = core_->Stats().jobs_by_state;
  Restart();
  // 6, 7, 8 and the retired sweep trials (3, 4, 5: read whole for the ASHA
  // rungs, then evicted) — only the three active jobs stay.
  EXPECT_EQ(core_->Stats().jobs_in_memory, 3);
  EXPECT_EQ(core_->Stats().jobs_by_state, stats_before);
  EXPECT_EQ(Views(9, /*blank_pending_reason=*/true), before);
}

TEST_P(HistoryTest, Tick_FinalWriteFailed_KeptInMemoryWithItsFinalState) {
  if (GetParam() != "memory") GTEST_SKIP() << "failure injection: memory store";
  FakeConnection& a = Connect("a", 1);
  auto id = core_->SubmitJob(Spec("alice"), "");
  v1::TaskRef task = a.Starts()[0].task();
  Report("a", Status(task, v1::TASK_STATE_RUNNING));
  // The store is down when the job ends: its stored record says RUNNING.
  memory_.SetFailing(true);
  Report("a", Status(task, v1::TASK_STATE_EXITED, 0));
  core_->Tick();
  // Not evicted: reading the store would show a stale state.
  EXPECT_EQ(core_->Stats().jobs_in_memory, 1);
  EXPECT_EQ(core_->GetJob(*id)->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_THAT(Ids(core_->ListJobs({v1::JOB_STATE_SUCCEEDED}, 0)), ElementsAre(*id));
}

INSTANTIATE_TEST_SUITE_P(Stores, HistoryTest, ::testing::Values("memory", "sqlite"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace trainctl::coord
