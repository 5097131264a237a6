// trainctl-container-env: the first program inside a podman container of a
// task; sets the task's environment from a file and runs the task.
//
//   trainctl-container-env ENV_FILE PROGRAM [ARGS...]
//
// Why: podman runs as root (rootful podman, the usual deployment), and any
// variable in its own environment reaches podman, conmon and the dynamic
// loader as root (LD_PRELOAD, CONTAINERS_CONF, XDG_CONFIG_HOME, TMPDIR, ...).
// So the agent starts podman with a fixed environment of its own
// (ContainerRuntime::Options::runtime_env) and writes the task's variables to
// ENV_FILE, which podman bind-mounts read-only into the container together
// with this program (static, so it runs in any image: glibc, musl or none).
// The task's values never pass through a root process's environment or
// command line.
//
// ENV_FILE holds NAME=VALUE entries, each ended by a NUL byte (values may hold
// newlines, never a NUL: the coordinator refuses those). Each entry is set
// over the image's environment (setenv), then PROGRAM is run with execvp:
// looked up in the PATH of the image (the task's PATH is not passed: it names
// the host's directories). Exit codes of its own: 125 (bad usage, unreadable
// or malformed ENV_FILE) and 127 (PROGRAM not found or not executable), each
// with a line on stderr (the task's log), as the task shim does.

#include <errno.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: trainctl-container-env ENV_FILE PROGRAM [ARGS...]\n");
    return 125;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "trainctl-container-env: cannot read %s: %s\n", argv[1],
                 std::strerror(errno));
    return 125;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\0', start);
    if (end == std::string::npos) {
      std::fprintf(stderr, "trainctl-container-env: %s: last entry not ended by NUL\n",
                   argv[1]);
      return 125;
    }
    const std::string entry = text.substr(start, end - start);
    const size_t eq = entry.find('=');
    if (eq == 0 || eq == std::string::npos) {
      std::fprintf(stderr, "trainctl-container-env: %s: entry without NAME=\n", argv[1]);
      return 125;
    }
    if (setenv(entry.substr(0, eq).c_str(), entry.c_str() + eq + 1, 1) != 0) {
      std::fprintf(stderr, "trainctl-container-env: setenv: %s\n", std::strerror(errno));
      return 125;
    }
    start = end + 1;
  }
  execvp(argv[2], argv + 2);
  std::fprintf(stderr, "trainctl-container-env: cannot run %s: %s\n", argv[2],
               std::strerror(errno));
  return 127;
}
