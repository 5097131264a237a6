// One conformance suite for every StateStore backend: each backend must keep
// the same promises, so each runs the same tests.

#include <sqlite3.h>
#include <sys/stat.h>

#include <cstdio>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/status_matchers.h"
#include "coordinator/etcd/etcd_client.h"
#include "coordinator/etcd/etcd_state_store.h"
#include "coordinator/etcd/testing/etcd_server.h"
#include "coordinator/state_store.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::SizeIs;
using ::trainctl::testing::StatusIs;

// A backend: makes a store over `dir`; calling it again over the same dir
// reopens the same data (for the memory store: the same object).
using Factory = std::function<std::unique_ptr<StateStore>(const std::string& dir)>;

class StateStoreConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/store-" + GetParam() + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    if (GetParam() == "etcd") {
      auto server = testing::EtcdServer::Start(dir_ + "/etcd");
      if (absl::IsNotFound(server.status())) GTEST_SKIP() << server.status();
      ASSERT_THAT(server, ::trainctl::testing::IsOk());
      etcd_server_ = std::move(*server);
      auto conn = ConnectEtcd(etcd_server_->endpoint(), absl::Seconds(20));
      ASSERT_THAT(conn, ::trainctl::testing::IsOk());
      etcd_ = std::move(*conn);
    }
  }
  // Opens (or reopens) the backend under test.
  StateStore* Open() {
    if (GetParam() == "memory") {
      if (!memory_) memory_ = std::make_unique<MemoryStateStore>();
      return memory_.get();
    }
    if (GetParam() == "etcd") {
      // Reopening is a new store over the same keys. Pages of 2 keys, so
      // that every read crosses pages.
      etcd_store_ = std::make_unique<EtcdStateStore>(etcd_.get(), "/conformance/",
                                                     std::nullopt, /*page_size=*/2);
      return etcd_store_.get();
    }
    sqlite_.reset();
    auto s = SqliteStateStore::Open(dir_ + "/state.db");
    EXPECT_THAT(s, ::trainctl::testing::IsOk());
    sqlite_ = std::move(*s);
    return sqlite_.get();
  }
  std::string dir_;
  std::unique_ptr<MemoryStateStore> memory_;
  std::unique_ptr<SqliteStateStore> sqlite_;
  std::unique_ptr<testing::EtcdServer> etcd_server_;
  std::unique_ptr<EtcdConnection> etcd_;
  std::unique_ptr<EtcdStateStore> etcd_store_;
};

v1::Job MakeJob(int64_t id, v1::JobState state) {
  v1::Job job;
  job.set_id(id);
  job.set_state(state);
  job.mutable_spec()->add_command("echo");
  job.mutable_spec()->add_command(std::string(1000, 'x'));
  return job;
}

// One id per cluster: the same on every call and after reopening the store
// (a coordinator restart), 32 hex digits.
TEST_P(StateStoreConformanceTest, ClusterId_StableAcrossReopen) {
  auto first = Open()->ClusterId();
  ASSERT_THAT(first, ::trainctl::testing::IsOk());
  EXPECT_EQ(first->size(), 32u);
  EXPECT_EQ(first->find_first_not_of("0123456789abcdef"), std::string::npos);
  auto again = Open()->ClusterId();
  ASSERT_THAT(again, ::trainctl::testing::IsOk());
  EXPECT_EQ(*again, *first);
}

