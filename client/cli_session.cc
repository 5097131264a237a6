// `trainctl exec`, `shell`, `attach` and `port-forward`: interactive
// sessions beside a running rank, over the Session stream
// (proto/trainctl/v1/session.proto). The meanings are kubectl's: exec -i
// sends stdin, -t allocates a terminal (the local one goes raw while the
// session runs), the exit status is the remote command's; port-forward
// [LOCAL:]REMOTE listens on 127.0.0.1:LOCAL and carries each connection
// to 127.0.0.1:REMOTE on the rank's node.

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/cli_internal.h"
#include "grpcpp/grpcpp.h"

namespace trainctl::cli::internal {
namespace {

// Bytes of local input per Session message (the coordinator takes up to
// 64 KiB).
constexpr size_t kInputChunk = 32 * 1024;
// The output window sessions open with (SessionOpen.output_window_bytes:
// bytes of output on their way, not yet acknowledged): 8 MiB, enough to
// keep a loopback stream busy, while a slow reader holds the remote side
// back instead of filling the coordinator's memory.
constexpr int32_t kOutputWindowBytes = 8 << 20;
// The input window (SessionOpen.input_window_bytes: stdin sent and not yet
// taken by the command): 1 MiB, what the agent holds unread per session,
// so a command that reads slowly holds back the local side and no input is
// ever refused.
constexpr int32_t kInputWindowBytes = 1 << 20;

using SessionStream =
    grpc::ClientReaderWriterInterface<v1::SessionClientMessage, v1::SessionServerMessage>;

// The writes of one session stream, from two threads (the input loop, and
// the output reader's acks): one at a time, as gRPC requires.
class SessionWriter {
 public:
  explicit SessionWriter(SessionStream* stream) : stream_(stream) {}
  SessionWriter(const SessionWriter&) = delete;
  SessionWriter& operator=(const SessionWriter&) = delete;

  // Writes `m`; false when the stream is broken.
  bool Write(const v1::SessionClientMessage& m) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return stream_->Write(m);
  }

  // Writes `data` as stdin once the input window has room for it (the
  // command has taken enough of what was sent: InputTaken). False when the
  // stream is broken or Ended.
  bool WriteStdin(std::string data) ABSL_LOCKS_EXCLUDED(mu_, window_mu_) {
    const auto size = static_cast<int64_t>(data.size());
    {
      absl::MutexLock lock(&window_mu_);
      want_ = size;
      window_mu_.Await(absl::Condition(
          +[](SessionWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->window_mu_) {
            return w->ended_ || w->in_flight_ + w->want_ <= kInputWindowBytes;
          },
          this));
      if (ended_) return false;
      in_flight_ += size;
    }
    v1::SessionClientMessage m;
    m.set_stdin(std::move(data));
    return Write(m);
  }

  // The agent says the command took `n` bytes of stdin (input_ack).
  void InputTaken(int64_t n) ABSL_LOCKS_EXCLUDED(window_mu_) {
    absl::MutexLock lock(&window_mu_);
    in_flight_ = std::max<int64_t>(0, in_flight_ - n);
  }

  // The session is over: WriteStdin waits no longer.
  void Ended() ABSL_LOCKS_EXCLUDED(window_mu_) {
    absl::MutexLock lock(&window_mu_);
    ended_ = true;
  }

  // Notes `n` bytes of output written out locally; acknowledges them in
  // one output_ack once a quarter of the window has gathered (the agent
  // holds back at a full window). False when the stream is broken.
  bool Consumed(size_t n) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    unacked_ += static_cast<int64_t>(n);
    if (unacked_ < kOutputWindowBytes / 4) return true;
    v1::SessionClientMessage ack;
    ack.set_output_ack(unacked_);
    unacked_ = 0;
    return stream_->Write(ack);
  }

