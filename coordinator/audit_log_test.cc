// Tier 1: the audit trail (coordinator/audit_log.h) over a memory state
// store, with times as arguments.

#include "coordinator/audit_log.h"

#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::trainctl::testing::StatusIs;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

std::vector<int64_t> Seqs(const std::vector<v1::AuditEvent>& events) {
  std::vector<int64_t> out;
  for (const v1::AuditEvent& e : events) out.push_back(e.seq());
  return out;
}

class AuditLogTest : public ::testing::Test {
 protected:
  void SetUp() override { log_ = Reopen(); }
  std::unique_ptr<AuditLog> Reopen() {
    auto opened = AuditLog::Open(&state_);
    EXPECT_THAT(opened, ::trainctl::testing::IsOk());
    return opened.ok() ? std::move(*opened) : nullptr;
  }
  MemoryStateStore state_;
  MemoryStateStore empty_;
  std::unique_ptr<AuditLog> log_;
};

TEST_F(AuditLogTest, Record_ThenList_OldestFirstWithEveryField) {
  auto first = log_->Record("ops", "token.create", "tok-0123456789ab", "user alice", kT0);
  TC_ASSERT_OK(first);
  EXPECT_EQ(first->seq(), 1);
  EXPECT_EQ(first->time_ms(), absl::ToUnixMillis(kT0));
  TC_ASSERT_OK(log_->Record("ops", "token.revoke", "tok-0123456789ab", "", kT0 + absl::Seconds(1)));
  auto events = log_->List(absl::InfinitePast(), 0);
  TC_ASSERT_OK(events);
  ASSERT_THAT(*events, SizeIs(2));
  EXPECT_EQ((*events)[0].action(), "token.create");
  EXPECT_EQ((*events)[0].who(), "ops");
  EXPECT_EQ((*events)[0].target(), "tok-0123456789ab");
  EXPECT_EQ((*events)[0].detail(), "user alice");
  EXPECT_EQ((*events)[1].action(), "token.revoke");
  EXPECT_EQ((*events)[1].seq(), 2);
}

// A restart continues the numbering; the events are still there.
TEST_F(AuditLogTest, Reopen_ContinuesTheNumbering) {
  TC_ASSERT_OK(log_->Record("ops", "node.drain", "gpu-1", "reason: bad fan", kT0));
  TC_ASSERT_OK(log_->Record("ops", "node.resume", "gpu-1", "", kT0));
  std::unique_ptr<AuditLog> restarted = Reopen();
  ASSERT_NE(restarted, nullptr);
  auto third = restarted->Record("ops", "node.down", "gpu-1", "", kT0 + absl::Seconds(1));
  TC_ASSERT_OK(third);
  EXPECT_EQ(third->seq(), 3);
  EXPECT_THAT(Seqs(*restarted->List(absl::InfinitePast(), 0)), ElementsAre(1, 2, 3));
}

// Retention: events older than the bound go; the newest always stays, so a
// restart after pruning everything continues the numbering.
TEST_F(AuditLogTest, Prune_DeletesOlderEventsKeepsTheNewest) {
  for (int i = 0; i < 5; ++i) {
    TC_ASSERT_OK(log_->Record("ops", "node.drain", absl::StrCat(i), "", kT0 + absl::Hours(i)));
  }
  auto pruned = log_->Prune(kT0 + absl::Hours(2), 100);
  TC_ASSERT_OK(pruned);
  EXPECT_EQ(*pruned, 2);
  EXPECT_THAT(Seqs(*log_->List(absl::InfinitePast(), 0)), ElementsAre(3, 4, 5));
  pruned = log_->Prune(kT0 + absl::Hours(100), 100);
  TC_ASSERT_OK(pruned);
  EXPECT_EQ(*pruned, 2);
  EXPECT_THAT(Seqs(*log_->List(absl::InfinitePast(), 0)), ElementsAre(5));
  std::unique_ptr<AuditLog> restarted = Reopen();
  ASSERT_NE(restarted, nullptr);
  auto next = restarted->Record("ops", "node.resume", "0", "", kT0 + absl::Hours(101));
  TC_ASSERT_OK(next);
  EXPECT_EQ(next->seq(), 6);
  EXPECT_EQ(*AuditLog::Open(&empty_)->get()->Prune(kT0, 100), 0);  // nothing to prune
}