TEST_P(StateStoreConformanceTest, PutJob_ThenReopen_LoadsSameJobsInIdOrder) {
  StateStore* store = Open();
  TC_ASSERT_OK(store->PutJob(MakeJob(2, v1::JOB_STATE_PENDING)));
  TC_ASSERT_OK(store->PutJob(MakeJob(1, v1::JOB_STATE_RUNNING)));
  store = Open();
  auto state = store->Load();
  TC_ASSERT_OK(state);
  ASSERT_THAT(state->jobs, SizeIs(2));
  EXPECT_EQ(state->jobs[0].id(), 1);
  EXPECT_EQ(state->jobs[0].state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(state->jobs[1].spec().command(1).size(), 1000u);
}

TEST_P(StateStoreConformanceTest, PutJob_SameIdTwice_LastWriteWins) {
  StateStore* store = Open();
  TC_ASSERT_OK(store->PutJob(MakeJob(5, v1::JOB_STATE_PENDING)));
  TC_ASSERT_OK(store->PutJob(MakeJob(5, v1::JOB_STATE_SUCCEEDED)));
  auto state = Open()->Load();
  ASSERT_THAT(state->jobs, SizeIs(1));
  EXPECT_EQ(state->jobs[0].state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_P(StateStoreConformanceTest, PutNode_ThenReopen_LoadsNodes) {
  StateStore* store = Open();
  v1::Node node;
  node.set_name("gpu-1");
  node.add_gpus()->set_uuid("GPU-1");
  TC_ASSERT_OK(store->PutNode(node));
  node.add_gpus()->set_uuid("GPU-2");
  TC_ASSERT_OK(store->PutNode(node));
  auto state = Open()->Load();
  ASSERT_THAT(state->nodes, SizeIs(1));
  EXPECT_EQ(state->nodes[0].gpus_size(), 2);
}

TEST_P(StateStoreConformanceTest, Put_BadKeys_InvalidArgument) {
  StateStore* store = Open();
  EXPECT_THAT(store->PutJob(MakeJob(0, v1::JOB_STATE_PENDING)),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("id")));
  EXPECT_THAT(store->PutNode(v1::Node()),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("name")));
}

TEST_P(StateStoreConformanceTest, Load_Empty_NoJobsNoNodes) {
  auto state = Open()->Load();
  TC_ASSERT_OK(state);
  EXPECT_THAT(state->jobs, SizeIs(0));
  EXPECT_THAT(state->nodes, SizeIs(0));
}

v1::MetricPoint Point(const std::string& key, double value, int64_t step) {
  v1::MetricPoint p;
  p.set_key(key);
  p.set_value(value);
  p.set_step(step);
  p.set_time_ms(1000 + step);
  p.set_attempt(1);
  p.set_rank(0);
  return p;
}

TEST_P(StateStoreConformanceTest,
       AppendMetrics_ThenReopen_ReadsByKeyThenAppendOrder) {
  StateStore* store = Open();
  // Two reports of job 7, interleaving keys; one of job 8.
  TC_ASSERT_OK(store->AppendMetrics(7, {Point("loss", 2.5, 1), Point("acc", 0.1, 1)}));
  TC_ASSERT_OK(store->AppendMetrics(7, {Point("loss", 1.5, 2), Point("loss", 0.5, 3)}));
  TC_ASSERT_OK(store->AppendMetrics(8, {Point("loss", 9, 1)}));
  store = Open();
  auto points = store->ReadMetrics(7, "");
  TC_ASSERT_OK(points);
  // "acc" sorts before "loss"; loss keeps its append order 1, 2, 3.
  ASSERT_THAT(*points, SizeIs(4));
  EXPECT_EQ((*points)[0].key(), "acc");
  EXPECT_EQ((*points)[1].step(), 1);
  EXPECT_EQ((*points)[2].step(), 2);
  EXPECT_EQ((*points)[3].value(), 0.5);
  EXPECT_EQ((*points)[3].time_ms(), 1003);
  EXPECT_EQ((*points)[3].attempt(), 1);
}

TEST_P(StateStoreConformanceTest, ReadMetrics_KeyOrUnknownJob_FiltersOrEmpty) {
  StateStore* store = Open();
  TC_ASSERT_OK(store->AppendMetrics(7, {Point("loss", 2.5, 1), Point("acc", 0.1, 1)}));
  auto loss = store->ReadMetrics(7, "loss");
  TC_ASSERT_OK(loss);
  ASSERT_THAT(*loss, SizeIs(1));
  EXPECT_EQ((*loss)[0].value(), 2.5);
  auto none = store->ReadMetrics(99, "");
  TC_ASSERT_OK(none);
  EXPECT_THAT(*none, SizeIs(0));
}

TEST_P(StateStoreConformanceTest, Load_AfterAppendMetrics_CountsPointsPerJob) {
  StateStore* store = Open();
  TC_ASSERT_OK(store->AppendMetrics(3, {Point("loss", 1, 1), Point("loss", 1, 2)}));
  TC_ASSERT_OK(store->AppendMetrics(3, {Point("acc", 1, 2)}));
  TC_ASSERT_OK(store->AppendMetrics(4, {Point("loss", 1, 1)}));
  auto state = Open()->Load();
  TC_ASSERT_OK(state);
  EXPECT_EQ(state->metric_points.at(3), 3);
  EXPECT_EQ(state->metric_points.at(4), 1);
  EXPECT_FALSE(state->metric_points.contains(5));
}

TEST_P(StateStoreConformanceTest, AppendMetrics_BadInput_InvalidArgumentNothingStored) {
  StateStore* store = Open();
  EXPECT_THAT(store->AppendMetrics(0, {Point("loss", 1, 1)}),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("job_id")));
  // One bad point refuses the whole report.
  EXPECT_THAT(store->AppendMetrics(1, {Point("loss", 1, 1), Point("", 1, 1)}),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("key")));
  auto points = store->ReadMetrics(1, "");
  TC_ASSERT_OK(points);
  EXPECT_THAT(*points, SizeIs(0));
}

