// `trainctl why JOB`: why a job waits (its queue position, quota, excluded
// nodes, preemption, the reservation it waits behind and its estimated
// start), as lines for people or the WhyJob answer as JSON.

#include <algorithm>
#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/cli_internal.h"

namespace trainctl::cli::internal {

CLI::App* AddWhyCommand(CLI::App& app, Flags& f) {
  CLI::App* why = app.add_subcommand(
      "why", "Explain why a job waits: quota, nodes, reservation and ETA");
  why->add_option("JOB", f.job_id, "Job id")->required();
  why->add_option("-o,--output", f.output, "Output format: table, json or yaml")
      ->check(CLI::IsMember({"table", "json", "yaml"}));
  why->footer(Example("  trainctl why 42\n  trainctl why 42 -o json"));
  return why;
}

int Session::Why(int64_t job_id, bool json) {
  v1::WhyJobRequest request;
  request.set_job_id(job_id);
  v1::WhyJobResponse why;
  if (absl::Status s = Call(&Stub::WhyJob, request, &why); !s.ok()) {
    return Fail(s);
  }
  if (json) {
    out_ << ToJson(why) << "\n";
    return kExitOk;
  }
  // Agents that cannot run their pre-flight program: their configuration,
  // never a verdict on their GPUs (a gang there starts unprobed).
  auto agent_errors = [&] {
    for (const std::string& e : why.agent_errors()) out_ << "Agent error:  " << e << "\n";
  };
  if (why.state() != v1::JOB_STATE_PENDING) {
    out_ << why.summary() << "\n";
    agent_errors();
    return kExitOk;
  }
  out_ << absl::StrFormat("Job %d is pending in queue %s (number %d in the "
                          "scheduling order).\n",
                          why.job_id(), why.queue(), why.position());
  out_ << "Why:          " << why.summary() << "\n";
  if (!why.quota().empty()) out_ << "Quota:        " << why.quota() << "\n";
  for (const std::string& e : why.excluded_nodes()) {
    out_ << "Excluded:     " << e << "\n";
  }
  // The job's own node selection (--gpu-type, --constraint, -w, -x).
  for (const std::string& c : why.constraints()) {
    out_ << "Constraint:   " << c << "\n";
  }
  agent_errors();
  if (why.preempted_for_job_id() != 0) {
    out_ << absl::StrFormat(
        "Preempted:    for job %d (%d time%s); restarts once job %d starts\n",
        why.preempted_for_job_id(), why.preemptions(),
        why.preemptions() == 1 ? "" : "s", why.preempted_for_job_id());
  }
  if (why.reservation_job_id() != 0 && why.reservation().empty()) {
    // First in line, but no set of nodes it may use can ever take it (e.g.
    // pre-flight excluded the others): there is nothing to reserve.
    out_ << absl::StrFormat(
        "Reservation:  none: %s is first in line, but no nodes it may use can "
        "take it even when they drain\n",
        why.reservation_job_id() == why.job_id()
            ? std::string("this job")
            : absl::StrCat("job ", why.reservation_job_id()));
  } else if (why.reservation_job_id() != 0) {
    std::string eta = "unknown (a job there has no --time-limit)";
    if (why.reservation_eta_ms() > 0) {
      const absl::Duration in = FromMs(why.reservation_eta_ms()) - clock_.Now();
      eta = absl::StrCat(
          "in ", FormatAge(std::max(in, absl::ZeroDuration())), " (",
          absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", FromMs(why.reservation_eta_ms()),
                           absl::UTCTimeZone()),
          ")");
    }
    out_ << absl::StrFormat(
        "Reservation:  %s %s, estimated start %s\n",
        why.reservation_job_id() == why.job_id()
            ? std::string("this job holds")
            : absl::StrCat("job ", why.reservation_job_id(), " holds"),
        why.reservation(), eta);
  }
  if (why.nodes_size() > 0) {
    out_ << "Nodes:\n";
    for (const std::string& line : why.nodes()) out_ << "  " << line << "\n";
  }
  return kExitOk;
}

}  // namespace trainctl::cli::internal
