// Tier 1: the token store (coordinator/token_store.h) over a memory state
// store, with times as arguments: no clock, no sleeps, no Coordinator.

#include "coordinator/token_store.h"

#include <random>
#include <string>
#include <vector>

#include "common/secrets.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;
using ::trainctl::testing::StatusIs;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);  // 2027-01-15T08:00:00Z

v1::CreateTokenRequest Request(const std::string& user, v1::Role role = v1::ROLE_USER,
                               int64_t expires_s = 0, const std::string& name = "") {
  v1::CreateTokenRequest r;
  r.set_user(user);
  r.set_role(role);
  r.set_expires_s(expires_s);
  r.set_name(name);
  return r;
}

class TokenStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { tokens_ = Reopen(); }
  // A token store over the same memory state (a coordinator restart).
  std::unique_ptr<TokenStore> Reopen() {
    auto opened = TokenStore::Open(&state_);
    EXPECT_THAT(opened, ::trainctl::testing::IsOk());
    return opened.ok() ? std::move(*opened) : nullptr;
  }
  MemoryStateStore state_;
  std::unique_ptr<TokenStore> tokens_;
};

TEST_F(TokenStoreTest, Create_ThenAuthenticate_GivesItsUserAndRole) {
  auto alice = tokens_->Create(Request("alice", v1::ROLE_UNSPECIFIED, 0, "laptop"), "ops", kT0);
  TC_ASSERT_OK(alice);
  EXPECT_THAT(alice->info.id(), ::testing::MatchesRegex("tok-[0-9a-f]{12}"));
  EXPECT_THAT(alice->secret, ::testing::MatchesRegex("[0-9a-f]{64}"));
  EXPECT_EQ(alice->info.user(), "alice");
  EXPECT_EQ(alice->info.role(), v1::ROLE_USER);  // UNSPECIFIED reads as USER
  EXPECT_EQ(alice->info.name(), "laptop");
  EXPECT_EQ(alice->info.created_by(), "ops");
  EXPECT_EQ(alice->info.created_ms(), absl::ToUnixMillis(kT0));
  EXPECT_EQ(alice->info.expires_ms(), 0);

  auto who = tokens_->Authenticate(alice->secret, kT0 + absl::Hours(24 * 365 * 10));
  TC_ASSERT_OK(who);
  EXPECT_EQ(who->user, "alice");
  EXPECT_FALSE(who->admin);

  auto admin = tokens_->Create(Request("ci-bot", v1::ROLE_ADMIN), "ops", kT0);
  TC_ASSERT_OK(admin);
  EXPECT_TRUE(tokens_->Authenticate(admin->secret, kT0)->admin);
  EXPECT_NE(admin->info.id(), alice->info.id());
  EXPECT_NE(admin->secret, alice->secret);
}

// Only the digest is kept: neither List nor the stored record holds the
// secret.
TEST_F(TokenStoreTest, Create_StoresOnlyTheSecretsDigest) {
  auto made = tokens_->Create(Request("alice"), "ops", kT0);
  TC_ASSERT_OK(made);
  auto records = state_.ReadRecords(TokenStore::kRecordKind, {});
  TC_ASSERT_OK(records);
  ASSERT_THAT(*records, SizeIs(1));
  EXPECT_EQ((*records)[0].key, made->info.id());
  EXPECT_EQ((*records)[0].value.find(made->secret), std::string::npos);
  v1::StoredToken stored;
  ASSERT_TRUE(stored.ParseFromString((*records)[0].value));
  EXPECT_EQ(stored.secret_sha256(), Sha256Hex(made->secret));
  for (const v1::TokenInfo& t : tokens_->List(true, kT0)) {
    EXPECT_EQ(t.SerializeAsString().find(made->secret), std::string::npos);
  }
}

TEST_F(TokenStoreTest, Authenticate_UnknownSecret_UnauthenticatedWithoutEchoingIt) {
  const std::string guess = "0123456789abcdef0123456789abcdef";
  EXPECT_THAT(tokens_->Authenticate(guess, kT0),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr("unknown or revoked token"), Not(HasSubstr(guess)))));
}

