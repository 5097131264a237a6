// Tier 1: accounting (coordinator/accounting.h) over a memory state store,
// times as arguments: usage reports by user, project, queue, GPU type and
// node with exact edges, the history's pages and filters, restarts, and a
// seeded comparison of the rollups against a brute-force sum.

#include "coordinator/accounting.h"

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::trainctl::testing::StatusIs;

constexpr int64_t kH = 3600 * 1000;
// A day boundary, so hours are aligned: 2027-01-15 00:00 UTC.
constexpr int64_t kT0 = int64_t{1'800'000'000} / 86400 * 86400 * 1000;

v1::UsageRecord Attempt(int64_t job, const std::string& user, int64_t start, int64_t end,
                        double gpus, double used_fraction = 0.5,
                        v1::AttemptOutcome outcome = v1::ATTEMPT_OUTCOME_SUCCEEDED,
                        const std::vector<std::pair<std::string, double>>& nodes = {{"n1", -1}}) {
  v1::UsageRecord r;
  r.set_job_id(job);
  r.set_user(user);
  r.set_project(absl::StrCat("p-", user));
  r.set_queue("default");
  r.set_start_time_ms(start);
  r.set_end_time_ms(end);
  r.set_outcome(outcome);
  r.set_gpus(gpus);
  r.set_gpu_seconds_allocated(gpus * static_cast<double>(end - start) / 1000.0);
  r.set_gpu_seconds_used(r.gpu_seconds_allocated() * used_fraction);
  for (const auto& [node, g] : nodes) {
    v1::UsageSlice* s = r.add_slices();
    s->set_node(node);
    s->set_gpu_type(node == "n3" ? "a100" : "h100");
    const double share = g < 0 ? gpus / static_cast<double>(nodes.size()) : g;
    s->set_gpus(share);
    s->set_gpu_seconds_used(r.gpu_seconds_used() * share / gpus);
  }
  return r;
}

class AccountingTest : public ::testing::Test {
 protected:
  void SetUp() override { acct_ = Reopen(); }
  std::unique_ptr<Accounting> Reopen() {
    auto opened = Accounting::Open(&store_);
    EXPECT_THAT(opened, ::trainctl::testing::IsOk());
    return opened.ok() ? std::move(*opened) : nullptr;
  }
  v1::GetUsageResponse Usage(UsageBy by, int64_t since, int64_t until,
                             const std::string& only_user = "") {
    auto r = acct_->Usage({by, since, until, only_user});
    EXPECT_THAT(r, ::trainctl::testing::IsOk());
    return r.ok() ? *r : v1::GetUsageResponse();
  }
  std::vector<v1::UsageRecord> History(HistoryQuery q) {
    std::vector<v1::UsageRecord> out;
    TC_EXPECT_OK(acct_->History(q, [&](const v1::ListHistoryResponse& page) {
      EXPECT_LE(page.records_size(), q.page_size);
      out.insert(out.end(), page.records().begin(), page.records().end());
      return true;
    }));
    return out;
  }
  MemoryStateStore store_;
  std::unique_ptr<Accounting> acct_;
};

TEST_F(AccountingTest, Usage_ByUser_AllocatedUsedEfficiencyCounts) {
  // ana: 2 GPUs for 3 h at half activity, then a failed 1-GPU hour.
  TC_ASSERT_OK(acct_->Record(Attempt(1, "ana", kT0, kT0 + 3 * kH, 2.0)));
  TC_ASSERT_OK(acct_->Record(
      Attempt(2, "ana", kT0 + kH, kT0 + 2 * kH, 1.0, 0.0, v1::ATTEMPT_OUTCOME_FAILED)));
  // bob: a quarter GPU for 4 h, fully active.
  TC_ASSERT_OK(acct_->Record(Attempt(3, "bob", kT0, kT0 + 4 * kH, 0.25, 1.0)));
  const v1::GetUsageResponse u = Usage(UsageBy::kUser, kT0, kT0 + 24 * kH);
  ASSERT_THAT(u.rows(), SizeIs(2));
  EXPECT_EQ(u.rows(0).key(), "ana");
  EXPECT_THAT(u.rows(0).allocated_gpu_hours(), DoubleNear(7.0, 1e-9));
  EXPECT_THAT(u.rows(0).used_gpu_hours(), DoubleNear(3.0, 1e-9));
  EXPECT_THAT(u.rows(0).efficiency(), DoubleNear(3.0 / 7.0, 1e-9));
  EXPECT_EQ(u.rows(0).jobs(), 2);
  EXPECT_EQ(u.rows(0).failed(), 1);
  EXPECT_EQ(u.rows(1).key(), "bob");
  EXPECT_THAT(u.rows(1).allocated_gpu_hours(), DoubleNear(1.0, 1e-9));
  EXPECT_THAT(u.rows(1).efficiency(), DoubleNear(1.0, 1e-9));
  EXPECT_THAT(u.total().allocated_gpu_hours(), DoubleNear(8.0, 1e-9));
  EXPECT_EQ(u.total().jobs(), 3);
  // by project and queue group the same attempts otherwise.
  EXPECT_EQ(Usage(UsageBy::kProject, kT0, kT0 + 24 * kH).rows(0).key(), "p-ana");
  const v1::GetUsageResponse q = Usage(UsageBy::kQueue, kT0, kT0 + 24 * kH);
  ASSERT_THAT(q.rows(), SizeIs(1));
  EXPECT_THAT(q.rows(0).allocated_gpu_hours(), DoubleNear(8.0, 1e-9));
}

TEST_F(AccountingTest, Usage_AttemptStraddlesEdges_CountsItsOverlapToTheMillisecond) {
  // 2 GPUs from 10:30 to 12:30, used 60% of the time.
  TC_ASSERT_OK(acct_->Record(Attempt(1, "ana", kT0 + 10 * kH + kH / 2,
                                     kT0 + 12 * kH + kH / 2, 2.0, 0.6)));
  // Window 11:15:00.250 - 12:10: 54 min 59.75 s of it.
  const int64_t since = kT0 + 11 * kH + kH / 4 + 250, until = kT0 + 12 * kH + kH / 6;
  const double hours = static_cast<double>(until - since) / kH;
  const v1::GetUsageResponse u = Usage(UsageBy::kUser, since, until);
  ASSERT_THAT(u.rows(), SizeIs(1));
  EXPECT_THAT(u.rows(0).allocated_gpu_hours(), DoubleNear(2.0 * hours, 1e-12));
  EXPECT_THAT(u.rows(0).used_gpu_hours(), DoubleNear(0.6 * 2.0 * hours, 1e-12));
  // It ended after the window: no job counted in it.
  EXPECT_EQ(u.rows(0).jobs(), 0);
  // Inside one hour, and across the end.
  EXPECT_THAT(Usage(UsageBy::kUser, kT0 + 12 * kH, kT0 + 12 * kH + 1000).rows(0)
                  .allocated_gpu_hours(),
              DoubleNear(2.0 * 1000 / kH, 1e-12));
  const v1::GetUsageResponse end = Usage(UsageBy::kUser, kT0 + 12 * kH, kT0 + 13 * kH);
  EXPECT_THAT(end.rows(0).allocated_gpu_hours(), DoubleNear(1.0, 1e-12));
  EXPECT_EQ(end.rows(0).jobs(), 1);
  // A window before it sees nothing.
  EXPECT_THAT(Usage(UsageBy::kUser, kT0, kT0 + 10 * kH).rows(), SizeIs(0));
}

TEST_F(AccountingTest, Usage_GangOverTwoNodes_SplitByNodeAndTypeCountedOncePerUser) {
  // A 2 x 2 gang on n1 (h100) and n3 (a100) for 1 h.
  TC_ASSERT_OK(acct_->Record(Attempt(1, "ana", kT0, kT0 + kH, 4.0, 0.5,
                                     v1::ATTEMPT_OUTCOME_SUCCEEDED, {{"n1", 2}, {"n3", 2}})));
  // (The window's end is exclusive: an attempt that ends at kT0 + kH ends
  // inside [kT0, kT0 + kH + 1).)
  const v1::GetUsageResponse by_node = Usage(UsageBy::kNode, kT0, kT0 + kH + 1);
  ASSERT_THAT(by_node.rows(), SizeIs(2));
  EXPECT_EQ(by_node.rows(0).key(), "n1");
  EXPECT_THAT(by_node.rows(0).allocated_gpu_hours(), DoubleNear(2.0, 1e-12));
  EXPECT_EQ(by_node.rows(0).jobs(), 1);
  EXPECT_EQ(by_node.rows(1).jobs(), 1);
  EXPECT_EQ(by_node.total().jobs(), 1);
  const v1::GetUsageResponse by_type = Usage(UsageBy::kGpuType, kT0, kT0 + kH + 1);
  ASSERT_THAT(by_type.rows(), SizeIs(2));
  EXPECT_EQ(by_type.rows(0).key(), "a100");
  const v1::GetUsageResponse by_user = Usage(UsageBy::kUser, kT0, kT0 + kH + 1);
  ASSERT_THAT(by_user.rows(), SizeIs(1));
  EXPECT_THAT(by_user.rows(0).allocated_gpu_hours(), DoubleNear(4.0, 1e-12));
  EXPECT_EQ(by_user.rows(0).jobs(), 1);
  EXPECT_EQ(by_user.rows(0).attempts(), 1);
}

TEST_F(AccountingTest, Usage_OnlyUser_SeesOnlyTheirRows) {
  TC_ASSERT_OK(acct_->Record(Attempt(1, "ana", kT0, kT0 + kH, 1.0)));
  TC_ASSERT_OK(acct_->Record(Attempt(2, "bob", kT0, kT0 + kH, 1.0)));
  const v1::GetUsageResponse u = Usage(UsageBy::kProject, kT0, kT0 + kH, "bob");
  ASSERT_THAT(u.rows(), SizeIs(1));
  EXPECT_EQ(u.rows(0).key(), "p-bob");
  EXPECT_EQ(u.only_user(), "bob");
  EXPECT_THAT(u.total().allocated_gpu_hours(), DoubleNear(1.0, 1e-12));
}

TEST_F(AccountingTest, Usage_PreemptedAndRestarted_CountedAsAttemptsNotJobs) {
  v1::UsageRecord first = Attempt(1, "ana", kT0, kT0 + kH, 1.0, 0.5, v1::ATTEMPT_OUTCOME_RESTARTED);
  first.set_preempted(true);
  TC_ASSERT_OK(acct_->Record(first));
  TC_ASSERT_OK(acct_->Record(Attempt(1, "ana", kT0 + kH, kT0 + 2 * kH, 1.0)));
  const v1::GetUsageResponse u = Usage(UsageBy::kUser, kT0, kT0 + 2 * kH + 1);
  EXPECT_EQ(u.rows(0).attempts(), 2);
  EXPECT_EQ(u.rows(0).jobs(), 1);
  EXPECT_EQ(u.rows(0).preempted(), 1);
  EXPECT_THAT(u.rows(0).allocated_gpu_hours(), DoubleNear(2.0, 1e-12));
}

TEST_F(AccountingTest, Reopen_RecordsKeptAndRollupsRebuilt) {
  for (int i = 1; i <= 25; ++i) {
    TC_ASSERT_OK(acct_->Record(Attempt(i, i % 2 ? "ana" : "bob", kT0 + i * kH / 7,
                                       kT0 + i * kH / 3 + 5000, 1.5)));
  }
  const v1::GetUsageResponse before = Usage(UsageBy::kUser, kT0 + 1234, kT0 + 7 * kH + 99);
  acct_ = Reopen();
  EXPECT_EQ(acct_->records(), 25);
  const v1::GetUsageResponse after = Usage(UsageBy::kUser, kT0 + 1234, kT0 + 7 * kH + 99);
  EXPECT_EQ(before.DebugString(), after.DebugString());
}

TEST_F(AccountingTest, BadInput_InvalidArgumentNamingTheField) {
  EXPECT_THAT(ParseUsageBy("team"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("by:")));
  EXPECT_EQ(*ParseUsageBy("gpu-type"), UsageBy::kGpuType);
  EXPECT_THAT(acct_->Usage({UsageBy::kUser, kT0, kT0, ""}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("until_ms")));
  EXPECT_THAT(acct_->Usage({UsageBy::kUser, -1, kT0, ""}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("since_ms")));
  v1::UsageRecord r = Attempt(1, "ana", kT0, kT0 + kH, 1.0);
  r.set_end_time_ms(kT0 - 1);
  EXPECT_THAT(acct_->Record(r), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("end_time_ms")));
  r = Attempt(0, "ana", kT0, kT0 + kH, 1.0);
  EXPECT_THAT(acct_->Record(r), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("job_id")));
  r = Attempt(1, "ana", kT0, kT0 + kH, 1.0);
  r.set_gpu_seconds_used(-1);
  EXPECT_THAT(acct_->Record(r),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gpu_seconds_used")));
  EXPECT_EQ(acct_->records(), 0);
  HistoryQuery q{kT0, kT0 + kH, "", "done", 10};
  EXPECT_THAT(acct_->History(q, [](const v1::ListHistoryResponse&) { return true; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("state")));
  q = HistoryQuery{kT0, kT0 + kH, "", "", 0};
  EXPECT_THAT(acct_->History(q, [](const v1::ListHistoryResponse&) { return true; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("page_size")));
}

TEST_F(AccountingTest, History_PagesOverlapFiltersAndEarlyStop) {
  // 30 attempts of 2 h each, one starting every hour; every third is bob's
  // and failed.
  for (int i = 0; i < 30; ++i) {
    TC_ASSERT_OK(acct_->Record(Attempt(
        i + 1, i % 3 == 0 ? "bob" : "ana", kT0 + i * kH, kT0 + (i + 2) * kH, 1.0, 0.5,
        i % 3 == 0 ? v1::ATTEMPT_OUTCOME_FAILED : v1::ATTEMPT_OUTCOME_SUCCEEDED)));
  }
  // Window [10 h, 20 h): attempts 9..19 (0-based) overlap it, i.e. jobs 10-20.
  std::vector<v1::UsageRecord> all = History({kT0 + 10 * kH, kT0 + 20 * kH, "", "", 4});
  ASSERT_THAT(all, SizeIs(11));
  EXPECT_EQ(all.front().job_id(), 10);
  EXPECT_EQ(all.back().job_id(), 20);
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.end_time_ms() < b.end_time_ms();
  }));
  std::vector<int64_t> bobs;
  for (const v1::UsageRecord& r : History({kT0 + 10 * kH, kT0 + 20 * kH, "bob", "", 2})) {
    bobs.push_back(r.job_id());
  }
  EXPECT_THAT(bobs, ElementsAre(10, 13, 16, 19));
  EXPECT_THAT(History({kT0 + 10 * kH, kT0 + 20 * kH, "", "failed", 1000}), SizeIs(4));
  // The caller stops after the first page.
  int pages = 0;
  TC_EXPECT_OK(acct_->History({kT0, kT0 + 40 * kH, "", "", 5},
                              [&](const v1::ListHistoryResponse&) { return ++pages < 1; }));
  EXPECT_EQ(pages, 1);
}

