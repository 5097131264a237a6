// `trainctl cancel JOB` and `trainctl wait JOB [--timeout]` (also what
// `submit --wait` does): the long-poll, the progress line drawn while a
// person watches, the one-line outcome, and the exit status that tells how
// the job ended (Cli::WaitExitStatus).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/cli_internal.h"
#include "client/table.h"

namespace trainctl::cli::internal {

namespace {

constexpr char kWaitExitHelp[] =
    "Exit status:\n"
    "  0        the job succeeded\n"
    "  1..125   the job failed: the exit code of the rank that failed first\n"
    "           (capped to 125)\n"
    "  1        the job failed otherwise (signal, lost node, infeasible), or\n"
    "           the coordinator could not be reached\n"
    "  2        the job was cancelled (also: bad command line)\n"
    "  124      --timeout reached before the job ended\n"
    "A job stopped at its --time-limit (reason TIMEOUT: ...) failed: 125 when\n"
    "its first failing rank exited 143 (SIGTERM caught, capped to 125), else 1.\n"
    "Several jobs: the worst of them: 124 when the timeout came first, else the\n"
    "status of the first failed job (in the order given), else 2 when one was\n"
    "cancelled, else 0.\n";

}  // namespace

// "30s", "5m", "1h30m", or a bare number of seconds.
std::optional<absl::Duration> ParseTimeout(const std::string& text) {
  double seconds;
  if (absl::SimpleAtod(text, &seconds) && seconds >= 0) {
    return absl::Seconds(seconds);
  }
  absl::Duration d;
  if (absl::ParseDuration(text, &d) && d >= absl::ZeroDuration()) return d;
  return std::nullopt;
}

CLI::App* AddCancelCommand(CLI::App& app, Flags& f) {
  CLI::App* cancel = app.add_subcommand("cancel", "Cancel jobs: by id, or every unfinished job a filter selects");
  cancel->add_option("JOB", f.job_ids, "Job ids");
  cancel->add_option("--sweep", f.cancel_sweep, "Every unfinished trial of this sweep");
  cancel->add_option("--array", f.cancel_array,
                     "Every unfinished task of this job array (its id, as "
                     "`submit --array` printed)")
      ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  cancel->add_option("--name", f.cancel_name, "Every unfinished job of this name");
  cancel->add_option("--state", f.cancel_states,
                     "Every job in this state, e.g. pending (repeatable; with "
                     "--sweep/--name: of those)")
      ->check(CLI::IsMember(JobStateNames(), CLI::ignore_case))
      ->allow_extra_args(false);
  cancel->footer(Example(
      "  trainctl cancel 42\n  trainctl cancel 42 43 44\n"
      "  trainctl cancel --name lr-sweep --state pending\n"
      "  trainctl cancel --sweep sw-1a2b3c\n"
      "  trainctl cancel --array 57"));
  return cancel;
}

CLI::App* AddWaitCommand(CLI::App& app, Flags& f) {
  CLI::App* wait = app.add_subcommand(
      "wait", "Wait for jobs to end; the exit status tells how they ended");
  wait->add_option("JOB", f.job_ids, "Job ids (several: wait for all)")->required();
  wait->add_option("--timeout", f.timeout,
                   "Give up after this long, e.g. 90s, 2h (default: never)");
  wait->footer(absl::StrCat(kWaitExitHelp, "\n",
                            Example("  trainctl wait 42 --timeout 2h && "
                                    "echo done")));
  return wait;
}

int Session::CancelJobs(const std::vector<int64_t>& ids, const std::string& sweep_id,
                        const std::string& name, const std::vector<std::string>& states,
                        int64_t array_job_id) {
  std::vector<int64_t> targets = ids;
  const bool filtered =
      !sweep_id.empty() || !name.empty() || !states.empty() || array_job_id > 0;
  if (filtered) {
    v1::ListJobsRequest request;
    request.set_sweep_id(sweep_id);
    request.set_array_job_id(array_job_id);
    if (array_job_id > 0) request.set_limit(kMaxArrayTaskCount);
    for (const std::string& s : states) {
      v1::JobState state;
      if (v1::JobState_Parse("JOB_STATE_" + absl::AsciiStrToUpper(s), &state)) {
        request.add_states(state);
      }
    }
    v1::ListJobsResponse response;
    if (absl::Status s = Call(&Stub::ListJobs, request, &response); !s.ok()) {
      return Fail(s);
    }
    for (const v1::Job& job : response.jobs()) {
      if (IsFinal(job.state())) continue;
      if (!name.empty() && job.spec().name() != name) continue;
      if (std::find(targets.begin(), targets.end(), job.id()) == targets.end()) {
        targets.push_back(job.id());
      }
    }
    if (targets.empty()) {
      out_ << "no unfinished job matches\n";
      return kExitOk;
    }
  }
  if (targets.size() == 1 && !filtered) return Cancel(targets[0]);
  int failed = 0;
  for (int64_t id : targets) {
    v1::CancelJobRequest request;
    request.set_job_id(id);
    v1::CancelJobResponse response;
    if (absl::Status s = Call(&Stub::CancelJob, request, &response); !s.ok()) {
      err_ << absl::StrFormat("trainctl: error: job %d: %s\n", id, s.message());
      ++failed;
      continue;
    }
    out_ << "cancelled job " << id << "\n";
  }
  if (failed > 0) {
    err_ << absl::StrFormat("trainctl: error: %d of %d job(s) could not be cancelled\n",
                            failed, targets.size());
    return kExitRpcError;
  }
  return kExitOk;
}

int Session::Cancel(int64_t job_id) {
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  v1::CancelJobResponse response;
  if (absl::Status s = Call(&Stub::CancelJob, request, &response); !s.ok()) {
    return Fail(s);
  }
  out_ << "cancelled job " << job_id << "\n";
  return kExitOk;
}

int Session::Wait(int64_t job_id, std::optional<absl::Duration> timeout) {
  const absl::Time start = clock_.Now();
  const absl::Time deadline =
      timeout ? start + *timeout : absl::InfiniteFuture();
  v1::WaitJobResponse response;
  for (int frame = 0;; ++frame) {
    absl::Duration poll = std::min(progress_ ? kProgressPoll : kWaitPoll,
                                   deadline - clock_.Now());
    v1::WaitJobRequest request;
    request.set_job_id(job_id);
    // 0 would mean the server's default of 30 s.
    request.set_timeout_ms(
        std::max<int64_t>(1, absl::ToInt64Milliseconds(poll)));
    if (absl::Status s =
            Call(&Stub::WaitJob, request, &response,
                 std::max(poll, absl::ZeroDuration()) + kWaitSlack);
        !s.ok()) {
      ClearProgress();
      return Fail(s);
    }
    if (response.done()) break;
    if (clock_.Now() >= deadline) {
      ClearProgress();
      err_ << absl::StrFormat(
          "trainctl: error: job %d is still %s after %s; wait again with "
          "`trainctl wait %d`\n",
          job_id, StateName(response.job().state()),
          absl::FormatDuration(*timeout), job_id);
      return kExitWaitTimeout;
    }
    if (progress_) DrawProgress(response.job(), clock_.Now() - start, frame);
  }
  ClearProgress();
  PrintSummary(response.job());
  return Cli::WaitExitStatus(response.job());
}

int Session::WaitJobs(const std::vector<int64_t>& job_ids,
                      std::optional<absl::Duration> timeout) {
  if (job_ids.size() == 1) return Wait(job_ids.front(), timeout);
  const absl::Time deadline = timeout ? clock_.Now() + *timeout : absl::InfiniteFuture();
  int failed = kExitOk;
  bool cancelled = false;
  for (int64_t id : job_ids) {
    std::optional<absl::Duration> left;
    if (timeout) left = std::max(deadline - clock_.Now(), absl::ZeroDuration());
    const int status = Wait(id, left);
    if (status == kExitWaitTimeout) return kExitWaitTimeout;
    if (status == kExitCancelled) {
      cancelled = true;
    } else if (status != kExitOk && failed == kExitOk) {
      failed = status;
    }
  }
  if (failed != kExitOk) return failed;
  return cancelled ? kExitCancelled : kExitOk;
}

void Session::DrawProgress(const v1::Job& job, absl::Duration elapsed,
                           int frame) {
  static constexpr char kFrames[] = "|/-\\";
  std::string line =
      absl::StrFormat("%c job %d %s %s", kFrames[frame % 4], job.id(),
                      StateName(job.state()), FormatAge(elapsed));
  if (job.attempt() > 0) absl::StrAppend(&line, " (attempt ", job.attempt(), ")");
  if (!job.reason().empty()) absl::StrAppend(&line, ": ", job.reason());
  // One column short of the width: a full line would wrap on some terminals.
  if (terminal_width_ > 1) line = Truncate(line, terminal_width_ - 1);
  // \r and "erase to end of line" (ECMA-48 EL) redraw it in place.
  err_ << "\r\033[K" << line;
  err_.flush();
  progress_drawn_ = true;
}

void Session::ClearProgress() {
  if (!progress_drawn_) return;
  err_ << "\r\033[K";
  err_.flush();
  progress_drawn_ = false;
}

void Session::PrintSummary(const v1::Job& job) {
  std::string line =
      absl::StrFormat("job %d %s", job.id(), JobStateLabel(job));
  if (job.start_time_ms() > 0 && job.end_time_ms() > 0) {
    absl::StrAppend(
        &line, " after ",
        FormatAge(FromMs(job.end_time_ms()) - FromMs(job.start_time_ms())));
  }
  if (job.attempt() > 0)
    absl::StrAppend(&line, " (attempt ", job.attempt(), ")");
  if (!job.reason().empty()) absl::StrAppend(&line, ": ", job.reason());
  if (job.state() == v1::JOB_STATE_FAILED && job.tasks_size() > 0) {
    absl::StrAppendFormat(&line, "; see `trainctl describe %d`", job.id());
  }
  err_ << line << "\n";
}

}  // namespace trainctl::cli::internal

namespace trainctl::cli {

int Cli::WaitExitStatus(const v1::Job& job) {
  switch (job.state()) {
    case v1::JOB_STATE_SUCCEEDED:
      return kExitOk;
    case v1::JOB_STATE_CANCELLED:
      return kExitCancelled;
    case v1::JOB_STATE_FAILED: {
      const v1::Task* first = nullptr;
      for (const v1::Task& t : job.tasks()) {
        if (t.exit_code() == 0) continue;
        if (first == nullptr ||
            std::make_pair(t.end_time_ms(), t.rank()) <
                std::make_pair(first->end_time_ms(), first->rank())) {
          first = &t;
        }
      }
      if (first == nullptr) return 1;
      return std::clamp(first->exit_code(), 1, 125);
    }
    default:
      return 1;
  }
}

}  // namespace trainctl::cli
