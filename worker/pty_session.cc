#include "worker/pty_session.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/terminal_size.h"

namespace trainctl::worker {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

void SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
}

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

bool ValidTerm(const std::string& term) {
  if (term.size() > 64) return false;
  for (char c : term) {
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '+' ||
          c == '-')) {
      return false;
    }
  }
  return true;
}

}  // namespace

// One session. Its descriptors belong to its loop thread once Start() has
// run; mu_ guards what other threads hand it (input, requests, the exit).
class SessionHost::Session {
 public:
  Session(std::string id, std::string tag, ProcessLauncher* launcher, const Send* send)
      : id_(std::move(id)), tag_(std::move(tag)), launcher_(launcher), send_(send) {}
  ~Session() {
    CloseFd(in_fd_);
    if (out_fd_ != in_fd_) CloseFd(out_fd_);
    out_fd_ = -1;
    CloseFd(err_fd_);
    CloseFd(wake_fd_);
  }

  // Sets the descriptors (owned from here on) and starts the loop thread.
  // `window`: most output bytes sent and not acknowledged; 0: no limit.
  // `input_acks`: tell the client (input_ack) how much of its input the
  // command took, for its input window.
  void Start(int in_fd, int out_fd, int err_fd, bool tty, bool forward, int pid,
             size_t window, bool input_acks) {
    window_ = window;
    input_acks_ = input_acks;
    in_fd_ = in_fd;
    out_fd_ = out_fd;
    err_fd_ = err_fd;
    tty_ = tty;
    forward_ = forward;
    pid_ = pid;
    thread_ = std::thread([this] { Loop(); });
  }

