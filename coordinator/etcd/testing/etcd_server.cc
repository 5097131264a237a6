#include "coordinator/etcd/testing/etcd_server.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/testing/loopback.h"

extern char** environ;

namespace trainctl::coord::testing {

absl::StatusOr<std::unique_ptr<EtcdServer>> EtcdServer::Start(const std::string& dir) {
  const std::string binary = "/usr/bin/etcd";
  if (access(binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError("etcd is not installed (Debian package etcd-server)");
  }
  std::filesystem::create_directories(dir);
  const int client = ::trainctl::testing::FreeLoopbackPort();
  const int peer = ::trainctl::testing::FreeLoopbackPort();
  const std::string c = absl::StrCat("http://127.0.0.1:", client);
  const std::string p = absl::StrCat("http://127.0.0.1:", peer);
  std::vector<std::string> args = {
      binary, "--name", "n1", "--data-dir", dir + "/data",
      "--listen-client-urls", c, "--advertise-client-urls", c,
      "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
      "--initial-cluster", "n1=" + p};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, (dir + "/etcd.stderr").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return absl::UnavailableError(absl::StrCat("cannot start etcd: rc ", rc));
  auto server = std::unique_ptr<EtcdServer>(
      new EtcdServer(pid, absl::StrCat("127.0.0.1:", client)));
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!::trainctl::testing::LoopbackAccepts(client)) {
    if (absl::Now() > deadline || waitpid(pid, nullptr, WNOHANG) == pid) {
      return absl::UnavailableError(
          absl::StrCat("etcd did not come up; see ", dir, "/etcd.stderr"));
    }
    absl::SleepFor(absl::Milliseconds(20));  // polling a port, not waiting for state
  }
  return server;
}

EtcdServer::~EtcdServer() {
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

}  // namespace trainctl::coord::testing