 private:
  SessionStream* const stream_;
  absl::Mutex mu_;
  // Output consumed and not yet acknowledged, bytes.
  int64_t unacked_ ABSL_GUARDED_BY(mu_) = 0;
  // The input window; its own lock, so an ack is noted while a write
  // waits for gRPC.
  absl::Mutex window_mu_;
  // Stdin sent and not yet taken by the command, bytes.
  int64_t in_flight_ ABSL_GUARDED_BY(window_mu_) = 0;
  // The size of the write waiting for room (one input thread per session).
  int64_t want_ ABSL_GUARDED_BY(window_mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(window_mu_) = false;
};
// The holder process of a `trainctl shell` job: the sessions run beside it
// (with --image, in its container: busybox's and coreutils' sleep both take
// "infinity", so any image with a `sleep` holds the job).
const std::vector<std::string> kHolderCommand = {"sleep", "infinity"};
// How often `shell` looks whether its job has started.
constexpr absl::Duration kStartPoll = absl::Milliseconds(100);

// The local terminal's settings before it went raw, restored on every exit
// path: RawTerminal's destructor, and the handlers of the signals that end
// the process (tcsetattr is async-signal-safe).
termios g_saved_termios;
volatile sig_atomic_t g_terminal_raw = 0;
// Written by the SIGWINCH handler ('w'); the session loop polls it.
int g_wake_write = -1;

void RestoreTerminal() {
  if (g_terminal_raw) {
    tcsetattr(STDIN_FILENO, TCSADRAIN, &g_saved_termios);
    g_terminal_raw = 0;
  }
}

extern "C" void OnEndingSignal(int sig) {
  RestoreTerminal();
  signal(sig, SIG_DFL);
  raise(sig);
}

extern "C" void OnWinch(int) {
  const int saved = errno;
  const char c = 'w';
  if (g_wake_write >= 0) (void)!write(g_wake_write, &c, 1);
  errno = saved;
}

// The local terminal in raw mode (cfmakeraw: keys go to the remote side
// unchanged, Ctrl-C included) for its lifetime.
class RawTerminal {
 public:
  RawTerminal() {
    if (tcgetattr(STDIN_FILENO, &g_saved_termios) != 0) return;
    termios raw = g_saved_termios;
    cfmakeraw(&raw);
    for (int sig : {SIGTERM, SIGHUP, SIGQUIT, SIGINT, SIGABRT}) signal(sig, OnEndingSignal);
    if (tcsetattr(STDIN_FILENO, TCSADRAIN, &raw) == 0) g_terminal_raw = 1;
  }
  ~RawTerminal() {
    RestoreTerminal();
    for (int sig : {SIGTERM, SIGHUP, SIGQUIT, SIGINT, SIGABRT}) signal(sig, SIG_DFL);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;
};

void WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// The terminal size of fd 0 (else 1), rows x cols; 0 x 0 when neither is a
// terminal.
std::pair<int, int> TerminalSize() {
  for (int fd : {STDIN_FILENO, STDOUT_FILENO}) {
    winsize ws{};
    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
      return {ws.ws_row, ws.ws_col};
    }
  }
  return {0, 0};
}

// Runs one session to its end: sends `open`, then (with `send_stdin`)
// local stdin and terminal resizes, and writes what comes back to fds 1
// and 2. Returns the exit status: the remote command's exit code, 128 +
// its signal, kExitRpcError (message on `err`) when the session failed.
// With `reattach_hint`, a session cut by a lost connection (UNAVAILABLE: the
// coordinator or the node's agent went away) also says how to get back into
// the job: the job is not the session, and a coordinator restart keeps it.
int RunSession(Stub* stub, const v1::SessionOpen& open, bool send_stdin, std::ostream& err,
               bool reattach_hint = false) {
  grpc::ClientContext ctx;
  std::unique_ptr<SessionStream> stream = stub->Session(&ctx);
  SessionWriter writer(stream.get());
  v1::SessionClientMessage first;
  *first.mutable_open() = open;
  first.mutable_open()->set_output_window_bytes(kOutputWindowBytes);
  if (send_stdin) first.mutable_open()->set_input_window_bytes(kInputWindowBytes);
  writer.Write(first);

  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    err << "trainctl: error: pipe: " << std::strerror(errno) << "\n";
    return kExitRpcError;
  }
  const bool local_tty = isatty(STDIN_FILENO) != 0;
  std::optional<RawTerminal> raw;
  if (open.tty() && send_stdin && local_tty) {
    err.flush();
    raw.emplace();
  }
  if (open.tty()) {
    g_wake_write = wake[1];
    signal(SIGWINCH, OnWinch);
  }
  std::optional<v1::SessionExit> exit;
  std::thread reader([&] {
    v1::SessionServerMessage m;
    while (stream->Read(&m)) {
      switch (m.msg_case()) {
        case v1::SessionServerMessage::kStdout:
          WriteAll(STDOUT_FILENO, m.stdout());
          writer.Consumed(m.stdout().size());
          break;
        case v1::SessionServerMessage::kStderr:
          WriteAll(STDERR_FILENO, m.stderr());
          writer.Consumed(m.stderr().size());
          break;
        case v1::SessionServerMessage::kNotice:
          WriteAll(STDERR_FILENO, absl::StrCat("\r\ntrainctl: ", m.notice(), "\r\n"));
          break;
        case v1::SessionServerMessage::kExit:
          exit = m.exit();
          break;
        case v1::SessionServerMessage::kInputAck:
          writer.InputTaken(m.input_ack());
          break;
        default:
          break;
      }
    }
    writer.Ended();
    const char d = 'd';
    (void)!write(wake[1], &d, 1);
  });
  bool stdin_open = send_stdin;
  std::vector<char> buf(kInputChunk);
  bool done = false;
  while (!done) {
    pollfd fds[2] = {{wake[0], POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
    if (poll(fds, stdin_open ? 2 : 1, -1) < 0) continue;  // EINTR (SIGWINCH)
    if (fds[0].revents & POLLIN) {
      char c;
      while (read(wake[0], &c, 1) == 1) {
        if (c == 'd') done = true;
        if (c == 'w') {
          const auto [rows, cols] = TerminalSize();
          if (rows > 0) {
            v1::SessionClientMessage m;
            m.mutable_resize()->set_rows(rows);
            m.mutable_resize()->set_cols(cols);
            writer.Write(m);
          }
        }
      }
    }
    if (done || !stdin_open) continue;
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = read(STDIN_FILENO, buf.data(), buf.size());
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n > 0) {
        // Waits while the command is a window behind (the session's end
        // stops the wait).
        writer.WriteStdin(std::string(buf.data(), static_cast<size_t>(n)));
        continue;
      }
      v1::SessionClientMessage m;
      m.set_stdin_eof(true);
      stdin_open = false;
      writer.Write(m);
    }
  }
  reader.join();
  if (open.tty()) {
    signal(SIGWINCH, SIG_DFL);
    g_wake_write = -1;
  }
  const grpc::Status status = stream->Finish();
  raw.reset();
  close(wake[0]);
  close(wake[1]);
  if (exit.has_value()) {
    if (!exit->reason().empty()) err << "trainctl: session ended: " << exit->reason() << "\n";
    return exit->signal() != 0 ? 128 + exit->signal() : exit->exit_code();
  }
  err << "trainctl: error: "
      << (status.ok() ? std::string("the session ended without an exit status")
                      : status.error_message())
      << "\n";
  if (reattach_hint && status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    const int64_t job = open.job_id();
    err << "trainctl: the connection was lost, not necessarily job " << job
        << ": if it still runs (trainctl describe " << job << "), trainctl attach " << job
        << " gets back in, trainctl cancel " << job << " ends it\n";
  }
  return kExitRpcError;
}

