#include "coordinator/node_admin.h"

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"

namespace trainctl::coord {
namespace {

// A duration for people: whole seconds, as absl formats them ("1h", "2h30m",
// "5m3s", "0s").
std::string Human(absl::Duration d) {
  std::string s = absl::FormatDuration(absl::Trunc(d, absl::Seconds(1)));
  if (s == "0") return "0s";
  if (s.size() > 3 && absl::EndsWith(s, "m0s")) s.resize(s.size() - 2);
  return s;
}

}  // namespace

absl::Status ValidateUpdateNodes(const v1::UpdateNodesRequest& req) {
  if (req.nodes().empty()) {
    return absl::InvalidArgumentError("nodes: name at least one node");
  }
  absl::flat_hash_set<std::string> seen;
  for (int i = 0; i < req.nodes_size(); ++i) {
    const std::string& n = req.nodes(i);
    if (n.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("nodes[", i, "]: empty node name"));
    }
    if (!seen.insert(n).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("nodes[", i, "]: node ", n, " is named twice"));
    }
  }
  const v1::NodeAction a = req.action();
  if (a != v1::NODE_ACTION_DRAIN && a != v1::NODE_ACTION_RESUME &&
      a != v1::NODE_ACTION_DOWN) {
    return absl::InvalidArgumentError("action: must be DRAIN, RESUME or DOWN");
  }
  if (a != v1::NODE_ACTION_RESUME && req.reason().empty()) {
    return absl::InvalidArgumentError(
        "reason: required to drain or down a node (--reason: say why, for the "
        "users whose jobs wait)");
  }
  if (req.reason().size() > static_cast<size_t>(kMaxAdminReasonBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reason: ", req.reason().size(), " bytes; at most ", kMaxAdminReasonBytes));
  }
  if (req.deadline_s() != 0 && a != v1::NODE_ACTION_DRAIN) {
    return absl::InvalidArgumentError("deadline_s: only a drain has a deadline");
  }
  if (req.deadline_s() < 0 || req.deadline_s() > kMaxDrainDeadlineS) {
    return absl::InvalidArgumentError(absl::StrCat(
        "deadline_s: ", req.deadline_s(), " is outside 0 (none) to ",
        kMaxDrainDeadlineS, " (a year)"));
  }
  if (req.verify() && a != v1::NODE_ACTION_RESUME) {
    return absl::InvalidArgumentError("verify: only a resume is verified");
  }
  return absl::OkStatus();
}

v1::NodeAdmin AdminAfter(const v1::UpdateNodesRequest& req, const std::string& by,
                         absl::Time now) {
  v1::NodeAdmin admin;
  if (req.action() == v1::NODE_ACTION_RESUME) return admin;
  admin.set_state(req.action() == v1::NODE_ACTION_DOWN ? v1::NODE_ADMIN_STATE_DOWN
                                                       : v1::NODE_ADMIN_STATE_DRAIN);
  admin.set_reason(req.reason());
  admin.set_by(by.empty() ? "anonymous" : by);
  admin.set_since_ms(ToUnixMs(now));
  if (req.action() == v1::NODE_ACTION_DRAIN && req.deadline_s() > 0) {
    admin.set_deadline_ms(ToUnixMs(now + absl::Seconds(req.deadline_s())));
  }
  return admin;
}

bool InService(const v1::Node& node) {
  return node.admin().state() == v1::NODE_ADMIN_STATE_UNSPECIFIED;
}

v1::NodeServiceState ServiceStateOf(const v1::Node& node, bool holds_tasks) {
  switch (node.admin().state()) {
    case v1::NODE_ADMIN_STATE_DRAIN:
      return holds_tasks ? v1::NODE_SERVICE_STATE_DRAINING : v1::NODE_SERVICE_STATE_DRAINED;
    case v1::NODE_ADMIN_STATE_DOWN:
      return v1::NODE_SERVICE_STATE_DOWN;
    default:
      return v1::NODE_SERVICE_STATE_IN_SERVICE;
  }
}

bool DrainDeadlinePassed(const v1::Node& node, absl::Time now) {
  return node.admin().state() == v1::NODE_ADMIN_STATE_DRAIN &&
         node.admin().deadline_ms() > 0 && ToUnixMs(now) >= node.admin().deadline_ms();
}

std::string DescribeAdmin(const v1::Node& node, absl::Time now) {
  const v1::NodeAdmin& a = node.admin();
  if (InService(node)) return "";
  std::string out = absl::StrCat(
      a.state() == v1::NODE_ADMIN_STATE_DOWN ? "DOWN" : "DRAIN", " by ", a.by(), " ",
      Human(now - absl::FromUnixMillis(a.since_ms())), " ago: ", a.reason());
  if (a.deadline_ms() > 0) {
    const absl::Duration left = absl::FromUnixMillis(a.deadline_ms()) - now;
    absl::StrAppend(&out, left > absl::ZeroDuration()
                              ? absl::StrCat(", deadline in ", Human(left))
                              : std::string(", deadline passed"));
  }
  return out;
}

