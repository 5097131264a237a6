#include "coordinator/etcd/ha_leader.h"

#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace trainctl::coord {

absl::StatusOr<HaLeadership> AcquireLeadership(const HaOptions& options,
                                               const absl::Notification& shutdown) {
  if (options.prefix.empty() || !absl::EndsWith(options.prefix, "/")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--etcd-prefix must be non-empty and end with '/', got \"", options.prefix, "\""));
  }
  HaLeadership ha;
  auto conn = ConnectEtcd(options.etcd_endpoints, absl::Seconds(30));
  if (!conn.ok()) return conn.status();
  ha.conn = std::move(*conn);
  auto election =
      LeaderElection::Create(ha.conn.get(), options.prefix + "leader", options.lease);
  if (!election.ok()) return election.status();
  ha.election = std::move(*election);

  auto leader = ha.election->CurrentLeader();
  if (leader.ok()) {
    TC_LOG_INFO("standby: {} leads; waiting for leadership", *leader);
  }
  // Turns a shutdown signal into a cancelled campaign.
  absl::Notification done;
  std::thread watcher([&] {
    while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
      if (shutdown.HasBeenNotified()) {
        ha.election->Cancel();
        return;
      }
    }
  });
  absl::Status campaign;
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (true) {
    campaign = ha.election->Campaign(options.address);
    if (!absl::IsUnavailable(campaign) || absl::Now() > give_up) break;
    TC_LOG_WARN("{}; retrying", campaign.ToString());
  }
  done.Notify();
  watcher.join();
  if (!campaign.ok()) return campaign;
  TC_LOG_INFO("elected leader (lease {:x}, ttl {})", ha.election->lease_id(),
              absl::FormatDuration(options.lease));
  ha.store = std::make_unique<EtcdStateStore>(ha.conn.get(), options.prefix,
                                              ha.election->fence());
  return ha;
}

}  // namespace trainctl::coord
