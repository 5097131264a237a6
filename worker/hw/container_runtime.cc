#include "worker/hw/container_runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

extern char** environ;

namespace trainctl::worker {
namespace {

bool ValidEnvName(const std::string& name) {
  if (name.empty() || absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

bool ValidContainerName(const std::string& name) {
  if (name.empty() || !absl::ascii_isalnum(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
           c == '-';
  });
}

// "GPU-5c89852c-..." or "MIG-GPU-.../7/0" / "MIG-<uuid>".
bool ValidGpuUuid(const std::string& uuid) {
  if (uuid.empty()) return false;
  return std::all_of(uuid.begin(), uuid.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '/';
  });
}

absl::Status CheckEnvNames(const std::map<std::string, std::string>& env) {
  for (const auto& [name, value] : env) {
    if (!ValidEnvName(name)) {
      // Up to a '=' only: a malformed name may hold a value ("TOKEN=...").
      const size_t eq = name.find('=');
      return absl::InvalidArgumentError(absl::StrCat(
          "bad environment variable name \"",
          absl::CEscape(name.substr(0, std::min<size_t>(eq, 64))),
          eq == std::string::npos ? "" : "=...",
          "\" for the container: want [A-Za-z_][A-Za-z0-9_]*"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckHostPath(const std::string& what, const std::string& path) {
  if (path.empty() || path[0] != '/' || absl::StrContains(path, ':') ||
      absl::StrContains(path, ',')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad container ", what, " \"", path,
        "\": want an absolute path without ':' or ',' (the runtimes' separators)"));
  }
  return absl::OkStatus();
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

// Runs `binary --version` (stdin /dev/null, stderr discarded) and returns
// the last word of its first line: "podman version 4.3.1" -> "4.3.1",
// "apptainer version 1.2.5" -> "1.2.5", "singularity-ce version 3.11.4" ->
// "3.11.4".
absl::StatusOr<std::string> RunVersion(const std::string& binary) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  const char* argv[] = {binary.c_str(), "--version", nullptr};
  pid_t pid = 0;
  const int err = posix_spawn(&pid, binary.c_str(), &fa, nullptr,
                              const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  if (err != 0) {
    close(out[0]);
    return absl::InternalError(absl::StrCat("cannot run ", binary, ": ", std::strerror(err)));
  }
  std::string text;
  char buf[512];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof(buf))) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (text.size() < 4096) text.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(
        binary, " --version failed (",
        WIFEXITED(status) ? absl::StrCat("exit ", WEXITSTATUS(status))
                          : absl::StrCat("signal ", WTERMSIG(status)),
        ")"));
  }
  absl::string_view first = text;
  first = first.substr(0, first.find('\n'));
  std::vector<absl::string_view> words = absl::StrSplit(first, ' ', absl::SkipWhitespace());
  if (words.empty()) {
    return absl::InternalError(absl::StrCat(binary, " --version printed nothing"));
  }
  return std::string(words.back());
}

}  // namespace

ContainerRuntime::ContainerRuntime(ContainerRuntimeKind kind, std::string binary,
                                   std::string version, bool rootless, Options options)
    : kind_(kind),
      binary_(std::move(binary)),
      version_(std::move(version)),
      rootless_(rootless),
      options_(std::move(options)) {}

absl::StatusOr<ContainerRuntime> ContainerRuntime::Detect(const std::string& path_env,
                                                          Options options) {
  std::vector<std::pair<ContainerRuntimeKind, const char*>> names;
  if (options.want != ContainerRuntimeKind::kApptainer) {
    names.emplace_back(ContainerRuntimeKind::kPodman, "podman");
  }
  if (options.want != ContainerRuntimeKind::kPodman) {
    names.emplace_back(ContainerRuntimeKind::kApptainer, "apptainer");
    names.emplace_back(ContainerRuntimeKind::kApptainer, "singularity");
  }
  const std::vector<std::string> dirs =
      absl::StrSplit(path_env, ':', absl::SkipEmpty());
  std::vector<std::string> rejected;
  for (const auto& [kind, name] : names) {
    for (const std::string& dir : dirs) {
      const std::string path = absl::StrCat(dir, "/", name);
      if (access(path.c_str(), F_OK) != 0) continue;
      if (!IsExecutableFile(path)) {
        rejected.push_back(absl::StrCat(path, " is not an executable file"));
        continue;
      }
      auto version = RunVersion(path);
      if (!version.ok()) {
        rejected.push_back(std::string(version.status().message()));
        continue;
      }
      for (const char* var : {"HOME", "XDG_RUNTIME_DIR"}) {
        const char* value = std::getenv(var);
        if (value != nullptr && !options.runtime_env.count(var)) {
          options.runtime_env[var] = value;
        }
      }
      return ContainerRuntime(kind, path, *std::move(version), geteuid() != 0,
                              std::move(options));
    }
  }
  std::string wanted = options.want == ContainerRuntimeKind::kPodman      ? "podman"
                       : options.want == ContainerRuntimeKind::kApptainer ? "apptainer or singularity"
                                                                          : "podman, apptainer or singularity";
  return absl::NotFoundError(absl::StrCat(
      "no container runtime (", wanted, ") in PATH=", path_env,
      rejected.empty() ? "" : absl::StrCat("; rejected: ", absl::StrJoin(rejected, "; ")),
      " (Debian: apt-get install podman)"));
}

std::string ContainerRuntime::Describe() const {
  const char* name = kind_ == ContainerRuntimeKind::kPodman      ? "podman"
                     : kind_ == ContainerRuntimeKind::kApptainer ? "apptainer"
                                                                 : "none";
  if (kind_ == ContainerRuntimeKind::kNone) return "no container runtime";
  return absl::StrCat(name, " ", version_, " (", binary_, rootless_ ? ", rootless" : ", rootful",
                      options_.global_args.empty()
                          ? ""
                          : absl::StrCat(", global args: ", absl::StrJoin(options_.global_args, " ")),
                      ")");
}

absl::StatusOr<WrappedLaunch> ContainerRuntime::WrapArgv(const ContainerLaunch& c) const {
  if (kind_ == ContainerRuntimeKind::kNone) {
    return absl::FailedPreconditionError("no container runtime on this node");
  }
  if (c.image.empty() || c.image[0] == '-') {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad container image \"", c.image, "\": empty or starting with '-'"));
  }
  if (c.argv.empty()) return absl::InvalidArgumentError("empty argv for the container");
  if (absl::Status s = CheckEnvNames(c.env); !s.ok()) return s;
  if (kind_ == ContainerRuntimeKind::kPodman) {
    if (options_.env_exec.empty()) {
      return absl::FailedPreconditionError(
          "podman needs trainctl-container-env (ContainerRuntime::Options::env_exec)");
    }
    if (absl::Status s = CheckHostPath("environment file", c.env_file); !s.ok()) return s;
  }
  for (const std::string& m : c.mounts) {
    if (absl::Status s = CheckHostPath("mount", m); !s.ok()) return s;
  }
  for (const auto& [target, source] : c.mount_sources) {
    if (absl::Status s = CheckHostPath("mount source", source); !s.ok()) return s;
  }
  auto source_of = [&c](const std::string& m) {
    auto it = c.mount_sources.find(m);
    return it == c.mount_sources.end() ? m : it->second;
  };
  if (!c.workdir.empty()) {
    if (absl::Status s = CheckHostPath("workdir", c.workdir); !s.ok()) return s;
  }
  if (!c.name.empty() && !ValidContainerName(c.name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad container name \"", c.name, "\": want [A-Za-z0-9][A-Za-z0-9_.-]*"));
  }
  for (const std::string& g : c.gpu_uuids) {
    if (!ValidGpuUuid(g)) {
      return absl::InvalidArgumentError(absl::StrCat("bad GPU UUID \"", g, "\""));
    }
  }
  if (!c.cgroup_parent.empty() && (c.cgroup_parent[0] != '/' ||
                                   absl::StrContains(c.cgroup_parent, ".."))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad cgroup parent \"", c.cgroup_parent,
        "\": want a path relative to the cgroup mount, starting with '/'"));
  }
  auto from_image = [&](const std::string& name) {
    return std::find(options_.image_env.begin(), options_.image_env.end(), name) !=
           options_.image_env.end();
  };

  WrappedLaunch w;
  w.env = options_.runtime_env;
  std::vector<std::string>& a = w.argv;
  a.push_back(binary_);
  a.insert(a.end(), options_.global_args.begin(), options_.global_args.end());
  if (kind_ == ContainerRuntimeKind::kPodman) {
    // The task's cgroup must be a plain path: the systemd cgroup manager
    // would want a slice name.
    if (!c.cgroup_parent.empty()) a.push_back("--cgroup-manager=cgroupfs");
    a.insert(a.end(), {"run", "--rm", "--init"});
    if (!c.name.empty()) a.insert(a.end(), {"--replace", "--name", c.name});
    a.insert(a.end(), {"--network=host", "--ipc=host", "--pids-limit=-1",
                       "--log-driver=passthrough", "--security-opt=label=disable"});
    if (rootless_) {
      a.push_back("--userns=keep-id");
    } else if (c.uid >= 0) {
      a.insert(a.end(), {"--user", c.gid >= 0 ? absl::StrCat(c.uid, ":", c.gid)
                                              : absl::StrCat(c.uid)});
    }
    if (!c.cgroup_parent.empty()) a.push_back("--cgroup-parent=" + c.cgroup_parent);
    for (const std::string& g : c.gpu_uuids) {
      a.insert(a.end(), {"--device", "nvidia.com/gpu=" + g});
    }
    for (const std::string& m : c.mounts) a.insert(a.end(), {"-v", source_of(m) + ":" + m});
    if (!c.workdir.empty()) a.insert(a.end(), {"-w", c.workdir});
    // The task's variables: in c.env_file, set inside by env-exec.
    a.insert(a.end(), {"-v", absl::StrCat(options_.env_exec, ":", kEnvExecInContainer, ":ro"),
                       "-v", absl::StrCat(c.env_file, ":", kEnvFileInContainer, ":ro")});
  } else {
    a.insert(a.end(), {"exec", "--cleanenv"});
    if (!c.gpu_uuids.empty()) a.push_back("--nv");
    for (const std::string& m : c.mounts) {
      const std::string source = source_of(m);
      a.insert(a.end(), {"--bind", source == m ? m : source + ":" + m});
    }
    if (!c.workdir.empty()) a.insert(a.end(), {"--pwd", c.workdir});
    // A `singularity` binary (Singularity, or Apptainer's compatibility
    // link) reads SINGULARITYENV_; Apptainer reads both, preferring its own.
    const std::string prefix =
        absl::EndsWith(binary_, "/singularity") ? "SINGULARITYENV_" : "APPTAINERENV_";
    for (const auto& [name, value] : c.env) {
      if (from_image(name)) continue;
      w.env[prefix + name] = value;
    }
    if (!c.gpu_uuids.empty() && !c.env.count("CUDA_VISIBLE_DEVICES")) {
      w.env[prefix + "CUDA_VISIBLE_DEVICES"] = absl::StrJoin(c.gpu_uuids, ",");
    }
  }
  a.insert(a.end(), options_.run_args.begin(), options_.run_args.end());
  a.push_back(c.image);
  if (kind_ == ContainerRuntimeKind::kPodman) {
    a.insert(a.end(), {kEnvExecInContainer, kEnvFileInContainer});
  }
  a.insert(a.end(), c.argv.begin(), c.argv.end());
  return w;
}

