// Tier 1: the rules of coordinator/auth.h without a network.

#include "coordinator/auth.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kTokens[] = R"pb(
  # alice and bob are users, ops is an admin.
  tokens { token: "alice-token-0123456789" user: "alice" }
  tokens { token: "bob-token-0123456789ab" user: "bob" role: ROLE_USER }
  tokens { token: "ops-token-0123456789ab" user: "ops" role: ROLE_ADMIN }
)pb";

v1::Job JobOf(int64_t id, const std::string& user) {
  v1::Job job;
  job.set_id(id);
  job.mutable_spec()->set_user(user);
  return job;
}

TEST(TokenAuthenticatorTest, Authenticate_KnownBearerToken_GivesItsUserAndRole) {
  auto auth = TokenAuthenticator::FromText(kTokens);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ((*auth)->size(), 3);

  absl::StatusOr<Principal> alice = (*auth)->Authenticate("Bearer alice-token-0123456789");
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ(alice->user, "alice");
  EXPECT_FALSE(alice->admin);
  // The scheme is case-insensitive (RFC 7235).
  absl::StatusOr<Principal> ops = (*auth)->Authenticate("bearer ops-token-0123456789ab");
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_TRUE(ops->admin);
}

TEST(TokenAuthenticatorTest, Authenticate_MissingMalformedOrUnknown_IsUnauthenticated) {
  auto auth = TokenAuthenticator::FromText(kTokens);
  ASSERT_TRUE(auth.ok());
  for (const char* header : {"", "alice-token-0123456789", "Basic YWxpY2U6cHc=",
                             "Bearer ", "Bearer alice-token-012345678X"}) {
    absl::StatusOr<Principal> p = (*auth)->Authenticate(header);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kUnauthenticated) << header;
    // Never echo what was sent: it may be someone's mistyped secret.
    EXPECT_THAT(p.status().message(), Not(HasSubstr("012345678X")));
  }
}

TEST(TokenAuthenticatorTest, FromText_BadEntries_AreInvalidArgumentNamingTheField) {
  struct Case {
    const char* text;
    const char* field;
  } cases[] = {
      {R"pb(tokens { token: "short" user: "a" })pb", "tokens[0].token"},
      {R"pb(tokens { token: "has a space in it here" user: "a" })pb", "tokens[0].token"},
      {R"pb(tokens { token: "alice-token-0123456789" user: "" })pb", "tokens[0].user"},
      {R"pb(tokens { token: "alice-token-0123456789" user: "a b" })pb", "tokens[0].user"},
      {R"pb(tokens { token: "alice-token-0123456789" user: "a" }
            tokens { token: "alice-token-0123456789" user: "b" })pb",
       "tokens[1].token"},
      {"", "no entry"},
      {"tokens { tokn: \"x\" }", "line 1"},
  };
  for (const Case& c : cases) {
    auto auth = TokenAuthenticator::FromText(c.text);
    EXPECT_EQ(auth.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(auth.status().message(), HasSubstr(c.field)) << c.text;
  }
}

TEST(TokenAuthenticatorTest, FromFile_Missing_IsNotFound) {
  EXPECT_EQ(TokenAuthenticator::FromFile("/nonexistent/tokens").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(CheckJobAccessTest, OwnerAndAdmin_Allowed_OthersDenied) {
  const v1::Job job = JobOf(7, "alice");
  EXPECT_TRUE(CheckJobAccess({"alice", false}, job, "cancel").ok());
  EXPECT_TRUE(CheckJobAccess({"ops", true}, job, "cancel").ok());
  EXPECT_TRUE(CheckJobAccess(AnonymousPrincipal(), job, "cancel").ok());
  absl::Status bob = CheckJobAccess({"bob", false}, job, "cancel");
  EXPECT_EQ(bob.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(bob.message(), HasSubstr("user bob may not cancel job 7"));
  EXPECT_THAT(bob.message(), HasSubstr("user alice"));
  // A job submitted in insecure mode (no owner) belongs to admins only.
  EXPECT_EQ(CheckJobAccess({"bob", false}, JobOf(8, ""), "read").code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(ListOwnerTest, OwnJobsByDefault_AllUsersAndOthersOnlyForAdmins) {
  const Principal alice{"alice", false};
  const Principal ops{"ops", true};
  // Default: one's own jobs, admins included (kubectl's current namespace).
  EXPECT_EQ(*ListOwner(alice, false, ""), "alice");
  EXPECT_EQ(*ListOwner(ops, false, ""), "ops");
  EXPECT_EQ(*ListOwner(alice, false, "alice"), "alice");
  // Admins: every user's, or one named user's.
  EXPECT_EQ(*ListOwner(ops, true, ""), "");
  EXPECT_EQ(*ListOwner(ops, false, "alice"), "alice");
  // Insecure mode: no identity, every job.
  EXPECT_EQ(*ListOwner(AnonymousPrincipal(), false, ""), "");
  EXPECT_EQ(*ListOwner(AnonymousPrincipal(), true, "bob"), "bob");

  absl::StatusOr<std::string> all = ListOwner(alice, true, "");
  EXPECT_EQ(all.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(all.status().message(), HasSubstr("all_users: user alice"));
  absl::StatusOr<std::string> bobs = ListOwner(alice, false, "bob");
  EXPECT_EQ(bobs.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(bobs.status().message(), HasSubstr("not user bob's"));
}

TEST(ApplySubmitterTest, EmptyUser_IsSetFromToken_OtherUserOnlyForAdmin) {
  v1::JobSpec spec;
  ASSERT_TRUE(ApplySubmitter({"alice", false}, &spec).ok());
  EXPECT_EQ(spec.user(), "alice");
  // Naming oneself is fine.
  ASSERT_TRUE(ApplySubmitter({"alice", false}, &spec).ok());

  v1::JobSpec as_bob;
  as_bob.set_user("bob");
  absl::Status s = ApplySubmitter({"alice", false}, &as_bob);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("spec.user"));
  EXPECT_TRUE(ApplySubmitter({"ops", true}, &as_bob).ok());
  EXPECT_EQ(as_bob.user(), "bob");

  // Insecure mode leaves the spec as it came.
  v1::JobSpec anon;
  ASSERT_TRUE(ApplySubmitter(AnonymousPrincipal(), &anon).ok());
  EXPECT_EQ(anon.user(), "");
}

TEST(CheckNodeIdentityTest, CertificateNameMustMatchNodeName) {
  EXPECT_TRUE(CheckNodeIdentity("gpu-1", "gpu-1").ok());
  absl::Status s = CheckNodeIdentity("gpu-1", "gpu-2");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("\"gpu-1\""));
  EXPECT_THAT(s.message(), HasSubstr("\"gpu-2\""));
}

}  // namespace
}  // namespace trainctl::coord