// Seeded simulation: random attempts (some multi-node, some zero-length,
// some days long) and random windows; every answer equals the brute-force
// overlap sum over the records.
// `n` seeded random attempts (ids 1..n) over 72 h from kT0: whole and
// fractional GPUs, one or two nodes, every outcome, some of zero length,
// some 30 h long; recorded into `acct`.
std::vector<v1::UsageRecord> RecordRandomAttempts(Accounting& acct, std::mt19937_64& rng, int n) {
  std::vector<v1::UsageRecord> kept;
  const std::vector<std::string> users = {"ana", "bob", "cy"};
  for (int i = 1; i <= n; ++i) {
    const int64_t start = kT0 + static_cast<int64_t>(rng() % (72 * kH));
    const int64_t len = rng() % 10 == 0 ? 0 : static_cast<int64_t>(rng() % (rng() % 5 == 0 ? 30 * kH : 2 * kH));
    std::vector<std::pair<std::string, double>> nodes = {{"n1", -1}};
    if (rng() % 3 == 0) nodes = {{"n2", -1}, {"n3", -1}};
    const auto outcome = static_cast<v1::AttemptOutcome>(1 + rng() % 5);
    kept.push_back(Attempt(i, users[rng() % 3], start, start + len,
                           0.25 * static_cast<double>(1 + rng() % 8),
                           static_cast<double>(rng() % 100) / 100.0, outcome, nodes));
    EXPECT_THAT(acct.Record(kept.back()), ::trainctl::testing::IsOk());
  }
  return kept;
}

