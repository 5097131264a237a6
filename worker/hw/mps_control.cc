#include "worker/hw/mps_control.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"

extern char** environ;

namespace trainctl::worker {
namespace {

// sun_path holds 108 bytes with the terminating NUL; the server's sockets
// live directly in the pipe directory with names of a dozen bytes.
constexpr size_t kMaxPipeDirectoryBytes = 107 - 24;

std::string GpuDir(const std::string& root, int index) {
  return absl::StrCat(root, "/gpu-", index);
}

// `name` resolved on PATH (or as given when it has a slash); empty if none.
std::string FindOnPath(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    return access(name.c_str(), X_OK) == 0 ? name : "";
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "", ':',
                                              absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

}  // namespace

std::map<std::string, std::string> MpsClientEnv(const std::string& pipe_directory,
                                                int64_t memory_limit_bytes,
                                                int active_thread_pct) {
  std::map<std::string, std::string> env;
  env["CUDA_MPS_PIPE_DIRECTORY"] = pipe_directory;
  const int64_t mib = memory_limit_bytes >> 20;
  if (mib > 0) env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = absl::StrCat("0=", mib, "MB");
  if (active_thread_pct > 0 && active_thread_pct < 100) {
    env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = absl::StrCat(active_thread_pct);
  }
  return env;
}

absl::StatusOr<std::unique_ptr<DaemonMpsControl>> DaemonMpsControl::Create(
    std::string root, std::string control_binary) {
  if (root.empty()) {
    return absl::InvalidArgumentError("MPS directory: empty");
  }
  if (GpuDir(root, 999).size() + 5 > kMaxPipeDirectoryBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MPS directory %s: too long for UNIX socket paths (keep it under %d "
        "bytes, e.g. /run/trainctl-mps)",
        root, kMaxPipeDirectoryBytes - 14));
  }
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrFormat("MPS directory %s: %s", root, ec.message()));
  }
  chmod(root.c_str(), 0755);
  std::string binary = FindOnPath(control_binary);
  if (binary.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s not found or not executable (it ships with the NVIDIA driver's "
        "compute utilities)",
        control_binary));
  }
  return std::unique_ptr<DaemonMpsControl>(
      new DaemonMpsControl(std::move(root), std::move(binary)));
}

DaemonMpsControl::DaemonMpsControl(std::string root, std::string binary)
    : root_(std::move(root)), binary_(std::move(binary)) {}

std::string DaemonMpsControl::PipeDirectory(int index) const {
  absl::MutexLock lock(&mu_);
  return started_.count(index) > 0 ? GpuDir(root_, index) + "/pipe" : "";
}

absl::StatusOr<int> DaemonMpsControl::Run(int index, const std::string& uuid,
                                          const std::vector<std::string>& args,
                                          const std::string& stdin_text) const {
  // The daemon's environment: ours, with its GPU alone visible and its own
  // directories.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    absl::string_view kv(*e);
    if (absl::StartsWith(kv, "CUDA_VISIBLE_DEVICES=") ||
        absl::StartsWith(kv, "CUDA_MPS_PIPE_DIRECTORY=") ||
        absl::StartsWith(kv, "CUDA_MPS_LOG_DIRECTORY=")) {
      continue;
    }
    env_strings.emplace_back(kv);
  }
  env_strings.push_back(absl::StrCat("CUDA_VISIBLE_DEVICES=", uuid));
  env_strings.push_back(absl::StrCat("CUDA_MPS_PIPE_DIRECTORY=", GpuDir(root_, index), "/pipe"));
  env_strings.push_back(absl::StrCat("CUDA_MPS_LOG_DIRECTORY=", GpuDir(root_, index), "/log"));
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = {binary_};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  int in[2];
  if (pipe2(in, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, binary_.c_str(), &actions, nullptr, argv.data(),
                             envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  if (rc != 0) {
    close(in[1]);
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot run %s: %s", binary_, std::strerror(rc)));
  }
  if (!stdin_text.empty()) {
    (void)!write(in[1], stdin_text.data(), stdin_text.size());
  }
  close(in[1]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

absl::Status DaemonMpsControl::Start(int index, const std::string& uuid) {
  for (const char* sub : {"/pipe", "/log"}) {
    std::error_code ec;
    const std::string dir = GpuDir(root_, index) + sub;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrFormat("MPS directory %s: %s", dir, ec.message()));
    }
    chmod(dir.c_str(), 0755);
  }
  // -d: the control program starts the daemon in the background and exits.
  absl::StatusOr<int> exit = Run(index, uuid, {"-d"}, "");
  if (!exit.ok()) return exit.status();
  if (*exit != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s -d for GPU %d (%s) exited with status %d; see %s/log/control.log",
        binary_, index, uuid, *exit, GpuDir(root_, index)));
  }
  absl::MutexLock lock(&mu_);
  started_[index] = uuid;
  TC_LOG_INFO("MPS control daemon for GPU {} ({}): pipes in {}/pipe", index, uuid,
              GpuDir(root_, index));
  return absl::OkStatus();
}

absl::Status DaemonMpsControl::StopAll() {
  std::map<int, std::string> started;
  {
    absl::MutexLock lock(&mu_);
    started.swap(started_);
  }
  absl::Status first;
  for (const auto& [index, uuid] : started) {
    absl::StatusOr<int> exit = Run(index, uuid, {}, "quit\n");
    if (first.ok() && (!exit.ok() || *exit != 0)) {
      first = absl::InternalError(absl::StrFormat(
          "stopping the MPS daemon of GPU %d: %s", index,
          exit.ok() ? absl::StrCat("exit status ", *exit) : exit.status().ToString()));
    }
  }
  return first;
}

absl::Status FakeMpsControl::Start(int index, const std::string& uuid) {
  absl::MutexLock lock(&mu_);
  if (fail_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("fake MPS daemon for GPU %d fails to start", index));
  }
  running_[index] = uuid;
  return absl::OkStatus();
}

absl::Status FakeMpsControl::StopAll() {
  absl::MutexLock lock(&mu_);
  running_.clear();
  return absl::OkStatus();
}

std::string FakeMpsControl::PipeDirectory(int index) const {
  absl::MutexLock lock(&mu_);
  return running_.count(index) > 0 ? absl::StrCat("/fake-mps/gpu-", index, "/pipe") : "";
}

std::map<int, std::string> FakeMpsControl::Running() const {
  absl::MutexLock lock(&mu_);
  return running_;
}

void FakeMpsControl::SetFailing(bool fail) {
  absl::MutexLock lock(&mu_);
  fail_ = fail;
}

}  // namespace trainctl::worker