// At most max_events go per call, the oldest first.
TEST_F(AuditLogTest, Prune_InBatchesOfMaxEvents) {
  for (int i = 0; i < 7; ++i) {
    TC_ASSERT_OK(log_->Record("ops", "node.drain", absl::StrCat(i), "", kT0 + absl::Hours(i)));
  }
  const absl::Time before = kT0 + absl::Hours(5);  // events 1-5 are older
  EXPECT_EQ(*log_->Prune(before, 2), 2);
  EXPECT_THAT(Seqs(*log_->List(absl::InfinitePast(), 0)), ElementsAre(3, 4, 5, 6, 7));
  EXPECT_EQ(*log_->Prune(before, 2), 2);
  EXPECT_EQ(*log_->Prune(before, 2), 1);
  EXPECT_EQ(*log_->Prune(before, 2), 0);
  EXPECT_THAT(Seqs(*log_->List(absl::InfinitePast(), 0)), ElementsAre(6, 7));
  EXPECT_THAT(log_->Prune(before, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_events")));
}

TEST_F(AuditLogTest, Prune_StoreFails_ErrorNothingDeleted) {
  TC_ASSERT_OK(log_->Record("ops", "node.drain", "a", "", kT0));
  TC_ASSERT_OK(log_->Record("ops", "node.drain", "b", "", kT0 + absl::Hours(1)));
  state_.SetFailing(true);
  EXPECT_THAT(log_->Prune(kT0 + absl::Hours(2), 100),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  state_.SetFailing(false);
  EXPECT_THAT(Seqs(*log_->List(absl::InfinitePast(), 0)), ElementsAre(1, 2));
}

// `since` keeps the events at or after it; `limit` the newest.
TEST_F(AuditLogTest, List_SinceAndLimit_TheNewestAtOrAfter) {
  for (int i = 0; i < 5; ++i) {
    TC_ASSERT_OK(log_->Record("ops", "job.cancel_as", absl::StrCat(i), "", kT0 + absl::Hours(i)));
  }
  EXPECT_THAT(Seqs(*log_->List(kT0 + absl::Hours(2), 0)), ElementsAre(3, 4, 5));
  EXPECT_THAT(Seqs(*log_->List(absl::InfinitePast(), 2)), ElementsAre(4, 5));
  EXPECT_THAT(Seqs(*log_->List(kT0 + absl::Hours(10), 0)), SizeIs(0));
  EXPECT_THAT(log_->List(absl::InfinitePast(), -1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("limit")));
}

// A clock stepped back does not reorder the trail: the event takes the last
// event's time.
TEST_F(AuditLogTest, Record_ClockSteppedBack_TimeNeverGoesBack) {
  TC_ASSERT_OK(log_->Record("ops", "token.create", "a", "", kT0));
  auto back = log_->Record("ops", "token.create", "b", "", kT0 - absl::Minutes(5));
  TC_ASSERT_OK(back);
  EXPECT_EQ(back->time_ms(), absl::ToUnixMillis(kT0));
  EXPECT_THAT(Seqs(*log_->List(absl::InfinitePast(), 0)), ElementsAre(1, 2));
}

TEST_F(AuditLogTest, Record_StoreFails_UnavailableNothingListed) {
  state_.SetFailing(true);
  EXPECT_THAT(log_->Record("ops", "token.revoke", "tok-1", "", kT0),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  state_.SetFailing(false);
  EXPECT_THAT(*log_->List(absl::InfinitePast(), 0), SizeIs(0));
  EXPECT_THAT(log_->Record("ops", "", "x", "", kT0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("action")));
}

TEST_F(AuditLogTest, RecordAsync_CallsBackWithTheStoredEvent) {
  absl::Notification done;
  absl::StatusOr<v1::AuditEvent> got;
  log_->RecordAsync("ops", "job.submit_as", "42", "as alice", kT0,
                    [&](absl::StatusOr<v1::AuditEvent> e) {
                      got = std::move(e);
                      done.Notify();
                    });
  done.WaitForNotification();
  TC_ASSERT_OK(got);
  EXPECT_EQ(got->seq(), 1);
  EXPECT_THAT(*log_->List(absl::InfinitePast(), 0), SizeIs(1));
}

// The log line's payload: protobuf JSON, proto field names.
TEST(AuditJsonTest, ProtoFieldNamesOneLine) {
  v1::AuditEvent e;
  e.set_seq(7);
  e.set_who("ops");
  e.set_action("token.revoke");
  e.set_detail("a \"quoted\" reason");
  const std::string json = AuditJson(e);
  EXPECT_THAT(json, HasSubstr("\"action\":\"token.revoke\""));
  EXPECT_THAT(json, HasSubstr("\"time_ms\""));
  EXPECT_THAT(json, HasSubstr("a \\\"quoted\\\" reason"));
  EXPECT_EQ(json.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace trainctl::coord
