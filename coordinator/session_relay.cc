#include "coordinator/session_relay.h"

#include <signal.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/terminal_size.h"

namespace trainctl::coord {
namespace {

absl::Status CheckOpen(const v1::SessionOpen& open) {
  if (open.job_id() <= 0) {
    return absl::InvalidArgumentError("job_id: must be a job id (> 0)");
  }
  if (open.rank() < 0) return absl::InvalidArgumentError("rank: must not be negative");
  if (open.port() < 0 || open.port() > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("port: %d is not a TCP port (1-65535)", open.port()));
  }
  if (open.port() > 0 && (open.argv_size() > 0 || open.tty() || open.login_shell())) {
    return absl::InvalidArgumentError(
        "port: a port-forward takes no argv, tty or login_shell");
  }
  if (open.port() == 0 && open.argv().empty() && !open.login_shell()) {
    return absl::InvalidArgumentError("argv: empty: no command to run");
  }
  if (open.argv_size() > kMaxSessionArgs) {
    return absl::InvalidArgumentError(
        absl::StrFormat("argv: %d arguments, at most %d", open.argv_size(), kMaxSessionArgs));
  }
  size_t bytes = 0;
  for (const std::string& a : open.argv()) bytes += a.size();
  if (bytes > kMaxSessionArgvBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("argv: %d bytes, at most %d", bytes, kMaxSessionArgvBytes));
  }
  if (!open.argv().empty() && open.argv(0).empty()) {
    return absl::InvalidArgumentError("argv: the program name is empty");
  }
  return CheckTerminalSize(open.rows(), open.cols(), true);
}

std::string Describe(const v1::SessionOpen& open) {
  if (open.port() > 0) return absl::StrCat("port-forward to port ", open.port());
  if (open.argv().empty()) return open.tty() ? "login shell (tty)" : "login shell";
  return absl::StrCat(open.tty() ? "exec -t: " : "exec: ", absl::StrJoin(open.argv(), " "));
}

}  // namespace

SessionRelay::SessionRelay(Hooks hooks, Options options)
    : hooks_(std::move(hooks)),
      options_(options),
      own_clock_(options.clock == nullptr ? std::make_unique<RealClock>() : nullptr),
      clock_(options.clock != nullptr ? options.clock : own_clock_.get()) {
  if (options_.timer_thread) timers_ = std::thread([this] { TimerLoop(); });
}

SessionRelay::~SessionRelay() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    while (!sessions_.empty()) {
      EndLocked(sessions_.begin(), absl::UnavailableError("the coordinator is shutting down"));
    }
  }
  if (timers_.joinable()) timers_.join();
}

void SessionRelay::AgentConnected(const std::string& node, AgentConnection* conn) {
  absl::MutexLock lock(&mu_);
  AgentConnection*& known = agents_[node];
  if (known != nullptr && known != conn) {
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      auto next = std::next(it);
      if (it->second.conn == known) {
        EndLocked(it, absl::UnavailableError(absl::StrCat(
                          "the agent of node ", node, " reconnected; the session is gone")));
      }
      it = next;
    }
  }
  known = conn;
}

void SessionRelay::AgentGone(const std::string& node, AgentConnection* conn) {
  absl::MutexLock lock(&mu_);
  auto a = agents_.find(node);
  if (a != agents_.end() && a->second == conn) agents_.erase(a);
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    auto next = std::next(it);
    if (it->second.conn == conn) {
      EndLocked(it, absl::UnavailableError(absl::StrCat(
                        "lost the agent of node ", node, "; the session is gone")));
    }
    it = next;
  }
}

