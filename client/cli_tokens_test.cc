// `trainctl token create|list|revoke` and `trainctl audit` against a mock
// stub (client/cli_tokens.cc), and the local account a submit without a
// token is charged to.

#include <pwd.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli.h"
#include "client/testing/cli_harness.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace trainctl::cli {
namespace {

namespace v1 = ::trainctl::v1;
using ::testing::_;
using ::testing::AllOf;
using ::testing::DoAll;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Return;
using ::testing::SaveArg;
using ::testing::SetArgPointee;

constexpr char kSecret[] = "5e5fe7a1c0ffee5e5fe7a1c0ffee5e5fe7a1c0ffee5e5fe7a1c0ffee5e5fe7a1";

class CliTokensTest : public CliHarness<> {};

TEST_F(CliTokensTest, Create_SecretAloneOnStdoutIdOnStderr) {
  v1::CreateTokenRequest sent;
  auto made = Proto<v1::CreateTokenResponse>(absl::StrCat(
      R"pb(token { id: "tok-0123456789ab" user: "alice" role: ROLE_USER
                   expires_ms: 1707776000000 } secret: ")pb",
      kSecret, "\""));
  EXPECT_CALL(stub_, CreateToken(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&sent), SetArgPointee<2>(made), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"token", "create", "--user", "alice", "--expires", "90d", "--name", "laptop"}),
            0)
      << err_.str();
  EXPECT_EQ(sent.user(), "alice");
  EXPECT_EQ(sent.role(), v1::ROLE_USER);
  EXPECT_EQ(sent.expires_s(), 90 * 86400);
  EXPECT_EQ(sent.name(), "laptop");
  EXPECT_EQ(out_.str(), absl::StrCat(kSecret, "\n"));
  EXPECT_THAT(err_.str(), AllOf(HasSubstr("tok-0123456789ab"), HasSubstr("user alice"),
                                HasSubstr("expires 2024-02-12T22:13:20Z"),
                                HasSubstr("shown this once"), Not(HasSubstr(kSecret))));
}

TEST_F(CliTokensTest, Create_AdminJson_PrintsTheResponse) {
  v1::CreateTokenRequest sent;
  auto made = Proto<v1::CreateTokenResponse>(
      R"pb(token { id: "tok-0123456789ab" user: "ci" role: ROLE_ADMIN } secret: "s3cr3t")pb");
  EXPECT_CALL(stub_, CreateToken(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&sent), SetArgPointee<2>(made), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"token", "create", "--user", "ci", "--role", "admin", "-o", "json"}), 0);
  EXPECT_EQ(sent.role(), v1::ROLE_ADMIN);
  EXPECT_EQ(sent.expires_s(), 0);  // no --expires: never
  v1::CreateTokenResponse parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &parsed).ok()) << out_.str();
  EXPECT_EQ(parsed.secret(), "s3cr3t");
  EXPECT_EQ(parsed.token().id(), "tok-0123456789ab");
}

// Bad durations and roles are usage errors before any call (the strict
// mock fails the test on any RPC).
TEST_F(CliTokensTest, Create_BadExpiresOrRole_UsageErrorNamingTheFlag) {
  for (const char* bad : {"soon", "-5d", "0d", "90x", "d"}) {
    EXPECT_EQ(Run({"token", "create", "--user", "alice", absl::StrCat("--expires=", bad)}),
              kExitUsage)
        << bad;
    EXPECT_THAT(err_.str(), AllOf(HasSubstr("--expires"), HasSubstr("90d"))) << bad;
  }
  EXPECT_EQ(Run({"token", "create", "--user", "alice", "--role", "root"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--role"));
  EXPECT_EQ(Run({"token", "create"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--user"));
}

TEST_F(CliTokensTest, List_TableWithStatesNeverASecret) {
  v1::ListTokensRequest sent;
  // Now is 2023-11-14T22:13:20Z (kNowMs).
  auto listed = Proto<v1::ListTokensResponse>(R"pb(
    tokens { id: "tok-aaaaaaaaaaaa" name: "laptop" user: "alice" role: ROLE_USER
             created_ms: 1699913600000 expires_ms: 1707776000000 }
    tokens { id: "tok-bbbbbbbbbbbb" user: "ops2" role: ROLE_ADMIN
             created_ms: 1699913600000 revoked_ms: 1699996400000 revoked_by: "ops" }
    tokens { id: "tok-cccccccccccc" user: "bob" role: ROLE_USER
             created_ms: 1699913600000 expires_ms: 1699999000000 }
  )pb");
  EXPECT_CALL(stub_, ListTokens(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&sent), SetArgPointee<2>(listed), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"token", "list", "--all"}), 0) << err_.str();
  EXPECT_TRUE(sent.all());
  std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 4u) << out_.str();
  EXPECT_THAT(lines[0], AllOf(HasSubstr("ID"), HasSubstr("NAME"), HasSubstr("USER"),
                              HasSubstr("ROLE"), HasSubstr("CREATED"), HasSubstr("EXPIRES"),
                              HasSubstr("STATE")));
  EXPECT_THAT(lines[1], AllOf(HasSubstr("tok-aaaaaaaaaaaa"), HasSubstr("laptop"),
                              HasSubstr("alice"), HasSubstr("user"), HasSubstr("1d0h ago"),
                              HasSubstr("in 90d0h"), HasSubstr("valid")));
  EXPECT_THAT(lines[2], AllOf(HasSubstr("admin"), HasSubstr("never"),
                              HasSubstr("revoked 1h0m ago by ops")));
  EXPECT_THAT(lines[3], AllOf(HasSubstr("16m40s ago"), HasSubstr("expired")));
}

TEST_F(CliTokensTest, Revoke_PrintsWhenAndByWhom) {
  v1::RevokeTokenRequest sent;
  auto revoked = Proto<v1::RevokeTokenResponse>(R"pb(
    token { id: "tok-0123456789ab" user: "alice" revoked_ms: 1700000000000 revoked_by: "ops" }
  )pb");
  EXPECT_CALL(stub_, RevokeToken(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&sent), SetArgPointee<2>(revoked), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"token", "revoke", "tok-0123456789ab"}), 0);
  EXPECT_EQ(sent.id(), "tok-0123456789ab");
  EXPECT_EQ(out_.str(),
            "revoked token tok-0123456789ab of user alice at 2023-11-14T22:13:20Z by ops\n");
}

// What the coordinator refuses reaches the user as its message.
TEST_F(CliTokensTest, Revoke_NotAdmin_ShowsPermissionDenied) {
  EXPECT_CALL(stub_, RevokeToken(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                    "user bob may not revoke tokens: only an admin may")));
  EXPECT_NE(Run({"token", "revoke", "tok-0123456789ab"}), 0);
  EXPECT_THAT(err_.str(), HasSubstr("only an admin"));
}