  // The eventfd that wakes the loop; made before the launch, as the exit
  // callback may run at once.
  absl::Status MakeWake() {
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) return absl::InternalError("eventfd: " + ErrnoText(errno));
    return absl::OkStatus();
  }

  // From the launcher's exit callback.
  void Exited(ExitInfo info) {
    absl::MutexLock lock(&mu_);
    exit_ = info;
    Wake();
  }

  absl::Status Apply(const v1::SessionClientMessage& msg) {
    switch (msg.msg_case()) {
      case v1::SessionClientMessage::kStdin: {
        absl::MutexLock lock(&mu_);
        if (pending_.size() + msg.stdin().size() > kSessionMaxPendingInput) {
          return absl::ResourceExhaustedError(absl::StrFormat(
              "stdin: more than %d bytes wait unread by the command", kSessionMaxPendingInput));
        }
        pending_ += msg.stdin();
        Wake();
        return absl::OkStatus();
      }
      case v1::SessionClientMessage::kResize: {
        if (absl::Status s =
                CheckTerminalSize(msg.resize().rows(), msg.resize().cols(), false);
            !s.ok()) {
          return s;
        }
        absl::MutexLock lock(&mu_);
        resize_ = {msg.resize().rows(), msg.resize().cols()};
        Wake();
        return absl::OkStatus();
      }
      case v1::SessionClientMessage::kStdinEof: {
        absl::MutexLock lock(&mu_);
        eof_requested_ = true;
        Wake();
        return absl::OkStatus();
      }
      case v1::SessionClientMessage::kSignal: {
        const int sig = msg.signal();
        if (sig < 1 || sig > 64) {
          return absl::InvalidArgumentError(
              absl::StrFormat("signal: %d is not a signal number (1-64)", sig));
        }
        if (pid_ > 0 && kill(-pid_, sig) != 0 && errno != ESRCH) {
          TC_LOG_WARN("session {}: signal {}: {}", id_, sig, ErrnoText(errno));
        }
        return absl::OkStatus();
      }
      case v1::SessionClientMessage::kClose:
        RequestClose();
        return absl::OkStatus();
      case v1::SessionClientMessage::kOutputAck: {
        if (msg.output_ack() < 1) {
          return absl::InvalidArgumentError(
              absl::StrFormat("output_ack: %d is not a byte count (> 0)", msg.output_ack()));
        }
        absl::MutexLock lock(&mu_);
        const size_t acked = static_cast<size_t>(msg.output_ack());
        unacked_ -= std::min(unacked_, acked);
        Wake();
        return absl::OkStatus();
      }
      default:
        return absl::OkStatus();
    }
  }

  void RequestClose() {
    absl::MutexLock lock(&mu_);
    close_requested_ = true;
    Wake();
  }

  bool done() const { return done_.load(); }
  const std::string& tag() const { return tag_; }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Wake() {
    const uint64_t one = 1;
    if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof(one));
  }

  // Output bytes the window lets the loop read now: kSessionChunkBytes
  // without a window.
  size_t Allowance() {
    if (window_ == 0) return kSessionChunkBytes;
    absl::MutexLock lock(&mu_);
    return window_ > unacked_ ? std::min(window_ - unacked_, kSessionChunkBytes) : 0;
  }

  // Reads what `fd` has now, up to `limit` bytes, into one message sent as
  // it is: the bytes are read into the message's own string, which is then
  // moved along. Returns the bytes read; 0 at its end (EOF, or EIO: a pty
  // whose slave side is closed everywhere); -1 when nothing is there now.
  ssize_t ReadChunk(int fd, bool err, size_t limit) {
    // What the descriptor holds (sockets, pipes and ptys say): one read
    // takes it all, without a buffer of the largest size kept per session.
    int ready = 0;
    size_t want = 64 << 10;  // FIONREAD refused, or nothing there yet (EOF)
    if (ioctl(fd, FIONREAD, &ready) == 0 && ready > 0) want = static_cast<size_t>(ready);
    want = std::min(want, limit);
    v1::SessionFromAgent m;
    m.set_session_id(id_);
    std::string* data =
        err ? m.mutable_payload()->mutable_stderr() : m.mutable_payload()->mutable_stdout();
    data->resize(want);
    while (true) {
      const ssize_t n = read(fd, data->data(), want);
      if (n > 0) {
        data->resize(static_cast<size_t>(n));
        if (window_ > 0) {
          absl::MutexLock lock(&mu_);
          unacked_ += static_cast<size_t>(n);
        }
        (*send_)(std::move(m));
        return n;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return -1;
      return 0;
    }
  }

  // Reads what `fd` has now: one chunk, or (`drain`) everything there, the
  // window aside (the command has ended: its output is sent whole). Returns
  // false when it is at its end.
  bool ReadSome(int fd, bool err, bool drain) {
    while (true) {
      const size_t limit = drain ? kSessionChunkBytes : Allowance();
      if (limit == 0) return true;
      const ssize_t n = ReadChunk(fd, err, limit);
      if (n > 0) {
        if (!drain) return true;
        continue;
      }
      if (n < 0) return true;
      return false;
    }
  }

  void Loop() {
    bool stop_sent = false;
    bool eof_done = false;
    while (true) {
      std::string pending;
      std::optional<std::pair<int, int>> resize;
      bool close_requested = false;
      bool eof_requested = false;
      std::optional<ExitInfo> exit;
      {
        absl::MutexLock lock(&mu_);
        pending.swap(pending_);
        resize.swap(resize_);
        close_requested = close_requested_;
        eof_requested = eof_requested_;
        exit = exit_;
      }
      if (resize.has_value() && tty_) {
        winsize ws{};
        ws.ws_row = static_cast<unsigned short>(resize->first);
        ws.ws_col = static_cast<unsigned short>(resize->second);
        if (ioctl(in_fd_, TIOCSWINSZ, &ws) != 0) {
          TC_LOG_WARN("session {}: TIOCSWINSZ: {}", id_, ErrnoText(errno));
        }
      }
      if (close_requested && forward_) {
        Finish(ExitInfo{}, "closed by the client");
        return;
      }
      if (close_requested && !stop_sent && pid_ > 0 && !exit.has_value()) {
        stop_sent = true;
        absl::Status s = launcher_->Stop(pid_, absl::ZeroDuration());
        if (!s.ok() && !absl::IsNotFound(s)) {
          TC_LOG_WARN("session {}: stop: {}", id_, s.ToString());
        }
      }
      // Input: what the descriptor takes now; the rest waits for POLLOUT.
      if (!pending.empty() && in_fd_ >= 0) {
        size_t off = 0;
        while (off < pending.size()) {
          const ssize_t n = write(in_fd_, pending.data() + off, pending.size() - off);
          if (n > 0) {
            off += static_cast<size_t>(n);
            continue;
          }
          if (n < 0 && errno == EINTR) continue;
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
          off = pending.size();  // EPIPE, EIO: nobody reads any more
        }
        pending.erase(0, off);
        // Taken (or dropped because nobody reads any more): the client may
        // send as much again.
        if (input_acks_ && off > 0) {
          v1::SessionFromAgent ack;
          ack.set_session_id(id_);
          ack.mutable_payload()->set_input_ack(static_cast<int64_t>(off));
          (*send_)(std::move(ack));
        }
      }
      if (!pending.empty()) {
        absl::MutexLock lock(&mu_);
        pending_.insert(0, pending);
      }
      if (eof_requested && !eof_done && pending.empty() && in_fd_ >= 0) {
        eof_done = true;
        if (tty_) {
          termios t{};
          const char veof = tcgetattr(in_fd_, &t) == 0 ? static_cast<char>(t.c_cc[VEOF]) : 4;
          (void)!write(in_fd_, &veof, 1);
        } else if (forward_) {
          shutdown(in_fd_, SHUT_WR);
        } else {
          CloseFd(in_fd_);
        }
      }
      if (exit.has_value()) {
        // Every process of the group is gone: what they wrote is in the
        // buffers now.
        if (out_fd_ >= 0) ReadSome(out_fd_, false, true);
        if (err_fd_ >= 0) ReadSome(err_fd_, true, true);
        Finish(*exit, "");
        return;
      }
      std::vector<pollfd> fds;
      fds.push_back({wake_fd_, POLLIN, 0});
      // A full output window: output waits (its descriptors left out of the
      // poll, a negative fd, so a hangup does not spin) until an ack wakes
      // the loop.
      const bool may_read = Allowance() > 0;
      const int out_i = out_fd_ >= 0 ? static_cast<int>(fds.size()) : -1;
      if (out_fd_ >= 0) {
        short ev = may_read ? POLLIN : 0;
        if (out_fd_ == in_fd_ && !pending.empty()) ev |= POLLOUT;
        fds.push_back({ev != 0 ? out_fd_ : -1, ev, 0});
      }
      const int err_i = err_fd_ >= 0 ? static_cast<int>(fds.size()) : -1;
      if (err_fd_ >= 0) fds.push_back({may_read ? err_fd_ : -1, POLLIN, 0});
      if (in_fd_ >= 0 && in_fd_ != out_fd_ && !pending.empty()) {
        fds.push_back({in_fd_, POLLOUT, 0});
      }
      if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) {
        TC_LOG_WARN("session {}: poll: {}", id_, ErrnoText(errno));
      }
      if (fds[0].revents & POLLIN) {
        uint64_t v;
        (void)!read(wake_fd_, &v, sizeof(v));
      }
      if (out_i >= 0 && may_read && (fds[out_i].revents & (POLLIN | POLLHUP | POLLERR))) {
        if (!ReadSome(out_fd_, false, false)) {
          if (forward_) {
            Finish(ExitInfo{}, "");
            return;
          }
          // A pty's EIO: the command's side is closed; its exit follows.
          if (out_fd_ == in_fd_) in_fd_ = -1;
          CloseFd(out_fd_);
        }
      }
      if (err_i >= 0 && (fds[err_i].revents & (POLLIN | POLLHUP | POLLERR))) {
        if (!ReadSome(err_fd_, true, false)) CloseFd(err_fd_);
      }
    }
  }

  void Finish(ExitInfo info, const std::string& reason) {
    v1::SessionFromAgent m;
    m.set_session_id(id_);
    v1::SessionExit* e = m.mutable_payload()->mutable_exit();
    if (info.signal != 0) {
      e->set_exit_code(-1);
      e->set_signal(info.signal);
    } else {
      e->set_exit_code(info.exit_code);
    }
    e->set_reason(reason);
    // Done before the exit is out: whoever sees the exit sees the session
    // gone from Count().
    done_.store(true);
    (*send_)(std::move(m));
  }

  const std::string id_;
  const std::string tag_;
  ProcessLauncher* const launcher_;
  const Send* const send_;
  int in_fd_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  int wake_fd_ = -1;
  bool tty_ = false;
  bool forward_ = false;
  int pid_ = 0;
  std::thread thread_;
  std::atomic<bool> done_{false};
  // Most output bytes sent and not acknowledged; 0: no window.
  size_t window_ = 0;
  // The client keeps an input window: ack what the command takes.
  bool input_acks_ = false;

  absl::Mutex mu_;
  std::string pending_ ABSL_GUARDED_BY(mu_);
  std::optional<std::pair<int, int>> resize_ ABSL_GUARDED_BY(mu_);
  bool close_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool eof_requested_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<ExitInfo> exit_ ABSL_GUARDED_BY(mu_);
  // Output bytes sent and not yet acknowledged (with a window).
  size_t unacked_ ABSL_GUARDED_BY(mu_) = 0;
};

