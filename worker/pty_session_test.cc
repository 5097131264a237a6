#include "worker/pty_session.h"

#include <csignal>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/hw/posix_process_launcher.h"

namespace trainctl::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::ContainsRegex;

constexpr absl::Duration kWait = absl::Seconds(20);

// A socket listening on a free loopback port (backlog 1), its port in
// *port; -1 on failure.
int ListenOnLoopback(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 1) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

// What a session sent, collected for the test to wait on.
class Collector {
 public:
  SessionHost::Send Sender() {
    return [this](const v1::SessionFromAgent& m) {
      absl::MutexLock lock(&mu_);
      messages_.push_back(m);
    };
  }
  // Waits (bounded) until session `id` has sent its exit; returns it.
  std::optional<v1::SessionExit> WaitExit(const std::string& id, absl::Duration wait = kWait) {
    absl::MutexLock lock(&mu_);
    auto has_exit = [&] {
      for (const auto& m : messages_) {
        if (m.session_id() == id && m.payload().has_exit()) return true;
      }
      return false;
    };
    mu_.AwaitWithTimeout(absl::Condition(&has_exit), wait);
    for (const auto& m : messages_) {
      if (m.session_id() == id && m.payload().has_exit()) return m.payload().exit();
    }
    return std::nullopt;
  }
  // Waits (bounded) until session `id`'s stdout contains `text`.
  bool WaitOutput(const std::string& id, const std::string& text) {
    absl::MutexLock lock(&mu_);
    auto has = [&] { return absl::StrContains(OutLocked(id, false), text); };
    return mu_.AwaitWithTimeout(absl::Condition(&has), kWait);
  }
  // Waits (bounded) until session `id` has sent more than `bytes` bytes of
  // stdout, or its exit; returns how many it has sent.
  size_t WaitOutputBeyond(const std::string& id, size_t bytes) {
    absl::MutexLock lock(&mu_);
    auto more = [&] {
      if (OutLocked(id, false).size() > bytes) return true;
      for (const auto& m : messages_) {
        if (m.session_id() == id && m.payload().has_exit()) return true;
      }
      return false;
    };
    mu_.AwaitWithTimeout(absl::Condition(&more), kWait);
    return OutLocked(id, false).size();
  }
  std::string Out(const std::string& id, bool err = false) {
    absl::MutexLock lock(&mu_);
    return OutLocked(id, err);
  }
  // Waits (bounded) until session `id`'s input_acks add up to `bytes`;
  // returns their sum.
  int64_t WaitInputAcked(const std::string& id, int64_t bytes) {
    absl::MutexLock lock(&mu_);
    auto sum = [&] {
      int64_t n = 0;
      for (const auto& m : messages_) {
        if (m.session_id() == id) n += m.payload().input_ack();
      }
      return n;
    };
    auto enough = [&] { return sum() >= bytes; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), kWait);
    return sum();
  }
  std::vector<v1::SessionFromAgent> All() {
    absl::MutexLock lock(&mu_);
    return messages_;
  }

 private:
  std::string OutLocked(const std::string& id, bool err) {
    std::string out;
    for (const auto& m : messages_) {
      if (m.session_id() != id) continue;
      if (!err && m.payload().has_stdout()) out += m.payload().stdout();
      if (err && m.payload().has_stderr()) out += m.payload().stderr();
    }
    return out;
  }
  absl::Mutex mu_;
  std::vector<v1::SessionFromAgent> messages_;
};

class PtySessionTest : public ::testing::Test {
 protected:
  PtySessionTest()
      : launcher_([] {
          PosixProcessLauncher::Options o;
          o.task_shim = TRAINCTL_TASK_SHIM;
          return o;
        }()),
        host_(&launcher_, collector_.Sender()) {
    // As trainctl-agent does: a write to a command that is gone is EPIPE.
    signal(SIGPIPE, SIG_IGN);
    workdir_ = std::filesystem::temp_directory_path() /
               absl::StrCat("pty_session_test.", getpid());
    std::filesystem::create_directories(workdir_);
    // The task's launch, as the agent built it.
    task_.argv = {"sleep", "1000"};
    task_.env = {{"PATH", "/usr/bin:/bin"}, {"RANK", "1"}, {"SHELL", "/bin/sh"},
                 {"CUDA_VISIBLE_DEVICES", "3"}};
    task_.workdir = workdir_.string();
    task_.log_path = (workdir_ / "task.log").string();
  }
  ~PtySessionTest() override {
    host_.CloseAll();
    std::filesystem::remove_all(workdir_);
  }