namespace {

// TERM as a terminal type name: letters, digits and "._+-", at most 64.
bool ValidTerm(const std::string& term) {
  return term.size() <= 64 && std::all_of(term.begin(), term.end(), [](char c) {
           return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
                  c == '_' || c == '+' || c == '-';
         });
}

// A login shell inside an image: the task's $SHELL when the image has it,
// else the image's /bin/sh (an account's shell on the host, /bin/bash or
// /usr/bin/zsh, is often missing from a slim image). No value in it: $SHELL
// is expanded inside.
const std::vector<std::string>& LoginShellArgv() {
  static const auto* argv = new std::vector<std::string>{
      "/bin/sh", "-c",
      "if [ -n \"$SHELL\" ] && [ -x \"$SHELL\" ]; then exec \"$SHELL\" -l; fi; "
      "exec /bin/sh -l"};
  return *argv;
}

}  // namespace

absl::StatusOr<WrappedLaunch> ContainerRuntime::ExecArgv(const ContainerLaunch& c,
                                                         const ContainerExec& e) const {
  if (kind_ == ContainerRuntimeKind::kNone) {
    return absl::FailedPreconditionError("no container runtime on this node");
  }
  if (e.argv.empty() && !e.login_shell) {
    return absl::InvalidArgumentError("argv: empty: no command to run in the container");
  }
  if (e.tty && !ValidTerm(e.term)) {
    return absl::InvalidArgumentError(
        "term: only letters, digits and \"._+-\", at most 64 characters");
  }
  const std::vector<std::string>& argv = e.argv.empty() ? LoginShellArgv() : e.argv;
  if (kind_ == ContainerRuntimeKind::kApptainer) {
    ContainerLaunch again = c;
    again.argv = argv;
    absl::StatusOr<WrappedLaunch> w = WrapArgv(again);
    if (!w.ok()) return w.status();
    if (e.tty && !e.term.empty()) {
      const std::string prefix =
          absl::EndsWith(binary_, "/singularity") ? "SINGULARITYENV_" : "APPTAINERENV_";
      w->env[prefix + "TERM"] = e.term;
    }
    return w;
  }
  if (options_.env_exec.empty()) {
    return absl::FailedPreconditionError(
        "podman needs trainctl-container-env (ContainerRuntime::Options::env_exec)");
  }
  if (c.name.empty() || !ValidContainerName(c.name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "name: bad container name \"", c.name, "\": want [A-Za-z0-9][A-Za-z0-9_.-]*"));
  }
  if (c.env_file.empty()) {
    return absl::InvalidArgumentError(
        "env_file: empty: the task's environment file is what sets its variables inside");
  }
  if (!c.workdir.empty()) {
    if (absl::Status s = CheckHostPath("workdir", c.workdir); !s.ok()) return s;
  }
  WrappedLaunch w;
  w.env = options_.runtime_env;
  std::vector<std::string>& a = w.argv;
  a.push_back(binary_);
  a.insert(a.end(), options_.global_args.begin(), options_.global_args.end());
  // The manager the container was made with (WrapArgv).
  if (!c.cgroup_parent.empty()) a.push_back("--cgroup-manager=cgroupfs");
  a.push_back("exec");
  if (e.stdin_open) a.push_back("-i");
  if (e.tty) a.push_back("-t");
  a.push_back("--detach-keys=");
  if (c.uid >= 0) {
    a.insert(a.end(), {"--user", c.gid >= 0 ? absl::StrCat(c.uid, ":", c.gid)
                                            : absl::StrCat(c.uid)});
  }
  if (!c.workdir.empty()) a.insert(a.end(), {"-w", c.workdir});
  if (e.tty && !e.term.empty()) a.insert(a.end(), {"--env", "TERM=" + e.term});
  a.insert(a.end(), {c.name, kEnvExecInContainer, kEnvFileInContainer});
  a.insert(a.end(), argv.begin(), argv.end());
  // The task is RUNNING once `podman run` started, but its container runs
  // only after the image is there (a pull may take minutes): the exec waits
  // for it, through the host's /bin/sh. The script holds the podman command
  // (the operator's configuration) and the container name (checked above);
  // the command's own arguments stay positional parameters, never code.
  std::vector<std::string> inspect = {binary_};
  inspect.insert(inspect.end(), options_.global_args.begin(), options_.global_args.end());
  std::vector<std::string> quoted;
  for (const std::string& arg : inspect) {
    quoted.push_back(absl::StrCat("'", absl::StrReplaceAll(arg, {{"'", "'\\''"}}), "'"));
  }
  const std::string running = absl::StrCat(
      "[ \"$(", absl::StrJoin(quoted, " "),
      " container inspect --format '{{.State.Running}}' ", c.name,
      " 2>/dev/null)\" = true ]");
  const std::string script = absl::StrCat(
      "if ! ", running, "; then\n",
      "  echo 'trainctl: waiting for container ", c.name, " to run' >&2\n",
      "  t=0\n",
      "  until ", running, "; do\n",
      "    t=$((t + 1))\n",
      "    if [ $t -gt ", kExecWaitSeconds * 5, " ]; then\n",
      "      echo 'trainctl: container ", c.name, " is not running after ", kExecWaitSeconds,
      " s' >&2\n",
      "      exit 125\n",
      "    fi\n",
      "    sleep 0.2\n",
      "  done\n",
      "fi\n",
      "exec \"$@\"\n");
  std::vector<std::string> waiting = {"/bin/sh", "-c", script, "trainctl-exec"};
  waiting.insert(waiting.end(), a.begin(), a.end());
  w.argv = std::move(waiting);
  return w;
}

