#include "coordinator/auth.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "common/secrets.h"

namespace trainctl::coord {
namespace {

constexpr size_t kMinTokenChars = 16;
constexpr size_t kMaxTokenChars = 512;
constexpr size_t kMaxUserChars = 128;

// Collects the text-format parser's first error instead of letting protobuf
// log it.
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (error_.empty()) {
      error_ = absl::StrCat("line ", line + 1, " column ", column + 1, ": ", message);
    }
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

bool ValidToken(absl::string_view token) {
  if (token.size() < kMinTokenChars || token.size() > kMaxTokenChars) return false;
  for (char c : token) {
    if (!absl::ascii_isgraph(c)) return false;
  }
  return true;
}

}  // namespace

bool ValidUserName(absl::string_view user) {
  if (user.empty() || user.size() > kMaxUserChars) return false;
  for (char c : user) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '@' && c != '-') {
      return false;
    }
  }
  return true;
}

Principal AnonymousPrincipal() { return Principal{"", true}; }

absl::StatusOr<absl::string_view> BearerToken(absl::string_view header) {
  if (header.empty()) {
    return absl::UnauthenticatedError(
        "no credentials: send `authorization: Bearer <token>` (trainctl "
        "--token, $TRAINCTL_AUTH_TOKEN or `token` in ~/.config/trainctl/config)");
  }
  absl::string_view token = absl::StripAsciiWhitespace(header);
  if (token.size() < 7 || !absl::EqualsIgnoreCase(token.substr(0, 7), "bearer ")) {
    return absl::UnauthenticatedError(
        "authorization: expected \"Bearer <token>\"");
  }
  return absl::StripLeadingAsciiWhitespace(token.substr(7));
}

std::optional<Principal> TokenAuthenticator::Find(absl::string_view token) const {
  // Keyed by digest: the lookup's timing tells nothing of the token.
  auto it = tokens_.find(Sha256Hex(token));
  if (it == tokens_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::unique_ptr<TokenAuthenticator>> TokenAuthenticator::FromText(
    absl::string_view text) {
  v1::TokensFile file;
  google::protobuf::TextFormat::Parser parser;
  FirstError errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &file)) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a TokensFile in protobuf text format (",
                     errors.error().empty() ? "parse error" : errors.error(),
                     "); expected lines like: tokens { token: \"...\" user: "
                     "\"alice\" role: ROLE_USER }"));
  }
  if (file.tokens().empty()) {
    return absl::InvalidArgumentError(
        "tokens: no entry; with no token nobody could use the user API");
  }
  auto auth = std::unique_ptr<TokenAuthenticator>(new TokenAuthenticator());
  for (int i = 0; i < file.tokens_size(); ++i) {
    const v1::TokenEntry& e = file.tokens(i);
    const std::string where = absl::StrCat("tokens[", i, "]");
    if (!ValidToken(e.token())) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".token: must be ", kMinTokenChars, " to ", kMaxTokenChars,
          " printable ASCII characters without spaces (e.g. `openssl rand -hex "
          "32`), got ", e.token().size(), " characters"));
    }
    if (!ValidUserName(e.user())) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".user: must be 1 to ", kMaxUserChars,
          " characters of [A-Za-z0-9._@-], got \"", absl::CHexEscape(e.user()), "\""));
    }
    Principal p{e.user(), e.role() == v1::ROLE_ADMIN};
    if (!auth->tokens_.emplace(Sha256Hex(e.token()), std::move(p)).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".token: the same token is given to an earlier entry"));
    }
  }
  return auth;
}

absl::StatusOr<std::unique_ptr<TokenAuthenticator>> TokenAuthenticator::FromFile(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read tokens file ", path));
  std::stringstream text;
  text << in.rdbuf();
  auto auth = FromText(text.str());
  if (!auth.ok()) {
    return absl::Status(auth.status().code(),
                        absl::StrCat(path, ": ", auth.status().message()));
  }
  return auth;
}

absl::StatusOr<Principal> TokenAuthenticator::Authenticate(
    absl::string_view header) const {
  absl::StatusOr<absl::string_view> token = BearerToken(header);
  if (!token.ok()) return token.status();
  std::optional<Principal> who = Find(*token);
  if (!who.has_value()) {
    return absl::UnauthenticatedError(
        "unknown or revoked token (not in the coordinator's --tokens-file)");
  }
  return *std::move(who);
}

absl::Status CheckJobAccess(const Principal& who, const v1::Job& job,
                            absl::string_view action) {
  if (who.admin || job.spec().user() == who.user) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "user ", who.user, " may not ", action, " job ", job.id(), ": it belongs to ",
      job.spec().user().empty() ? "nobody (submitted without authentication)"
                                : absl::StrCat("user ", job.spec().user()),
      "; only its owner or an admin may"));
}

absl::Status ApplySubmitter(const Principal& who, v1::JobSpec* spec) {
  if (who.user.empty()) return absl::OkStatus();  // anonymous (insecure mode)
  if (spec->user().empty()) {
    spec->set_user(who.user);
    return absl::OkStatus();
  }
  if (spec->user() == who.user || who.admin) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "spec.user: user ", who.user, " may not submit a job as user ",
      spec->user(), "; leave spec.user empty (it is set from your token) or "
      "ask an admin"));
}

absl::StatusOr<std::string> ListOwner(const Principal& who, bool all_users,
                                      absl::string_view user) {
  if (who.user.empty()) return std::string(user);  // anonymous (insecure mode)
  if (!user.empty()) {
    if (who.admin || user == who.user) return std::string(user);
    return absl::PermissionDeniedError(absl::StrCat(
        "user: user ", who.user, " may list only their own jobs, not user ", user,
        "'s; only an admin may list another user's"));
  }
  if (!all_users) return who.user;
  if (who.admin) return std::string();
  return absl::PermissionDeniedError(absl::StrCat(
      "all_users: user ", who.user,
      " may list only their own jobs; only an admin may list every user's"));
}

absl::Status CheckNodeIdentity(absl::string_view cert_name,
                               absl::string_view node_name) {
  if (cert_name == node_name) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "node.name: this agent's certificate names node \"", cert_name,
      "\"; it may not register or report as node \"", node_name,
      "\" (run it with --node-name ", cert_name,
      " or give it that node's certificate)"));
}

}  // namespace trainctl::coord
