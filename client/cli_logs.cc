// `trainctl logs JOB [--rank N] [-f] [--tail N] [--all-ranks]`: prints a
// rank's log; with -f follows it (across restarts) until the job ends; with
// --tail only its last lines; with --all-ranks every rank's, each line
// prefixed with its rank (followed together with -f). Following is
// common/log_follow.h's loop, the one the coordinator's StreamLogs runs.

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
#include "common/log_follow.h"

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
                 "Every rank's log, each line prefixed with [rank R]; with -f, "
                 "every rank followed together until the job ends");
  logs->footer(Example("  trainctl logs 42 --rank 3 -f\n  trainctl logs 42 --tail 20\n"
                       "  trainctl logs 42 --all-ranks | grep -i error\n"
                       "  trainctl logs 42 --all-ranks -f"));
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

namespace {

// What `logs -f` says on stderr when the log it follows changed
// (LogFollow::OnWaited returned true): a restart, a gang's pre-flight giving
// way to its command, or another pre-flight run. `what` is "log" or "logs".
std::string LogChangeNotice(int64_t job_id, const LogFollow& log, const char* what) {
  if (log.restarted()) {
    return absl::StrFormat("trainctl: job %d restarted (attempt %d); following its new %s\n",
                           job_id, log.attempt(), what);
  }
  if (log.probe_run() == 0) {
    return absl::StrFormat("trainctl: job %d: pre-flight done; following its command's %s\n",
                           job_id, what);
  }
  return absl::StrFormat("trainctl: job %d: pre-flight run %d; following its probe's %s\n",
                         job_id, log.probe_run(), what);
}

}  // namespace

int Session::Logs(int64_t job_id, int rank, bool follow) {
  LogFollow log(follow, 0);
  while (true) {
    v1::GetLogsRequest request;
    request.set_job_id(job_id);
    request.set_rank(rank);
    request.set_offset(log.offset());
    v1::GetLogsResponse response;
    absl::Status s = Call(&Stub::GetLogs, request, &response);
    if (s.ok()) {
      out_.write(response.data().data(), response.data().size());
      out_.flush();
    }
    switch (log.OnRead(s.ok() ? absl::StatusOr<v1::GetLogsResponse>(std::move(response)) : s)) {
      case LogFollow::Next::kDone:
        return kExitOk;
      case LogFollow::Next::kFail:
        return Fail(s);
      case LogFollow::Next::kRead:
        continue;
      case LogFollow::Next::kWait:
        break;
    }
    absl::StatusOr<v1::WaitJobResponse> waited = WaitForFollow(job_id);
    if (!waited.ok()) return Fail(waited.status());
    if (log.OnWaited(waited->job(), waited->done())) {
      err_ << LogChangeNotice(job_id, log, "log");
    }
  }
}

absl::StatusOr<v1::WaitJobResponse> Session::WaitForFollow(int64_t job_id) {
  v1::WaitJobRequest wait;
  wait.set_job_id(job_id);
  wait.set_timeout_ms(absl::ToInt64Milliseconds(kFollowPoll));
  v1::WaitJobResponse waited;
  if (absl::Status w = Call(&Stub::WaitJob, wait, &waited, kFollowPoll + kWaitSlack);
      !w.ok()) {
    return w;
  }
  return waited;
}

int Session::LogsFollowAllRanks(int64_t job_id) {
  // The ranks: those of the job's current attempt, once it is placed.
  v1::GetJobRequest get;
  get.set_job_id(job_id);
  v1::GetJobResponse got;
  if (absl::Status s = Call(&Stub::GetJob, get, &got); !s.ok()) return Fail(s);
  v1::Job job = got.job();
  bool final = IsFinal(job.state());
  while (job.tasks_size() == 0 && !final) {
    absl::StatusOr<v1::WaitJobResponse> waited = WaitForFollow(job_id);
    if (!waited.ok()) return Fail(waited.status());
    job = waited->job();
    final = waited->done();
  }
  struct Rank {
    int rank;
    LogFollow log;
    // The last line read, not yet ended by a newline.
    std::string partial;
    bool done = false;
  };
  std::vector<Rank> ranks;
  for (const v1::Task& t : job.tasks()) ranks.push_back({t.rank(), LogFollow(true, 0), "", false});
  // Every rank's complete lines, prefixed; a rank's unfinished line waits
  // for its end (or is ended with a newline when its log is).
  auto emit = [this](Rank& r, const std::string& data, bool end) {
    r.partial += data;
    size_t start = 0;
    for (size_t nl; (nl = r.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
      out_ << "[rank " << r.rank << "] " << absl::string_view(r.partial).substr(start, nl - start)
           << "\n";
    }
    r.partial.erase(0, start);
    if (end && !r.partial.empty()) {
      out_ << "[rank " << r.rank << "] " << r.partial << "\n";
      r.partial.clear();
    }
    out_.flush();
  };
  for (Rank& r : ranks) r.log.OnWaited(job, final);
  while (true) {
    bool waiting = false;
    for (Rank& r : ranks) {
      while (!r.done) {
        v1::GetLogsRequest request;
        request.set_job_id(job_id);
        request.set_rank(r.rank);
        request.set_offset(r.log.offset());
        v1::GetLogsResponse response;
        absl::Status s = Call(&Stub::GetLogs, request, &response);
        const std::string data = s.ok() ? response.data() : "";
        const LogFollow::Next next =
            r.log.OnRead(s.ok() ? absl::StatusOr<v1::GetLogsResponse>(std::move(response)) : s);
        emit(r, data, next == LogFollow::Next::kDone);
        if (next == LogFollow::Next::kFail) return Fail(s);
        if (next == LogFollow::Next::kDone) r.done = true;
        if (next != LogFollow::Next::kRead) {
          waiting = waiting || next == LogFollow::Next::kWait;
          break;
        }
      }
    }
    if (!waiting) return kExitOk;
    absl::StatusOr<v1::WaitJobResponse> waited = WaitForFollow(job_id);
    if (!waited.ok()) return Fail(waited.status());
    std::string notice;
    for (Rank& r : ranks) {
      if (r.done) continue;
      if (r.log.OnWaited(waited->job(), waited->done())) {
        notice = LogChangeNotice(job_id, r.log, "logs");
        emit(r, "", /*end=*/true);  // the old log's unfinished line
      }
    }
    err_ << notice;
  }
}

}  // namespace trainctl::cli::internal