// Group commit: many threads write at once; every write whose
// caller got OK is there after the store is reopened.
TEST_P(StateStoreConformanceTest, PutJob_ConcurrentWriters_EveryAckedWriteLoads) {
  StateStore* store = Open();
  constexpr int kThreads = 8;
  constexpr int kJobsEach = 20;
  std::vector<absl::Status> results(kThreads * kJobsEach);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kJobsEach; ++i) {
        const int64_t id = 1 + t * kJobsEach + i;
        // Each job twice, PENDING then SCHEDULED, as a submit does.
        absl::Status s = store->PutJob(MakeJob(id, v1::JOB_STATE_PENDING));
        if (s.ok()) s = store->PutJob(MakeJob(id, v1::JOB_STATE_SCHEDULED));
        results[id - 1] = s;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) TC_ASSERT_OK(s);
  auto state = Open()->Load();
  TC_ASSERT_OK(state);
  ASSERT_THAT(state->jobs, SizeIs(kThreads * kJobsEach));
  for (size_t i = 0; i < state->jobs.size(); ++i) {
    EXPECT_EQ(state->jobs[i].id(), static_cast<int64_t>(i) + 1);
    EXPECT_EQ(state->jobs[i].state(), v1::JOB_STATE_SCHEDULED) << "job " << i + 1;
  }
}