  static v1::SessionOpen Exec(std::vector<std::string> argv, bool tty) {
    v1::SessionOpen o;
    o.set_job_id(7);
    o.set_rank(1);
    for (auto& a : argv) o.add_argv(a);
    o.set_tty(tty);
    return o;
  }
  static v1::SessionClientMessage Stdin(const std::string& bytes) {
    v1::SessionClientMessage m;
    m.set_stdin(bytes);
    return m;
  }

  Collector collector_;
  PosixProcessLauncher launcher_;
  SessionHost host_;
  std::filesystem::path workdir_;
  LaunchSpec task_;
};

TEST_F(PtySessionTest, CommandSeesTheTasksEnvironmentAndWorkdirAndItsExitCodeComesBack) {
  ASSERT_TRUE(host_.Open("s1", Exec({"sh", "-c", "echo rank=$RANK gpus=$CUDA_VISIBLE_DEVICES; "
                                                 "pwd; echo oops >&2; exit 3"},
                                    false),
                         task_)
                  .ok());
  auto exit = collector_.WaitExit("s1");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), 3);
  EXPECT_EQ(exit->signal(), 0);
  EXPECT_THAT(collector_.Out("s1"), HasSubstr("rank=1 gpus=3\n"));
  EXPECT_THAT(collector_.Out("s1"), HasSubstr(workdir_.string()));
  // Without a tty stderr is its own stream.
  EXPECT_EQ(collector_.Out("s1", true), "oops\n");
  // The task's log is not the session's.
  EXPECT_FALSE(std::filesystem::exists(workdir_ / "task.log"));
  // `started` comes first, with the pid.
  auto all = collector_.All();
  ASSERT_FALSE(all.empty());
  EXPECT_TRUE(all.front().payload().has_started());
  EXPECT_GT(all.front().payload().started().pid(), 0);
}

TEST_F(PtySessionTest, TtyIsAPtyOfTheRequestedSizeThatFollowsResizes) {
  v1::SessionOpen o = Exec({"sh", "-c", "tty; stty size; read x; stty size"}, true);
  o.set_rows(30);
  o.set_cols(100);
  o.set_stdin(true);
  ASSERT_TRUE(host_.Open("t", o, task_).ok());
  ASSERT_TRUE(collector_.WaitOutput("t", "30 100"));
  EXPECT_THAT(collector_.Out("t"), ContainsRegex("/dev/pts/[0-9]+"));
  v1::SessionClientMessage resize;
  resize.mutable_resize()->set_rows(40);
  resize.mutable_resize()->set_cols(120);
  ASSERT_TRUE(host_.Input("t", resize).ok());
  ASSERT_TRUE(host_.Input("t", Stdin("\r")).ok());
  auto exit = collector_.WaitExit("t");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), 0);
  EXPECT_THAT(collector_.Out("t"), HasSubstr("40 120"));
}

TEST_F(PtySessionTest, CtrlCOnTheTerminalInterruptsTheForegroundCommand) {
  v1::SessionOpen o = Exec({"sh", "-c", "echo ready; sleep 1000"}, true);
  o.set_stdin(true);
  ASSERT_TRUE(host_.Open("c", o, task_).ok());
  ASSERT_TRUE(collector_.WaitOutput("c", "ready"));
  // sh -c catches a SIGINT that comes before it has started `sleep` (dash's
  // rule for -c), as on any terminal: type Ctrl-C again, a bounded number
  // of times, until the command is interrupted.
  std::optional<v1::SessionExit> exit;
  for (int i = 0; i < 20 && !exit.has_value(); ++i) {
    ASSERT_TRUE(host_.Input("c", Stdin("\x03")).ok());
    exit = collector_.WaitExit("c", absl::Seconds(1));
  }
  ASSERT_TRUE(exit.has_value()) << collector_.Out("c");
  EXPECT_EQ(exit->signal(), SIGINT);
  EXPECT_EQ(exit->exit_code(), -1);
}

TEST_F(PtySessionTest, StdinReachesTheCommandAndEofEndsIt) {
  v1::SessionOpen o = Exec({"cat"}, false);
  o.set_stdin(true);
  ASSERT_TRUE(host_.Open("i", o, task_).ok());
  ASSERT_TRUE(host_.Input("i", Stdin("hello\n")).ok());
  ASSERT_TRUE(collector_.WaitOutput("i", "hello\n"));
  v1::SessionClientMessage eof;
  eof.set_stdin_eof(true);
  ASSERT_TRUE(host_.Input("i", eof).ok());
  auto exit = collector_.WaitExit("i");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), 0);
}