absl::StatusOr<std::string> SessionRelay::Open(const Principal& who,
                                               const v1::SessionOpen& open,
                                               SessionClient* client) {
  if (absl::Status s = CheckOpen(open); !s.ok()) return s;
  absl::StatusOr<v1::Job> job = hooks_.get_job(open.job_id());
  if (!job.ok()) return job.status();
  const char* action = open.port() > 0 ? "port-forward to" : "exec into";
  if (absl::Status s = CheckJobAccess(who, *job, action); !s.ok()) return s;
  const v1::Task* task = nullptr;
  for (const v1::Task& t : job->tasks()) {
    if (t.rank() == open.rank()) task = &t;
  }
  if (task == nullptr) {
    if (job->tasks().empty()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "job %d has no running task yet (state %s): sessions open beside a running "
          "rank; wait for it to start (trainctl wait)",
          open.job_id(), v1::JobState_Name(job->state())));
    }
    return absl::NotFoundError(absl::StrFormat("rank: job %d has no rank %d (ranks 0-%d)",
                                               open.job_id(), open.rank(),
                                               job->tasks_size() - 1));
  }
  if (task->state() != v1::TASK_STATE_RUNNING) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "job %d rank %d is not running (task %s, job %s)", open.job_id(), open.rank(),
        v1::TaskState_Name(task->state()), v1::JobState_Name(job->state())));
  }
  std::string id;
  {
    absl::MutexLock lock(&mu_);
    auto a = agents_.find(task->node());
    if (a == agents_.end()) {
      return absl::UnavailableError(absl::StrCat("the agent of node ", task->node(),
                                                 " (job ", open.job_id(), " rank ",
                                                 open.rank(), ") is not connected"));
    }
    absl::BitGen gen;
    id = absl::StrFormat("s%d-%08x", next_id_++, absl::Uniform<uint32_t>(gen));
    Entry& e = sessions_[id];
    e.client = client;
    e.node = task->node();
    e.conn = a->second;
    e.job_id = open.job_id();
    e.end_job = open.end_job_with_session();
    e.open_deadline = clock_->Now() + options_.open_timeout;
    // A session into a job waiting for its grace keeps it.
    job_ends_.erase(open.job_id());
    const absl::Duration idle_timeout = JobIdleTimeout(job->spec());
    if (job->spec().interactive() && idle_timeout < absl::InfiniteDuration()) {
      IdleClock& clock = idle_[open.job_id()];
      if (clock.timeout == absl::ZeroDuration()) clock.timeout = idle_timeout;
      clock.last_activity = clock_->Now();
      clock.warned = false;
    }
    v1::CoordinatorMessage msg;
    v1::SessionToAgent* to = msg.mutable_session();
    to->set_session_id(id);
    to->set_attempt(job->attempt());
    to->set_relays_output_acks(true);
    *to->mutable_payload()->mutable_open() = open;
    e.conn->Send(std::move(msg));
  }
  TC_LOG_INFO("session {}: user {} opened job {} rank {} on node {}: {}", id,
              who.user.empty() ? "(anonymous)" : who.user, open.job_id(), open.rank(),
              task->node(), Describe(open));
  if (hooks_.audit) {
    hooks_.audit(who, open.port() > 0 ? "session.port_forward" : "session.exec",
                 absl::StrCat(open.job_id(), "/", open.rank()),
                 absl::StrCat(Describe(open), " (session ", id, ", node ", task->node(),
                              ", job owner ", job->spec().user(), ")"));
  }
  return id;
}

absl::Status SessionRelay::FromClient(const std::string& id,
                                      const v1::SessionClientMessage& msg) {
  switch (msg.msg_case()) {
    case v1::SessionClientMessage::kOpen:
      return absl::InvalidArgumentError("open: only the first message of a session opens it");
    case v1::SessionClientMessage::kStdin:
      if (msg.stdin().size() > kMaxSessionInputBytes) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "stdin: %d bytes in one message, at most %d", msg.stdin().size(),
            kMaxSessionInputBytes));
      }
      break;
    case v1::SessionClientMessage::kSignal:
      if (msg.signal() < 1 || msg.signal() > 64) {
        return absl::InvalidArgumentError(
            absl::StrFormat("signal: %d is not a signal number (1-64)", msg.signal()));
      }
      break;
    case v1::SessionClientMessage::kResize:
      if (absl::Status s =
              CheckTerminalSize(msg.resize().rows(), msg.resize().cols(), false);
          !s.ok()) {
        return s;
      }
      break;
    case v1::SessionClientMessage::kOutputAck:
      if (msg.output_ack() < 1) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "output_ack: %d is not a byte count (> 0)", msg.output_ack()));
      }
      break;
    case v1::SessionClientMessage::MSG_NOT_SET:
      return absl::OkStatus();
    default:
      break;
  }
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("session ", id, " has ended"));
  }
  if (msg.has_stdin()) {
    auto clock = idle_.find(it->second.job_id);
    if (clock != idle_.end()) {
      clock->second.last_activity = clock_->Now();
      clock->second.warned = false;
    }
  }
  v1::CoordinatorMessage out;
  out.mutable_session()->set_session_id(id);
  *out.mutable_session()->mutable_payload() = msg;
  it->second.conn->Send(std::move(out));
  return absl::OkStatus();
}