// The queued path: writes enqueued in order (the last write of a job wins,
// even when both are still queued), one wait for the last ticket covers all.
TEST_P(StateStoreConformanceTest, EnqueuePut_WaitLastTicket_AllDurableLastWins) {
  StateStore* store = Open();
  WriteTicket last = 0;
  for (int64_t id = 1; id <= 30; ++id) {
    auto t = store->EnqueuePutJob(MakeJob(id, v1::JOB_STATE_PENDING));
    TC_ASSERT_OK(t);
    t = store->EnqueuePutJob(MakeJob(id, id % 2 ? v1::JOB_STATE_RUNNING
                                                : v1::JOB_STATE_SUCCEEDED));
    TC_ASSERT_OK(t);
    EXPECT_GE(*t, last);
    last = *t;
  }
  v1::Node node;
  node.set_name("gpu-1");
  auto t = store->EnqueuePutNode(node);
  TC_ASSERT_OK(t);
  TC_ASSERT_OK(store->WaitDurable(*t));
  auto state = Open()->Load();
  TC_ASSERT_OK(state);
  ASSERT_THAT(state->jobs, SizeIs(30));
  EXPECT_EQ(state->jobs[0].state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(state->jobs[1].state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_THAT(state->nodes, SizeIs(1));
}

// WhenDurable calls back exactly once per call, also for a ticket already
// durable, and for concurrent waiters.
TEST_P(StateStoreConformanceTest, WhenDurable_ConcurrentWaiters_EachCalledOnceOk) {
  StateStore* store = Open();
  constexpr int kThreads = 6;
  std::vector<int> calls(kThreads, 0);
  std::vector<absl::Status> status(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto t = store->EnqueuePutJob(MakeJob(100 + i, v1::JOB_STATE_PENDING));
      ASSERT_TRUE(t.ok());
      absl::Notification called;
      store->WhenDurable(*t, [&](absl::Status s) {
        ++calls[i];
        status[i] = s;
        called.Notify();
      });
      called.WaitForNotification();
      // Already durable: called inline.
      store->WhenDurable(*t, [&](absl::Status s) { ++calls[i]; });
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(calls[i], 2);
    TC_EXPECT_OK(status[i]);
  }
  auto state = Open()->Load();
  TC_ASSERT_OK(state);
  EXPECT_THAT(state->jobs, SizeIs(kThreads));
}

// Concurrent metric reports each commit all their points.
TEST_P(StateStoreConformanceTest, AppendMetrics_ConcurrentReports_AllPointsStored) {
  StateStore* store = Open();
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10 && results[t].ok(); ++i) {
        results[t] = store->AppendMetrics(7, {Point("loss", i, 1.0), Point("acc", i, 0.5)});
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) TC_ASSERT_OK(s);
  auto points = Open()->ReadMetrics(7, "loss");
  TC_ASSERT_OK(points);
  EXPECT_THAT(*points, SizeIs(40));
}

// A job that is final but whose task still runs is not retired (it can
// change: the task's exit will be stored); a retired sweep trial comes back
// whole (ASHA rungs are rebuilt from it); every other retired job comes back
// as a summary only.
TEST_P(StateStoreConformanceTest, LoadSummarized_RetiredJobs_SummariesOthersWhole) {
  StateStore* store = Open();
  TC_ASSERT_OK(store->PutJob(MakeJob(1, v1::JOB_STATE_PENDING)));
  v1::Job done = MakeJob(2, v1::JOB_STATE_SUCCEEDED);
  done.mutable_spec()->set_user("alice");
  done.set_request_id("req-2");
  done.set_placement_seq(7);
  done.add_tasks()->set_state(v1::TASK_STATE_EXITED);
  TC_ASSERT_OK(store->PutJob(done));
  v1::Job trial = MakeJob(3, v1::JOB_STATE_CANCELLED);
  trial.mutable_spec()->set_sweep_id("sw");
  TC_ASSERT_OK(store->PutJob(trial));
  v1::Job stopping = MakeJob(4, v1::JOB_STATE_FAILED);
  stopping.add_tasks()->set_state(v1::TASK_STATE_STOPPING);
  TC_ASSERT_OK(store->PutJob(stopping));
  // Job 5 was running when first written, then retired: the last write wins.
  TC_ASSERT_OK(store->PutJob(MakeJob(5, v1::JOB_STATE_RUNNING)));
  TC_ASSERT_OK(store->PutJob(MakeJob(5, v1::JOB_STATE_FAILED)));

  auto state = Open()->LoadSummarized();
  TC_ASSERT_OK(state);
  std::vector<int64_t> whole;
  for (const v1::Job& j : state->jobs) whole.push_back(j.id());
  EXPECT_EQ(whole, (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(state->jobs[0].spec().command(1).size(), 1000u);
  ASSERT_THAT(state->retired, SizeIs(2));
  const JobSummary& s = state->retired[0];
  EXPECT_EQ(s.id, 2);
  EXPECT_EQ(s.state, v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(s.user, "alice");
  EXPECT_EQ(s.request_id, "req-2");
  EXPECT_EQ(s.sweep_id, "");
  EXPECT_EQ(s.placement_seq, 7);
  EXPECT_EQ(state->retired[1].id, 5);
  EXPECT_EQ(state->retired[1].state, v1::JOB_STATE_FAILED);
}

TEST_P(StateStoreConformanceTest, ReadJobs_KnownAndUnknownIds_InAskedOrderUnknownLeftOut) {
  StateStore* store = Open();
  TC_ASSERT_OK(store->PutJob(MakeJob(1, v1::JOB_STATE_SUCCEEDED)));
  TC_ASSERT_OK(store->PutJob(MakeJob(2, v1::JOB_STATE_FAILED)));
  TC_ASSERT_OK(store->PutJob(MakeJob(12, v1::JOB_STATE_CANCELLED)));
  TC_ASSERT_OK(store->PutJob(MakeJob(500, v1::JOB_STATE_SUCCEEDED)));
  store = Open();
  // Job 2 lies between asked ids and is not returned; 99 is not stored.
  auto jobs = store->ReadJobs({12, 99, 500, 1});
  TC_ASSERT_OK(jobs);
  ASSERT_THAT(*jobs, SizeIs(3));
  EXPECT_EQ((*jobs)[0].id(), 12);
  EXPECT_EQ((*jobs)[0].state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ((*jobs)[1].id(), 500);
  EXPECT_EQ((*jobs)[2].id(), 1);
  EXPECT_EQ((*jobs)[2].spec().command(1).size(), 1000u);
  auto none = store->ReadJobs({});
  TC_ASSERT_OK(none);
  EXPECT_THAT(*none, SizeIs(0));
}

// The keys of `records`, in the order returned.
std::vector<std::string> KeysOf(const std::vector<StoredRecord>& records) {
  std::vector<std::string> keys;
  for (const StoredRecord& r : records) keys.push_back(r.key);
  return keys;
}

// Generic records (the token store, the audit trail): kept per kind, the
// last write of a key wins, read back after a reopen in key order.
TEST_P(StateStoreConformanceTest, PutRecord_ThenReopen_ReadsEachKindInKeyOrder) {
  StateStore* store = Open();
  TC_ASSERT_OK(store->PutRecord("tokens", "tok-b", "B1"));
  TC_ASSERT_OK(store->PutRecord("tokens", "tok-a", "A"));
  TC_ASSERT_OK(store->PutRecord("tokens", "tok-b", "B2"));
  TC_ASSERT_OK(store->PutRecord("audit", "0001", std::string("\0x", 2)));
  store = Open();
  auto tokens = store->ReadRecords("tokens", {});
  TC_ASSERT_OK(tokens);
  EXPECT_THAT(KeysOf(*tokens), ::testing::ElementsAre("tok-a", "tok-b"));
  EXPECT_EQ((*tokens)[1].value, "B2");
  auto audit = store->ReadRecords("audit", {});
  TC_ASSERT_OK(audit);
  ASSERT_THAT(*audit, SizeIs(1));
  EXPECT_EQ((*audit)[0].value, std::string("\0x", 2));
  auto none = store->ReadRecords("unknown_kind", {});
  TC_ASSERT_OK(none);
  EXPECT_THAT(*none, SizeIs(0));
}

// from_key, limit and newest_first: what the audit trail's "the newest N
// since T" reads.
TEST_P(StateStoreConformanceTest, ReadRecords_FromKeyLimitNewestFirst) {
  StateStore* store = Open();
  for (const char* key : {"05", "01", "03", "04", "02"}) {
    TC_ASSERT_OK(store->PutRecord("audit", key, key));
  }
  RecordQuery from;
  from.from_key = "02";
  EXPECT_THAT(KeysOf(*store->ReadRecords("audit", from)),
              ::testing::ElementsAre("02", "03", "04", "05"));
  RecordQuery first_two;
  first_two.limit = 2;
  EXPECT_THAT(KeysOf(*store->ReadRecords("audit", first_two)),
              ::testing::ElementsAre("01", "02"));
  RecordQuery newest;
  newest.newest_first = true;
  newest.limit = 2;
  EXPECT_THAT(KeysOf(*store->ReadRecords("audit", newest)),
              ::testing::ElementsAre("05", "04"));
  RecordQuery newest_from;
  newest_from.newest_first = true;
  newest_from.from_key = "04";
  EXPECT_THAT(KeysOf(*store->ReadRecords("audit", newest_from)),
              ::testing::ElementsAre("05", "04"));
  RecordQuery all_newest;
  all_newest.newest_first = true;
  EXPECT_THAT(KeysOf(*store->ReadRecords("audit", all_newest)),
              ::testing::ElementsAre("05", "04", "03", "02", "01"));
}

TEST_P(StateStoreConformanceTest, PutRecord_BadKindOrKey_InvalidArgumentNothingStored) {
  StateStore* store = Open();
  EXPECT_THAT(store->PutRecord("", "k", "v"),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("kind")));
  EXPECT_THAT(store->PutRecord("Tokens/x", "k", "v"),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("kind")));
  EXPECT_THAT(store->PutRecord("tokens", "", "v"),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("key")));
  EXPECT_THAT(store->PutRecord("tokens", "a/b", "v"),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("key")));
  RecordQuery negative;
  negative.limit = -1;
  EXPECT_THAT(store->ReadRecords("tokens", negative),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("limit")));
  EXPECT_THAT(*store->ReadRecords("tokens", {}), SizeIs(0));
}