// With an input window the agent says how much input the command took:
// the acks add up to what was sent, and none comes without a window.
TEST_F(PtySessionTest, InputWindowAcksWhatTheCommandTook) {
  v1::SessionOpen o = Exec({"cat"}, false);
  o.set_stdin(true);
  o.set_input_window_bytes(256 << 10);
  ASSERT_TRUE(host_.Open("w", o, task_).ok());
  const std::string chunk(64 << 10, 'x');
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(host_.Input("w", Stdin(chunk)).ok());
  EXPECT_EQ(collector_.WaitInputAcked("w", 4 * chunk.size()), 4 * chunk.size());
  ASSERT_TRUE(collector_.WaitOutputBeyond("w", 4 * chunk.size() - 1) >= 4 * chunk.size());

  v1::SessionOpen plain = Exec({"cat"}, false);
  plain.set_stdin(true);
  ASSERT_TRUE(host_.Open("p", plain, task_).ok());
  ASSERT_TRUE(host_.Input("p", Stdin("hello\n")).ok());
  ASSERT_TRUE(collector_.WaitOutput("p", "hello\n"));
  for (const auto& m : collector_.All()) {
    if (m.session_id() == "p") {
      EXPECT_EQ(m.payload().input_ack(), 0);
    }
  }
}

// A command that does not read, and a client without a window that keeps
// sending: past kSessionMaxPendingInput the input is refused, not dropped
// (the agent then ends the session, Agent::HandleSession).
TEST_F(PtySessionTest, InputBeyondWhatTheAgentHoldsIsRefused) {
  v1::SessionOpen o = Exec({"sleep", "1000"}, false);
  o.set_stdin(true);
  ASSERT_TRUE(host_.Open("s", o, task_).ok());
  const std::string chunk(64 << 10, 'y');
  absl::Status s;
  size_t sent = 0;
  // sleep never reads: the pipe takes 64 KiB, the agent up to 1 MiB more.
  for (int i = 0; i < 64 && s.ok(); ++i) {
    s = host_.Input("s", Stdin(chunk));
    if (s.ok()) sent += chunk.size();
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_GE(sent, kSessionMaxPendingInput);
}

TEST_F(PtySessionTest, CloseKillsTheCommandsProcessGroup) {
  ASSERT_TRUE(host_.Open("k", Exec({"sh", "-c", "sleep 1000 & sleep 1000"}, false), task_).ok());
  v1::SessionClientMessage close;
  close.set_close(true);
  ASSERT_TRUE(host_.Input("k", close).ok());
  auto exit = collector_.WaitExit("k");
  ASSERT_TRUE(exit.has_value());
  // The launcher's stop: SIGTERM, then SIGKILL to the group.
  EXPECT_THAT(exit->signal(), ::testing::AnyOf(SIGTERM, SIGKILL));
  EXPECT_EQ(host_.Count(), 0);
}

TEST_F(PtySessionTest, SessionsEndWhenTheirTaskEnds) {
  ASSERT_TRUE(host_.Open("a", Exec({"sleep", "1000"}, false), task_, "7/0/1").ok());
  ASSERT_TRUE(host_.Open("b", Exec({"sleep", "1000"}, false), task_, "7/0/2").ok());
  EXPECT_EQ(host_.CloseTagged("7/0/1"), 1);
  ASSERT_TRUE(collector_.WaitExit("a").has_value());
  EXPECT_EQ(host_.Count(), 1);
}

TEST_F(PtySessionTest, OutputComesInBoundedChunks) {
  ASSERT_TRUE(host_.Open("big", Exec({"head", "-c", "300000", "/dev/zero"}, false), task_).ok());
  ASSERT_TRUE(collector_.WaitExit("big").has_value());
  size_t total = 0;
  for (const auto& m : collector_.All()) {
    if (!m.payload().has_stdout()) continue;
    EXPECT_LE(m.payload().stdout().size(), kSessionChunkBytes);
    total += m.payload().stdout().size();
  }
  EXPECT_EQ(total, 300000u);
}

TEST_F(PtySessionTest, LoginShellIsTheAccountsShell) {
  v1::SessionOpen o;
  o.set_login_shell(true);
  o.set_tty(true);
  o.set_stdin(true);
  ASSERT_TRUE(host_.Open("sh", o, task_).ok());
  ASSERT_TRUE(host_.Input("sh", Stdin("echo shell=$0; exit 4\r")).ok());
  auto exit = collector_.WaitExit("sh");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), 4);
  EXPECT_THAT(collector_.Out("sh"), HasSubstr("shell=/bin/sh"));
}

