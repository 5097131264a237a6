#ifndef TRAINCTL_WORKER_PTY_SESSION_H_
#define TRAINCTL_WORKER_PTY_SESSION_H_

// The agent's side of interactive sessions (`trainctl exec`, `shell`,
// `port-forward`; proto/trainctl/v1/session.proto): a command started
// beside a running task, with the task's own launch (its account, cgroup,
// environment and work dir: the LaunchSpec the agent built for it, started
// through the same ProcessLauncher and so the same task shim, which drops
// privileges and joins the cgroup), under a pseudo-terminal or on pipes; or
// a TCP connection to a port on the node's loopback.
//
// Each session has one thread that polls its descriptors: output is read
// and sent in chunks of at most kSessionChunkBytes (what the descriptor holds
// when it is read, straight into the message: no copy of its own), input
// queued by
// Input() is written when the descriptor takes it (never blocking the
// caller, the agent's stream reader), and once the command has ended (its
// whole process group reaped by the launcher) what is left of its output
// is sent, then its exit. A session opened with an output window
// (SessionOpen.output_window_bytes) stops reading output while that many
// bytes are sent and not acknowledged (SessionClientMessage.output_ack).

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "trainctl/v1/session.pb.h"
#include "worker/hw/process_launcher.h"

namespace trainctl::worker {

// Most bytes of output in one SessionServerMessage: 1 MiB.
inline constexpr size_t kSessionChunkBytes = 1 << 20;
// The range SessionOpen.output_window_bytes is clamped to: 64 KiB - 64 MiB.
inline constexpr size_t kSessionMinOutputWindow = 64 << 10;
inline constexpr size_t kSessionMaxOutputWindow = 64 << 20;
// Most input bytes a session holds while its command does not read them
// (1 MiB); more is refused (RESOURCE_EXHAUSTED), which ends the session
// (Agent::HandleSession): a client with an input window
// (SessionOpen.input_window_bytes, at most this) never gets there.
inline constexpr size_t kSessionMaxPendingInput = 1 << 20;
// Most sessions open on one agent at once.
inline constexpr int kMaxSessionsPerAgent = 256;

// The sessions of one agent. Thread-safe.
class SessionHost {
 public:
  // Sends one message to the coordinator (taken by value: output chunks are
  // moved along, not copied). Called from session threads (and from Open())
  // until the host is destroyed; must be thread-safe and must not call back
  // into the host.
  using Send = std::function<void(v1::SessionFromAgent)>;

  // `launcher` is not owned and must outlive the host.
  SessionHost(ProcessLauncher* launcher, Send send);
  // CloseAll().
  ~SessionHost();
  SessionHost(const SessionHost&) = delete;
  SessionHost& operator=(const SessionHost&) = delete;

  // Opens session `id` beside the task launched with `task` (its account,
  // cgroup, environment and work dir are used; its argv, log and container
  // settings are not). Without open.port: runs open.argv (empty with
  // open.login_shell: the account's login shell, $SHELL of the task's
  // environment, which the agent set from the account database; else
  // /bin/sh) with `-l`; with open.tty under a new pseudo-terminal of
  // open.rows x open.cols (0: 24 x 80) as its controlling terminal, TERM set
  // to open.term (default xterm-256color), stdout and stderr one stream;
  // without, on pipes (stdin /dev/null unless open.stdin). With open.port:
  // connects to 127.0.0.1:port. Sends `started` (with the pid, 0 for a
  // forward) before any output; then output chunks, then `exit` once. With
  // open.output_window_bytes > 0 (clamped to kSessionMinOutputWindow -
  // kSessionMaxOutputWindow) at most that many output bytes are sent and
  // not yet acknowledged by output_ack; the caller clears the field when
  // nobody will ack (an older coordinator).
  // Returns the pid (0 for a forward).
  // Errors: INVALID_ARGUMENT naming the field (argv empty without
  // login_shell, port outside 1-65535, rows/cols outside 0-10000, term with
  // other characters or longer than 64, input_window_bytes outside
  // 0-kSessionMaxPendingInput); ALREADY_EXISTS for an id in use;
  // RESOURCE_EXHAUSTED beyond kMaxSessionsPerAgent; UNAVAILABLE when
  // nothing listens on the port; INTERNAL for openpty, pipe or socket
  // failures (errno text); those of ProcessLauncher::Launch (NOT_FOUND for a
  // missing program).
  // `tag` names what the session runs beside (CloseTagged).
  // `wrap`, when set, rewrites the command's launch just before it starts
  // (argv, environment, privileges: the agent's `podman exec` into a
  // container task, ContainerRuntime::ExecArgv); it gets `open` and the
  // launch as built above (argv from open, or the host login shell), and
  // its error is returned as is, the session not opened.
  using Wrap = std::function<absl::Status(const v1::SessionOpen&, LaunchSpec&)>;
  absl::StatusOr<int> Open(const std::string& id, const v1::SessionOpen& open,
                           LaunchSpec task, const std::string& tag = "",
                           const Wrap& wrap = nullptr);

  // Closes (as `close`) every session opened with `tag`, without waiting:
  // the task they run beside has ended. Returns how many.
  int CloseTagged(const std::string& tag);

  // Applies one client message to session `id`: stdin bytes (queued and
  // written as the command reads them), resize (TIOCSWINSZ: the foreground
  // process gets SIGWINCH), stdin_eof (pipes and forwards: closed /
  // half-closed; a tty: the terminal's EOF character, ^D), signal (to the
  // command's process group), close (the launcher stops the group at once / closes the
  // connection; the exit follows), output_ack (that many bytes of output
  // consumed: the session may read more). An id not open (it ended
  // meanwhile) is ignored. Errors: INVALID_ARGUMENT for a signal outside
  // 1-64, a size outside 1-10000 or an output_ack below 1;
  // RESOURCE_EXHAUSTED when more than kSessionMaxPendingInput bytes of input
  // wait unread.
  absl::Status Input(const std::string& id, const v1::SessionClientMessage& msg);

  // Ends every session (as `close`: SIGTERM then SIGKILL to the group) and
  // waits until each has sent its exit.
  void CloseAll();

  // Sessions open now (not yet sent their exit).
  int Count() const;

 private:
  class Session;

  // Joins and drops sessions that have sent their exit.
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ProcessLauncher* const launcher_;
  const Send send_;
  mutable absl::Mutex mu_;
  // Open and finished-but-not-joined sessions by id.
  std::map<std::string, std::shared_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_PTY_SESSION_H_
