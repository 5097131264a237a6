// The cluster simulation in CI (tests/sim/README.md): a few hundred seeds of
// a few hundred events each on the memory store, a few on SQLite, and every
// scenario in tests/sim/seeds/ (each replays a bug the simulation found or
// was taught to find, now fixed).

#include "tests/sim/cluster_sim.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/spdlog.h"

namespace trainctl::sim {
namespace {

using ::testing::IsEmpty;

class ClusterSimTest : public ::testing::Test {
 protected:
  void SetUp() override { spdlog::set_level(spdlog::level::off); }
  void TearDown() override { spdlog::set_level(spdlog::level::info); }
};

std::string Describe(const SimResult& r) {
  return absl::StrJoin(r.violations, "\n");
}

TEST_F(ClusterSimTest, RunSeed_ManySeedsOnTheMemoryStore_NoInvariantFails) {
  SimOptions options;
  int64_t events = 0, processes = 0, probes = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    SimResult r = RunSeed(seed, 400, options);
    ASSERT_THAT(r.violations, IsEmpty()) << Describe(r);
    events += r.events;
    processes += r.processes_started;
    probes += r.preflight_runs;
  }
  // The runs went deep: processes started, pre-flights ran.
  EXPECT_GT(processes, 1000);
  EXPECT_GT(probes, 50);
  std::printf("cluster sim: %lld events, %lld processes, %lld probes\n",
              static_cast<long long>(events), static_cast<long long>(processes),
              static_cast<long long>(probes));
}

TEST_F(ClusterSimTest, RunSeed_SqliteStoreWithCrashes_NoInvariantFails) {
  SimOptions options;
  options.store = "sqlite";
  options.sqlite_dir = ::testing::TempDir();
  for (uint64_t seed = 1001; seed <= 1006; ++seed) {
    SimResult r = RunSeed(seed, 300, options);
    ASSERT_THAT(r.violations, IsEmpty()) << Describe(r);
  }
}

TEST_F(ClusterSimTest, RunSeed_CommitQueueStoreKilledWithWritesQueued_NoInvariantFails) {
  // kill -9 of a group-committing coordinator: the crashes lose queued
  // writes (a task's RUNNING, an exit nobody waited for), which the agents'
  // registrations repair.
  SimOptions options;
  options.store = "queue";
  int64_t lost = 0;
  for (uint64_t seed = 2001; seed <= 2040; ++seed) {
    SimResult r = RunSeed(seed, 400, options);
    ASSERT_THAT(r.violations, IsEmpty()) << Describe(r);
    lost += r.writes_lost;
  }
  EXPECT_GT(lost, 0) << "no crash caught a write in the queue";
}

TEST_F(ClusterSimTest, RunSeed_SameSeed_SameRun) {
  SimOptions options;
  SimResult a = RunSeed(77, 500, options);
  SimResult b = RunSeed(77, 500, options);
  EXPECT_EQ(a.events_by_type, b.events_by_type);
  EXPECT_EQ(a.job_end_states, b.job_end_states);
  EXPECT_EQ(a.processes_started, b.processes_started);
  EXPECT_EQ(a.preflight_runs, b.preflight_runs);
}

TEST_F(ClusterSimTest, Scenarios_EveryRecordedBug_StaysFixed) {
  const std::filesystem::path dir = TRAINCTL_SIM_SEEDS_DIR;
  int replayed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".scenario") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<Scenario> s = ParseScenario(text.str());
    ASSERT_TRUE(s.ok()) << entry.path() << ": " << s.status();
    SimOptions options;
    options.store = s->store;
    options.sqlite_dir = ::testing::TempDir();
    SimResult r = RunEvents(s->seed, s->events, options);
    EXPECT_THAT(r.violations, IsEmpty()) << entry.path() << "\n" << Describe(r);
    ++replayed;
  }
  EXPECT_GE(replayed, 3);
}

TEST_F(ClusterSimTest, ParseScenario_FormatRoundTrip_SameEvents) {
  Scenario s{42, GenerateEvents(42, 50), "queue"};
  absl::StatusOr<Scenario> back = ParseScenario(FormatScenario(s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->seed, 42u);
  EXPECT_EQ(back->store, "queue");
  ASSERT_EQ(back->events.size(), s.events.size());
  for (size_t i = 0; i < s.events.size(); ++i) {
    EXPECT_EQ(back->events[i].type, s.events[i].type);
    EXPECT_EQ(back->events[i].a, s.events[i].a);
    EXPECT_EQ(back->events[i].b, s.events[i].b);
  }
}

TEST_F(ClusterSimTest, ParseScenario_UnknownEvent_InvalidArgumentNamingTheLine) {
  absl::StatusOr<Scenario> s = ParseScenario("seed 1\nsubmit_gang 1 2\nfly 1 2\n");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(s.status()));
  EXPECT_THAT(std::string(s.status().message()), ::testing::HasSubstr("line 3"));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseScenario("submit_gang 1 2\n").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseScenario("seed 1\nstore disk\n").status()));
}

}  // namespace
}  // namespace trainctl::sim