TEST_F(PtySessionTest, PortForwardCarriesBytesBothWays) {
  int port = 0;
  const int lfd = ListenOnLoopback(&port);
  ASSERT_GE(lfd, 0);
  // An upper-casing echo server for one connection.
  std::thread server([lfd] {
    const int c = accept(lfd, nullptr, nullptr);
    char buf[256];
    ssize_t n;
    while ((n = read(c, buf, sizeof(buf))) > 0) {
      for (ssize_t i = 0; i < n; ++i) buf[i] = static_cast<char>(toupper(buf[i]));
      (void)!write(c, buf, n);
    }
    close(c);
  });
  v1::SessionOpen o;
  o.set_port(port);
  ASSERT_TRUE(host_.Open("pf", o, task_).ok());
  ASSERT_TRUE(host_.Input("pf", Stdin("ping")).ok());
  ASSERT_TRUE(collector_.WaitOutput("pf", "PING"));
  v1::SessionClientMessage eof;
  eof.set_stdin_eof(true);
  ASSERT_TRUE(host_.Input("pf", eof).ok());
  auto exit = collector_.WaitExit("pf");
  server.join();
  close(lfd);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), 0);
}

TEST_F(PtySessionTest, OutputWindowHoldsTheConnectionBackUntilAcked) {
  int port = 0;
  const int lfd = ListenOnLoopback(&port);
  ASSERT_GE(lfd, 0);
  constexpr size_t kTotal = 1 << 20;
  // A server that writes kTotal bytes at once and closes.
  std::thread server([lfd] {
    const int c = accept(lfd, nullptr, nullptr);
    const std::string data(kTotal, 'z');
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = write(c, data.data() + off, data.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    close(c);
  });
  v1::SessionOpen o;
  o.set_port(port);
  o.set_output_window_bytes(1);  // clamped up to kSessionMinOutputWindow
  ASSERT_TRUE(host_.Open("win", o, task_).ok());
  // Never more than the window beyond what is acknowledged, whenever the
  // output is looked at; each ack lets the rest come.
  size_t acked = 0;
  while (acked < kTotal) {
    const size_t seen = collector_.WaitOutputBeyond("win", acked);
    ASSERT_GT(seen, acked) << "no output beyond the " << acked << " bytes acked";
    EXPECT_LE(seen - acked, kSessionMinOutputWindow);
    v1::SessionClientMessage ack;
    ack.set_output_ack(static_cast<int64_t>(seen - acked));
    ASSERT_TRUE(host_.Input("win", ack).ok());
    acked = seen;
  }
  auto exit = collector_.WaitExit("win");
  server.join();
  close(lfd);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(collector_.Out("win"), std::string(kTotal, 'z'));
  v1::SessionClientMessage bad;
  bad.set_output_ack(0);
  EXPECT_EQ(host_.Input("win", bad).code(), absl::StatusCode::kOk);  // ended: ignored
}

TEST_F(PtySessionTest, ForwardToAPortNobodyListensOnIsUnavailable) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
  close(s);  // a port just freed: nothing listens there
  v1::SessionOpen o;
  o.set_port(ntohs(addr.sin_port));
  EXPECT_EQ(host_.Open("no", o, task_).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(PtySessionTest, BadRequestsAreInvalidArgumentNamingTheField) {
  v1::SessionOpen o;
  o.set_port(70000);
  auto r = host_.Open("a", o, task_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("port"));
  r = host_.Open("b", v1::SessionOpen(), task_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("argv"));
  o = Exec({"true"}, true);
  o.set_term("xterm; rm -rf /");
  r = host_.Open("c", o, task_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("term"));
  ASSERT_TRUE(host_.Open("d", Exec({"sleep", "1000"}, false), task_).ok());
  EXPECT_EQ(host_.Open("d", Exec({"true"}, false), task_).status().code(),
            absl::StatusCode::kAlreadyExists);
  v1::SessionClientMessage sig;
  sig.set_signal(99);
  EXPECT_EQ(host_.Input("d", sig).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(host_.Open("e", Exec({"no-such-program-xyz"}, false), task_).status().code(),
            absl::StatusCode::kNotFound);
  o = Exec({"cat"}, false);
  o.set_input_window_bytes(static_cast<int32_t>(kSessionMaxPendingInput) + 1);
  r = host_.Open("f", o, task_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("input_window_bytes"));
}

}  // namespace
}  // namespace trainctl::worker
