// container_wrap_probe: runs a command in a container the way the agent will,
// through ContainerRuntime (worker/hw/container_runtime.h), for
// tests/e2e/container_smoke_e2e.sh.
//
//   container_wrap_probe [--global-arg A]... [--run-arg A]... --image IMAGE
//       [--mount DIR]... [--workdir DIR] [--env NAME=VALUE]... [--name NAME]
//       [--cgroup-parent PATH] [--env-exec PATH --env-file PATH] -- ARGV...
//   container_wrap_probe [--global-arg A]... --cleanup NAME
//
// Detects the runtime in $PATH, prints the wrapped argv (one element a line,
// prefixed "argv: ") on stderr, writes the environment file (podman: at
// --env-file, mode 0600, as the agent does; --env-exec names
// trainctl-container-env), then execs the argv with the wrapped environment
// only. With --cleanup, runs ContainerRuntime::CleanupCommands(NAME) one
// after the other and exits with the last one's status. Exit codes of its own: 2 bad usage, 3 no runtime, 4 WrapArgv refused,
// 5 exec failed (each with a line on stderr).

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "worker/hw/container_runtime.h"

using trainctl::worker::ContainerLaunch;
using trainctl::worker::ContainerRuntime;

int main(int argc, char** argv) {
  ContainerRuntime::Options options;
  ContainerLaunch c;
  std::string cleanup;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "container_wrap_probe: %s needs a value\n", a.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--global-arg") {
      options.global_args.push_back(v);
    } else if (a == "--run-arg") {
      options.run_args.push_back(v);
    } else if (a == "--image") {
      c.image = v;
    } else if (a == "--mount") {
      c.mounts.push_back(v);
    } else if (a == "--workdir") {
      c.workdir = v;
    } else if (a == "--env") {
      const size_t eq = v.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "container_wrap_probe: --env wants NAME=VALUE\n");
        return 2;
      }
      c.env[v.substr(0, eq)] = v.substr(eq + 1);
    } else if (a == "--name") {
      c.name = v;
    } else if (a == "--cleanup") {
      cleanup = v;
    } else if (a == "--cgroup-parent") {
      c.cgroup_parent = v;
    } else if (a == "--env-exec") {
      options.env_exec = v;
    } else if (a == "--env-file") {
      c.env_file = v;
    } else {
      std::fprintf(stderr, "container_wrap_probe: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  for (; i < argc; ++i) c.argv.push_back(argv[i]);

  const char* path = std::getenv("PATH");
  auto rt = ContainerRuntime::Detect(path != nullptr ? path : "/usr/bin:/bin", options);
  if (!rt.ok()) {
    std::fprintf(stderr, "container_wrap_probe: %s\n", rt.status().ToString().c_str());
    return 3;
  }
  std::fprintf(stderr, "runtime: %s\n", rt->Describe().c_str());
  if (!cleanup.empty()) {
    int status = 0;
    for (std::vector<std::string>& cmd : rt->CleanupCommands(cleanup)) {
      std::vector<char*> args;
      std::string line;
      for (std::string& a : cmd) {
        args.push_back(a.data());
        line += " " + a;
      }
      args.push_back(nullptr);
      std::fprintf(stderr, "cleanup:%s\n", line.c_str());
      const pid_t pid = fork();
      if (pid == 0) {
        execv(args[0], args.data());
        _exit(127);
      }
      if (pid < 0 || waitpid(pid, &status, 0) != pid) return 5;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  auto w = rt->WrapArgv(c);
  if (!w.ok()) {
    std::fprintf(stderr, "container_wrap_probe: %s\n", w.status().ToString().c_str());
    return 4;
  }
  if (!c.env_file.empty()) {
    auto content = rt->EnvFileContent(c);
    FILE* f = content.ok() ? std::fopen(c.env_file.c_str(), "w") : nullptr;
    if (f == nullptr || std::fwrite(content->data(), 1, content->size(), f) != content->size() ||
        std::fclose(f) != 0) {
      std::fprintf(stderr, "container_wrap_probe: cannot write %s\n", c.env_file.c_str());
      return 4;
    }
  }
  std::vector<char*> args;
  for (std::string& a : w->argv) {
    std::fprintf(stderr, "argv: %s\n", a.c_str());
    args.push_back(a.data());
  }
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : w->env) env_strings.push_back(k + "=" + v);
  std::vector<char*> env;
  for (std::string& e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);
  execve(args[0], args.data(), env.data());
  std::fprintf(stderr, "container_wrap_probe: exec %s: %s\n", args[0], std::strerror(errno));
  return 5;
}
