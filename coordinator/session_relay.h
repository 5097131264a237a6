#ifndef TRAINCTL_COORDINATOR_SESSION_RELAY_H_
#define TRAINCTL_COORDINATOR_SESSION_RELAY_H_

// The coordinator's side of interactive sessions (`trainctl exec`, `shell`,
// `attach`, `port-forward`; proto/trainctl/v1/session.proto): the table of
// open sessions (id -> client, node), who may open one, and the routing of
// messages between a client's Session stream and the agent running the
// session's command (AgentMessage.session / CoordinatorMessage.session).
// No gRPC: the transport (grpc_service.cc) hands it clients and agent
// connections behind interfaces, so the test fakes both.
//
// Life of a session: Open (checked: the caller owns the job or is an admin,
// the rank's task runs) ──open sent to the task's agent──▶ opening
// ──agent's `started`──▶ running ──agent's `exit` or `error`──▶ ended (the
// client's stream finishes). Either side going away ends it: the client
// gone (ClientGone) sends the agent a `close` (it kills the command's
// process group); the agent gone (AgentGone) ends the client's stream
// with UNAVAILABLE. A session whose agent does not answer its open within
// open_timeout ends with DEADLINE_EXCEEDED.
//
// Idle policy of interactive jobs (JobSpec.interactive; the timeout is
// Hooks::idle_timeout's: `trainctl shell --idle-timeout`, else the queue's
// default, else 1 h; never for --idle-timeout 0): from the first session
// into such a job, the relay keeps when its terminal last had input (stdin
// of any of its sessions). When there has been none for the timeout and
// its GPUs have been idle as long, the job ends
// (reason "idle for ...", what `describe` shows); a warning line goes to its
// terminals first, min(timeout / 10, 5 min) before. GPU activity counts as
// activity. The idle clocks live in memory: a coordinator restart starts
// them again, from the restart, for every interactive job still running
// (AdoptInteractiveJobs), whose sessions the restart ended.
//
// `trainctl shell` sessions (SessionOpen.end_job_with_session) also end
// their job: when the command exits, at once; when the client went away,
// after `shell_grace` (a new session into the job before then, e.g.
// `trainctl attach`, keeps it).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/auth.h"
#include "coordinator/node_registry.h"
#include "trainctl/v1/service.pb.h"
#include "trainctl/v1/session.pb.h"

namespace trainctl::coord {

// The client end of one session (the Session RPC's reactor). The relay
// calls it with its own lock held: implementations only queue a write or
// finish the stream, and never call back into the relay from these.
class SessionClient {
 public:
  virtual ~SessionClient() = default;
  // Queues one message for the client.
  virtual void Send(v1::SessionServerMessage msg) = 0;
  // Finishes the client's stream with `status` after what is queued (OK
  // after an exit). The relay calls it at most once per session and then
  // forgets the client.
  virtual void End(const absl::Status& status) = 0;
};

// Most bytes of stdin in one client message (64 KiB), of argv in all
// (64 KiB), and argv entries (1,024).
inline constexpr size_t kMaxSessionInputBytes = 64 * 1024;
inline constexpr size_t kMaxSessionArgvBytes = 64 * 1024;
inline constexpr int kMaxSessionArgs = 1024;

// Thread-safe. Lock: mu_ guards the session table, the agent table and the
// pending job ends; it is held while calling SessionClient and
// AgentConnection methods (which only queue), never while calling the
// hooks (which reach the coordinator's own lock).
class SessionRelay {
 public:
  struct Hooks {
    // The job by id (Coordinator::GetJob). Errors: NOT_FOUND.
    std::function<absl::StatusOr<v1::Job>(int64_t)> get_job;
    // Ends job `job_id` (Coordinator::CancelJob); `reason` says why (logged
    // and recorded). Null: shell sessions never end their job.
    std::function<void(int64_t job_id, const std::string& reason)> end_job;
    // Records that `who` opened a session (the audit log's RecordAsync);
    // null: nothing is recorded.
    std::function<void(const Principal& who, const std::string& action,
                       const std::string& target, const std::string& detail)>
        audit;
    // Whether job `job_id`'s GPUs have been idle since `since` (no
    // utilization sample above the idle line since then:
    // coordinator/usage_history.h). Null: GPUs always count as idle.
    std::function<bool(int64_t job_id, absl::Time since)> gpus_idle;
    // How long the job of `spec` may stay idle (IdleTimeoutOf under the
    // coordinator's policy); absl::InfiniteDuration(): never. Null: the
    // spec's own idle_timeout_ms when > 0, else never.
    std::function<absl::Duration(const v1::JobSpec& spec)> idle_timeout;
  };
  struct Options {
    // How long an open waits for the agent's `started` or `error`.
    absl::Duration open_timeout = absl::Seconds(30);
    // How long a `trainctl shell` job outlives its client going away (a
    // dropped connection, a killed CLI), so `trainctl attach` can take it
    // back: 60 s.
    absl::Duration shell_grace = absl::Seconds(60);
    // The relay's time: open deadlines, idle clocks, shell graces (not
    // owned; outlives the relay). Null: a RealClock of its own.
    const Clock* clock = nullptr;
    // A thread of the relay runs RunTimers() as timers come due (at least
    // once a second). False: only the caller's RunTimers() calls do (tests
    // on a FakeClock).
    bool timer_thread = true;
  };

