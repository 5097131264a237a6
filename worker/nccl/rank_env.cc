#include "worker/nccl/rank_env.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace trainctl::worker {
namespace {

constexpr absl::string_view kHint =
    "run this under trainctl submit, which sets the launch environment";

absl::StatusOr<std::string> GetString(
    absl::FunctionRef<const char*(const char*)> getenv, const char* name) {
  const char* value = getenv(name);
  if (value == nullptr || *value == '\0') {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s is not set: %s", name, kHint));
  }
  return std::string(value);
}

// Parses `name` as an integer in [min, max].
absl::StatusOr<int64_t> GetInt(
    absl::FunctionRef<const char*(const char*)> getenv, const char* name,
    int64_t min, int64_t max) {
  TC_ASSIGN_OR_RETURN(std::string text, GetString(getenv, name));
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min || value > max) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s='%s' is not an integer in [%d, %d]: %s", name, text, min, max,
        kHint));
  }
  return value;
}

}  // namespace

absl::StatusOr<RankEnv> RankEnvFromEnv(
    absl::FunctionRef<const char*(const char*)> getenv) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  RankEnv env;
  TC_ASSIGN_OR_RETURN(env.coordinator, GetString(getenv, "TRAINCTL_COORDINATOR"));
  TC_ASSIGN_OR_RETURN(env.job_id,
                      GetInt(getenv, "TRAINCTL_JOB_ID", 0,
                             std::numeric_limits<int64_t>::max()));
  TC_ASSIGN_OR_RETURN(env.attempt, GetInt(getenv, "TRAINCTL_ATTEMPT", 0, kIntMax));
  if (const char* run = getenv("TRAINCTL_PREFLIGHT"); run != nullptr && *run != '\0') {
    TC_ASSIGN_OR_RETURN(env.probe_run, GetInt(getenv, "TRAINCTL_PREFLIGHT", 1, kIntMax));
  }
  TC_ASSIGN_OR_RETURN(env.token, GetString(getenv, "TRAINCTL_TOKEN"));
  TC_ASSIGN_OR_RETURN(env.world_size, GetInt(getenv, "WORLD_SIZE", 1, kIntMax));
  TC_ASSIGN_OR_RETURN(env.rank, GetInt(getenv, "RANK", 0, kIntMax));
  TC_ASSIGN_OR_RETURN(env.local_world_size,
                      GetInt(getenv, "LOCAL_WORLD_SIZE", 1, kIntMax));
  TC_ASSIGN_OR_RETURN(env.local_rank, GetInt(getenv, "LOCAL_RANK", 0, kIntMax));
  if (env.rank >= env.world_size) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "RANK=%d is not below WORLD_SIZE=%d: %s", env.rank, env.world_size,
        kHint));
  }
  if (env.local_rank >= env.local_world_size) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "LOCAL_RANK=%d is not below LOCAL_WORLD_SIZE=%d: %s", env.local_rank,
        env.local_world_size, kHint));
  }
  if (env.local_world_size > env.world_size) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "LOCAL_WORLD_SIZE=%d is above WORLD_SIZE=%d: %s",
        env.local_world_size, env.world_size, kHint));
  }
  if (const char* socket = getenv("TRAINCTL_RENDEZVOUS_SOCKET"); socket != nullptr) {
    env.rendezvous_socket = socket;
  }
  if (const char* ids = getenv("TRAINCTL_NCCL_UNIQUE_IDS"); ids != nullptr && *ids != '\0') {
    TC_ASSIGN_OR_RETURN(env.nccl_unique_ids,
                        GetInt(getenv, "TRAINCTL_NCCL_UNIQUE_IDS", 1, env.world_size));
  }
  return env;
}

}  // namespace trainctl::worker
