#ifndef TRAINCTL_COMMON_SECRETS_H_
#define TRAINCTL_COMMON_SECRETS_H_

// Secrets: making them, comparing them, and keying tables by them, through
// OpenSSL's libcrypto (RAND_bytes, CRYPTO_memcmp, SHA-256). No gRPC.

#include <string>

#include "absl/strings/string_view.h"

namespace trainctl {

// A fresh secret of `bytes` random bytes from OpenSSL's CSPRNG (RAND_bytes),
// as lower-case hex (2 * bytes characters). Used for attempt tokens
// (TRAINCTL_TOKEN) and pre-flight tokens; 16 bytes = 128 bits by default.
// Aborts the process if the CSPRNG cannot be seeded (OpenSSL reports that
// only when the kernel has no entropy source at all): a predictable token
// would be worse than no job.
std::string NewSecretToken(int bytes = 16);

// True when `a` and `b` are equal, in time that depends on their lengths
// only, not on where they differ (CRYPTO_memcmp): a caller guessing a token
// learns nothing from how long a refusal took.
bool SameSecret(absl::string_view a, absl::string_view b);

// SHA-256 of `data`, as 64 lower-case hex characters. Tables of secrets are
// keyed by this digest, so that a lookup's timing reveals at most a prefix
// of the digest, never of the secret.
std::string Sha256Hex(absl::string_view data);

}  // namespace trainctl

#endif  // TRAINCTL_COMMON_SECRETS_H_
