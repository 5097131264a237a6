#include "coordinator/pass_coalescer.h"

namespace trainctl::coord {

void PassCoalescer::Request(absl::Time now) {
  if (!requested_) {
    requested_ = true;
    requested_at_ = now;
    ahead_ = waiting_.load();
  }
  ++events_;
}

void PassCoalescer::Entered() {
  if (requested_ && ahead_ > 0) --ahead_;
}

bool PassCoalescer::MustRunNow(absl::Time now) const {
  if (!requested_) return false;
  return waiting_.load() == 0 || ahead_ <= 0 || events_ >= kMaxEvents ||
         now - requested_at_ >= kMaxDelay;
}

void PassCoalescer::Clear() {
  requested_ = false;
  events_ = 0;
  ahead_ = 0;
}

}  // namespace trainctl::coord
