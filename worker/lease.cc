#include "worker/lease.h"

#include <algorithm>

namespace trainctl::worker {

void AgentLease::Registered(absl::Time sent, absl::Duration lease) {
  absl::MutexLock lock(&mu_);
  unanswered_.clear();
  held_ = lease > absl::ZeroDuration();
  expiry_ = held_ ? sent + lease : absl::InfiniteFuture();
}

void AgentLease::HeartbeatSent(absl::Time sent) {
  absl::MutexLock lock(&mu_);
  // Bounded: a coordinator that never answers must not grow this forever.
  if (unanswered_.size() >= 4096) unanswered_.pop_front();
  unanswered_.push_back(sent);
}

void AgentLease::Granted(absl::Duration lease) {
  absl::MutexLock lock(&mu_);
  if (unanswered_.empty()) return;
  const absl::Time sent = unanswered_.front();
  unanswered_.pop_front();
  if (!held_ || lease <= absl::ZeroDuration()) return;
  expiry_ = std::max(expiry_, sent + lease);
}

bool AgentLease::ExpiredAt(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (!held_ || now < expiry_) return false;
  held_ = false;
  return true;
}

absl::Time AgentLease::Expiry() const {
  absl::MutexLock lock(&mu_);
  return held_ ? expiry_ : absl::InfiniteFuture();
}

}  // namespace trainctl::worker