// The queued form: durable once its ticket is, and readable then.
TEST_P(StateStoreConformanceTest, EnqueuePutRecord_WaitDurable_ThenRead) {
  StateStore* store = Open();
  auto ticket = store->EnqueuePutRecord("audit", "1", "one");
  TC_ASSERT_OK(ticket);
  TC_ASSERT_OK(store->WaitDurable(*ticket));
  auto read = Open()->ReadRecords("audit", {});
  TC_ASSERT_OK(read);
  ASSERT_THAT(*read, SizeIs(1));
  EXPECT_EQ((*read)[0].value, "one");
}

// Retention: the keys below the bound go, that kind's only, queued writes
// first; what is left survives a reopen.
TEST_P(StateStoreConformanceTest, DeleteRecordsBefore_DeletesOnlyLowerKeysOfThatKind) {
  StateStore* store = Open();
  for (const char* key : {"05", "01", "03", "04", "02"}) {
    TC_ASSERT_OK(store->PutRecord("audit", key, key));
  }
  TC_ASSERT_OK(store->PutRecord("tokens", "01", "t"));
  auto queued = store->EnqueuePutRecord("audit", "00", "queued");
  TC_ASSERT_OK(queued);
  auto deleted = store->DeleteRecordsBefore("audit", "03");
  TC_ASSERT_OK(deleted);
  EXPECT_EQ(*deleted, 3);  // 00 (queued before the delete), 01, 02
  store = Open();
  EXPECT_THAT(KeysOf(*store->ReadRecords("audit", {})),
              ::testing::ElementsAre("03", "04", "05"));
  EXPECT_THAT(KeysOf(*store->ReadRecords("tokens", {})), ::testing::ElementsAre("01"));
  EXPECT_EQ(*store->DeleteRecordsBefore("audit", ""), 0);
  EXPECT_EQ(*store->DeleteRecordsBefore("unknown_kind", "99"), 0);
  EXPECT_THAT(store->DeleteRecordsBefore("Bad/kind", "99"),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("kind")));
}