// Parses `trainctl port-forward`'s [LOCAL:]REMOTE.
absl::Status ParsePorts(const std::string& text, int* local, int* remote) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  auto port = [](const std::string& s, int* out, bool zero_ok) {
    return absl::SimpleAtoi(s, out) && *out >= (zero_ok ? 0 : 1) && *out <= 65535;
  };
  if (parts.size() == 1 && port(parts[0], remote, false)) {
    *local = *remote;
    return absl::OkStatus();
  }
  if (parts.size() == 2 && port(parts[1], remote, false) &&
      (parts[0].empty() ? (*local = 0, true) : port(parts[0], local, true))) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "PORTS: \"", text, "\" is not [LOCAL:]REMOTE with ports 1-65535 (LOCAL 0 or empty: any)"));
}

// One forwarded connection: `sock` <-> a port-forward session.
void ForwardConnection(Stub* stub, v1::SessionOpen open, int sock, std::ostream* err) {
  grpc::ClientContext ctx;
  std::unique_ptr<SessionStream> stream = stub->Session(&ctx);
  SessionWriter writer(stream.get());
  v1::SessionClientMessage first;
  *first.mutable_open() = open;
  first.mutable_open()->set_output_window_bytes(kOutputWindowBytes);
  first.mutable_open()->set_input_window_bytes(kInputWindowBytes);
  writer.Write(first);
  std::thread reader([&] {
    v1::SessionServerMessage m;
    while (stream->Read(&m)) {
      if (m.has_stdout()) {
        WriteAll(sock, m.stdout());
        writer.Consumed(m.stdout().size());
      }
      if (m.msg_case() == v1::SessionServerMessage::kInputAck) writer.InputTaken(m.input_ack());
      if (m.has_exit()) break;
    }
    writer.Ended();
    // The remote side is done: so is the local one.
    shutdown(sock, SHUT_RDWR);
  });
  std::vector<char> buf(kInputChunk);
  while (true) {
    const ssize_t n = read(sock, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    v1::SessionClientMessage m;
    if (n > 0) {
      if (!writer.WriteStdin(std::string(buf.data(), static_cast<size_t>(n)))) break;
      continue;
    }
    m.set_stdin_eof(true);
    writer.Write(m);
    break;
  }
  reader.join();
  ctx.TryCancel();
  const grpc::Status status = stream->Finish();
  if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED) {
    *err << "trainctl: port-forward: " << status.error_message() << "\n";
    err->flush();
  }
  close(sock);
}

