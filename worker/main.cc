// trainctl-agent: one per GPU host (docs/design.md §1). Discovers GPUs
// through NVML (or offers fake ones with --fake-gpus on machines without
// GPUs), registers with the coordinator, launches and supervises tasks.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_target.h"
#include "common/flag_hints.h"
#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "common/paths.h"
#include "worker/agent.h"
#include "worker/agent_client.h"
#include "worker/node_offer.h"
#include "worker/nccl/rendezvous_relay_server.h"
#include "worker/hw/agent_guard.h"
#include "worker/hw/cuda_driver_hold.h"
#include "worker/hw/fake_gpu_inventory.h"
#include "worker/hw/mps_control.h"
#include "worker/hw/nvml_gpu_inventory.h"
#include "worker/hw/posix_process_launcher.h"
#include "worker/hw/cgroup.h"
#include "worker/hw/container_runtime.h"
#include "worker/task_env.h"
#include "worker/torch_store.h"

extern char** environ;


namespace {

absl::Notification g_shutdown;
std::atomic<bool> g_signalled{false};
// SIGINT/SIGTERM may come twice (a terminal's Ctrl-C reaches the agent and
// its guard, which forwards it): Notify() only the first time.
void OnSignal(int) {
  if (!g_signalled.exchange(true)) g_shutdown.Notify();
}

std::string Hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

int Fail(const std::string& msg) {
  TC_LOG_ERROR("{}", msg);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Session output moves in chunks of up to 1 MiB: reuse, not fresh pages.
  trainctl::TuneMallocForStreams();
  // Sessions write to the stdin of commands and to connections whose other
  // end may be gone: EPIPE, handled where it comes, not the agent's death.
  signal(SIGPIPE, SIG_IGN);
  CLI::App app{"trainctl-agent: one per GPU host; offers its GPUs to the "
               "coordinator, launches and supervises task processes.\n"
               "Example: trainctl-agent --coordinator head:50051 --gpus 0,1\n"
               "Without GPUs: trainctl-agent --fake-gpus 8:H100:80GiB"};
  std::string coordinator = "127.0.0.1:50051", node_name, address, gpus, fake,
              log_dir, port_range = "29500-29999", log_level = "info";
  app.add_option("--coordinator", coordinator,
                 "coordinator address:port, or a comma-separated list of the "
                 "HA leader and standbys (tried in order)")
      ->envname("TRAINCTL_COORDINATOR")
      ->capture_default_str();
  app.add_option("--node-name", node_name, "this node's name (default: the hostname)");
  app.add_option("--address", address,
                 "address other hosts reach this node at, used as MASTER_ADDR "
                 "when rank 0 runs here (default: 127.0.0.1 when the "
                 "coordinator is on loopback, else the hostname)");
  app.add_option("--gpus", gpus, "comma-separated GPU indices this agent offers (default: all)");
  app.add_option("--fake-gpus", fake,
                 "N[:MODEL[:MEMORY]]: offer N fake GPUs instead of reading NVML, "
                 "for machines without GPUs (e.g. 8:H100:80GiB); never chosen silently");
  std::vector<std::string> features, labels;
  app.add_option("--features", features,
                 "comma-separated features this node offers, matched by "
                 "`trainctl submit --constraint` (e.g. ib,nvlink; a-z, 0-9, _, -)")
      ->delimiter(',');
  app.add_option("--labels", labels,
                 "comma-separated key=value labels shown by `trainctl nodes` "
                 "(e.g. rack=r1,zone=a)")
      ->delimiter(',');
  std::string state_dir;
  app.add_option("--state-dir", state_dir,
                 "this agent's directory on the host: task logs in logs/ (unless "
                 "--log-dir says otherwise) and the rendezvous relay's socket "
                 "(default: $XDG_DATA_HOME or ~/.local/share, then "
                 "trainctl/agent-<node>; with only --log-dir given, the directory "
                 "above it)");
  app.add_option("--log-dir", log_dir, "directory of task logs (default: <state-dir>/logs)");
  app.add_option("--port-range", port_range,
                 "MASTER_PORT range LO-HI offered to jobs whose rank 0 runs here")
      ->capture_default_str();
  bool fence = true;
  app.add_flag("--fence,!--no-fence", fence,
               "kill this node's tasks when the coordinator has not renewed the "
               "agent's lease for its node timeout (the coordinator has failed "
               "them by then; default on)");
  bool guard = true;
  app.add_flag("--guard,!--no-guard", guard,
               "run under a guard process that stops every task the agent "
               "leaves behind when it dies, even by kill -9 "
               "(worker/hw/agent_guard.h; default on)");
  bool hold_cuda = true;
  app.add_flag("--hold-cuda-driver,!--no-hold-cuda-driver", hold_cuda,
               "initialise the CUDA driver (cuInit, no context, no GPU memory) "
               "in the agent and keep it so, as torchrun's launcher does: each "
               "task's own CUDA start is ~0.28 s faster (default on; real GPUs "
               "only)");
  bool use_mps = false;
  std::string mps_dir;
  int mps_thread_pct = 0;
  app.add_flag("--mps", use_mps,
               "run one CUDA MPS control daemon per offered GPU "
               "(nvidia-cuda-mps-control -d): tasks sharing a GPU (auto-packed "
               "trials, --gpu-fraction, --gpu-mem) run as MPS clients of it, "
               "each capped at its memory reservation");
  app.add_option("--mps-dir", mps_dir,
                 "with --mps: pipe and log directories of the daemons, "
                 "DIR/gpu-N/{pipe,log} (default: LOG_DIR/mps; keep it short: "
                 "the pipes are UNIX sockets)");
  app.add_option("--mps-active-thread-percentage", mps_thread_pct,
                 "with --mps: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of every client, "
                 "1-99 (default 0: not set, each may use all SMs)")
      ->check(CLI::Range(0, 99));
  std::string rendezvous_socket = "auto";
  app.add_option("--rendezvous-socket", rendezvous_socket,
                 "unix socket of this node's rendezvous relay: ranks ask it "
                 "for the ncclUniqueId (TRAINCTL_RENDEZVOUS_SOCKET) and it asks "
                 "the coordinator once per job attempt for all of them; every "
                 "call carries its attempt's TRAINCTL_TOKEN. 'auto': "
                 "rendezvous-NODE.sock in --state-dir; 'none': off (ranks ask the "
                 "coordinator directly)")
      ->capture_default_str();
  std::string torch_store_cmd = "auto";
  app.add_option("--torch-store-host", torch_store_cmd,
                 "command (split at spaces) of the helper that hosts the PyTorch "
                 "TCPStore of each gang whose rank 0 runs here, so the store "
                 "listens before the ranks start, as under torchrun "
                 "(worker/nccl/python/torch_store_host.py); 'auto': python3 "
                 "with ../share/torch_store_host.py (or ../share/trainctl/) next "
                 "to this binary, real "
                 "GPUs only, skipped when torch does not import; 'none': off")
      ->capture_default_str();
  std::string task_shim = "auto";
  app.add_option("--task-shim", task_shim,
                 "trainctl-task-shim, started as the first process of every "
                 "task: it kills the task when the agent dies, and puts it in "
                 "its cgroup and under its user's account. 'auto' (default): "
                 "the one next to this binary when the agent runs as root (it "
                 "is needed to run tasks as their users), used only for tasks "
                 "with an account or a cgroup while the --guard covers agent "
                 "death for the rest, else none; 'none': never")
      ->capture_default_str();
  std::vector<std::string> task_env;
  app.add_option("--task-env", task_env,
                 "names of the agent's environment variables tasks also get "
                 "(comma-separated; a trailing * is a prefix: HF_*). Tasks "
                 "always get PATH, LANG, LANGUAGE, LC_*, TZ, LD_LIBRARY_PATH, "
                 "CUDA_* and NCCL_*; nothing else of the agent's environment")
      ->delimiter(',');
  int task_usage_period = 1;
  app.add_option("--task-usage-period", task_usage_period,
                 "heartbeats per sample of the running tasks' CPU, memory and "
                 "GPU use (each task's processes from its cgroup, else a /proc scan; "
                 "NVML's per-process queries; behind "
                 "`trainctl top`, accounting's GPU-hours used and interactive "
                 "jobs' idle check): 1 every heartbeat, N every Nth, 0 never "
                 "(those figures then stay unknown)")
      ->check(CLI::Range(0, 3600))
      ->capture_default_str();
  double report_linger_ms = 0;
  app.add_option("--report-linger-ms", report_linger_ms,
                 "task start and exit reports are written at most once per "
                 "this many ms: the first after a quiet spell at once, those "
                 "that follow within it together, so that a burst of short "
                 "tasks costs the coordinator one message, one scheduling "
                 "pass and one commit (heartbeats and log reads never wait). "
                 "It trades a GPU's turnover for coordinator CPU: use it when "
                 "the coordinator's CPU is what limits many agents. 0 "
                 "(default): each report as soon as the stream is free")
      ->check(CLI::Range(0.0, 1000.0))
      ->capture_default_str();
  std::string cgroups_mode = "auto";
  app.add_option("--cgroups", cgroups_mode,
                 "auto: a cgroup v2 per task under the agent's own cgroup "
                 "(accounting, --cpus/--mem limits, the whole task killed at "
                 "its end; needs a delegated cgroup, e.g. systemd "
                 "Delegate=yes), falling back to process groups with the "
                 "reason in the log; off: process groups only")
      ->check(CLI::IsMember({"auto", "off"}))
      ->capture_default_str();
  std::string container_runtime = "auto";
  app.add_option("--container-runtime", container_runtime,
                 "runtime for jobs with an image: auto (podman, else "
                 "Apptainer, found in PATH), podman, apptainer, or none")
      ->check(CLI::IsMember({"auto", "podman", "apptainer", "none"}))
      ->capture_default_str();
  std::string container_global_args, container_run_args;
  app.add_option("--container-global-args", container_global_args,
                 "arguments before the runtime's subcommand, split at spaces "
                 "(e.g. \"--runtime runc\" where crun refuses the host)");
  app.add_option("--container-run-args", container_run_args,
                 "arguments after `run`/`exec`, split at spaces (e.g. "
                 "\"--ulimit nofile=65536:65536\")");
  std::string container_env_exec = "auto";
  app.add_option("--container-env-exec", container_env_exec,
                 "trainctl-container-env, the first program of every podman "
                 "container (it sets the task's variables inside, so none "
                 "passes through root podman's environment); auto: the one "
                 "next to this agent. podman is not used without it");
  bool task_no_new_privs = true;
  app.add_option("--task-no-new-privs", task_no_new_privs,
                 "true: tasks of other accounts run with no_new_privs, so a set-uid "
                 "program (sudo) or file capability gives them nothing; false: "
                 "they may gain what such programs give")
      ->capture_default_str();
  bool run_tasks_as_agent = false;
  app.add_flag("--run-tasks-as-agent", run_tasks_as_agent,
               "run every task as this agent's account, whatever user the job "
               "belongs to (a node given to one tenant); by default a root "
               "agent runs each task as its job's user");
  std::string preflight_probe;
  app.add_option("--preflight-probe", preflight_probe,
                 "program run for a gang's pre-flight (a short NCCL all-reduce "
                 "on the reserved GPUs; docs/preflight.md) (default: "
                 "trainctl-nccl-allreduce next to this binary, or with "
                 "--fake-gpus trainctl-fake-preflight-probe)");
  trainctl::worker::AgentTlsFiles tls;
  CLI::Option* tls_cert = app.add_option(
      "--tls-cert", tls.cert,
      "PEM client certificate of this node, CN = --node-name "
      "(deploy/make_certs.sh: nodes/NODE.crt); with --tls-key and --tls-ca: "
      "mutual TLS to the coordinator");
  CLI::Option* tls_key = app.add_option("--tls-key", tls.key, "PEM private key of --tls-cert");
  CLI::Option* tls_ca = app.add_option(
      "--tls-ca", tls.ca,
      "PEM CA certificate that signed the coordinator's certificate; tasks get "
      "it as TRAINCTL_TLS_CA for the rendezvous");
  tls_cert->needs(tls_key)->needs(tls_ca);
  tls_key->needs(tls_cert);
  tls_ca->needs(tls_cert);
  app.add_option("--log-level", log_level, "debug, info, warn or error")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}))->capture_default_str();
  // Options may also come from a TOML file, KEY = VALUE per line with KEY a
  // flag's long name (deploy/config/agent.conf documents every one; the
  // systemd unit passes /etc/trainctl/agent.conf). Flags on the command line
  // win; an unknown key is an error, so a typo does not pass silently.
  app.set_version_flag("--version", "trainctl-agent " TRAINCTL_VERSION);
  app.set_config("--config", "",
                 "read options from this TOML file: KEY = VALUE per line, KEY "
                 "a flag's name without --; command-line flags win "
                 "(example: deploy/config/agent.conf)");
  app.allow_config_extras(CLI::config_extras_mode::error);
  if (int rc = trainctl::ParseFlagsOrExplain(app, argc, argv, std::cout, std::cerr); rc >= 0) {
    return rc;
  }
  trainctl::InitLogging("agent", log_level);
  // As in the coordinator: Debian's Abseil walks a global lock-order graph
  // on every nested lock (Mutex deadlock detection); tests keep it on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // The guard is up: it, not a shim per task, stops the tasks of a killed
  // agent.
  bool guarded = false;
  if (guard) {
    // First, while this process has one thread (the guard forks).
    absl::StatusOr<trainctl::worker::GuardSplit> split =
        trainctl::worker::SplitGuard(absl::Seconds(5));
    guarded = split.ok();
    if (!split.ok()) {
      TC_LOG_WARN("cannot start the agent's guard ({}): tasks will OUTLIVE a "
                  "killed agent unless --task-shim is given",
                  split.status().ToString());
    } else if (!split->is_agent) {
      return split->exit_code;
    }
  } else if (task_shim == "none" || (task_shim == "auto" && geteuid() != 0)) {
    TC_LOG_WARN("--no-guard and no --task-shim: tasks will OUTLIVE a killed "
                "agent and keep their GPUs");
  }

  if (absl::StatusOr<std::string> target = trainctl::GrpcTargetFor(coordinator);
      !target.ok()) {
    return Fail(absl::StrCat("--coordinator: ", target.status().message()));
  }
  trainctl::worker::AgentConfig config;
  config.node_name = node_name.empty() ? Hostname() : node_name;
  config.address = address;
  if (config.address.empty()) {
    const bool loopback = coordinator.rfind("127.", 0) == 0 ||
                          coordinator.rfind("localhost", 0) == 0 ||
                          coordinator.rfind("[::1]", 0) == 0;
    config.address = loopback ? "127.0.0.1" : Hostname();
  }
  for (absl::string_view part :
       absl::StrSplit(gpus, ',', absl::SkipEmpty())) {
    int index;
    if (!absl::SimpleAtoi(part, &index) || index < 0) {
      return Fail(absl::StrCat("--gpus: \"", part, "\" is not a GPU index"));
    }
    config.offered_gpus.push_back(index);
  }
  if (absl::StatusOr<std::vector<std::string>> f = trainctl::worker::ParseFeatures(features);
      f.ok()) {
    config.features = *std::move(f);
  } else {
    return Fail(std::string(f.status().message()));
  }
  if (absl::StatusOr<std::map<std::string, std::string>> l =
          trainctl::worker::ParseLabels(labels);
      l.ok()) {
    config.labels = *std::move(l);
  } else {
    return Fail(std::string(l.status().message()));
  }
  std::vector<std::string> range =
      absl::StrSplit(port_range, '-');
  if (range.size() != 2 || !absl::SimpleAtoi(range[0], &config.port_min) ||
      !absl::SimpleAtoi(range[1], &config.port_max) || config.port_min <= 0 ||
      config.port_max > 65535 || config.port_min > config.port_max) {
    return Fail("--port-range: expected LO-HI with 0 < LO <= HI <= 65535");
  }
  if (state_dir.empty() && !log_dir.empty()) {
    // As before --state-dir existed: the directory above --log-dir.
    std::filesystem::path logs = std::filesystem::path(log_dir).lexically_normal();
    if (!logs.has_filename()) logs = logs.parent_path();  // "a/logs/"
    state_dir = logs.parent_path().string();
  }
  if (state_dir.empty()) {
    state_dir = absl::StrCat(trainctl::DefaultDataDir(), "/agent-", config.node_name);
  }
  config.log_dir = log_dir.empty() ? absl::StrCat(state_dir, "/logs") : log_dir;
  config.cpu_count = static_cast<int>(std::thread::hardware_concurrency());
  config.task_usage_period = task_usage_period;
  config.fences = fence;
  if (!fence) {
    TC_LOG_WARN("--no-fence: tasks keep running when this host is cut off from "
                "the coordinator, although it fails and may restart them elsewhere");
  }
  config.base_env = trainctl::worker::PassThroughEnv(environ, task_env);
  std::optional<trainctl::worker::CgroupTree> cgroup_tree;
  if (cgroups_mode == "auto") {
    absl::StatusOr<trainctl::worker::CgroupTree> tree = trainctl::worker::CgroupTree::Open();
    if (tree.ok()) {
      cgroup_tree = *std::move(tree);
      config.cgroups = &*cgroup_tree;
      TC_LOG_INFO("{}", cgroup_tree->Describe());
    } else {
      TC_LOG_WARN("no per-task cgroups, process groups only (jobs with "
                  "--cpus/--mem cannot start here): {}",
                  std::string(tree.status().message()));
    }
  }
  std::optional<trainctl::worker::ContainerRuntime> runtime;
  if (container_runtime != "none") {
    trainctl::worker::ContainerRuntime::Options options;
    options.want = container_runtime == "podman"      ? trainctl::worker::ContainerRuntimeKind::kPodman
                   : container_runtime == "apptainer" ? trainctl::worker::ContainerRuntimeKind::kApptainer
                                                      : trainctl::worker::ContainerRuntimeKind::kNone;
    options.global_args = absl::StrSplit(container_global_args, ' ', absl::SkipEmpty());
    options.run_args = absl::StrSplit(container_run_args, ' ', absl::SkipEmpty());
    if (container_env_exec == "auto") {
      std::error_code ec;
      container_env_exec =
          (std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() /
           "trainctl-container-env")
              .string();
    }
    if (access(container_env_exec.c_str(), X_OK) == 0) {
      options.env_exec = std::filesystem::absolute(container_env_exec).string();
    } else if (container_runtime != "apptainer") {
      // podman without it could only pass the task's variables through its
      // own (root) environment: podman is not used.
      TC_LOG_WARN("no trainctl-container-env at {}: podman is not used for jobs with an image",
                  container_env_exec);
      if (container_runtime == "podman") {
        return Fail(absl::StrCat("--container-runtime podman needs trainctl-container-env (",
                                 container_env_exec, " is not an executable)"));
      }
      options.want = trainctl::worker::ContainerRuntimeKind::kApptainer;
    }
    const char* path = std::getenv("PATH");
    absl::StatusOr<trainctl::worker::ContainerRuntime> found =
        trainctl::worker::ContainerRuntime::Detect(path != nullptr ? path : "", options);
    if (found.ok()) {
      if (found->kind() == trainctl::worker::ContainerRuntimeKind::kPodman) {
        // Root podman runs the container as the job's uid; no set-uid
        // program in the image may gain more (Apptainer sets
        // no_new_privs itself).
        options.run_args.push_back("--security-opt=no-new-privileges");
        found = trainctl::worker::ContainerRuntime(found->kind(), found->binary(),
                                                   found->version(), found->rootless(),
                                                   options);
      }
      runtime = *std::move(found);
      config.container_runtime = &*runtime;
      TC_LOG_INFO("container runtime: {}", runtime->Describe());
    } else if (container_runtime != "auto") {
      return Fail(absl::StrCat("--container-runtime ", container_runtime, ": ",
                               found.status().message()));
    } else {
      TC_LOG_INFO("no container runtime: jobs with an image are not placed here ({})",
                  std::string(found.status().message()));
    }
  }
  config.run_tasks_as_agent = run_tasks_as_agent;
  if (geteuid() != 0 && !run_tasks_as_agent) {
    TC_LOG_WARN("the agent runs as uid {}, not root: every task runs as this "
                "account, and jobs of other users are refused (run the agent "
                "as root to run each job as its user, or pass "
                "--run-tasks-as-agent on a node given to one tenant)",
                geteuid());
  }
  if (!tls.key.empty()) {
    // Like ssh with a private key: a key others can read is refused, since
    // whoever reads it can register as this node.
    struct stat st;
    if (stat(tls.key.c_str(), &st) != 0) {
      return Fail(absl::StrCat("--tls-key ", tls.key, ": ", std::strerror(errno)));
    }
    if ((st.st_mode & 077) != 0) {
      return Fail(absl::StrFormat(
          "--tls-key %s is readable by group or others (mode %04o): the "
          "node's key must be readable by the agent alone (chmod 600 %s)",
          tls.key, st.st_mode & 07777, tls.key));
    }
  }

  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (!tls.cert.empty()) {
    auto made = trainctl::worker::MakeAgentTlsCredentials(tls);
    if (!made.ok()) return Fail(std::string(made.status().message()));
    credentials = std::move(*made);
    // Task processes reach the rendezvous over TLS too (worker/nccl reads it).
    config.base_env["TRAINCTL_TLS_CA"] =
        std::filesystem::absolute(tls.ca).string();
  } else {
    TC_LOG_WARN("no --tls-cert: plaintext to the coordinator, which accepts "
                "this only in insecure mode");
  }

  // Hardware: NVML unless --fake-gpus is given.
  std::unique_ptr<trainctl::worker::GpuInventory> inventory;
  auto nvml = trainctl::worker::NvmlGpuInventory::Create();
  if (!fake.empty()) {
    auto spec = trainctl::worker::ParseFakeGpuSpec(fake);
    if (!spec.ok()) return Fail(absl::StrCat("--fake-gpus: ", spec.status().message()));
    if (nvml.ok()) {
      TC_LOG_WARN("NVML works on this host, but --fake-gpus was given: offering "
                  "{} FAKE GPUs, not the real ones", spec->count);
    }
    TC_LOG_WARN("offering {} fake GPUs ({}): no GPU work can run on them",
                spec->count, spec->model);
    inventory = std::make_unique<trainctl::worker::FakeGpuInventory>(*spec,
                                                                      config.node_name);
    config.fake_gpus = true;
  } else if (nvml.ok()) {
    inventory = std::move(*nvml);
    if (hold_cuda) {
      if (absl::Status s = trainctl::worker::HoldCudaDriver(); !s.ok()) {
        TC_LOG_WARN("could not keep the CUDA driver initialised ({}); tasks pay "
                    "the driver's start-up themselves", std::string(s.message()));
      }
    }
  } else {
    return Fail(absl::StrCat("cannot read GPUs through NVML: ", nvml.status().message(),
                             ". On a machine without GPUs, pass --fake-gpus N."));
  }

  // MPS daemons, one per offered GPU, before any task starts.
  std::unique_ptr<trainctl::worker::MpsControl> mps;
  if (use_mps) {
    if (config.fake_gpus) {
      TC_LOG_WARN("--mps with fake GPUs: no MPS daemons run, the node only "
                  "reports MPS and tasks get its environment");
      mps = std::make_unique<trainctl::worker::FakeMpsControl>();
    } else {
      auto made = trainctl::worker::DaemonMpsControl::Create(
          mps_dir.empty() ? config.log_dir + "/mps" : mps_dir);
      if (!made.ok()) return Fail(absl::StrCat("--mps: ", made.status().message()));
      mps = std::move(*made);
    }
    absl::StatusOr<std::vector<trainctl::worker::GpuInfo>> listed = inventory->ListGpus();
    if (!listed.ok()) return Fail(absl::StrCat("--mps: ", listed.status().message()));
    for (const trainctl::worker::GpuInfo& g : *listed) {
      if (!config.offered_gpus.empty() &&
          std::find(config.offered_gpus.begin(), config.offered_gpus.end(), g.index) ==
              config.offered_gpus.end()) {
        continue;
      }
      if (absl::Status s = mps->Start(g.index, g.uuid); !s.ok()) {
        // The daemons already started are stopped; failing that is said too.
        absl::Status stopped = mps->StopAll();
        return Fail(absl::StrCat("--mps: ", s.message(),
                                 stopped.ok() ? "" : absl::StrCat(
                                     "; stopping the MPS daemons already started "
                                     "also failed: ", stopped.message())));
      }
    }
    config.mps = mps.get();
    config.mps_active_thread_pct = mps_thread_pct;
  }

  if (preflight_probe.empty()) {
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    preflight_probe = (self.parent_path() / (config.fake_gpus
                                                 ? "trainctl-fake-preflight-probe"
                                                 : "trainctl-nccl-allreduce"))
                          .string();
  }
  if (const std::string probe_error = trainctl::worker::PreflightProbeError(preflight_probe);
      !probe_error.empty()) {
    // The agent's configuration, not its GPUs: the registration says so and
    // gangs here start without a pre-flight (never excluded for it).
    TC_LOG_ERROR("configuration error: {}; gangs on this node start without a "
                 "pre-flight until it is fixed (`trainctl why` and `nodes` show this)",
                 probe_error);
  } else if (config.fake_gpus) {
    TC_LOG_WARN("pre-flights run {} (fake GPUs: no NCCL all-reduce)", preflight_probe);
  }
  config.preflight_probe = preflight_probe;

  // PyTorch stores (worker/torch_store.h): started now, so a store opens in
  // milliseconds when a gang starts; the registration says whether it runs.
  std::unique_ptr<trainctl::worker::TorchStoreHost> torch_store;
  {
    std::vector<std::string> store_argv;
    bool required = false;
    if (torch_store_cmd == "auto") {
      std::error_code ec;
      const std::filesystem::path share =
          std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() / ".." / "share";
      // The bundle's share/, or a package's /usr/share/trainctl/.
      for (const std::filesystem::path& script :
           {share / "torch_store_host.py", share / "trainctl" / "torch_store_host.py"}) {
        if (!config.fake_gpus && store_argv.empty() && std::filesystem::exists(script, ec)) {
          store_argv = {"python3", script.lexically_normal().string()};
        }
      }
    } else if (torch_store_cmd != "none") {
      store_argv = absl::StrSplit(torch_store_cmd, ' ', absl::SkipEmpty());
      required = true;
    }
    if (!store_argv.empty()) {
      auto host = trainctl::worker::TorchStoreHost::Start(store_argv, absl::Seconds(60));
      if (host.ok()) {
        TC_LOG_INFO("hosting PyTorch TCPStores for gangs (torch {})",
                    (*host)->torch_version());
        torch_store = *std::move(host);
        config.torch_store = torch_store.get();
      } else if (required) {
        return Fail(absl::StrCat("--torch-store-host: ", host.status().message()));
      } else {
        TC_LOG_INFO("not hosting PyTorch stores ({}); rank 0 of each gang creates "
                    "its own", std::string(host.status().message()));
      }
    }
  }

  // The rendezvous relay (worker/nccl/rendezvous_relay.h): its upstream
  // channel, the relay, then the socket it is served on.
  std::unique_ptr<trainctl::worker::GrpcRendezvousUpstream> relay_upstream;
  std::unique_ptr<trainctl::worker::RendezvousRelay> relay;
  std::unique_ptr<trainctl::worker::RendezvousRelayServer> relay_server;
  if (rendezvous_socket != "none") {
    if (rendezvous_socket == "auto") {
      // Named after the node: agents sharing a state directory (several on
      // one host, tests) must not bind one socket.
      rendezvous_socket = (std::filesystem::path(state_dir) /
                           absl::StrCat("rendezvous-", config.node_name, ".sock"))
                              .string();
    }
    std::error_code ec;
    std::filesystem::create_directories(
        std::filesystem::path(rendezvous_socket).parent_path(), ec);
    relay_upstream = std::make_unique<trainctl::worker::GrpcRendezvousUpstream>(
        trainctl::worker::CoordinatorChannel(coordinator, credentials));
    relay = std::make_unique<trainctl::worker::RendezvousRelay>(relay_upstream.get());
    auto server = trainctl::worker::RendezvousRelayServer::Start(
        std::filesystem::absolute(rendezvous_socket).string(), relay.get());
    if (server.ok()) {
      relay_server = *std::move(server);
      config.rendezvous_relay = relay.get();
      config.rendezvous_socket = std::filesystem::absolute(rendezvous_socket).string();
      TC_LOG_INFO("rendezvous relay for this node's ranks on {}",
                  config.rendezvous_socket);
    } else {
      TC_LOG_WARN("no rendezvous relay ({}): ranks ask the coordinator directly",
                  std::string(server.status().message()));
    }
  }

  // Members in dependency order: hardware, then the agent, then the session.
  trainctl::worker::PosixProcessLauncher::Options launch_options;
  launch_options.no_new_privs = task_no_new_privs;
  if (task_shim == "auto") {
    // Found by itself: only for the tasks that need it (their account or
    // cgroup) while the guard covers the agent's death. A --task-shim named
    // on the command line starts every task.
    launch_options.shim_every_task = !guarded;
    std::error_code ec;
    const std::filesystem::path next_to =
        std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() /
        "trainctl-task-shim";
    task_shim = "none";
    if (geteuid() == 0) {
      if (access(next_to.c_str(), X_OK) == 0) {
        task_shim = next_to.string();
      } else {
        TC_LOG_WARN("no trainctl-task-shim next to the agent ({}): tasks of "
                    "other users cannot start",
                    next_to.string());
      }
    }
  }
  if (task_shim != "none") {
    if (access(task_shim.c_str(), X_OK) != 0) {
      return Fail(absl::StrCat("--task-shim ", task_shim, " is not an executable"));
    }
    launch_options.task_shim = std::filesystem::absolute(task_shim).string();
  }
  auto launcher =
      std::make_unique<trainctl::worker::PosixProcessLauncher>(launch_options);
  trainctl::worker::Agent agent(config, inventory.get(), launcher.get());
  if (absl::Status s = agent.Validate(); !s.ok()) return Fail(s.ToString());
  trainctl::worker::GrpcAgentSession session(
      &agent, coordinator, credentials,
      absl::Microseconds(std::llround(report_linger_ms * 1000)));

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::thread session_thread([&] {
    session.Run();
    // Run() returns by itself only when the coordinator refused this agent
    // for good (FatalError()): the agent exits.
    OnSignal(0);
  });
  TC_LOG_INFO("node {} ({}) connecting to {}; task logs in {}", config.node_name,
              config.address, coordinator, config.log_dir);
  g_shutdown.WaitForNotification();
  TC_LOG_INFO("shutting down: stopping tasks");
  session.Shutdown();
  session_thread.join();
  // Kills what still runs; its exit callbacks reach the agent, so the
  // launcher goes before the agent.
  launcher.reset();
  if (mps != nullptr) {
    if (absl::Status s = mps->StopAll(); !s.ok()) TC_LOG_WARN("{}", s.ToString());
  }
  // The relay's server first (its waiting ranks get ABORTED), then the
  // upstream calls in flight (their callbacks reach the relay), then the
  // relay.
  relay_server.reset();
  if (relay_upstream != nullptr) relay_upstream->CancelAll();
  relay.reset();
  relay_upstream.reset();
  if (absl::Status fatal = session.FatalError(); !fatal.ok()) {
    return Fail(std::string(fatal.message()));
  }
  return 0;
}