// Usage by user over [since, until) equals a brute-force sum over `all`.
void ExpectUsageMatchesBruteForce(const Accounting& acct, const std::vector<v1::UsageRecord>& all,
                                  int64_t since, int64_t until) {
  std::map<std::string, double> alloc, used;
  std::map<std::string, int64_t> jobs;
  for (const v1::UsageRecord& r : all) {
    const int64_t s = r.start_time_ms(), e = r.end_time_ms();
    const int64_t ov = std::max<int64_t>(0, std::min(e, until) - std::max(s, since));
    if (ov > 0) {
      alloc[r.user()] += r.gpus() * static_cast<double>(ov) / kH;
      used[r.user()] += r.gpu_seconds_used() * static_cast<double>(ov) / static_cast<double>(e - s) / 3600.0;
    }
    if (e >= since && e < until && r.outcome() != v1::ATTEMPT_OUTCOME_RESTARTED) ++jobs[r.user()];
  }
  absl::StatusOr<v1::GetUsageResponse> u = acct.Usage({UsageBy::kUser, since, until, ""});
  ASSERT_THAT(u, ::trainctl::testing::IsOk());
  for (const v1::UsageRow& row : u->rows()) {
    SCOPED_TRACE(absl::StrCat("window [", since, ", ", until, ") user ", row.key()));
    EXPECT_THAT(row.allocated_gpu_hours(), DoubleNear(alloc[row.key()], 1e-9));
    EXPECT_THAT(row.used_gpu_hours(), DoubleNear(used[row.key()], 1e-9));
    EXPECT_EQ(row.jobs(), jobs[row.key()]);
  }
  double want = 0;
  for (const auto& [user, a] : alloc) want += a;
  EXPECT_THAT(u->total().allocated_gpu_hours(), DoubleNear(want, 1e-9));
}