int PortForward(Stub* stub, Session& session, int64_t job_id, int rank,
                const std::string& ports, std::ostream& err) {
  int local = 0, remote = 0;
  if (absl::Status s = ParsePorts(ports, &local, &remote); !s.ok()) {
    return session.UsageError(s.message());
  }
  // Refused up front (another user's job, a rank not running), as kubectl
  // checks the pod before it listens.
  v1::GetJobRequest get;
  get.set_job_id(job_id);
  v1::GetJobResponse job;
  if (absl::Status s = session.Call(&Stub::GetJob, get, &job); !s.ok()) return session.Fail(s);
  const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(local));
  if (lfd < 0 || bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(lfd, 128) != 0) {
    return session.Fail(absl::UnavailableError(
        absl::StrFormat("cannot listen on 127.0.0.1:%d: %s", local, std::strerror(errno))));
  }
  socklen_t len = sizeof(addr);
  getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string line = absl::StrFormat("Forwarding from 127.0.0.1:%d -> %d\n",
                                           ntohs(addr.sin_port), remote);
  WriteAll(STDOUT_FILENO, line);
  signal(SIGPIPE, SIG_IGN);
  v1::SessionOpen open;
  open.set_job_id(job_id);
  open.set_rank(rank);
  open.set_port(remote);
  while (true) {
    const int c = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return session.Fail(absl::InternalError(absl::StrCat("accept: ", std::strerror(errno))));
    }
    const int nodelay = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &nodelay, sizeof(nodelay));
    std::thread(ForwardConnection, stub, open, c, &err).detach();
  }
}

// Set by SIGINT/SIGTERM while `shell` waits for its job to start.
volatile sig_atomic_t g_interrupted = 0;
extern "C" void OnInterrupt(int) { g_interrupted = 1; }