void SessionRelay::ClientGone(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  v1::CoordinatorMessage out;
  out.mutable_session()->set_session_id(id);
  out.mutable_session()->mutable_payload()->set_close(true);
  it->second.conn->Send(std::move(out));
  if (it->second.end_job && hooks_.end_job) {
    job_ends_[it->second.job_id] = clock_->Now() + options_.shell_grace;
    TC_LOG_INFO("session {}: client gone; job {} ends in {} unless reattached", id,
                it->second.job_id, absl::FormatDuration(options_.shell_grace));
  }
  // The client is going: nothing more is sent to it.
  sessions_.erase(it);
}

void SessionRelay::FromAgent(const std::string& node, v1::SessionFromAgent msg) {
  std::optional<std::pair<int64_t, std::string>> end_job;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(msg.session_id());
    if (it == sessions_.end() || it->second.node != node) return;
    Entry& e = it->second;
    v1::SessionServerMessage& p = *msg.mutable_payload();
    switch (p.msg_case()) {
      case v1::SessionServerMessage::kStarted: {
        e.started = true;
        v1::SessionServerMessage out = p;
        out.mutable_started()->set_session_id(msg.session_id());
        out.mutable_started()->set_node(node);
        e.client->Send(std::move(out));
        break;
      }
      case v1::SessionServerMessage::kExit: {
        e.client->Send(p);
        if (e.end_job && hooks_.end_job) {
          const v1::SessionExit& x = p.exit();
          end_job.emplace(e.job_id,
                          x.signal() != 0
                              ? absl::StrCat("the shell session ended (signal ", x.signal(), ")")
                              : absl::StrCat("the shell session ended (exit code ",
                                             x.exit_code(), ")"));
        }
        EndLocked(it, absl::OkStatus());
        break;
      }
      case v1::SessionServerMessage::kError: {
        const auto code = static_cast<absl::StatusCode>(p.error().code());
        EndLocked(it, absl::Status(code == absl::StatusCode::kOk ? absl::StatusCode::kUnknown
                                                                  : code,
                                   p.error().message()));
        break;
      }
      default:
        // Output, moved on: a chunk is up to 1 MiB.
        e.client->Send(std::move(p));
        break;
    }
  }
  if (end_job.has_value()) {
    {
      absl::MutexLock lock(&mu_);
      idle_.erase(end_job->first);
    }
    TC_LOG_INFO("job {}: {}; ending it", end_job->first, end_job->second);
    hooks_.end_job(end_job->first, end_job->second);
  }
}

int SessionRelay::OpenSessions() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(sessions_.size());
}

int SessionRelay::IdleClocks() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(idle_.size());
}

void SessionRelay::NoticeLocked(int64_t job_id, const std::string& notice) {
  for (auto& [id, e] : sessions_) {
    if (e.job_id != job_id) continue;
    v1::SessionServerMessage m;
    m.set_notice(notice);
    e.client->Send(std::move(m));
  }
}

void SessionRelay::CheckIdle(absl::Time now) {
  struct Due {
    int64_t job;
    absl::Time since;
    absl::Duration timeout;
    bool end;
  };
  std::vector<Due> due;
  for (const auto& [job, clock] : idle_) {
    const absl::Duration idle = now - clock.last_activity;
    const absl::Duration lead = std::min(clock.timeout / 10, absl::Minutes(5));
    if (idle >= clock.timeout) {
      due.push_back({job, clock.last_activity, clock.timeout, true});
    } else if (!clock.warned && idle >= clock.timeout - lead) {
      due.push_back({job, clock.last_activity, clock.timeout, false});
    }
  }
  if (due.empty()) return;
  std::vector<bool> idle_gpus(due.size(), true);
  std::vector<std::pair<int64_t, std::string>> ends;
  mu_.Unlock();
  for (size_t i = 0; i < due.size(); ++i) {
    if (hooks_.gpus_idle) idle_gpus[i] = hooks_.gpus_idle(due[i].job, due[i].since);
  }
  mu_.Lock();
  for (size_t i = 0; i < due.size(); ++i) {
    auto clock = idle_.find(due[i].job);
    // Input came meanwhile: its clock started again.
    if (clock == idle_.end() || clock->second.last_activity != due[i].since) continue;
    if (!idle_gpus[i]) {
      // Busy GPUs are activity.
      clock->second.last_activity = now;
      clock->second.warned = false;
      continue;
    }
    const std::string timeout = absl::FormatDuration(due[i].timeout);
    if (!due[i].end) {
      clock->second.warned = true;
      NoticeLocked(due[i].job,
                   absl::StrCat("no input and GPUs idle: job ", due[i].job, " ends in ",
                                absl::FormatDuration(due[i].since + due[i].timeout - now),
                                " (idle timeout ", timeout, ") unless you type something"));
      continue;
    }
    const std::string reason = absl::StrCat(
        "idle for ", timeout, ": no terminal input and its GPUs idle (--idle-timeout)");
    NoticeLocked(due[i].job, absl::StrCat("ending job ", due[i].job, ": ", reason));
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      auto next = std::next(it);
      if (it->second.job_id == due[i].job) {
        v1::CoordinatorMessage out;
        out.mutable_session()->set_session_id(it->first);
        out.mutable_session()->mutable_payload()->set_close(true);
        it->second.conn->Send(std::move(out));
        v1::SessionServerMessage exit;
        exit.mutable_exit()->set_exit_code(-1);
        exit.mutable_exit()->set_signal(SIGHUP);
        exit.mutable_exit()->set_reason(reason);
        it->second.client->Send(std::move(exit));
        EndLocked(it, absl::OkStatus());
      }
      it = next;
    }
    idle_.erase(clock);
    job_ends_.erase(due[i].job);
    if (hooks_.end_job) ends.emplace_back(due[i].job, reason);
  }
  if (ends.empty()) return;
  mu_.Unlock();
  for (const auto& [job, reason] : ends) {
    TC_LOG_INFO("job {}: {}; ending it", job, reason);
    hooks_.end_job(job, reason);
  }
  mu_.Lock();
}

