#include "worker/torch_store.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"

extern char** environ;

namespace trainctl::worker {

absl::Status ReadLineBefore(int fd, absl::Time deadline, std::string& pending,
                            std::string& line) {
  while (true) {
    if (size_t nl = pending.find('\n'); nl != std::string::npos) {
      line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      return absl::OkStatus();
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError("no reply line in time");
    }
    pollfd pfd{fd, POLLIN, 0};
    const int r = poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return absl::UnavailableError(absl::StrCat("poll: ", std::strerror(errno)));
    if (r == 0) continue;  // The deadline check above ends the wait.
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(absl::StrCat("read: ", std::strerror(errno)));
    if (n == 0) return absl::UnavailableError("the store host closed its output");
    pending.append(buf, static_cast<size_t>(n));
  }
}

absl::StatusOr<std::unique_ptr<TorchStoreHost>> TorchStoreHost::Start(
    const std::vector<std::string>& argv, absl::Duration ready_timeout,
    absl::Duration request_timeout) {
  if (argv.empty()) return absl::InvalidArgumentError("torch store host: empty command");
  signal(SIGPIPE, SIG_IGN);
  int to[2], from[2];
  if (pipe2(to, O_CLOEXEC) != 0) {
    return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  if (pipe2(from, O_CLOEXEC) != 0) {
    close(to[0]);
    close(to[1]);
    return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, from[1], STDOUT_FILENO);
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, cargv[0], &fa, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(to[0]);
  close(from[1]);
  if (err != 0) {
    close(to[1]);
    close(from[0]);
    return absl::UnavailableError(
        absl::StrCat("cannot start ", argv[0], ": ", std::strerror(err)));
  }
  std::unique_ptr<TorchStoreHost> host(new TorchStoreHost(pid, to[1], from[0], request_timeout));
  std::string line;
  absl::Status s;
  {
    absl::MutexLock lock(&host->mu_);
    s = ReadLineBefore(host->from_fd_, absl::Now() + ready_timeout, host->pending_, line);
  }
  if (!s.ok() || !absl::StartsWith(line, "ready")) {
    return absl::UnavailableError(absl::StrCat(
        "torch store host ", argv.back(), " did not get ready: ",
        s.ok() ? absl::StrCat("said '", line, "'") : std::string(s.message())));
  }
  host->version_ = std::string(absl::StripPrefix(line, "ready "));
  return host;
}

TorchStoreHost::TorchStoreHost(pid_t pid, int to_fd, int from_fd,
                               absl::Duration request_timeout)
    : pid_(pid), request_timeout_(request_timeout), to_fd_(to_fd), from_fd_(from_fd) {}

TorchStoreHost::~TorchStoreHost() {
  {
    absl::MutexLock lock(&mu_);
    close(to_fd_);
    close(from_fd_);
  }
  for (int i = 0; i < 100; ++i) {  // Up to 5 s for a clean exit.
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    usleep(50'000);
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

absl::StatusOr<std::string> TorchStoreHost::RequestLocked(const std::string& request,
                                                          absl::Duration timeout) {
  if (broken_) return absl::UnavailableError("the torch store host has failed before");
  const std::string out = request + "\n";
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = write(to_fd_, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      broken_ = true;
      return absl::UnavailableError(
          absl::StrCat("torch store host: write: ", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  std::string line;
  if (absl::Status s = ReadLineBefore(from_fd_, absl::Now() + timeout, pending_, line);
      !s.ok()) {
    broken_ = true;
    return absl::UnavailableError(absl::StrCat("torch store host: ", s.message()));
  }
  return line;
}

absl::Status TorchStoreHost::Open(int port, int world_size) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::string> reply =
      RequestLocked(absl::StrCat("open ", port, " ", world_size), request_timeout_);
  if (!reply.ok()) return reply.status();
  if (*reply == absl::StrCat("ok ", port)) return absl::OkStatus();
  const std::string prefix = absl::StrCat("error ", port, " ");
  if (absl::StartsWith(*reply, prefix)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "PyTorch TCPStore on port ", port, ": ", reply->substr(prefix.size())));
  }
  return absl::UnavailableError(absl::StrCat("torch store host answered '", *reply, "'"));
}

void TorchStoreHost::Close(int port) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::string> reply = RequestLocked(absl::StrCat("close ", port), request_timeout_);
  if (!reply.ok()) {
    TC_LOG_WARN("closing the PyTorch store on port {}: {}", port,
                std::string(reply.status().message()));
  }
}

}  // namespace trainctl::worker