  explicit SessionRelay(Hooks hooks) : SessionRelay(std::move(hooks), Options()) {}
  SessionRelay(Hooks hooks, Options options);
  // Ends every open session's client with UNAVAILABLE and stops the timer
  // thread.
  ~SessionRelay();
  SessionRelay(const SessionRelay&) = delete;
  SessionRelay& operator=(const SessionRelay&) = delete;

  // The agent of `node` registered on `conn` (not owned; valid until
  // AgentGone). Sessions on an earlier connection of that node end with
  // UNAVAILABLE.
  void AgentConnected(const std::string& node, AgentConnection* conn);
  // `conn` of `node` ended: its sessions' clients get UNAVAILABLE. A
  // connection already replaced by a newer one is ignored.
  void AgentGone(const std::string& node, AgentConnection* conn);

  // Opens a session for `who` from `open` (the stream's first message) and
  // sends it to the agent of the rank's node; `client` (not owned) gets
  // everything from there until End. Returns the session's id.
  // Errors: INVALID_ARGUMENT naming the field (job_id, rank, port, argv,
  // rows/cols); NOT_FOUND for an unknown job or a rank it does not have;
  // PERMISSION_DENIED unless `who` owns the job or is an admin (the
  // CheckJobAccess rule, as for logs and cancel); FAILED_PRECONDITION when
  // the rank's task is not running (not placed yet, or ended);
  // UNAVAILABLE when its node's agent is not connected.
  absl::StatusOr<std::string> Open(const Principal& who, const v1::SessionOpen& open,
                                   SessionClient* client);

  // A client message after the open, passed to the agent (output_ack too:
  // opens tell agents so, SessionToAgent.relays_output_acks).
  // Errors: INVALID_ARGUMENT for a second open, stdin over
  // kMaxSessionInputBytes, a signal outside 1-64, a size outside 1-10000 or
  // an output_ack below 1; NOT_FOUND for a session that has ended.
  absl::Status FromClient(const std::string& id, const v1::SessionClientMessage& msg);

  // The client of session `id` went away (or its stream ended): the agent
  // is told to close it; a shell session's job ends after shell_grace. An
  // id that has ended already is ignored.
  void ClientGone(const std::string& id);

  // A message from the agent of `node` for one of its sessions (taken by
  // value: an output chunk, up to 1 MiB, is moved on to the client, not
  // copied); messages for sessions of other nodes, or ended ones, are
  // dropped.
  void FromAgent(const std::string& node, v1::SessionFromAgent msg);

  // At start-up: starts an idle clock, from now, for each of `running` that
  // is interactive with an idle timeout and has none yet, so a `trainctl
  // shell` job whose sessions a coordinator restart ended still idles out
  // instead of holding its GPUs until its time limit. Other jobs are
  // ignored.
  void AdoptInteractiveJobs(const std::vector<v1::Job>& running) ABSL_LOCKS_EXCLUDED(mu_);

  // Applies every timer due at the clock's now: opens the agent never
  // answered past open_timeout (DEADLINE_EXCEEDED), idle warnings and idle
  // ends, shell jobs whose grace has passed (Hooks::end_job, called without
  // the relay's lock). Returns when the next timer is due, at most 1 s
  // ahead.
  absl::Time RunTimers() ABSL_LOCKS_EXCLUDED(mu_);

  // Sessions not yet ended.
  int OpenSessions() const;
  // Jobs waiting for their shell_grace to pass.
  int PendingJobEnds() const;
  // Interactive jobs whose idle clock runs.
  int IdleClocks() const;

 private:
  // An interactive job's idle clock.
  struct IdleClock {
    absl::Duration timeout;
    absl::Time last_activity;
    bool warned = false;
  };
  struct Entry {
    SessionClient* client = nullptr;
    std::string node;
    AgentConnection* conn = nullptr;
    int64_t job_id = 0;
    bool started = false;
    bool end_job = false;
    absl::Time open_deadline;
  };

  // The idle timeout of a job of `spec` (Hooks::idle_timeout, else the
  // spec's own); absl::InfiniteDuration() for none.
  absl::Duration JobIdleTimeout(const v1::JobSpec& spec) const;
  // Ends session `it` for the client with `status` and forgets it.
  void EndLocked(std::map<std::string, Entry>::iterator it, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The timer thread (Options::timer_thread): RunTimers() as timers come
  // due, until the relay is destroyed.
  void TimerLoop();
  // One pass of the idle policy at `now` (mu_ released while asking
  // hooks_.gpus_idle and ending jobs).
  void CheckIdle(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `notice` to every open session of `job_id`.
  void NoticeLocked(int64_t job_id, const std::string& notice)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Hooks hooks_;
  const Options options_;
  // options_.clock, or own_clock_.
  std::unique_ptr<Clock> own_clock_;
  const Clock* const clock_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> sessions_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, AgentConnection*> agents_ ABSL_GUARDED_BY(mu_);
  // Idle clocks of interactive jobs with an idle timeout, by job id.
  std::map<int64_t, IdleClock> idle_ ABSL_GUARDED_BY(mu_);
  // Jobs of shell sessions whose client went away: when to end each.
  std::map<int64_t, absl::Time> job_ends_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timers_;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_SESSION_RELAY_H_