// Waits until rank 0 of `job_id` runs (or SIGINT/SIGTERM came: OK, and
// g_interrupted says so); prints where it waits once.
// Errors: those of GetJob; FAILED_PRECONDITION when the job ended first.
absl::Status WaitRunning(Session& session, int64_t job_id, std::ostream& err) {
  bool said = false;
  while (!g_interrupted) {
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    v1::GetJobResponse resp;
    if (absl::Status s = session.Call(&Stub::GetJob, req, &resp); !s.ok()) return s;
    const v1::Job& job = resp.job();
    // RUNNING, not SCHEDULED: a gang's pre-flight probes run as its tasks
    // first.
    if (job.state() == v1::JOB_STATE_RUNNING && !job.tasks().empty() &&
        job.tasks(0).state() == v1::TASK_STATE_RUNNING) {
      return absl::OkStatus();
    }
    if (IsFinal(job.state())) {
      return absl::FailedPreconditionError(
          absl::StrFormat("job %d ended before its shell started (%s)%s", job_id,
                          v1::JobState_Name(job.state()),
                          job.reason().empty() ? "" : absl::StrCat(": ", job.reason())));
    }
    if (!said) {
      err << "trainctl: job " << job_id << " is waiting for its resources"
          << " (trainctl why " << job_id << " says why)...\n";
      err.flush();
      said = true;
    }
    absl::SleepFor(kStartPoll);
  }
  return absl::OkStatus();
}

}  // namespace

SessionCommands AddSessionCommands(CLI::App& app, Flags& f) {
  SessionCommands c;
  c.exec = app.add_subcommand(
      "exec", "Run a command beside a running rank of a job (as its user, in its cgroup, "
              "with its environment and work dir)");
  c.exec->add_option("JOB", f.job_id, "The job")->required();
  c.exec->add_option("-r,--rank", f.sess_rank, "The rank (default 0)")
      ->check(CLI::NonNegativeNumber);
  c.exec->add_flag("-i,--stdin", f.sess_stdin, "Send this terminal's stdin to the command");
  c.exec->add_flag("-t,--tty", f.sess_tty,
                   "Run the command under a terminal (Ctrl-C and resizes reach it)");
  c.exec->add_option("command", f.sess_command, "The command, after --")->required();
  c.exec->footer(Example(
      "  trainctl exec 42 -- nvidia-smi\n"
      "  trainctl exec 42 --rank 1 -- py-spy dump --pid 1234\n"
      "  trainctl exec -it 42 -- bash"));

  c.shell = app.add_subcommand(
      "shell", "Start an interactive job and open a shell in it (ends with the shell "
               "unless --keep)");
  AddJobSpecOptions(c.shell, f);
  c.shell->add_flag("--keep", f.sess_keep,
                    "Keep the job when the shell ends or this client goes away "
                    "(trainctl attach JOB to get back in, trainctl cancel JOB to end it)");
  c.shell->add_option("--idle-timeout", f.sess_idle_timeout,
                      "End the job after this long with no terminal input and its GPUs "
                      "idle (default: the queue's, 1h unless the cluster sets another; 0: never)");
  c.shell->add_option("command", f.sess_command,
                      "The command to run instead of your login shell, after --");
  c.shell->footer(Example(
      "  trainctl shell --gpus 1\n"
      "  trainctl shell --gpu-fraction 0.5 --time-limit 2h -- jupyter lab --no-browser\n"
      "  trainctl shell --gpus 1 --keep\n"
      "  trainctl shell --gpus 1 --image nvcr.io/nvidia/pytorch:24.05-py3"));

  c.attach = app.add_subcommand("attach", "Open a shell in a running job (e.g. a shell --keep)");
  c.attach->add_option("JOB", f.job_id, "The job")->required();
  c.attach->add_option("-r,--rank", f.sess_rank, "The rank (default 0)")
      ->check(CLI::NonNegativeNumber);
  c.attach->footer(Example("  trainctl attach 42"));

  c.port_forward = app.add_subcommand(
      "port-forward", "Forward a local port to a port on a running rank's node");
  c.port_forward->add_option("JOB", f.job_id, "The job")->required();
  c.port_forward->add_option("PORTS", f.sess_ports,
                             "[LOCAL:]REMOTE: listen on 127.0.0.1:LOCAL (same as REMOTE "
                             "when left out; 0: any), reach 127.0.0.1:REMOTE on the node")
      ->required();
  c.port_forward->add_option("-r,--rank", f.sess_rank, "The rank (default 0)")
      ->check(CLI::NonNegativeNumber);
  c.port_forward->footer(Example(
      "  trainctl port-forward 42 8888\n  trainctl port-forward 42 18888:8888"));
  return c;
}