std::string RequeueReason(const v1::Node& node) {
  const v1::NodeAdmin& a = node.admin();
  const bool down = a.state() == v1::NODE_ADMIN_STATE_DOWN;
  return absl::StrCat(
      "node ", node.name(), down ? " was set DOWN" : " was drained", " by ", a.by(),
      " (", a.reason(), ")", down ? "" : " and its drain deadline passed",
      ": its tasks were stopped and the job requeued (no restart used)");
}

std::optional<std::string> AutoDrain::OnExclusion(const std::string& node,
                                                  const std::string& verdict,
                                                  absl::Time now) {
  if (max_exclusions_ <= 0) return std::nullopt;
  std::deque<absl::Time>& times = seen_[node];
  times.push_back(now);
  while (!times.empty() && now - times.front() > window_) times.pop_front();
  if (static_cast<int>(times.size()) < max_exclusions_) return std::nullopt;
  seen_.erase(node);
  return absl::StrCat("excluded by pre-flights ", max_exclusions_, " times within ",
                      Human(window_), "; last: ", verdict);
}

int AutoDrain::Count(const std::string& node, absl::Time now) const {
  auto it = seen_.find(node);
  if (it == seen_.end()) return 0;
  int n = 0;
  for (absl::Time t : it->second) {
    if (now - t <= window_) ++n;
  }
  return n;
}

std::string MissingGpus(const v1::Node& before, const v1::Node& after) {
  absl::flat_hash_set<std::string> now;
  for (const v1::Gpu& g : after.gpus()) now.insert(g.uuid());
  std::string out;
  for (const v1::Gpu& g : before.gpus()) {
    if (now.contains(g.uuid())) continue;
    absl::StrAppend(&out, out.empty() ? "" : ", ", "GPU ", g.index(), " (", g.uuid(), ")");
  }
  return out;
}

absl::Status CanVerify(const v1::Node& node, const VerifyFacts& facts) {
  const std::string& name = node.name();
  if (!facts.connected || node.state() != v1::NODE_STATE_READY) {
    return absl::FailedPreconditionError(absl::StrCat(
        "verify: node ", name, " is not connected: its agent must register before it can "
        "be verified and resumed"));
  }
  if (!facts.runs_probes || !node.preflight_probe_error().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "verify: node ", name, " cannot run its pre-flight probe: ",
        facts.runs_probes ? node.preflight_probe_error()
                          : std::string("its agent is older than probe tasks")));
  }
  if (node.gpus_size() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("verify: node ", name, " has no GPUs to probe"));
  }
  if (const int64_t job = node.admin().verify_job_id(); job != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("verify: node ", name, " is being verified already by job ", job));
  }
  if (facts.busy) {
    return absl::FailedPreconditionError(absl::StrCat(
        "verify: node ", name, " still runs ", facts.jobs_running,
        " job(s) or stops their tasks: the probe needs every GPU; wait until it is "
        "DRAINED, or `node down` it"));
  }
  return absl::OkStatus();
}

v1::JobSpec VerifySpec(const v1::Node& node, const std::string& by) {
  v1::JobSpec spec;
  spec.set_name(absl::StrCat("verify-", node.name()));
  spec.add_command("true");
  spec.set_nodes(1);
  spec.set_gpus_per_node(node.gpus_size());
  spec.set_preflight(v1::PREFLIGHT_MODE_ON);
  spec.set_max_restarts(0);
  spec.set_user(by);
  spec.set_verify_node(node.name());
  return spec;
}

v1::NodeAdmin AdminAfterVerify(const v1::NodeAdmin& admin, const v1::Job& job) {
  if (job.state() == v1::JOB_STATE_SUCCEEDED) return v1::NodeAdmin();
  const std::string kVerdict = "; resume --verify failed (job ";
  v1::NodeAdmin out = admin;
  out.set_verify_job_id(0);
  std::string reason = admin.reason();
  if (size_t at = reason.find(kVerdict); at != std::string::npos) reason.resize(at);
  absl::StrAppend(&reason, kVerdict, job.id(), "): ", job.reason());
  if (reason.size() > static_cast<size_t>(kMaxAdminReasonBytes)) {
    reason.resize(kMaxAdminReasonBytes);
  }
  out.set_reason(std::move(reason));
  return out;
}

v1::NodeAdmin AutomaticDrain(const std::string& reason, absl::Time now) {
  v1::NodeAdmin admin;
  admin.set_state(v1::NODE_ADMIN_STATE_DRAIN);
  admin.set_reason(reason);
  admin.set_by("trainctl");
  admin.set_since_ms(ToUnixMs(now));
  admin.set_automatic(true);
  return admin;
}

}  // namespace trainctl::coord
