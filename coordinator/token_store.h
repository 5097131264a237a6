#ifndef TRAINCTL_COORDINATOR_TOKEN_STORE_H_
#define TRAINCTL_COORDINATOR_TOKEN_STORE_H_

// Bearer tokens with a lifecycle (docs/design.md §6): made by an admin
// (`trainctl token create`), listed without their secret, revoked by id, and
// refused once revoked or expired, from the next call on. The immutable
// --tokens-file (TokenAuthenticator, auth.h) stays the bootstrap: its tokens
// keep working next to these.
//
// Only the SHA-256 of a secret is kept (StoredToken.secret_sha256, by
// common/secrets.h), in memory and in the StateStore's records of kind
// "tokens" (key: the token's id), so a restart and an etcd failover keep
// every token, and a copy of the state file holds no usable secret.
//
// No clock inside: every call that depends on time takes `now`.
// Thread-safe: called from gRPC threads. `mu_` guards the tokens in memory
// (Authenticate takes it shared); `write_mu_` serializes Create and Revoke
// across their store write, which is done without `mu_` held, so a
// revocation's fsync never holds up authentication. Lock order: write_mu_,
// then mu_.

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/auth.h"
#include "coordinator/state_store.h"
#include "trainctl/v1/auth.pb.h"
#include "trainctl/v1/service.pb.h"

namespace trainctl::coord {

class TokenStore {
 public:
  // The StateStore record kind the tokens are kept under.
  static constexpr char kRecordKind[] = "tokens";
  // Bytes of a new secret (64 hex characters: 256 bits).
  static constexpr int kSecretBytes = 32;

  // Loads every token kept in `store` (not owned; must outlive the token
  // store). Errors: DATA_LOSS when a record does not parse; those of
  // StateStore::ReadRecords (UNAVAILABLE, INTERNAL).
  static absl::StatusOr<std::unique_ptr<TokenStore>> Open(StateStore* store);

  // A new token and its secret, shown this once.
  struct Created {
    v1::TokenInfo info;
    std::string secret;
  };
  // Makes a token for `request.user()` with `request.role()`
  // (ROLE_UNSPECIFIED reads as ROLE_USER), expiring `request.expires_s()`
  // seconds after `now` (0: never), by admin `created_by` ("" without
  // authentication). Its id is "tok-" and 12 hex digits; its secret 64 hex
  // digits from OpenSSL's CSPRNG (NewSecretToken). Durable when it returns.
  // Errors: INVALID_ARGUMENT naming the field: user not 1-128 of
  // [A-Za-z0-9._@-], role not USER or ADMIN, expires_s negative or over
  // 100 years, name over 128 bytes or not printable; UNAVAILABLE / INTERNAL
  // when the store write failed (then no token was made).
  absl::StatusOr<Created> Create(const v1::CreateTokenRequest& request,
                                 absl::string_view created_by, absl::Time now)
      ABSL_LOCKS_EXCLUDED(write_mu_, mu_);

  // The tokens, oldest first, never a secret: only those valid at `now`
  // (not revoked, not expired), or with `all` every one.
  std::vector<v1::TokenInfo> List(bool all, absl::Time now) const ABSL_LOCKS_EXCLUDED(mu_);

  // Revokes token `id` at `now` by `by`: from the next call on it is
  // refused. Durable before it returns. Idempotent: revoking a revoked
  // token changes nothing (no write) and returns it as first revoked
  // (revoked_ms, revoked_by unchanged); an expired token can be revoked.
  // Sets *newly_revoked (when not null) to whether this call revoked it.
  // Errors: INVALID_ARGUMENT when `id` is empty; NOT_FOUND for an unknown
  // id; UNAVAILABLE / INTERNAL when the store write failed (then the token
  // still works).
  absl::StatusOr<v1::TokenInfo> Revoke(absl::string_view id, absl::string_view by,
                                       absl::Time now, bool* newly_revoked = nullptr)
      ABSL_LOCKS_EXCLUDED(write_mu_, mu_);

  // The principal of bearer secret `secret` at `now`.
  // Errors: UNAUTHENTICATED: "token tok-… expired at <RFC 3339 time>",
  // "token tok-… was revoked at <time> by <user>", or an unknown token.
  // The message never holds the secret.
  absl::StatusOr<Principal> Authenticate(absl::string_view secret, absl::Time now) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Tokens kept (valid or not).
  int size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit TokenStore(StateStore* store) : store_(store) {}
  // Writes `token` to the store (durable when OK). Needs no lock.
  absl::Status Persist(const v1::StoredToken& token);

  StateStore* const store_;
  absl::Mutex write_mu_;
  mutable absl::Mutex mu_ ABSL_ACQUIRED_AFTER(write_mu_);
  // By id, and the id of each secret digest.
  absl::flat_hash_map<std::string, v1::StoredToken> by_id_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> id_by_digest_ ABSL_GUARDED_BY(mu_);
};

// "2026-11-28T21:43:00Z": how token and audit messages write a time in ms
// since the Unix epoch.
std::string FormatTimeMs(int64_t ms);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_TOKEN_STORE_H_
