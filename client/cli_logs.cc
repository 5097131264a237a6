// `trainctl logs JOB [--rank N] [-f] [--tail N] [--all-ranks]`: prints a
// rank's log; with -f follows it (across restarts) until the job ends; with
// --tail only its last lines; with --all-ranks every rank's, each line
// prefixed with its rank.

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/cli_internal.h"

namespace trainctl::cli::internal {

CLI::App* AddLogsCommand(CLI::App& app, Flags& f) {
  const CLI::Range kNonNegative(0, 1'000'000);
  CLI::App* logs = app.add_subcommand("logs", "Print a rank's log");
  logs->add_option("JOB", f.job_id, "Job id")->required();
  logs->add_option("--rank", f.rank, "Rank (default 0)")->check(kNonNegative);
  auto* follow = logs->add_flag("-f,--follow", f.follow,
                                "Keep printing new output until the job ends");
  logs->add_option("--tail", f.tail_lines, "Only the last N lines")
      ->check(CLI::Range(1, 100'000'000))
      ->excludes(follow);
  logs->add_flag("--all-ranks", f.all_ranks,
                 "Every rank's log, each line prefixed with [rank R]")
      ->excludes(follow);
  logs->footer(Example("  trainctl logs 42 --rank 3 -f\n  trainctl logs 42 --tail 20\n"
                       "  trainctl logs 42 --all-ranks | grep -i error"));
  return logs;
}

int Session::LogsSnapshot(int64_t job_id, int rank, bool all_ranks, int tail_lines) {
  std::vector<int> ranks = {rank};
  if (all_ranks) {
    v1::GetJobRequest request;
    request.set_job_id(job_id);
    v1::GetJobResponse response;
    if (absl::Status s = Call(&Stub::GetJob, request, &response); !s.ok()) return Fail(s);
    ranks.clear();
    for (const v1::Task& t : response.job().tasks()) ranks.push_back(t.rank());
  }
  for (int r : ranks) {
    std::string text;
    for (int64_t offset = 0;;) {
      v1::GetLogsRequest request;
      request.set_job_id(job_id);
      request.set_rank(r);
      request.set_offset(offset);
      v1::GetLogsResponse response;
      if (absl::Status s = Call(&Stub::GetLogs, request, &response); !s.ok()) {
        return Fail(s);
      }
      text += response.data();
      offset = response.next_offset();
      if (response.eof() || response.data().empty()) break;
    }
    std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
    // A final newline leaves an empty last piece: not a line.
    if (!lines.empty() && lines.back().empty()) lines.pop_back();
    size_t first = 0;
    if (tail_lines > 0 && lines.size() > static_cast<size_t>(tail_lines)) {
      first = lines.size() - tail_lines;
    }
    for (size_t i = first; i < lines.size(); ++i) {
      if (all_ranks) out_ << "[rank " << r << "] ";
      out_ << lines[i] << "\n";
    }
  }
  return kExitOk;
}

int Session::Logs(int64_t job_id, int rank, bool follow) {
  int64_t offset = 0;
  // What the last WaitJob said (only when following).
  bool job_final = false;
  bool job_placed = false;
  int attempt = -1;
  while (true) {
    v1::GetLogsRequest request;
    request.set_job_id(job_id);
    request.set_rank(rank);
    request.set_offset(offset);
    v1::GetLogsResponse response;
    absl::Status s = Call(&Stub::GetLogs, request, &response);
    if (s.ok()) {
      out_.write(response.data().data(), response.data().size());
      out_.flush();
      offset = response.next_offset();
      if (response.eof()) return kExitOk;
      if (!response.data().empty()) continue;
      // Caught up with the log.
      if (!follow || job_final) return kExitOk;
    } else if (!(follow && !job_final && !job_placed &&
                 s.code() == absl::StatusCode::kNotFound)) {
      // NOT_FOUND while following a job not placed yet: it has no log yet;
      // wait for it like for new data. (An unknown job fails in WaitJob.)
      return Fail(s);
    }
    v1::WaitJobRequest wait;
    wait.set_job_id(job_id);
    wait.set_timeout_ms(absl::ToInt64Milliseconds(kFollowPoll));
    v1::WaitJobResponse waited;
    if (absl::Status w =
            Call(&Stub::WaitJob, wait, &waited, kFollowPoll + kWaitSlack);
        !w.ok()) {
      return Fail(w);
    }
    // One more read after the job is final collects the rest of the log.
    job_final = waited.done();
    job_placed = waited.job().tasks_size() > 0;
    if (attempt >= 0 && waited.job().attempt() != attempt) {
      // A restart: offsets are per attempt.
      err_ << absl::StrFormat(
          "trainctl: job %d restarted (attempt %d); following its new log\n",
          job_id, waited.job().attempt());
      offset = 0;
    }
    attempt = waited.job().attempt();
  }
}

}  // namespace trainctl::cli::internal