int SessionRelay::PendingJobEnds() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(job_ends_.size());
}

void SessionRelay::EndLocked(std::map<std::string, Entry>::iterator it,
                             const absl::Status& status) {
  it->second.client->End(status);
  sessions_.erase(it);
}

absl::Duration SessionRelay::JobIdleTimeout(const v1::JobSpec& spec) const {
  if (hooks_.idle_timeout) return hooks_.idle_timeout(spec);
  return spec.idle_timeout_ms() > 0 ? absl::Milliseconds(spec.idle_timeout_ms())
                                    : absl::InfiniteDuration();
}

void SessionRelay::AdoptInteractiveJobs(const std::vector<v1::Job>& running) {
  absl::MutexLock lock(&mu_);
  for (const v1::Job& job : running) {
    if (!job.spec().interactive() || job.state() != v1::JOB_STATE_RUNNING) continue;
    const absl::Duration timeout = JobIdleTimeout(job.spec());
    if (timeout == absl::InfiniteDuration() || idle_.count(job.id()) > 0) continue;
    IdleClock& clock = idle_[job.id()];
    clock.timeout = timeout;
    clock.last_activity = clock_->Now();
    TC_LOG_INFO("job {}: interactive, no session since the restart; idle clock started ({})",
                job.id(), absl::FormatDuration(timeout));
  }
}

void SessionRelay::TimerLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    mu_.Unlock();
    const absl::Time next = RunTimers();
    mu_.Lock();
    mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                         std::max(next - clock_->Now(), absl::Milliseconds(10)));
  }
}

absl::Time SessionRelay::RunTimers() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  absl::Time next = now + absl::Seconds(1);
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    auto following = std::next(it);
    if (!it->second.started && it->second.open_deadline <= now) {
      v1::CoordinatorMessage out;
      out.mutable_session()->set_session_id(it->first);
      out.mutable_session()->mutable_payload()->set_close(true);
      it->second.conn->Send(std::move(out));
      EndLocked(it, absl::DeadlineExceededError(absl::StrCat(
                        "the agent of node ", it->second.node,
                        " did not start the session (an agent older than the "
                        "coordinator takes no sessions)")));
    } else if (!it->second.started) {
      next = std::min(next, it->second.open_deadline);
    }
    it = following;
  }
  CheckIdle(now);
  for (const auto& [job, clock] : idle_) {
    const absl::Duration lead = std::min(clock.timeout / 10, absl::Minutes(5));
    next = std::min(next, clock.warned ? clock.last_activity + clock.timeout
                                       : clock.last_activity + clock.timeout - lead);
  }
  std::vector<std::pair<int64_t, std::string>> due;
  for (auto it = job_ends_.begin(); it != job_ends_.end();) {
    if (it->second <= now) {
      due.emplace_back(it->first,
                       absl::StrCat("its shell session's client went away ",
                                    absl::FormatDuration(options_.shell_grace),
                                    " ago and nobody reattached"));
      idle_.erase(it->first);
      it = job_ends_.erase(it);
    } else {
      next = std::min(next, it->second);
      ++it;
    }
  }
  if (!due.empty()) {
    mu_.Unlock();
    for (const auto& [job, reason] : due) {
      TC_LOG_INFO("job {}: {}; ending it", job, reason);
      hooks_.end_job(job, reason);
    }
    mu_.Lock();
  }
  return next;
}

}  // namespace trainctl::coord