TEST_F(CliTokensTest, Audit_SinceDurationOrTime_TableOldestFirst) {
  v1::ListAuditRequest sent;
  auto events = Proto<v1::ListAuditResponse>(R"pb(
    events { seq: 1 time_ms: 1699999000000 who: "ops" action: "token.create"
             target: "tok-0123456789ab" detail: "user alice" }
    events { seq: 2 time_ms: 1700000000000 who: "ops" action: "token.revoke"
             target: "tok-0123456789ab" }
  )pb");
  EXPECT_CALL(stub_, ListAudit(_, _, _))
      .WillRepeatedly(
          DoAll(SaveArg<1>(&sent), SetArgPointee<2>(events), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"audit", "--since", "7d", "--limit", "50"}), 0) << err_.str();
  EXPECT_EQ(sent.since_ms(), kNowMs - int64_t{7} * 86400 * 1000);
  EXPECT_EQ(sent.limit(), 50);
  std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 3u) << out_.str();
  EXPECT_THAT(lines[0], AllOf(HasSubstr("TIME"), HasSubstr("WHO"), HasSubstr("ACTION")));
  EXPECT_THAT(lines[1], AllOf(HasSubstr("2023-11-14T21:56:40Z"), HasSubstr("ops"),
                              HasSubstr("token.create"), HasSubstr("user alice")));
  EXPECT_THAT(lines[2], HasSubstr("token.revoke"));

  ASSERT_EQ(Run({"audit", "--since", "2023-11-01T00:00:00Z"}), 0) << err_.str();
  EXPECT_EQ(sent.since_ms(), 1698796800000);
  ASSERT_EQ(Run({"audit"}), 0);
  EXPECT_EQ(sent.since_ms(), 0);
  EXPECT_EQ(sent.limit(), 0);
}

TEST_F(CliTokensTest, Audit_BadSince_UsageError) {
  EXPECT_EQ(Run({"audit", "--since", "last tuesday"}), kExitUsage);
  EXPECT_THAT(err_.str(), AllOf(HasSubstr("--since"), HasSubstr("RFC 3339")));
}

// Without authentication a job is charged to this process's account, from
// the password database: never an empty user.
TEST(LocalAccountNameTest, IsThePasswordDatabasesNameOfTheEffectiveUid) {
  const passwd* entry = getpwuid(geteuid());
  ASSERT_NE(entry, nullptr) << "no password entry for uid " << geteuid();
  EXPECT_EQ(LocalAccountName(), entry->pw_name);
}

class CliLocalUserTest : public CliHarness<> {};

TEST_F(CliLocalUserTest, SubmitWithoutToken_ChargedToTheLocalAccount) {
  options_.default_user = LocalAccountName();
  ASSERT_FALSE(options_.default_user.empty());
  ExpectSubmit();
  ASSERT_EQ(Run({"submit", "--", "true"}), 0) << err_.str();
  EXPECT_EQ(submitted_.spec().user(), LocalAccountName());
}

}  // namespace
}  // namespace trainctl::cli
