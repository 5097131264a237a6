#ifndef TRAINCTL_WORKER_HW_CONTAINER_RUNTIME_H_
#define TRAINCTL_WORKER_HW_CONTAINER_RUNTIME_H_

// Running a task inside a container through a runtime already on the node:
// ContainerRuntime turns a task (image, argv, environment, mounts, GPUs)
// into the command line and environment of the runtime's process, which the
// agent then starts as it starts any task (ProcessLauncher): the runtime
// process stays in the foreground for the task's life, its exit status is the
// task's, and SIGTERM to it reaches the task (podman proxies signals to
// catatonit, its --init, which passes them on: the task as PID 1 would ignore
// SIGTERM without a handler; Apptainer's starter forwards them). No daemon,
// no API socket.
//
// But SIGKILL of `podman run` leaves the container running: it belongs to
// conmon, which podman started in its own session (seen on the development
// VM: the task went on, `podman ps` said "Up"). So after a SIGKILL, kill the
// task's cgroup (ContainerLaunch::cgroup_parent puts conmon and the
// container below it) and run CleanupCommands().
//
// Which runtime, and why podman first:
//  - podman is daemonless and in Debian's main archive (Debian 12: podman 4.3
//    with crun; `apt-get install podman catatonit`: catatonit is podman's
//    --init, which `run` below uses), also in Ubuntu and RHEL; `podman run`
//    is a child of the agent, like any task.
//  - Apptainer (formerly Singularity) is what HPC GPU clusters ship (it runs
//    SIF images from shared filesystems, unprivileged); it is not in Debian
//    12's archive (upstream .debs).
//  - GPUs: NVIDIA's Container Toolkit generates a CDI spec (`nvidia-ctk cdi
//    generate --output=/etc/cdi/nvidia.yaml`) that podman (>= 4.1) reads:
//    `--device nvidia.com/gpu=<UUID>` puts exactly those GPUs (device nodes,
//    driver libraries) in the container. Apptainer's native mode binds the
//    driver with `--nv` and shows every GPU; CUDA_VISIBLE_DEVICES (set by
//    the agent) selects them, as for tasks without containers.
// Docker is left out: its containers are children of dockerd, not of the
// agent, so the agent could neither wait for nor kill them as processes.
//
// The task's environment never reaches a root process. Rootful podman runs
// as root, and every variable in its own environment reaches podman, conmon
// and the dynamic loader as root (LD_PRELOAD, CONTAINERS_CONF,
// XDG_CONFIG_HOME, TMPDIR, ...): a user who could set one was root on the
// node. So podman starts with Options::runtime_env alone, and the task's
// variables go in a file (EnvFileContent(), written by the agent, readable
// by the task's account only) that podman bind-mounts read-only into the
// container with trainctl-container-env (container_env_exec.cc), the
// container's first program, which sets them and runs the task. Nor do
// values go on the command line, where /proc/<pid>/cmdline shows them to
// every user of the node. Apptainer runs as the task's user (the shim drops
// to it before), so its environment crosses no privilege line: it takes
// APPTAINERENV_NAME=value from its environment (SINGULARITYENV_ for a
// `singularity` binary) and, with --cleanenv, passes nothing else of it.
//
// Tested on the development VM (docs/containers.md): podman 4.3.1 as root
// with runc (crun 1.8 refuses that hybrid cgroup host) and explicit
// --ulimit values (the VM lacks CAP_SYS_RESOURCE); not tested: Apptainer,
// rootless podman, GPUs (no GPU, no CDI spec there).
//
// A session into a running task (`trainctl exec`, `attach`, `shell
// --image`: ExecArgv) keeps to the same rules: root podman gets
// `podman exec` with runtime_env alone, the command runs inside through
// trainctl-container-env and the same environment file, as the task's
// uid:gid. Apptainer has no long-lived container to enter: a session is one
// more `apptainer exec` of the same image, binds and variables.
//
// Thread-safety: immutable; every method may be called from any thread.

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainctl::worker {

enum class ContainerRuntimeKind { kNone, kPodman, kApptainer };

// One task to run in a container.
struct ContainerLaunch {
  // Image: podman: a local or registry reference ("localhost/train:3",
  // "nvcr.io/nvidia/pytorch:24.05-py3"); Apptainer: a SIF file, a sandbox
  // directory or a URI ("docker://...").
  std::string image;
  // The command inside the container; argv[0] is looked up in the image's
  // PATH.
  std::vector<std::string> argv;
  // The task's environment inside the container (see `image_env` in
  // ContainerRuntime::Options for names that come from the image instead).
  // Names must match [A-Za-z_][A-Za-z0-9_]*.
  std::map<std::string, std::string> env;
  // Working directory inside the container (absolute); empty: the image's.
  std::string workdir;
  // Host directories mounted at the same path inside (absolute, no ':' or
  // ','), e.g. the working directory and the checkpoint directory.
  std::vector<std::string> mounts;
  // For a path of `mounts`: the host directory mounted there instead (same
  // rules), e.g. the stage where the task shim bound the directory the
  // job's account opened (LaunchSpec::bind_as_account).
  std::map<std::string, std::string> mount_sources;
  // GPUs, by UUID as NVML gives them ("GPU-5c89852c-..."; MIG devices
  // "MIG-...").
  std::vector<std::string> gpu_uuids;
  // podman as root: run as uid:gid inside (`--user`); -1: the image's user.
  // Rootless podman maps the agent's own user instead (--userns=keep-id);
  // Apptainer always runs as the user that starts it, so the launcher must
  // start the runtime as that user.
  int uid = -1, gid = -1;
  // podman's container name ([A-Za-z0-9][A-Za-z0-9_.-]*), e.g.
  // "trainctl-j7-a0-r3"; `--replace` makes a leftover of the same name (an
  // agent that died) give way. Empty: podman picks one. Unused by Apptainer.
  std::string name;
  // podman: the host path of the file holding the task's environment
  // (EnvFileContent() of this launch), mounted read-only into the container
  // and read there by trainctl-container-env. It must be readable by `uid`
  // and by no other account. Required for podman; unused by Apptainer.
  std::string env_file;
  // podman: the task's cgroup v2, relative to the cgroup mount
  // (CgroupTree::RelativePath()), passed as --cgroup-parent with the
  // cgroupfs cgroup manager: the container's cgroup and conmon's are then
  // created below the task's, and CgroupTree::Kill() of the task kills the
  // container too (tested on the development VM). Empty: podman's default
  // (the container leaves the task's cgroup). Apptainer's processes stay in
  // the cgroup of the process that starts it.
  std::string cgroup_parent;
};

// One command to run in the container of a running task (a session):
// ContainerRuntime::ExecArgv.
struct ContainerExec {
  // The command inside; argv[0] is looked up in the image's PATH. Empty with
  // login_shell.
  std::vector<std::string> argv;
  // No argv: the task's $SHELL (its account's, from the task's environment)
  // with -l when the image has it as an executable file, else /bin/sh -l.
  bool login_shell = false;
  // Keep the command's stdin open (podman exec -i).
  bool stdin_open = false;
  // Under a pseudo-terminal (podman exec -t; the runtime's own stdin must be
  // a terminal, as the session host makes it).
  bool tty = false;
  // With tty: TERM inside (e.g. "xterm-256color"; letters, digits and
  // "._+-" only, at most 64 characters); empty: the runtime's default.
  std::string term;
};

// What the launcher starts: argv (argv[0] is the runtime's absolute path) and
// the process's whole environment.
struct WrappedLaunch {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
};

class ContainerRuntime {
 public:
  struct Options {
    // Which runtime Detect() looks for: kNone = podman, else apptainer, else
    // singularity; kPodman or kApptainer = only that one.
    ContainerRuntimeKind want = ContainerRuntimeKind::kNone;
    // Arguments before the subcommand, e.g. {"--runtime", "runc"} where crun
    // refuses the host (crun 1.8 on a hybrid cgroup host whose v2 tree has a
    // controller: "cgroups in hybrid mode not supported").
    std::vector<std::string> global_args;
    // Arguments after `run` / `exec`, before the image, e.g. {"--ulimit",
    // "nofile=65536:65536"} where the agent cannot raise rlimits to podman's
    // defaults (1048576 open files and processes as root; needs
    // CAP_SYS_RESOURCE).
    std::vector<std::string> run_args;
    // The runtime process's whole environment (podman's: nothing of the
    // task's is added). Detect() adds HOME and XDG_RUNTIME_DIR from the
    // agent's environment when set (rootless podman needs them).
    std::map<std::string, std::string> runtime_env = {
        {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}};
    // Task variables not passed into the container: the image sets them (the
    // agent's PATH would hide e.g. /opt/conda/bin of the image; a host
    // LD_LIBRARY_PATH means nothing inside, and Apptainer's --nv sets its
    // own).
    std::vector<std::string> image_env = {"PATH", "HOME", "LD_LIBRARY_PATH"};
    // podman: the host path of trainctl-container-env (absolute), mounted
    // read-only into each container as its first program. Required for
    // podman (WrapArgv refuses without it).
    std::string env_exec;
  };

  // Where trainctl-container-env and the environment file are mounted inside
  // a podman container.
  static constexpr char kEnvExecInContainer[] = "/.trainctl/env-exec";
  static constexpr char kEnvFileInContainer[] = "/.trainctl/env";

  // A runtime at `binary` (absolute path), e.g. from the agent's
  // configuration or a test. `rootless`: the agent is not root.
  ContainerRuntime(ContainerRuntimeKind kind, std::string binary, std::string version,
                   bool rootless, Options options);
  ContainerRuntime(ContainerRuntimeKind kind, std::string binary, std::string version,
                   bool rootless)
      : ContainerRuntime(kind, std::move(binary), std::move(version), rootless, Options()) {}

  // Finds podman, apptainer or singularity (in that order of preference,
  // whatever their order in PATH; see the file comment for why) in the
  // directories of `path_env` (a PATH value, "/usr/local/bin:/usr/bin"), runs
  // `<binary> --version` to learn its version and checks that it runs.
  // rootless() is geteuid() != 0.
  // Errors: NOT_FOUND naming the directories searched when none is there,
  // and why each one found was rejected (not executable, `--version`
  // failed).
  static absl::StatusOr<ContainerRuntime> Detect(const std::string& path_env,
                                                 Options options);
  static absl::StatusOr<ContainerRuntime> Detect(const std::string& path_env) {
    return Detect(path_env, Options());
  }

  ContainerRuntimeKind kind() const { return kind_; }
  // Absolute path, e.g. "/usr/bin/podman".
  const std::string& binary() const { return binary_; }
  // As `--version` printed it: "4.3.1", "1.2.5".
  const std::string& version() const { return version_; }
  bool rootless() const { return rootless_; }
  // One line for the agent's start log: "podman 4.3.1 (/usr/bin/podman,
  // rootful)".
  std::string Describe() const;

  // The runtime command for `c`:
  //   podman [global_args] [--cgroup-manager=cgroupfs] run --rm --init --replace
  //     --name NAME --network=host --ipc=host --pids-limit=-1
  //     --log-driver=passthrough --security-opt=label=disable
  //     (--userns=keep-id | --user UID[:GID]) [--cgroup-parent=CG]
  //     --device nvidia.com/gpu=UUID... -v DIR:DIR... -w WORKDIR
  //     -v ENV_EXEC:/.trainctl/env-exec:ro -v ENV_FILE:/.trainctl/env:ro
  //     [run_args] IMAGE /.trainctl/env-exec /.trainctl/env ARGV...
  //   apptainer [global_args] exec --cleanenv [--nv] --bind DIR... --pwd
  //     WORKDIR [run_args] IMAGE ARGV...
  // Host network and IPC: NCCL needs the host's interfaces (InfiniBand,
  // RoCE) and shares memory (/dev/shm) between the ranks of a node.
  // passthrough: the container writes straight to the task's log (the
  // runtime's stdout and stderr), with no copy in podman's storage. With
  // GPUs and no CUDA_VISIBLE_DEVICES in env, Apptainer gets
  // CUDA_VISIBLE_DEVICES=<the UUIDs> (podman needs none: only those GPUs
  // are in the container).
  // No value of `c.env` appears in the returned argv, nor (podman) in the
  // returned environment, which is Options::runtime_env alone.
  // Errors: FAILED_PRECONDITION for a kNone runtime, and for podman without
  // Options::env_exec; INVALID_ARGUMENT for podman without c.env_file, for an
  // empty image or one starting with '-', an empty argv, a bad variable
  // name (named), a mount or workdir that is not absolute or holds ':' or
  // ',', a bad container name or GPU UUID.
  absl::StatusOr<WrappedLaunch> WrapArgv(const ContainerLaunch& c) const;

  // The runtime command that runs `e` in the running container of the task
  // launched with `c` (the ContainerLaunch given to WrapArgv, env_file
  // included: its file must still be there), for an interactive session:
  //   /bin/sh -c WAIT trainctl-exec
  //     podman [global_args] [--cgroup-manager=cgroupfs] exec [-i] [-t]
  //     --detach-keys= [--user UID[:GID]] [-w WORKDIR] [--env TERM=T]
  //     NAME /.trainctl/env-exec /.trainctl/env ARGV...
  //   where WAIT (the host's sh, root with root podman) waits until
  //   `podman [global_args] container inspect NAME` says the container runs
  //   (a task is RUNNING from the start of `podman run`, before its image is
  //   pulled), saying so once on stderr, at most kExecWaitSeconds (then exit
  //   125), and execs the rest;
  //   apptainer: WrapArgv(c) with e's argv (a new `apptainer exec` of the
  //     same image, binds, working directory and variables), plus
  //     APPTAINERENV_TERM with a tty.
  // The command runs as the task runs: podman --user c.uid:c.gid (never
  // root unless the task is), or, rootless, the agent's user that
  // --userns=keep-id mapped; with the task's variables, which
  // trainctl-container-env sets from c.env_file inside the container (so
  // podman's environment is Options::runtime_env alone, and no value is on
  // its command line); --detach-keys= turns off podman's Ctrl-P Ctrl-Q
  // detach, which would swallow those keys. The login shell runs through
  // the image's /bin/sh.
  // Errors: FAILED_PRECONDITION for a kNone runtime, and for podman without
  // Options::env_exec; INVALID_ARGUMENT naming the field for an empty argv
  // without login_shell ("argv"), a bad term ("term"), and, for podman, a
  // task without a container name ("name") or environment file
  // ("env_file"), a bad workdir; those of WrapArgv for Apptainer.
  // How long ExecArgv's podman command waits for the container to run.
  static constexpr int kExecWaitSeconds = 600;
  absl::StatusOr<WrappedLaunch> ExecArgv(const ContainerLaunch& c,
                                         const ContainerExec& e) const;

  // Whether a task's container sees the node's network, so that a port a
  // task listens on is 127.0.0.1:PORT on the node (port-forward): podman
  // runs with --network=host unless Options::run_args chooses another
  // (--network/--net), Apptainer shares the host's network unless run_args
  // holds --net or --network. False for a kNone runtime.
  bool SharesHostNetwork() const;

  // podman: what the agent writes to `c.env_file`: NAME=VALUE of each
  // variable of `c.env` but those the image sets (Options::image_env), each
  // ended by a NUL byte, in name order (trainctl-container-env's format).
  // Errors: INVALID_ARGUMENT naming a bad variable name or a value with a
  // NUL byte.
  absl::StatusOr<std::string> EnvFileContent(const ContainerLaunch& c) const;

  // The commands, to run in order, that remove what the runtime may have
  // left of a container named `name` once its task ended abnormally (runtime
  // process killed, e.g. by CgroupTree::Kill()); their exit statuses may be
  // ignored (a container already gone is not an error):
  //   podman [global_args] stop --ignore --time=0 NAME
  //   podman [global_args] rm --force --ignore NAME
  // (podman 4.3 with runc, on the development VM: after a kill of conmon, a
  // lone `rm --force` fails once, "container state improper: stopped"; stop
  // first records the container as stopped.) Empty for Apptainer, which
  // keeps no state, and for an empty name.
  std::vector<std::vector<std::string>> CleanupCommands(const std::string& name) const;

 private:
  ContainerRuntimeKind kind_;
  std::string binary_;
  std::string version_;
  bool rootless_;
  Options options_;
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_HW_CONTAINER_RUNTIME_H_
