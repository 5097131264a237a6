#ifndef TRAINCTL_COORDINATOR_NODE_ADMIN_H_
#define TRAINCTL_COORDINATOR_NODE_ADMIN_H_

// A node's admin state (`trainctl node drain|resume|down`), with Slurm's
// meanings (scontrol's State=DRAIN / DOWN / RESUME):
//   - DRAIN: no new placements; what runs there finishes. The node shows
//     DRAINING while tasks remain, DRAINED once empty. With a deadline, what
//     still runs at the deadline gets the preemption notice (SIGTERM, the
//     stop grace, SIGKILL) and its job is requeued without spending a
//     restart.
//   - DOWN: out of service now: what runs there is stopped and requeued
//     (again without spending a restart).
//   - RESUME: back in service.
// The state is stored with the node (v1::Node.admin) and only these rules
// change it: an agent's registration never does.
//
// Pure functions and one small part (AutoDrain) with its own state; no
// clock (times are arguments), no locks (AutoDrain is guarded by the
// coordinator's lock, as NodeRegistry).

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "trainctl/v1/service.pb.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

// Longest --reason kept, bytes.
inline constexpr int kMaxAdminReasonBytes = 1024;
// Longest drain deadline, seconds (a year): a bigger one is a typo.
inline constexpr int64_t kMaxDrainDeadlineS = 365LL * 24 * 3600;

// Checks an UpdateNodes request. Errors: INVALID_ARGUMENT naming the field:
// no node, an empty or repeated node name, no action, an empty reason for
// DRAIN or DOWN, a reason over kMaxAdminReasonBytes, a negative or too large
// deadline_s (or one given with another action than DRAIN), verify with
// another action than RESUME.
absl::Status ValidateUpdateNodes(const v1::UpdateNodesRequest& req);

// The admin record `req` (validated) sets, made by user `by` at `now`: DRAIN
// or DOWN with the reason and the deadline (now + deadline_s, DRAIN only);
// RESUME clears it (in service). `by` empty (no authentication) is stored as
// "anonymous".
v1::NodeAdmin AdminAfter(const v1::UpdateNodesRequest& req, const std::string& by,
                         absl::Time now);

// True when the node takes placements: its admin state is neither DRAIN nor
// DOWN. (Liveness, NodeState, is judged separately.)
bool InService(const v1::Node& node);

// Where the node stands for `trainctl nodes`: IN_SERVICE, DRAINING (drained
// and `holds_tasks`: live tasks or tasks of earlier attempts still stopping
// there), DRAINED (drained and empty), DOWN.
v1::NodeServiceState ServiceStateOf(const v1::Node& node, bool holds_tasks);

// True when the node is drained with a deadline that `now` has reached.
bool DrainDeadlinePassed(const v1::Node& node, absl::Time now);

// The admin state in words for `nodes`, `node describe` and `why`, relative
// to `now`: "DRAIN by alice 2h0m ago: disk swap, deadline in 30m" / "DOWN by
// ops 5m ago: PSU" / "" in service.
std::string DescribeAdmin(const v1::Node& node, absl::Time now);

// The reason a job gets when a drain's deadline or a DOWN stopped its tasks
// on `node` and requeued it: names the node, the action, who and why.
std::string RequeueReason(const v1::Node& node);

// Automatic drains on repeated pre-flight exclusions: a node that pre-flights
// excluded `max_exclusions` times within `window` is drained (by
// "trainctl", automatic) with the count and the last verdict as its reason.
// Its own state: the exclusion times per node within the window. Not
// thread-safe: guarded by the coordinator's lock.
class AutoDrain {
 public:
  // max_exclusions <= 0 turns automatic drains off (the default).
  AutoDrain() = default;
  AutoDrain(int max_exclusions, absl::Duration window)
      : max_exclusions_(max_exclusions), window_(window) {}

  // Records that a pre-flight excluded `node` at `now` (`verdict`: why).
  // Returns the drain's reason when this exclusion makes max_exclusions
  // within the window (and forgets that node's count), nullopt otherwise.
  std::optional<std::string> OnExclusion(const std::string& node,
                                         const std::string& verdict, absl::Time now);

  // Exclusions of `node` recorded within the window ending at `now`.
  int Count(const std::string& node, absl::Time now) const;

  int max_exclusions() const { return max_exclusions_; }
  absl::Duration window() const { return window_; }

 private:
  int max_exclusions_ = 0;
  absl::Duration window_ = absl::Hours(1);
  // node -> exclusion times, oldest first.
  absl::flat_hash_map<std::string, std::deque<absl::Time>> seen_;
};

// The GPUs `before` offered (by UUID) that `after` lacks, in words ("GPU 3
// (GPU-ab12...)", comma-separated); "" when none is missing.
std::string MissingGpus(const v1::Node& before, const v1::Node& after);

// What `node resume --verify` needs to know of a node besides its record.
struct VerifyFacts {
  // Its agent's stream is up.
  bool connected = false;
  // Its agent runs pre-flight probes as tasks (RegisterNode.probe_tasks).
  bool runs_probes = false;
  // A task still holds GPUs there (running, stopping, or unknown to the
  // coordinator), and how many jobs run there.
  bool busy = false;
  int jobs_running = 0;
};

// OK when `node` can be verified now: connected and READY, able to run its
// probe, with GPUs, no verify job yet, and no task holding a GPU (the probe
// takes every GPU). Errors: FAILED_PRECONDITION saying which, beginning
// "verify: node NAME".
absl::Status CanVerify(const v1::Node& node, const VerifyFacts& facts);

// The spec of node `node`'s verify job (`node resume --verify` by user
// `by`): a gang of one node with every GPU of it, its pre-flight on, no
// restart, running `true`, JobSpec.verify_node set.
v1::JobSpec VerifySpec(const v1::Node& node, const std::string& by);

// The node's admin record once its verify job `job` (final) ended, from
// `admin` (the record while it ran): in service when it succeeded; else the
// same drain or down, no verify job, and the reason followed by the
// verdict ("...; resume --verify failed (job 12): <the job's reason>",
// replacing an earlier verdict).
v1::NodeAdmin AdminAfterVerify(const v1::NodeAdmin& admin, const v1::Job& job);

// The automatic drain record for `reason` at `now` (by "trainctl").
v1::NodeAdmin AutomaticDrain(const std::string& reason, absl::Time now);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_NODE_ADMIN_H_