// Expiry is checked against the time of the call: valid one millisecond
// before, refused from expires_ms on, with the time in the message.
TEST_F(TokenStoreTest, Authenticate_Expired_UnauthenticatedNamingWhen) {
  auto made = tokens_->Create(Request("bob", v1::ROLE_USER, 3600), "ops", kT0);
  TC_ASSERT_OK(made);
  EXPECT_EQ(made->info.expires_ms(), absl::ToUnixMillis(kT0) + 3'600'000);
  TC_EXPECT_OK(tokens_->Authenticate(made->secret, kT0 + absl::Seconds(3600) -
                                                       absl::Milliseconds(1)));
  EXPECT_THAT(tokens_->Authenticate(made->secret, kT0 + absl::Seconds(3600)),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr(made->info.id()),
                             HasSubstr("expired at 2027-01-15T09:00:00Z"),
                             Not(HasSubstr(made->secret)))));
  // Listed only with `all`.
  EXPECT_THAT(tokens_->List(false, kT0), SizeIs(1));
  EXPECT_THAT(tokens_->List(false, kT0 + absl::Hours(2)), SizeIs(0));
  EXPECT_THAT(tokens_->List(true, kT0 + absl::Hours(2)), SizeIs(1));
}

TEST_F(TokenStoreTest, Revoke_RefusedFromTheNextCallWithWhenAndWho) {
  auto made = tokens_->Create(Request("bob"), "ops", kT0);
  TC_ASSERT_OK(made);
  TC_ASSERT_OK(tokens_->Authenticate(made->secret, kT0));
  auto revoked = tokens_->Revoke(made->info.id(), "ops", kT0 + absl::Minutes(5));
  TC_ASSERT_OK(revoked);
  EXPECT_EQ(revoked->revoked_ms(), absl::ToUnixMillis(kT0 + absl::Minutes(5)));
  EXPECT_EQ(revoked->revoked_by(), "ops");
  EXPECT_THAT(tokens_->Authenticate(made->secret, kT0 + absl::Minutes(5)),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr("revoked at 2027-01-15T08:05:00Z by ops"),
                             Not(HasSubstr(made->secret)))));
  EXPECT_THAT(tokens_->List(false, kT0 + absl::Minutes(5)), SizeIs(0));
  ASSERT_THAT(tokens_->List(true, kT0 + absl::Minutes(5)), SizeIs(1));
}

// Revoking twice is idempotent: OK, nothing changes, the first revocation
// stands (a retried call after a lost answer is harmless).
TEST_F(TokenStoreTest, Revoke_Twice_OkKeepsTheFirstRevocation) {
  auto made = tokens_->Create(Request("bob"), "ops", kT0);
  TC_ASSERT_OK(made);
  bool newly = false;
  TC_ASSERT_OK(tokens_->Revoke(made->info.id(), "ops", kT0 + absl::Minutes(1), &newly));
  EXPECT_TRUE(newly);
  auto again = tokens_->Revoke(made->info.id(), "root", kT0 + absl::Minutes(2), &newly);
  TC_ASSERT_OK(again);
  EXPECT_FALSE(newly);
  EXPECT_EQ(again->revoked_ms(), absl::ToUnixMillis(kT0 + absl::Minutes(1)));
  EXPECT_EQ(again->revoked_by(), "ops");
}

TEST_F(TokenStoreTest, Revoke_UnknownOrEmptyId_NotFoundOrInvalid) {
  EXPECT_THAT(tokens_->Revoke("tok-000000000000", "ops", kT0),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("tok-000000000000")));
  EXPECT_THAT(tokens_->Revoke("", "ops", kT0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("id")));
}

// A restart (a new store over the same state) keeps every token: a revoked
// one is still refused, a valid one still works.
TEST_F(TokenStoreTest, Reopen_KeepsRevocationsAndValidTokens) {
  auto revoked = tokens_->Create(Request("bob"), "ops", kT0);
  auto kept = tokens_->Create(Request("carol", v1::ROLE_ADMIN), "ops", kT0);
  TC_ASSERT_OK(revoked);
  TC_ASSERT_OK(kept);
  TC_ASSERT_OK(tokens_->Revoke(revoked->info.id(), "ops", kT0));
  std::unique_ptr<TokenStore> restarted = Reopen();
  ASSERT_NE(restarted, nullptr);
  EXPECT_EQ(restarted->size(), 2);
  EXPECT_THAT(restarted->Authenticate(revoked->secret, kT0),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("revoked")));
  auto carol = restarted->Authenticate(kept->secret, kT0);
  TC_ASSERT_OK(carol);
  EXPECT_EQ(carol->user, "carol");
  EXPECT_TRUE(carol->admin);
}