bool ContainerRuntime::SharesHostNetwork() const {
  if (kind_ == ContainerRuntimeKind::kNone) return false;
  const std::vector<std::string>& r = options_.run_args;
  if (kind_ == ContainerRuntimeKind::kApptainer) {
    return std::none_of(r.begin(), r.end(), [](const std::string& arg) {
      return arg == "--net" || arg == "-n" || arg == "--network" ||
             absl::StartsWith(arg, "--net=") || absl::StartsWith(arg, "--network=");
    });
  }
  std::string network = "host";  // WrapArgv's --network=host; the last one wins
  for (size_t i = 0; i < r.size(); ++i) {
    for (const char* flag : {"--network", "--net"}) {
      if (r[i] == flag && i + 1 < r.size()) {
        network = r[i + 1];
      } else if (absl::StartsWith(r[i], absl::StrCat(flag, "="))) {
        network = r[i].substr(std::strlen(flag) + 1);
      }
    }
  }
  return network == "host";
}

absl::StatusOr<std::string> ContainerRuntime::EnvFileContent(const ContainerLaunch& c) const {
  if (absl::Status s = CheckEnvNames(c.env); !s.ok()) return s;
  std::string out;
  for (const auto& [name, value] : c.env) {
    if (std::find(options_.image_env.begin(), options_.image_env.end(), name) !=
        options_.image_env.end()) {
      continue;
    }
    if (value.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable ", name, ": value holds a NUL byte"));
    }
    absl::StrAppend(&out, name, "=", value);
    out.push_back('\0');
  }
  return out;
}

std::vector<std::vector<std::string>> ContainerRuntime::CleanupCommands(
    const std::string& name) const {
  if (kind_ != ContainerRuntimeKind::kPodman || name.empty()) return {};
  std::vector<std::vector<std::string>> commands(2, {binary_});
  for (auto& c : commands) {
    c.insert(c.end(), options_.global_args.begin(), options_.global_args.end());
  }
  commands[0].insert(commands[0].end(), {"stop", "--ignore", "--time=0", name});
  commands[1].insert(commands[1].end(), {"rm", "--force", "--ignore", name});
  return commands;
}

}  // namespace trainctl::worker