INSTANTIATE_TEST_SUITE_P(Backends, StateStoreConformanceTest,
                         ::testing::Values("memory", "sqlite", "etcd"));

TEST(MemoryStateStoreTest, AppendMetrics_Failing_UnavailableNothingStored) {
  MemoryStateStore store;
  store.SetFailing(true);
  EXPECT_THAT(store.AppendMetrics(1, {Point("loss", 1, 1)}),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  store.SetFailing(false);
  EXPECT_THAT(*store.ReadMetrics(1, ""), SizeIs(0));
}

TEST(SqliteStateStoreTest, Open_MissingDirectory_Unavailable) {
  EXPECT_THAT(SqliteStateStore::Open("/nonexistent-dir/x/state.db"),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::HasSubstr("open")));
}

// Group commit keeps "OK means committed": a second connection to the same
// file, opened while the first store is still running (nothing flushed by a
// close), sees every write whose caller got OK.
TEST(SqliteStateStoreTest, PutJob_AckedWhileOpen_VisibleToAnotherConnection) {
  const std::string dir = ::testing::TempDir() + "/sqlite-acked-open";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto writer = SqliteStateStore::Open(dir + "/state.db");
  TC_ASSERT_OK(writer);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        EXPECT_TRUE((*writer)->PutJob(MakeJob(1 + t * 10 + i, v1::JOB_STATE_PENDING)).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  auto reader = SqliteStateStore::Open(dir + "/state.db");
  TC_ASSERT_OK(reader);
  auto state = (*reader)->Load();
  TC_ASSERT_OK(state);
  EXPECT_THAT(state->jobs, SizeIs(40));
  // One write per job; concurrent ones may have shared a commit.
  const SqliteStateStore::CommitStats stats = (*writer)->commit_stats();
  EXPECT_EQ(stats.writes, 40);
  EXPECT_LE(stats.commits, 40);
}

// Writes queued while commits are held (one coordinator event: a submit and
// its placement) go in one transaction, and that one commit acks them all.
TEST(SqliteStateStoreTest, HoldCommits_WritesQueuedWhileHeld_OneCommit) {
  const std::string dir = ::testing::TempDir() + "/sqlite-hold";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto store = SqliteStateStore::Open(dir + "/state.db");
  TC_ASSERT_OK(store);
  const int64_t before = (*store)->commit_stats().commits;
  (*store)->HoldCommits();
  auto t1 = (*store)->EnqueuePutJob(MakeJob(1, v1::JOB_STATE_PENDING));
  auto t2 = (*store)->EnqueuePutJob(MakeJob(1, v1::JOB_STATE_SCHEDULED));
  auto t3 = (*store)->EnqueuePutJob(MakeJob(2, v1::JOB_STATE_SUCCEEDED));
  (*store)->ReleaseCommits();
  TC_ASSERT_OK(t3);
  TC_ASSERT_OK((*store)->WaitDurable(*t3));
  TC_EXPECT_OK((*store)->WaitDurable(*t1));
  const SqliteStateStore::CommitStats stats = (*store)->commit_stats();
  EXPECT_EQ(stats.commits - before, 1);
  auto state = (*store)->Load();
  TC_ASSERT_OK(state);
  ASSERT_THAT(state->jobs, SizeIs(2));
  EXPECT_EQ(state->jobs[0].state(), v1::JOB_STATE_SCHEDULED);
}

// Opens a SQLite store in a fresh directory named `name`.
std::unique_ptr<SqliteStateStore> FreshSqlite(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto store = SqliteStateStore::Open(dir + "/state.db");
  EXPECT_THAT(store, ::trainctl::testing::IsOk());
  return store.ok() ? std::move(*store) : nullptr;
}

// A lazy write costs no commit of its own: it goes with the next write that
// does. (The flush is set past any test's life, so nothing else commits it.)
TEST(SqliteStateStoreTest, LazyWrite_RidesWithTheNextCommit) {
  std::unique_ptr<SqliteStateStore> store = FreshSqlite("sqlite-lazy-rides");
  ASSERT_NE(store, nullptr);
  store->SetLazyFlush(absl::Hours(1));
  const SqliteStateStore::CommitStats before = store->commit_stats();
  auto lazy = store->EnqueuePutJobLazily(MakeJob(1, v1::JOB_STATE_RUNNING));
  TC_ASSERT_OK(lazy);
  auto eager = store->EnqueuePutJob(MakeJob(2, v1::JOB_STATE_SUCCEEDED));
  TC_ASSERT_OK(eager);
  TC_ASSERT_OK(store->WaitDurable(*eager));
  const SqliteStateStore::CommitStats after = store->commit_stats();
  EXPECT_EQ(after.commits - before.commits, 1);
  EXPECT_EQ(after.writes - before.writes, 2);
  TC_EXPECT_OK(store->WaitDurable(*lazy));
}

// Whoever waits for a lazy write, or reads, gets it committed at once.
TEST(SqliteStateStoreTest, LazyWrite_WaitedForOrRead_CommittedAtOnce) {
  std::unique_ptr<SqliteStateStore> store = FreshSqlite("sqlite-lazy-waited");
  ASSERT_NE(store, nullptr);
  store->SetLazyFlush(absl::Hours(1));
  auto waited = store->EnqueuePutJobLazily(MakeJob(1, v1::JOB_STATE_RUNNING));
  TC_ASSERT_OK(waited);
  TC_ASSERT_OK(store->WaitDurable(*waited));
  TC_ASSERT_OK(store->EnqueuePutJobLazily(MakeJob(2, v1::JOB_STATE_RUNNING)));
  auto state = store->Load();
  TC_ASSERT_OK(state);
  ASSERT_THAT(state->jobs, SizeIs(2));
  EXPECT_EQ(state->jobs[1].state(), v1::JOB_STATE_RUNNING);
}

// Alone and not waited for, a lazy write is still committed once its flush
// time is up.
TEST(SqliteStateStoreTest, LazyWrite_Alone_CommittedAfterTheFlush) {
  std::unique_ptr<SqliteStateStore> store = FreshSqlite("sqlite-lazy-alone");
  ASSERT_NE(store, nullptr);
  store->SetLazyFlush(absl::Milliseconds(20));
  const int64_t before = store->commit_stats().commits;
  TC_ASSERT_OK(store->EnqueuePutJobLazily(MakeJob(1, v1::JOB_STATE_RUNNING)));
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (store->commit_stats().commits == before && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(store->commit_stats().commits - before, 1);
}

// The state holds jobs' environments and tokens: owner-only, also when an
// older file was world-readable.
TEST(SqliteStateStoreTest, Open_NewOrLaxFile_Mode0600) {
  const std::string dir = ::testing::TempDir() + "/sqlite-mode";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string fresh = dir + "/fresh.db";
  const std::string lax = dir + "/lax.db";
  {
    std::FILE* f = std::fopen(lax.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
    ASSERT_EQ(chmod(lax.c_str(), 0644), 0);
  }
  for (const std::string& path : {fresh, lax}) {
    auto store = SqliteStateStore::Open(path);
    TC_ASSERT_OK(store);
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << path;
  }
}

// A file written before the summary columns existed (jobs: id, record only)
// gets them at Open(), filled from its records.
TEST(SqliteStateStoreTest, Open_FileWithoutSummaryColumns_SummariesFilled) {
  const std::string dir = ::testing::TempDir() + "/sqlite-old-schema";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/state.db";
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE jobs (id INTEGER PRIMARY KEY, record BLOB NOT NULL)",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_stmt* put = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "INSERT INTO jobs VALUES (?, ?)", -1, &put, nullptr),
              SQLITE_OK);
    for (v1::Job job : {MakeJob(1, v1::JOB_STATE_SUCCEEDED), MakeJob(2, v1::JOB_STATE_PENDING)}) {
      job.mutable_spec()->set_user("bob");
      const std::string blob = job.SerializeAsString();
      sqlite3_bind_int64(put, 1, job.id());
      sqlite3_bind_blob(put, 2, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
      ASSERT_EQ(sqlite3_step(put), SQLITE_DONE);
      sqlite3_reset(put);
    }
    sqlite3_finalize(put);
    sqlite3_close(db);
  }
  auto store = SqliteStateStore::Open(path);
  TC_ASSERT_OK(store);
  auto state = (*store)->LoadSummarized();
  TC_ASSERT_OK(state);
  ASSERT_THAT(state->jobs, SizeIs(1));
  EXPECT_EQ(state->jobs[0].id(), 2);
  ASSERT_THAT(state->retired, SizeIs(1));
  EXPECT_EQ(state->retired[0].id, 1);
  EXPECT_EQ(state->retired[0].user, "bob");
  EXPECT_EQ(state->retired[0].state, v1::JOB_STATE_SUCCEEDED);
}

}  // namespace
}  // namespace trainctl::coord
