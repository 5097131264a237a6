#ifndef TRAINCTL_COORDINATOR_AUTH_H_
#define TRAINCTL_COORDINATOR_AUTH_H_

// Who may do what (docs/design.md §6), without gRPC: bearer tokens of users
// and the rules of the user API, and the node identity of agents. The
// transport (grpc_service.cc) extracts the `authorization` metadata and the
// peer certificate's common name and asks these functions.
//
// Rules:
//   - a user (ROLE_USER) submits jobs as itself, and reads, waits for,
//     cancels and reads the logs, metrics and usage of its own jobs only
//     (JobSpec.user);
//   - an admin (ROLE_ADMIN) does all of that on every job and may submit on
//     behalf of another user;
//   - an agent registers only under the node name its client certificate
//     names (CN), so it can neither register nor report for another node;
//   - task processes use the per-attempt TRAINCTL_TOKEN for the rendezvous
//     (checked by RendezvousTable), not a user token.

#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainctl/v1/auth.pb.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

// The authenticated caller of the user API.
struct Principal {
  std::string user;
  bool admin = false;
};

// The principal of every call when no --tokens-file is given (insecure mode):
// no user name, allowed everything.
Principal AnonymousPrincipal();

// The tokens of --tokens-file: token -> principal. Immutable after creation,
// so thread-safe.
class TokenAuthenticator {
 public:
  // Parses a TokensFile in protobuf text format (trainctl/v1/auth.proto).
  // Errors: INVALID_ARGUMENT naming the entry and field: a text-format
  // syntax error, a token shorter than 16 or longer than 512 characters or
  // with characters outside printable ASCII (or a space), a duplicate token,
  // a bad user name (1-128 of [A-Za-z0-9._@-]), or no entry at all.
  static absl::StatusOr<std::unique_ptr<TokenAuthenticator>> FromText(
      absl::string_view text);
  // Reads and parses `path`. Errors: NOT_FOUND when it cannot be read; those
  // of FromText, prefixed with the path.
  static absl::StatusOr<std::unique_ptr<TokenAuthenticator>> FromFile(
      const std::string& path);

  // The principal of an `authorization` metadata value ("Bearer <token>";
  // the scheme is case-insensitive). `header` empty means none was sent.
  // Errors: UNAUTHENTICATED when missing, not a Bearer credential, or an
  // unknown token (the message never echoes the token).
  absl::StatusOr<Principal> Authenticate(absl::string_view header) const;

  // The principal of bearer token `token` (the secret itself, as BearerToken
  // returns it), or nullopt when the file does not hold it.
  std::optional<Principal> Find(absl::string_view token) const;

  // Number of tokens loaded.
  int size() const { return static_cast<int>(tokens_.size()); }

 private:
  TokenAuthenticator() = default;
  // By the SHA-256 of the token (common/secrets.h), not the token itself.
  absl::flat_hash_map<std::string, Principal> tokens_;
};

// The secret of an `authorization` metadata value ("Bearer <token>"; the
// scheme is case-insensitive; `header` empty means none was sent).
// Errors: UNAUTHENTICATED when missing or not a Bearer credential.
absl::StatusOr<absl::string_view> BearerToken(absl::string_view header);

// Whether `user` is a valid user name: 1 to 128 characters of
// [A-Za-z0-9._@-] (TokenEntry.user, CreateTokenRequest.user).
bool ValidUserName(absl::string_view user);

// Checks `who` may act on `job` (GetJob, CancelJob, WaitJob, GetLogs,
// GetMetrics, GetJobUsage):
// admins and the job's owner (job.spec().user) may. `action` names the
// call in the message ("cancel").
// Errors: PERMISSION_DENIED naming the job, the caller and the owner.
absl::Status CheckJobAccess(const Principal& who, const v1::Job& job,
                            absl::string_view action);

// Sets spec->user to `who`'s user at submit when empty; a different user is
// only allowed to admins. The anonymous principal leaves the spec as is.
// Errors: PERMISSION_DENIED when a non-admin submits as someone else.
absl::Status ApplySubmitter(const Principal& who, v1::JobSpec* spec);

// Whose jobs ListJobs shows `who` (returns the JobSpec.user to keep; empty
// means every user's), the rule of kubectl's namespaces: an authenticated
// caller sees their own jobs, `all_users` (admins only) every user's, `user`
// one user's (a non-admin only themselves). The anonymous principal
// (no --tokens-file) sees every job, or `user`'s when given.
// Errors: PERMISSION_DENIED when a non-admin sets `all_users` or names
// another user.
absl::StatusOr<std::string> ListOwner(const Principal& who, bool all_users,
                                      absl::string_view user);

// Checks an agent's registration against its certificate: `cert_name` is the
// verified peer certificate's common name, `node_name` RegisterNode's
// node.name. Errors: PERMISSION_DENIED when they differ.
absl::Status CheckNodeIdentity(absl::string_view cert_name,
                               absl::string_view node_name);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_AUTH_H_