SessionHost::SessionHost(ProcessLauncher* launcher, Send send)
    : launcher_(launcher), send_(std::move(send)) {}

SessionHost::~SessionHost() { CloseAll(); }

void SessionHost::ReapLocked() {
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second->done()) {
      it->second->Join();
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::StatusOr<int> SessionHost::Open(const std::string& id, const v1::SessionOpen& open,
                                      LaunchSpec task, const std::string& tag,
                                      const Wrap& wrap) {
  if (open.port() != 0 && (open.port() < 1 || open.port() > 65535)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("port: %d is not a TCP port (1-65535)", open.port()));
  }
  if (open.port() == 0 && open.argv().empty() && !open.login_shell()) {
    return absl::InvalidArgumentError("argv: empty: no command to run");
  }
  if (absl::Status s = CheckTerminalSize(open.rows(), open.cols(), true); !s.ok()) return s;
  if (!ValidTerm(open.term())) {
    return absl::InvalidArgumentError(
        "term: only letters, digits and \"._+-\", at most 64 characters");
  }
  if (open.input_window_bytes() < 0 ||
      static_cast<size_t>(open.input_window_bytes()) > kSessionMaxPendingInput) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "input_window_bytes: %d is not in 0-%d (what the agent holds unread per session)",
        open.input_window_bytes(), kSessionMaxPendingInput));
  }
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    ReapLocked();
    if (sessions_.count(id) > 0) {
      return absl::AlreadyExistsError(absl::StrCat("session ", id, " is already open"));
    }
    if (static_cast<int>(sessions_.size()) >= kMaxSessionsPerAgent) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "this node has %d sessions open, the most it runs at once", kMaxSessionsPerAgent));
    }
    session = std::make_shared<Session>(id, tag, launcher_, &send_);
    sessions_[id] = session;
  }
  auto drop = [&] {
    absl::MutexLock lock(&mu_);
    sessions_.erase(id);
  };
  if (absl::Status s = session->MakeWake(); !s.ok()) {
    drop();
    return s;
  }
  v1::SessionFromAgent started;
  started.set_session_id(id);
  const size_t window =
      open.output_window_bytes() > 0
          ? std::clamp(static_cast<size_t>(open.output_window_bytes()),
                       kSessionMinOutputWindow, kSessionMaxOutputWindow)
          : 0;

  if (open.port() > 0) {
    const int sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0) {
      drop();
      return absl::InternalError("socket: " + ErrnoText(errno));
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(open.port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      const int err = errno;
      close(sock);
      drop();
      return absl::UnavailableError(absl::StrFormat(
          "cannot connect to 127.0.0.1:%d on the task's node: %s", open.port(),
          ErrnoText(err)));
    }
    SetNonBlocking(sock);
    started.mutable_payload()->mutable_started()->set_pid(0);
    send_(std::move(started));
    session->Start(sock, sock, -1, false, true, 0, window, open.input_window_bytes() > 0);
    return 0;
  }

  // A command, with the task's launch: account, cgroup, environment, work
  // dir. Never its log or container settings.
  LaunchSpec spec = std::move(task);
  spec.log_path.clear();
  spec.keep_root = false;
  spec.bind_as_account.clear();
  spec.argv.assign(open.argv().begin(), open.argv().end());
  if (spec.argv.empty()) {
    auto shell = spec.env.find("SHELL");
    spec.argv = {shell != spec.env.end() && !shell->second.empty() ? shell->second : "/bin/sh",
                 "-l"};
  }
  int in_fd = -1, out_fd = -1, err_fd = -1;
  // The command's ends, closed once it has them.
  int child_fds[3] = {-1, -1, -1};
  if (open.tty()) {
    winsize ws{};
    ws.ws_row = static_cast<unsigned short>(open.rows() > 0 ? open.rows() : 24);
    ws.ws_col = static_cast<unsigned short>(open.cols() > 0 ? open.cols() : 80);
    int master = -1, slave = -1;
    char name[256] = {0};
    if (openpty(&master, &slave, name, nullptr, &ws) != 0) {
      const int err = errno;
      drop();
      return absl::InternalError("openpty: " + ErrnoText(err));
    }
    SetNonBlocking(master);
    fcntl(slave, F_SETFD, FD_CLOEXEC);
    // The terminal is the account's, as login(1) and sshd make it.
    if (spec.run_as.has_value()) {
      if (fchown(slave, spec.run_as->uid, -1) != 0 || fchmod(slave, 0620) != 0) {
        TC_LOG_WARN("session {}: cannot give {} to {}: {}", id, name, spec.run_as->user,
                    ErrnoText(errno));
      }
    }
    spec.tty_path = name;
    spec.env["TERM"] = open.term().empty() ? "xterm-256color" : open.term();
    in_fd = out_fd = master;
    child_fds[0] = slave;
  } else {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0) {
      drop();
      return absl::InternalError("pipe: " + ErrnoText(errno));
    }
    if (pipe2(err, O_CLOEXEC) != 0) {
      close(out[0]);
      close(out[1]);
      drop();
      return absl::InternalError("pipe: " + ErrnoText(errno));
    }
    out_fd = out[0];
    err_fd = err[0];
    child_fds[1] = out[1];
    child_fds[2] = err[1];
    spec.stdout_fd = out[1];
    spec.stderr_fd = err[1];
    if (open.stdin()) {
      int in[2];
      if (pipe2(in, O_CLOEXEC) != 0) {
        for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
        drop();
        return absl::InternalError("pipe: " + ErrnoText(errno));
      }
      in_fd = in[1];
      child_fds[0] = in[0];
      spec.stdin_fd = in[0];
    }
    SetNonBlocking(out_fd);
    SetNonBlocking(err_fd);
    if (in_fd >= 0) SetNonBlocking(in_fd);
  }
  std::weak_ptr<Session> weak = session;
  const absl::Status wrapped = wrap ? wrap(open, spec) : absl::OkStatus();
  absl::StatusOr<int> pid = !wrapped.ok() ? absl::StatusOr<int>(wrapped)
                                          : launcher_->Launch(spec, [weak](ExitInfo info) {
                                              if (auto s = weak.lock()) s->Exited(info);
                                            });
  for (int& fd : child_fds) CloseFd(fd);
  if (!pid.ok()) {
    CloseFd(in_fd);
    if (out_fd != in_fd) CloseFd(out_fd);
    CloseFd(err_fd);
    drop();
    return pid.status();
  }
  started.mutable_payload()->mutable_started()->set_pid(*pid);
  send_(std::move(started));
  session->Start(in_fd, out_fd, err_fd, open.tty(), false, *pid, window,
                 open.input_window_bytes() > 0);
  return *pid;
}

absl::Status SessionHost::Input(const std::string& id, const v1::SessionClientMessage& msg) {
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end() || it->second->done()) return absl::OkStatus();
    session = it->second;
  }
  return session->Apply(msg);
}

void SessionHost::CloseAll() {
  std::map<std::string, std::shared_ptr<Session>> all;
  {
    absl::MutexLock lock(&mu_);
    all.swap(sessions_);
  }
  for (auto& [id, s] : all) s->RequestClose();
  for (auto& [id, s] : all) s->Join();
}

int SessionHost::CloseTagged(const std::string& tag) {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (auto& [id, s] : sessions_) {
    if (s->done() || s->tag() != tag) continue;
    s->RequestClose();
    ++n;
  }
  return n;
}

int SessionHost::Count() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [id, s] : sessions_) n += s->done() ? 0 : 1;
  return n;
}

}  // namespace trainctl::worker