TEST_F(AccountingTest, Usage_RandomAttemptsAndWindows_MatchBruteForce) {
  std::mt19937_64 rng(35);
  const std::vector<v1::UsageRecord> kept = RecordRandomAttempts(*acct_, rng, 400);
  for (int w = 0; w < 200; ++w) {
    if (w == 100) acct_ = Reopen();
    const int64_t since = kT0 + static_cast<int64_t>(rng() % (100 * kH));
    // Up to 4 days: whole days come from the day cells.
    const int64_t until = since + 1 + static_cast<int64_t>(rng() % (w % 2 ? 20 * kH : 100 * kH));
    ExpectUsageMatchesBruteForce(*acct_, kept, since, until);
  }
}

// Retention: the attempts that ended before the horizon go from the store,
// in batches; windows from the horizon on still sum every attempt that
// overlaps them (those that started before it too), before and after a
// restart; windows that start before it are refused, not answered short.
TEST_F(AccountingTest, Prune_KeepsWindowsAfterTheHorizonExactRefusesEarlierOnes) {
  std::mt19937_64 rng(36);
  const std::vector<v1::UsageRecord> all = RecordRandomAttempts(*acct_, rng, 400);
  const int64_t horizon = kT0 + 36 * kH + 1234;
  int64_t ended_before = 0;
  for (const v1::UsageRecord& r : all) ended_before += r.end_time_ms() < horizon ? 1 : 0;
  int64_t deleted = 0;
  for (int batch = 0;; ++batch) {
    ASSERT_LT(batch, 100);
    absl::StatusOr<int64_t> n = acct_->Prune(horizon, 50);
    TC_ASSERT_OK(n);
    EXPECT_LE(*n, 50);
    deleted += *n;
    if (*n == 0) break;
  }
  EXPECT_EQ(deleted, ended_before);
  EXPECT_EQ(acct_->records(), 400 - ended_before);
  EXPECT_EQ(acct_->kept_since_ms(), horizon);
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) {
      acct_ = Reopen();  // rebuilt from what the store kept
      EXPECT_EQ(acct_->records(), 400 - ended_before);
      EXPECT_EQ(*acct_->Prune(horizon, 50), 0);
    }
    for (int w = 0; w < 50; ++w) {
      const int64_t since = horizon + static_cast<int64_t>(rng() % (60 * kH));
      const int64_t until = since + 1 + static_cast<int64_t>(rng() % (50 * kH));
      ExpectUsageMatchesBruteForce(*acct_, all, since, until);
    }
    EXPECT_THAT(acct_->Usage({UsageBy::kUser, horizon - 1, horizon + kH, ""}),
                StatusIs(absl::StatusCode::kOutOfRange,
                         HasSubstr("since_ms: what ended before 2027-01-16T12:00:01Z is no longer kept")));
    HistoryQuery early;
    early.since_ms = kT0;
    early.until_ms = horizon + kH;
    EXPECT_THAT(acct_->History(early, [](const v1::ListHistoryResponse&) { return true; }),
                StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("--accounting-retention")));
  }
  EXPECT_THAT(acct_->Prune(horizon, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_records")));
}

}  // namespace
}  // namespace trainctl::coord
