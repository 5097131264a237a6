// `trainctl token create|list|revoke` (tokens with a lifecycle, admins) and
// `trainctl audit` (the trail of admin actions), and the local account name
// a submit without authentication is charged to.

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/cli_internal.h"
#include "client/table.h"

namespace trainctl::cli {

std::string LocalAccountName() {
  // getpwuid_r: the CLI is single-threaded, but a library should not use
  // getpwuid's static buffer.
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buffer(size > 0 ? static_cast<size_t>(size) : 16384);
  passwd entry{};
  passwd* found = nullptr;
  if (getpwuid_r(geteuid(), &entry, buffer.data(), buffer.size(), &found) == 0 &&
      found != nullptr && found->pw_name != nullptr && found->pw_name[0] != '\0') {
    return found->pw_name;
  }
  // No entry for this uid (a container run with an arbitrary uid).
  if (const char* user = std::getenv("USER"); user != nullptr && user[0] != '\0') return user;
  return absl::StrCat("uid", geteuid());
}

namespace internal {

TokenCommands AddTokenCommands(CLI::App& app, Flags& f) {
  TokenCommands c;
  c.token = app.add_subcommand(
      "token", "Make, list and revoke bearer tokens (admins; the coordinator keeps them)");
  c.token->require_subcommand(1);
  c.token->footer(Example(
      "  trainctl token create --user alice --expires 90d --name laptop\n"
      "  trainctl token list --all\n"
      "  trainctl token revoke tok-0123456789ab"));

  c.create = c.token->add_subcommand(
      "create", "Make a token for a user; prints its secret once (keep it)");
  c.create->add_option("--user", f.tok_user, "The user the token authenticates as")
      ->required();
  c.create->add_option("--role", f.tok_role, "user or admin")
      ->check(CLI::IsMember({"user", "admin"}))
      ->capture_default_str();
  c.create->add_option("--expires", f.tok_expires,
                       "Lifetime, e.g. 90d, 2w, 36h, 1d12h (default: never expires)");
  c.create->add_option("--name", f.tok_name, "A name to tell tokens apart (at most 128 bytes)");
  c.create->add_option("-o,--output", f.output, "Output format: text, json or yaml")
      ->check(CLI::IsMember({"text", "json", "yaml"}));
  c.create->footer(Example(
      "  trainctl token create --user alice --expires 90d --name laptop\n"
      "  TOKEN=$(trainctl token create --user ci --role admin)   # the secret alone on stdout"));

  c.list = c.token->add_subcommand("list", "List tokens, never their secret");
  c.list->add_flag("--all", f.tok_all, "Also revoked and expired tokens");
  c.list->add_option("-o,--output", f.output, "Output format: table, json or yaml")
      ->check(CLI::IsMember({"table", "json", "yaml"}));
  c.list->footer(Example("  trainctl token list\n  trainctl token list --all -o json"));

  c.revoke = c.token->add_subcommand(
      "revoke", "Revoke a token: refused from the next call on (revoking twice is a no-op)");
  c.revoke->add_option("ID", f.tok_id, "The token's id (tok-...), from `token list`")
      ->required();
  c.revoke->add_option("-o,--output", f.output, "Output format: text, json or yaml")
      ->check(CLI::IsMember({"text", "json", "yaml"}));
  c.revoke->footer(Example("  trainctl token revoke tok-0123456789ab"));

  c.audit = app.add_subcommand(
      "audit", "Show the trail of admin actions: who did what, when (admins)");
  c.audit->add_option("--since", f.audit_since,
                      "Only events since then: a duration ago (7d, 12h) or an RFC 3339 "
                      "time (2026-11-01T00:00:00Z)");
  c.audit->add_option("--limit", f.audit_limit, "At most this many, the newest (0: 1000)")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  c.audit->add_option("-o,--output", f.output, "Output format: table, json or yaml")
      ->check(CLI::IsMember({"table", "json", "yaml"}));
  c.audit->footer(Example(
      "  trainctl audit\n  trainctl audit --since 7d\n"
      "  trainctl audit --since 2026-11-01T00:00:00Z --limit 50 -o json"));
  return c;
}

std::string PrepareTokenCommand(Flags* f, const TokenCommands& c, absl::Time now) {
  if (c.create->parsed()) {
    f->tok_request.set_user(f->tok_user);
    f->tok_request.set_role(f->tok_role == "admin" ? v1::ROLE_ADMIN : v1::ROLE_USER);
    f->tok_request.set_name(f->tok_name);
    if (!f->tok_expires.empty()) {
      absl::StatusOr<absl::Duration> d = ParseLongDuration(f->tok_expires);
      if (!d.ok()) return absl::StrCat("--expires: ", d.status().message());
      f->tok_request.set_expires_s(absl::ToInt64Seconds(*d));
      if (f->tok_request.expires_s() == 0) {
        return absl::StrCat("--expires ", f->tok_expires, ": at least 1s");
      }
    }
  }
  if (c.audit->parsed() && !f->audit_since.empty()) {
    absl::Time at;
    std::string error;
    if (absl::ParseTime(absl::RFC3339_full, f->audit_since, &at, &error)) {
      f->audit_since_ms = std::max<int64_t>(1, absl::ToUnixMillis(at));
    } else {
      absl::StatusOr<absl::Duration> ago = ParseLongDuration(f->audit_since);
      if (!ago.ok()) {
        return absl::StrCat("--since ", f->audit_since,
                            ": expected a duration ago (7d, 12h, 30m) or an RFC 3339 time "
                            "(2026-11-01T00:00:00Z)");
      }
      f->audit_since_ms = std::max<int64_t>(1, absl::ToUnixMillis(now - *ago));
    }
  }
  return "";
}

namespace {

// "2026-11-28T21:43:00Z".
std::string Rfc3339(int64_t ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(ms), absl::UTCTimeZone());
}

std::string RoleName(v1::Role role) { return role == v1::ROLE_ADMIN ? "admin" : "user"; }

}  // namespace

int Session::TokenCreate(const v1::CreateTokenRequest& request, bool json) {
  v1::CreateTokenResponse response;
  if (absl::Status s = Call(&Stub::CreateToken, request, &response); !s.ok()) return Fail(s);
  if (json) {
    out_ << ToJson(response);
    return kExitOk;
  }
  // The secret alone on stdout (TOKEN=$(trainctl token create ...)); the
  // rest for people on stderr.
  out_ << response.secret() << "\n";
  const v1::TokenInfo& t = response.token();
  err_ << "created token " << t.id() << " for user " << t.user() << " (role "
       << RoleName(t.role()) << ", "
       << (t.expires_ms() == 0 ? std::string("never expires")
                               : absl::StrCat("expires ", Rfc3339(t.expires_ms())))
       << "); its secret above is shown this once: only its SHA-256 is kept\n";
  return kExitOk;
}

int Session::TokenList(bool all, bool json) {
  v1::ListTokensRequest request;
  request.set_all(all);
  v1::ListTokensResponse response;
  if (absl::Status s = Call(&Stub::ListTokens, request, &response); !s.ok()) return Fail(s);
  if (json) {
    out_ << ToJson(response);
    return kExitOk;
  }
  const int64_t now_ms = absl::ToUnixMillis(clock_.Now());
  Table table({"ID", "NAME", "USER", "ROLE", "CREATED", "EXPIRES", "STATE"});
  for (const v1::TokenInfo& t : response.tokens()) {
    std::string expires = "never";
    if (t.expires_ms() != 0) {
      expires = t.expires_ms() > now_ms
                    ? absl::StrCat("in ", FormatAge(absl::Milliseconds(t.expires_ms() - now_ms)))
                    : absl::StrCat(Ago(t.expires_ms()), " ago");
    }
    std::string state = "valid";
    if (t.revoked_ms() != 0) {
      state = absl::StrCat("revoked ", Ago(t.revoked_ms()), " ago by ",
                           t.revoked_by().empty() ? "-" : t.revoked_by());
    } else if (t.expires_ms() != 0 && t.expires_ms() <= now_ms) {
      state = "expired";
    }
    table.AddRow({t.id(), t.name().empty() ? "-" : t.name(), t.user(), RoleName(t.role()),
                  absl::StrCat(Ago(t.created_ms()), " ago"), expires, state});
  }
  table.KeepWhole(0);
  table.Print(out_, terminal_width_);
  if (response.tokens().empty()) {
    err_ << (all ? "no tokens (`trainctl token create` makes one)\n"
                 : "no valid tokens (`token list --all` shows revoked and expired ones)\n");
  }
  return kExitOk;
}

int Session::TokenRevoke(const std::string& id, bool json) {
  v1::RevokeTokenRequest request;
  request.set_id(id);
  v1::RevokeTokenResponse response;
  if (absl::Status s = Call(&Stub::RevokeToken, request, &response); !s.ok()) return Fail(s);
  if (json) {
    out_ << ToJson(response);
    return kExitOk;
  }
  const v1::TokenInfo& t = response.token();
  out_ << "revoked token " << t.id() << " of user " << t.user() << " at "
       << Rfc3339(t.revoked_ms()) << " by "
       << (t.revoked_by().empty() ? "an anonymous caller" : t.revoked_by()) << "\n";
  return kExitOk;
}

int Session::Audit(int64_t since_ms, int limit, bool json) {
  v1::ListAuditRequest request;
  request.set_since_ms(since_ms);
  request.set_limit(limit);
  v1::ListAuditResponse response;
  if (absl::Status s = Call(&Stub::ListAudit, request, &response); !s.ok()) return Fail(s);
  if (json) {
    out_ << ToJson(response);
    return kExitOk;
  }
  Table table({"TIME", "WHO", "ACTION", "TARGET", "DETAIL"});
  for (const v1::AuditEvent& e : response.events()) {
    table.AddRow({Rfc3339(e.time_ms()), e.who().empty() ? "(anonymous)" : e.who(), e.action(),
                  e.target(), e.detail()});
  }
  table.KeepWhole(0);
  table.KeepWhole(2);
  table.Print(out_, terminal_width_);
  if (response.events().empty()) err_ << "no audit events\n";
  return kExitOk;
}

}  // namespace internal
}  // namespace trainctl::cli