// A revocation that could not be stored is not acknowledged, and the token
// keeps working (nothing half-done).
TEST_F(TokenStoreTest, Revoke_StoreFails_UnavailableTokenStillWorks) {
  auto made = tokens_->Create(Request("bob"), "ops", kT0);
  TC_ASSERT_OK(made);
  state_.SetFailing(true);
  EXPECT_THAT(tokens_->Revoke(made->info.id(), "ops", kT0),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  EXPECT_THAT(tokens_->Create(Request("carol"), "ops", kT0),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  state_.SetFailing(false);
  TC_EXPECT_OK(tokens_->Authenticate(made->secret, kT0));
  EXPECT_THAT(tokens_->List(true, kT0), SizeIs(1));
}

TEST_F(TokenStoreTest, Create_BadInput_InvalidArgumentNamingTheField) {
  EXPECT_THAT(tokens_->Create(Request(""), "ops", kT0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("user:")));
  EXPECT_THAT(tokens_->Create(Request("al ice"), "ops", kT0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("user:")));
  EXPECT_THAT(tokens_->Create(Request(std::string(129, 'a')), "ops", kT0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("user:")));
  EXPECT_THAT(tokens_->Create(Request("alice", v1::ROLE_USER, -1), "ops", kT0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expires_s:")));
  EXPECT_THAT(tokens_->Create(Request("alice", static_cast<v1::Role>(7)), "ops", kT0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("role:")));
  EXPECT_THAT(
      tokens_->Create(Request("alice", v1::ROLE_USER, 0, std::string(129, 'n')), "ops", kT0),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name:")));
  TC_EXPECT_OK(tokens_->Create(Request("a.b_c@d-e", v1::ROLE_USER, 0, std::string(128, 'n')),
                               "ops", kT0));
  EXPECT_THAT(tokens_->List(true, kT0), SizeIs(1));
}

TEST_F(TokenStoreTest, List_OldestFirstNeverTheSecret) {
  auto first = tokens_->Create(Request("alice"), "ops", kT0);
  auto second = tokens_->Create(Request("bob"), "ops", kT0 + absl::Seconds(1));
  TC_ASSERT_OK(first);
  TC_ASSERT_OK(second);
  std::vector<v1::TokenInfo> listed = tokens_->List(false, kT0 + absl::Seconds(2));
  ASSERT_THAT(listed, SizeIs(2));
  EXPECT_EQ(listed[0].id(), first->info.id());
  EXPECT_EQ(listed[1].id(), second->info.id());
}

// A simulation of the token lifecycle against a model, one seeded run:
// creates (some expiring), revokes, time passing and coordinator restarts
// (a new store over the same state), drawn at random. After every step each
// secret ever made authenticates exactly when the model says it is live:
// made, not revoked, not expired. So a revoked or expired token opens
// nothing, also after a restart, and a live one is never lost.
TEST_F(TokenStoreTest, RandomLifecycle_RevokedOrExpiredTokensOpenNothing_LiveOnesAlwaysWork) {
  struct Model {
    std::string id;
    std::string secret;
    absl::Time expires = absl::InfiniteFuture();
    bool revoked = false;
  };
  std::vector<Model> made;
  std::mt19937_64 rng(20261128);
  absl::Time now = kT0;
  int revoked = 0, expired = 0, restarts = 0;
  for (int step = 0; step < 2000; ++step) {
    const int what = static_cast<int>(rng() % 10);
    if (what < 4 || made.empty()) {
      const int64_t expires_s = rng() % 3 == 0 ? static_cast<int64_t>(1 + rng() % 600) : 0;
      auto c = tokens_->Create(Request(absl::StrCat("u", rng() % 5), v1::ROLE_USER, expires_s),
                               "ops", now);
      ASSERT_THAT(c, ::trainctl::testing::IsOk());
      made.push_back({c->info.id(), c->secret,
                      expires_s > 0 ? now + absl::Seconds(expires_s) : absl::InfiniteFuture()});
    } else if (what < 6) {
      Model& m = made[rng() % made.size()];
      ASSERT_THAT(tokens_->Revoke(m.id, "ops", now), ::trainctl::testing::IsOk());
      revoked += m.revoked ? 0 : 1;
      m.revoked = true;
    } else if (what < 9) {
      now += absl::Seconds(static_cast<int64_t>(rng() % 120));
    } else {
      tokens_ = Reopen();
      ++restarts;
    }
    for (const Model& m : made) {
      const bool live = !m.revoked && now < m.expires;
      absl::StatusOr<Principal> who = tokens_->Authenticate(m.secret, now);
      ASSERT_EQ(who.ok(), live) << "step " << step << " token " << m.id << ": "
                                << who.status();
      if (!live) EXPECT_EQ(who.status().code(), absl::StatusCode::kUnauthenticated);
    }
  }
  for (const Model& m : made) expired += (!m.revoked && now >= m.expires) ? 1 : 0;
  // The run exercised every kind of end.
  EXPECT_GT(revoked, 50);
  EXPECT_GT(expired, 10);
  EXPECT_GT(restarts, 50);
}

}  // namespace
}  // namespace trainctl::coord
