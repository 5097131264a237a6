#include "coordinator/token_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/secrets.h"

namespace trainctl::coord {
namespace {

constexpr size_t kMaxNameBytes = 128;
// 100 years: longer than any real lifetime, and expires_ms cannot overflow.
constexpr int64_t kMaxExpiresS = int64_t{100} * 366 * 24 * 3600;

bool Valid(const v1::TokenInfo& t, absl::Time now) {
  return t.revoked_ms() == 0 &&
         (t.expires_ms() == 0 || absl::ToUnixMillis(now) < t.expires_ms());
}

}  // namespace

std::string FormatTimeMs(int64_t ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(ms),
                          absl::UTCTimeZone());
}

absl::StatusOr<std::unique_ptr<TokenStore>> TokenStore::Open(StateStore* store) {
  absl::StatusOr<std::vector<StoredRecord>> records = store->ReadRecords(kRecordKind, {});
  if (!records.ok()) return records.status();
  auto tokens = std::unique_ptr<TokenStore>(new TokenStore(store));
  absl::MutexLock lock(&tokens->mu_);
  for (const StoredRecord& r : *records) {
    v1::StoredToken t;
    if (!t.ParseFromString(r.value) || t.info().id() != r.key) {
      return absl::DataLossError(
          absl::StrCat("token store: record ", r.key, " is not a StoredToken of that id"));
    }
    tokens->id_by_digest_[t.secret_sha256()] = r.key;
    tokens->by_id_[r.key] = std::move(t);
  }
  return tokens;
}

absl::Status TokenStore::Persist(const v1::StoredToken& token) {
  return store_->PutRecord(kRecordKind, token.info().id(), token.SerializeAsString());
}

absl::StatusOr<TokenStore::Created> TokenStore::Create(const v1::CreateTokenRequest& request,
                                                       absl::string_view created_by,
                                                       absl::Time now) {
  if (!ValidUserName(request.user())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "user: must be 1 to 128 characters of [A-Za-z0-9._@-], got \"",
        absl::CHexEscape(request.user().substr(0, 160)), "\""));
  }
  if (request.role() != v1::ROLE_UNSPECIFIED && request.role() != v1::ROLE_USER &&
      request.role() != v1::ROLE_ADMIN) {
    return absl::InvalidArgumentError(absl::StrCat(
        "role: must be ROLE_USER or ROLE_ADMIN, got ", static_cast<int>(request.role())));
  }
  if (request.expires_s() < 0 || request.expires_s() > kMaxExpiresS) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expires_s: must be 0 (never) or a number of seconds up to 100 years (",
        kMaxExpiresS, "), got ", request.expires_s()));
  }
  if (request.name().size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "name: at most ", kMaxNameBytes, " bytes, got ", request.name().size()));
  }
  for (char c : request.name()) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError("name: must not hold control characters");
    }
  }
  absl::MutexLock write(&write_mu_);
  Created made;
  made.secret = NewSecretToken(kSecretBytes);
  v1::StoredToken stored;
  stored.set_secret_sha256(Sha256Hex(made.secret));
  v1::TokenInfo& info = *stored.mutable_info();
  {
    absl::ReaderMutexLock lock(&mu_);
    do {
      info.set_id(absl::StrCat("tok-", NewSecretToken(6)));
    } while (by_id_.contains(info.id()));
  }
  info.set_name(request.name());
  info.set_user(request.user());
  info.set_role(request.role() == v1::ROLE_ADMIN ? v1::ROLE_ADMIN : v1::ROLE_USER);
  info.set_created_ms(absl::ToUnixMillis(now));
  info.set_created_by(std::string(created_by));
  if (request.expires_s() > 0) {
    info.set_expires_ms(info.created_ms() + request.expires_s() * 1000);
  }
  if (absl::Status s = Persist(stored); !s.ok()) return s;
  made.info = info;
  absl::MutexLock lock(&mu_);
  id_by_digest_[stored.secret_sha256()] = info.id();
  by_id_[info.id()] = std::move(stored);
  return made;
}

std::vector<v1::TokenInfo> TokenStore::List(bool all, absl::Time now) const {
  std::vector<v1::TokenInfo> out;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [id, t] : by_id_) {
      if (all || Valid(t.info(), now)) out.push_back(t.info());
    }
  }
  std::sort(out.begin(), out.end(), [](const v1::TokenInfo& a, const v1::TokenInfo& b) {
    return a.created_ms() != b.created_ms() ? a.created_ms() < b.created_ms()
                                            : a.id() < b.id();
  });
  return out;
}

absl::StatusOr<v1::TokenInfo> TokenStore::Revoke(absl::string_view id, absl::string_view by,
                                                 absl::Time now, bool* newly_revoked) {
  if (newly_revoked != nullptr) *newly_revoked = false;
  if (id.empty()) return absl::InvalidArgumentError("id: empty; name the token (tok-...)");
  absl::MutexLock write(&write_mu_);
  v1::StoredToken revoked;
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = by_id_.find(id);
    if (it == by_id_.end()) {
      return absl::NotFoundError(absl::StrCat(
          "id: no token ", absl::CHexEscape(id.substr(0, 80)),
          " (`trainctl token list --all` lists them)"));
    }
    if (it->second.info().revoked_ms() != 0) return it->second.info();  // idempotent
    revoked = it->second;
  }
  revoked.mutable_info()->set_revoked_ms(absl::ToUnixMillis(now));
  revoked.mutable_info()->set_revoked_by(std::string(by));
  // Durable first: a revocation that might be lost in a crash is not
  // acknowledged.
  if (absl::Status s = Persist(revoked); !s.ok()) return s;
  v1::TokenInfo info = revoked.info();
  if (newly_revoked != nullptr) *newly_revoked = true;
  absl::MutexLock lock(&mu_);
  by_id_[info.id()] = std::move(revoked);
  return info;
}

absl::StatusOr<Principal> TokenStore::Authenticate(absl::string_view secret,
                                                   absl::Time now) const {
  // Keyed by digest: the lookup's timing tells nothing of the secret.
  const std::string digest = Sha256Hex(secret);
  absl::ReaderMutexLock lock(&mu_);
  auto id = id_by_digest_.find(digest);
  if (id == id_by_digest_.end()) {
    return absl::UnauthenticatedError(
        "unknown or revoked token (neither in the coordinator's --tokens-file nor "
        "made by `trainctl token create`)");
  }
  const v1::TokenInfo& t = by_id_.at(id->second).info();
  if (t.revoked_ms() != 0) {
    return absl::UnauthenticatedError(absl::StrCat(
        "token ", t.id(), " was revoked at ", FormatTimeMs(t.revoked_ms()), " by ",
        t.revoked_by().empty() ? "an anonymous caller" : t.revoked_by(),
        "; ask an admin for a new one"));
  }
  if (t.expires_ms() != 0 && absl::ToUnixMillis(now) >= t.expires_ms()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "token ", t.id(), " expired at ", FormatTimeMs(t.expires_ms()),
        "; ask an admin for a new one"));
  }
  return Principal{t.user(), t.role() == v1::ROLE_ADMIN};
}

int TokenStore::size() const {
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<int>(by_id_.size());
}

}  // namespace trainctl::coord
