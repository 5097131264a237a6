// One conformance suite for every StateStore backend (STYLE.md habit 17).

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "common/testing/status_matchers.h"
#include "coordinator/etcd/etcd_client.h"
#include "coordinator/etcd/etcd_state_store.h"
#include "coordinator/etcd/testing/etcd_server.h"
#include "coordinator/state_store.h"
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
      // Reopening is a new store over the same keys.
      etcd_store_ = std::make_unique<EtcdStateStore>(etcd_.get(), "/conformance/",
                                                     std::nullopt);
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

INSTANTIATE_TEST_SUITE_P(Backends, StateStoreConformanceTest,
                         ::testing::Values("memory", "sqlite", "etcd"));

TEST(SqliteStateStoreTest, Open_MissingDirectory_Unavailable) {
  EXPECT_THAT(SqliteStateStore::Open("/nonexistent-dir/x/state.db"),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::HasSubstr("open")));
}

}  // namespace
}  // namespace trainctl::coord