std::string PrepareShell(Flags* f) {
  // 0: the queue's default (JobSpec.idle_timeout_ms); -1: never.
  int64_t idle_ms = 0;
  if (!f->sess_idle_timeout.empty()) {
    absl::Duration d;
    if (f->sess_idle_timeout == "0") {
      idle_ms = -1;
    } else if (absl::ParseDuration(f->sess_idle_timeout, &d) && d > absl::ZeroDuration()) {
      idle_ms = absl::ToInt64Milliseconds(d);
    } else {
      return absl::StrCat("--idle-timeout ", f->sess_idle_timeout,
                          ": expected a duration such as 30m or 2h (0: never)");
    }
  }
  f->command = kHolderCommand;
  if (std::string error = BuildSpec(f, "shell", "trainctl shell --gpus 1"); !error.empty()) {
    return error;
  }
  v1::JobSpec* spec = f->submit.mutable_spec();
  if (spec->name().empty()) spec->set_name("shell");
  spec->set_interactive(true);
  spec->set_idle_timeout_ms(idle_ms);
  return "";
}

int RunSessionCommand(const SessionCommands& c, Flags& f, Session& session, std::ostream& err) {
  Stub* stub = session.stub();
  if (c.port_forward->parsed()) {
    return PortForward(stub, session, f.job_id, f.sess_rank, f.sess_ports, err);
  }
  const auto [rows, cols] = TerminalSize();
  v1::SessionOpen open;
  open.set_rank(f.sess_rank);
  open.set_rows(rows);
  open.set_cols(cols);
  if (const char* term = std::getenv("TERM"); term != nullptr) open.set_term(term);
  if (c.exec->parsed()) {
    open.set_job_id(f.job_id);
    open.mutable_argv()->Assign(f.sess_command.begin(), f.sess_command.end());
    open.set_tty(f.sess_tty);
    open.set_stdin(f.sess_stdin);
    if (!f.sess_tty) open.clear_term();
    return RunSession(stub, open, f.sess_stdin, err);
  }
  if (c.attach->parsed()) {
    open.set_job_id(f.job_id);
    open.set_login_shell(true);
    open.set_tty(true);
    open.set_stdin(true);
    return RunSession(stub, open, true, err, /*reattach_hint=*/true);
  }
  // shell: an interactive job first (its spec made by PrepareShell).
  const std::vector<std::string>& command = f.sess_command;
  const v1::SubmitJobRequest& req = f.submit;
  v1::SubmitJobResponse submitted;
  if (absl::Status s = session.Call(&Stub::SubmitJob, req, &submitted); !s.ok()) {
    return session.Fail(s);
  }
  const int64_t job_id = submitted.job_id();
  err << "trainctl: interactive job " << job_id << "\n";
  err.flush();
  auto cancel = [&](const std::string& why) {
    if (f.sess_keep) return;
    v1::CancelJobRequest creq;
    creq.set_job_id(job_id);
    v1::CancelJobResponse cresp;
    if (session.Call(&Stub::CancelJob, creq, &cresp).ok()) {
      err << "trainctl: job " << job_id << " cancelled (" << why << ")\n";
    }
  };
  g_interrupted = 0;
  signal(SIGINT, OnInterrupt);
  signal(SIGTERM, OnInterrupt);
  absl::Status running = WaitRunning(session, job_id, err);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  if (g_interrupted) {
    cancel("interrupted before its shell started");
    return 128 + SIGINT;
  }
  if (!running.ok()) {
    cancel("its shell could not start");
    return session.Fail(running);
  }
  open.set_job_id(job_id);
  open.set_rank(0);
  if (command.empty()) {
    open.set_login_shell(true);
  } else {
    open.mutable_argv()->Assign(command.begin(), command.end());
  }
  open.set_tty(isatty(STDIN_FILENO) != 0);
  open.set_stdin(true);
  open.set_end_job_with_session(!f.sess_keep);
  const int status = RunSession(stub, open, true, err, /*reattach_hint=*/true);
  if (f.sess_keep) {
    err << "trainctl: job " << job_id << " keeps running (--keep): trainctl attach " << job_id
        << " to get back in, trainctl cancel " << job_id << " to end it\n";
  }
  return status;
}

}  // namespace trainctl::cli::internal
