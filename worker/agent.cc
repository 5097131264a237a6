#include "worker/agent.h"

#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/secrets.h"
#include "common/status_macros.h"
#include "worker/hw/accounts.h"
#include "worker/job_dirs.h"
#include "worker/task_paths.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

namespace trainctl::worker {

namespace {

// How much of a failed task's log end is searched for an out-of-memory error.
constexpr int64_t kOomScanBytes = 64 << 10;
// What PyTorch and the CUDA runtime print when an allocation fails:
// torch.cuda.OutOfMemoryError "CUDA out of memory. Tried to allocate ...",
// cudaErrorMemoryAllocation "CUDA error: out of memory".
constexpr const char* kOomPatterns[] = {"CUDA out of memory",
                                        "CUDA error: out of memory",
                                        "OutOfMemoryError"};
// Exits re-sent in a registration (RegisterNode.finished_tasks).
constexpr size_t kRecentExits = 256;
// How much of a probe's log end is searched for its result line.
constexpr int64_t kPreflightScanBytes = 16 << 10;

// Makes `dir` the private directory (0700) of `run_as`, or of the agent's
// account when unset. A failure (e.g. root squashed on NFS) is logged: the
// task then meets it itself.
void GiveToAccount(const std::string& dir, const std::optional<RunAs>& run_as) {
  std::error_code ec;
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);
  if (ec) TC_LOG_WARN("chmod 700 {}: {}", dir, ec.message());
  if (run_as.has_value() && chown(dir.c_str(), run_as->uid, run_as->gid) != 0) {
    TC_LOG_WARN("chown {} to {} (uid {}): {}", dir, run_as->user, run_as->uid,
                std::strerror(errno));
  }
}

// podman's name for the container of task `ref` of cluster `cluster_id`:
// trainctl-<cluster>-j<job>-a<attempt>-r<rank>. The cluster's id is in it
// because job ids start again at 1 in every cluster, and `--replace` (and
// the cleanup after a kill) would remove another cluster's container of the
// same name where two clusters' agents share a host's podman. Characters
// outside podman's name rule become '_'.
std::string ContainerName(const std::string& cluster_id, const v1::TaskRef& ref) {
  std::string cluster = cluster_id.substr(0, 32);
  for (char& c : cluster) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
  }
  return absl::StrFormat("trainctl-%s%sj%d-a%d-r%d", cluster, cluster.empty() ? "" : "-",
                         ref.job_id(), ref.attempt(), ref.rank());
}

// Runs `argv` (argv[0] an absolute path) with no output and waits for it.
// The child is in the agent's own process group, which the launcher never
// waits for, so this waitpid takes no status of the launcher's.
void RunAndWait(const std::vector<std::string>& argv) {
  if (argv.empty()) return;
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  char path[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  char* envp[] = {path, nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    TC_LOG_WARN("cannot run {}: {}", argv[0], std::strerror(err));
    return;
  }
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

// The task's output goes to /dev/null (JobSpec.discard_output). Never for a
// pre-flight probe: its result is read from its log.
bool DiscardsOutput(const v1::StartTask& start) {
  return start.discard_output() && !start.has_preflight();
}

// The node's part of its task cgroups' names. Agents that share a host (each
// offering some of its GPUs, --gpus) share one `tasks` directory, and a name
// one of them finds taken is treated as left by a dead agent and its
// processes killed: the names must differ between nodes. The node name itself
// where it is 1-64 bytes of [A-Za-z0-9._-] (not "." or ".."), else "node-"
// and 16 hex digits of its SHA-256.
std::string CgroupNodePart(const std::string& node) {
  const bool plain = node.size() <= 64 && IsValidCgroupName(node);
  return plain ? node : absl::StrCat("node-", Sha256Hex(node).substr(0, 16));
}

}  // namespace

Agent::Agent(AgentConfig config, GpuInventory* inventory, ProcessLauncher* launcher)
    : config_(std::move(config)),
      inventory_(inventory),
      launcher_(launcher),
      proc_sampler_(config_.proc_root),
      agent_account_(CurrentAccount()),
      instance_id_([] {
        absl::BitGen gen;
        return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(gen),
                               absl::Uniform<uint64_t>(gen));
      }()) {
  sessions_ = std::make_unique<SessionHost>(launcher_, [this](v1::SessionFromAgent m) {
    v1::AgentMessage msg;
    // Swapped, not copied: an output chunk is up to 1 MiB.
    msg.mutable_session()->Swap(&m);
    absl::MutexLock lock(&mu_);
    // Never queued: a session does not outlive its stream.
    if (connected_ && outbox_) outbox_(std::move(msg));
  });
}

absl::Status Agent::Validate() {
  TC_ASSIGN_OR_RETURN(std::vector<GpuInfo> gpus, inventory_->ListGpus());
  absl::flat_hash_set<int> have;
  for (const GpuInfo& g : gpus) have.insert(g.index);
  for (int i : config_.offered_gpus) {
    if (!have.contains(i)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--gpus: this host has no GPU ", i, " (it has ", gpus.size(), " GPUs)"));
    }
  }
  return absl::OkStatus();
}

Agent::~Agent() {
  if (config_.cgroups == nullptr) return;
  absl::MutexLock lock(&cgroup_pool_mu_);
  for (const auto& [user, dir] : cgroup_pool_) RemoveCgroup(dir);
  cgroup_pool_.clear();
  slot_users_.clear();
}

absl::StatusOr<v1::RegisterNode> Agent::Registration() {
  TC_ASSIGN_OR_RETURN(std::vector<GpuInfo> gpus, inventory_->ListGpus());
  absl::flat_hash_set<int> offered(config_.offered_gpus.begin(),
                                   config_.offered_gpus.end());
  v1::RegisterNode reg;
  v1::Node* node = reg.mutable_node();
  node->set_name(config_.node_name);
  node->set_address(config_.address);
  node->set_cpu_count(config_.cpu_count);
  node->set_port_min(config_.port_min);
  node->set_port_max(config_.port_max);
  node->set_fake_gpus(config_.fake_gpus);
  for (const std::string& f : config_.features) node->add_features(f);
  node->mutable_labels()->insert(config_.labels.begin(), config_.labels.end());
  // Root can switch to the job's account (setuid in the task shim).
  node->set_runs_as_job_user(!config_.run_tasks_as_agent &&
                             agent_account_.run_as.uid == 0);
  node->set_cgroups(config_.cgroups != nullptr);
  if (config_.container_runtime != nullptr) {
    node->add_container_runtimes(
        config_.container_runtime->kind() == ContainerRuntimeKind::kPodman ? "podman"
                                                                           : "apptainer");
  }
  node->set_torch_store(config_.torch_store != nullptr);
  node->set_mps(config_.mps != nullptr);
  // Checked at every registration: a probe installed since is seen at the
  // next reconnect.
  node->set_preflight_probe_error(PreflightProbeError(config_.preflight_probe));
  node->set_agent_version("0.1.0");
  reg.set_fences(config_.fences);
  reg.set_agent_instance_id(instance_id_);
  reg.set_accepts_start_task_batch(true);
  reg.set_probe_tasks(true);
  for (const GpuInfo& g : gpus) {
    if (!offered.empty() && !offered.contains(g.index)) continue;
    v1::Gpu* gpu = node->add_gpus();
    gpu->set_index(g.index);
    gpu->set_uuid(g.uuid);
    gpu->set_name(g.name);
    gpu->set_memory_total_bytes(g.memory_total_bytes);
    gpu->set_mig_enabled(g.mig_enabled);
    for (int peer : g.nvlink_peers) {
      if (offered.empty() || offered.contains(peer)) gpu->add_nvlink_peers(peer);
    }
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [key, entry] : tasks_) *reg.add_running_tasks() = entry.ref;
  for (const v1::TaskStatus& st : recent_exits_) *reg.add_finished_tasks() = st;
  return reg;
}

absl::StatusOr<v1::Heartbeat> Agent::Heartbeat() {
  TC_ASSIGN_OR_RETURN(std::vector<GpuSample> samples, inventory_->Sample());
  absl::flat_hash_set<int> offered(config_.offered_gpus.begin(),
                                   config_.offered_gpus.end());
  v1::Heartbeat hb;
  for (const GpuSample& s : samples) {
    if (!offered.empty() && !offered.contains(s.index)) continue;
    v1::GpuSample* out = hb.add_gpus();
    out->set_index(s.index);
    out->set_memory_used_bytes(s.memory_used_bytes);
    out->set_utilization_pct(s.utilization_pct);
    out->set_temperature_c(s.temperature_c);
    out->set_power_w(s.power_w);
    if (s.gpm) {
      out->set_activity_source(v1::GPU_ACTIVITY_SOURCE_GPM);
      out->set_sm_active_pct(s.sm_active_pct);
      out->set_sm_occupancy_pct(s.sm_occupancy_pct);
      out->set_dram_bw_pct(s.dram_bw_pct);
    } else {
      out->set_activity_source(v1::GPU_ACTIVITY_SOURCE_UTILIZATION);
    }
  }

  // Per-task use. Each task leads its own process group (pgid = pid).
  // Pre-flight probes are not the job's ranks: their use is not the job's
  // (TaskUsage names the attempt, not the probe run).
  std::vector<v1::TaskRef> running;
  // Task pid -> its cgroup, for the tasks that have one.
  std::map<int, std::string> cgroup_dirs;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, entry] : tasks_) {
      if (!entry.exited && entry.ref.pid() > 0 && entry.ref.probe_run() == 0) {
        running.push_back(entry.ref);
        if (!entry.cgroup_dir.empty()) cgroup_dirs[entry.ref.pid()] = entry.cgroup_dir;
      }
    }
  }
  if (running.empty()) return hb;
  if (config_.task_usage_period <= 0 ||
      busy_heartbeats_++ % config_.task_usage_period != 0) {
    return hb;
  }
  std::vector<int> pgids;
  for (const v1::TaskRef& r : running) pgids.push_back(r.pid());
  // A task in a cgroup is its cgroup's processes (a container's included),
  // read without walking /proc; the others are their process groups.
  std::map<int, std::vector<int>> members;
  if (config_.cgroups != nullptr) {
    for (const auto& [pid, dir] : cgroup_dirs) {
      absl::StatusOr<std::vector<int>> pids = config_.cgroups->Pids(dir);
      if (pids.ok()) members[pid] = *std::move(pids);
    }
  }
  const std::map<int, GroupUsage> groups = proc_sampler_.Sample(pgids, members);
  absl::StatusOr<std::vector<ProcessGpuSample>> procs = inventory_->SampleProcesses();
  if (!procs.ok()) {
    TC_LOG_WARN("per-process GPU sample failed: {}", procs.status().ToString());
    procs = std::vector<ProcessGpuSample>{};
  }
  for (const v1::TaskRef& r : running) {
    v1::TaskUsage* u = hb.add_task_usage();
    u->set_job_id(r.job_id());
    u->set_attempt(r.attempt());
    u->set_rank(r.rank());
    u->set_gpu_util_pct(-1);
    auto g = groups.find(r.pid());
    if (g == groups.end()) continue;
    u->set_cpu_pct(g->second.cpu_pct);
    u->set_rss_bytes(g->second.rss_bytes);
    const absl::flat_hash_set<int> members(g->second.pids.begin(), g->second.pids.end());
    int64_t memory = 0;
    int util = 0;
    bool memory_known = false, util_known = false;
    for (const ProcessGpuSample& p : *procs) {
      if (!members.contains(p.pid)) continue;
      if (p.memory_used_bytes >= 0) {
        memory += p.memory_used_bytes;
        memory_known = true;
      }
      if (p.sm_util_pct >= 0) {
        util += p.sm_util_pct;
        util_known = true;
      }
    }
    u->set_gpu_memory_known(memory_known);
    u->set_gpu_memory_bytes(memory);
    if (util_known) u->set_gpu_util_pct(std::min(100, util));
  }
  return hb;
}

std::string Agent::OutOfMemoryLine(const v1::TaskRef& ref) const {
  std::ifstream in(LogPath(ref), std::ios::binary | std::ios::ate);
  if (!in) return "";
  const int64_t size = in.tellg();
  const int64_t from = std::max<int64_t>(0, size - kOomScanBytes);
  std::string tail(size - from, '\0');
  in.seekg(from);
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  tail.resize(std::max<std::streamsize>(0, in.gcount()));
  for (const char* pattern : kOomPatterns) {
    const size_t at = tail.rfind(pattern);
    if (at == std::string::npos) continue;
    const size_t begin = tail.rfind('\n', at);
    const size_t end = tail.find('\n', at);
    std::string line = tail.substr(begin == std::string::npos ? 0 : begin + 1,
                                   end == std::string::npos ? std::string::npos
                                                            : end - (begin + 1));
    if (line.size() > 512) line.resize(512);
    return line;
  }
  return "";
}

void Agent::Connected(Outbox outbox, const std::string& cluster_id) {
  {
    absl::MutexLock lock(&cluster_mu_);
    cluster_id_ = cluster_id;
  }
  absl::MutexLock lock(&mu_);
  outbox_ = std::move(outbox);
  connected_ = true;
  while (!queued_.empty()) {
    v1::AgentMessage msg = std::move(queued_.front());
    queued_.pop_front();
    EmitLocked(std::move(msg));
  }
}

void Agent::Disconnected() {
  {
    absl::MutexLock lock(&mu_);
    connected_ = false;
    outbox_ = nullptr;
  }
  // The coordinator has told their clients UNAVAILABLE.
  sessions_->CloseAll();
}

int Agent::Fence(const std::string& why) {
  std::vector<int> pids;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, entry] : tasks_) {
      entry.stopped = true;
      if (entry.launching) entry.fence_after_launch = true;
      if (!entry.exited && entry.ref.pid() != 0) pids.push_back(entry.ref.pid());
    }
  }
  if (pids.empty()) return 0;
  TC_LOG_ERROR("FENCING: {}; killing all {} tasks of this node (pids {})", why,
               pids.size(), absl::StrJoin(pids, ","));
  int killed = 0;
  for (int pid : pids) {
    absl::Status s = launcher_->Stop(pid, absl::ZeroDuration());
    if (s.ok()) {
      ++killed;
    } else {
      TC_LOG_WARN("fence: stop pid {}: {}", pid, s.ToString());
    }
  }
  return killed;
}

int Agent::RunningTasks() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(std::count_if(tasks_.begin(), tasks_.end(), [](const auto& kv) {
    return !kv.second.exited;
  }));
}

std::string Agent::ClusterDir() const {
  absl::MutexLock lock(&cluster_mu_);
  return worker::ClusterDir(config_.log_dir, cluster_id_);
}

std::string Agent::LogPath(const v1::TaskRef& ref) const {
  // One file per task, no directory per job or attempt: on ext4 a new
  // directory costs several times a new file (55 vs 17 us of CPU each;
  // bench/README.md, "What changed (agent only)").
  absl::MutexLock lock(&cluster_mu_);
  return TaskLogPath(config_.log_dir, cluster_id_, ref);
}

std::string Agent::DefaultWorkdir(const v1::TaskRef& ref) const {
  absl::MutexLock lock(&cluster_mu_);
  return DefaultTaskWorkdir(config_.log_dir, cluster_id_, ref);
}

std::optional<v1::PreflightProbeResult> Agent::ParsePreflightResult(
    absl::string_view tail) {
  const size_t at = tail.rfind(kPreflightResultPrefix);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view line = tail.substr(at + sizeof(kPreflightResultPrefix) - 1);
  line = line.substr(0, line.find('\n'));
  v1::PreflightProbeResult result;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(std::string(line), &result, options)
           .ok()) {
    return std::nullopt;
  }
  return result;
}

void Agent::EmitLocked(v1::AgentMessage msg) {
  if (!connected_) {
    // Only task reports are worth keeping across a reconnect.
    if (msg.has_task_status() || msg.has_task_oom()) queued_.push_back(std::move(msg));
    return;
  }
  // An exit is forgotten once sent: the next registration will not list it.
  if (msg.has_task_status() && msg.task_status().state() != v1::TASK_STATE_RUNNING) {
    const v1::TaskRef& r = msg.task_status().task();
    tasks_.erase(Key{r.job_id(), r.attempt(), r.probe_run(), r.rank()});
    // Sent is not stored: the coordinator may die before it stores this.
    recent_exits_.push_back(msg.task_status());
    if (recent_exits_.size() > kRecentExits) recent_exits_.pop_front();
  }
  outbox_(msg);
}

void Agent::Handle(const v1::CoordinatorMessage& msg) {
  switch (msg.msg_case()) {
    case v1::CoordinatorMessage::kStartTask:
      Start(msg.start_task());
      break;
    case v1::CoordinatorMessage::kStartTaskBatch:
      // In order, as that many start_task messages: their RUNNING reports
      // leave in the same order.
      for (const v1::StartTask& start : msg.start_task_batch().starts()) Start(start);
      break;
    case v1::CoordinatorMessage::kStopTask: {
      const v1::TaskRef& r = msg.stop_task().task();
      int pid = 0;
      {
        absl::MutexLock lock(&mu_);
        auto it = tasks_.find(Key{r.job_id(), r.attempt(), r.probe_run(), r.rank()});
        if (it != tasks_.end() && !it->second.exited) {
          pid = it->second.ref.pid();
          it->second.stopped = true;
        }
      }
      if (pid == 0) break;  // Already ended; its exit is or will be reported.
      TC_LOG_INFO("stopping job {} rank {} (pid {})", r.job_id(), r.rank(), pid);
      absl::Status s =
          launcher_->Stop(pid, absl::Milliseconds(msg.stop_task().grace_ms()));
      if (!s.ok()) TC_LOG_WARN("stop pid {}: {}", pid, s.ToString());
      break;
    }
    case v1::CoordinatorMessage::kReadLog: {
      v1::AgentMessage reply = ReadLog(msg.read_log());
      absl::MutexLock lock(&mu_);
      if (connected_) outbox_(std::move(reply));
      break;
    }
    case v1::CoordinatorMessage::kSession:
      HandleSession(msg.session());
      break;
    default:
      break;
  }
}

void Agent::HandleSession(const v1::SessionToAgent& msg) {
  const v1::SessionClientMessage& payload = msg.payload();
  if (!payload.has_open()) {
    absl::Status s = sessions_->Input(msg.session_id(), payload);
    if (s.ok()) return;
    TC_LOG_WARN("session {}: {}", msg.session_id(), s.ToString());
    if (!absl::IsResourceExhausted(s)) return;
    // Input the command does not read, beyond what the agent holds: the
    // session ends with the reason rather than go on without those bytes.
    v1::SessionClientMessage close;
    close.set_close(true);
    (void)sessions_->Input(msg.session_id(), close);
    v1::AgentMessage reply;
    reply.mutable_session()->set_session_id(msg.session_id());
    v1::SessionError* e = reply.mutable_session()->mutable_payload()->mutable_error();
    e->set_code(static_cast<int>(s.code()));
    e->set_message(absl::StrCat(s.message(),
                                ": the session is ended rather than lose input (a client "
                                "with an input window, such as trainctl, waits instead)"));
    absl::MutexLock lock(&mu_);
    if (connected_) outbox_(reply);
    return;
  }
  // A coordinator that does not pass acks on (older than output windows):
  // output is sent without a window, as it would never be acknowledged.
  std::optional<v1::SessionOpen> no_window;
  if (payload.open().output_window_bytes() > 0 && !msg.relays_output_acks()) {
    no_window = payload.open();
    no_window->clear_output_window_bytes();
  }
  const v1::SessionOpen& open = no_window.has_value() ? *no_window : payload.open();
  std::shared_ptr<const LaunchSpec> base;
  std::shared_ptr<const ContainerLaunch> container;
  bool found = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = tasks_.find(Key{open.job_id(), msg.attempt(), 0, open.rank()});
    if (it != tasks_.end() && !it->second.exited && !it->second.launching) {
      found = true;
      base = it->second.session_spec;
      container = it->second.session_container;
    }
  }
  absl::Status status;
  SessionHost::Wrap wrap;
  if (container != nullptr && base != nullptr) {
    const bool keep_root = base->keep_root;
    wrap = [this, container, keep_root](const v1::SessionOpen& o, LaunchSpec& spec) {
      return WrapSessionInContainer(*container, keep_root, o, spec);
    };
  }
  if (!found) {
    status = absl::FailedPreconditionError(absl::StrFormat(
        "job %d rank %d has no running task on node %s", open.job_id(), open.rank(),
        config_.node_name));
  } else if (base == nullptr) {
    status = absl::FailedPreconditionError(absl::StrFormat(
        "job %d rank %d is a pre-flight probe: no sessions into it", open.job_id(),
        open.rank()));
  } else if (container != nullptr && open.port() > 0 &&
             (config_.container_runtime == nullptr ||
              !config_.container_runtime->SharesHostNetwork())) {
    // The agent connects to 127.0.0.1:PORT of the node, which is not the
    // container's own loopback then.
    status = absl::FailedPreconditionError(absl::StrFormat(
        "job %d rank %d runs in a container with a network of its own (the agent's "
        "--container-run-args choose one): port-forward reaches only containers on the "
        "node's network",
        open.job_id(), open.rank()));
  } else {
    absl::StatusOr<int> pid =
        sessions_->Open(msg.session_id(), open, *base,
                        absl::StrCat(open.job_id(), "/", msg.attempt(), "/", open.rank()),
                        wrap);
    status = pid.status();
    if (pid.ok()) {
      TC_LOG_INFO("session {}: job {} rank {}: {} (pid {})", msg.session_id(), open.job_id(),
                  open.rank(), open.port() > 0 ? absl::StrCat("port ", open.port()) : "command",
                  *pid);
    }
  }
  if (status.ok()) return;
  v1::AgentMessage reply;
  reply.mutable_session()->set_session_id(msg.session_id());
  v1::SessionError* e = reply.mutable_session()->mutable_payload()->mutable_error();
  e->set_code(static_cast<int>(status.code()));
  e->set_message(std::string(status.message()));
  absl::MutexLock lock(&mu_);
  if (connected_) outbox_(std::move(reply));
}

absl::Status Agent::PlaceInCgroup(const v1::StartTask& start, LaunchSpec& spec) const {
  const v1::TaskRef& ref = start.task();
  const CgroupLimits limits{start.cpus(), start.memory_bytes()};
  if (config_.cgroups == nullptr) {
    if (limits.cpus > 0 || limits.memory_bytes > 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "node %s cannot enforce --cpus/--mem: its agent has no cgroup v2 "
          "subtree (the agent's start log says why)",
          config_.node_name));
    }
    return absl::OkStatus();
  }
  const bool slot = limits.cpus <= 0 && limits.memory_bytes <= 0 && start.image().empty();
  // A slot is reused only by tasks of the account that last ran in it: its
  // counters (memory.current, cpu.stat) still count that task's use.
  const std::string& user = start.run_as_user();
  if (slot) {
    absl::MutexLock lock(&cgroup_pool_mu_);
    for (auto it = cgroup_pool_.rbegin(); it != cgroup_pool_.rend(); ++it) {
      if (it->first != user) continue;
      spec.cgroup_dir = std::move(it->second);
      cgroup_pool_.erase(std::next(it).base());
      slot_users_[spec.cgroup_dir] = user;
      return absl::OkStatus();
    }
  }
  std::string prefix;
  {
    absl::MutexLock lock(&cluster_mu_);
    if (!cluster_id_.empty()) prefix = absl::StrCat(cluster_id_.substr(0, 8), "-");
  }
  absl::StrAppend(&prefix, CgroupNodePart(config_.node_name), "-");
  const std::string name =
      slot ? absl::StrFormat("%sslot-%d", prefix, next_cgroup_slot_.fetch_add(1))
           : absl::StrFormat("%sjob-%d.attempt-%d.rank-%d", prefix, ref.job_id(),
                             ref.attempt(), ref.rank());
  absl::StatusOr<std::string> dir = config_.cgroups->CreateTaskCgroup(name, limits);
  if (dir.status().code() == absl::StatusCode::kAlreadyExists) {
    // Left by an agent that died: nothing of it may survive into this task.
    ReleaseCgroup(absl::StrCat(config_.cgroups->tasks_dir(), "/", name), /*reuse=*/false);
    dir = config_.cgroups->CreateTaskCgroup(name, limits);
  }
  if (!dir.ok()) return dir.status();
  spec.cgroup_dir = *std::move(dir);
  if (slot) {
    absl::MutexLock lock(&cgroup_pool_mu_);
    slot_users_[spec.cgroup_dir] = user;
  }
  return absl::OkStatus();
}

absl::Status Agent::WrapInContainer(const v1::StartTask& start, LaunchSpec& spec,
                                    ContainerLaunch* launched) const {
  const ContainerRuntime* runtime = config_.container_runtime;
  if (runtime == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "node %s has no container runtime (podman or Apptainer) for image %s",
        config_.node_name, start.image()));
  }
  ContainerLaunch c;
  c.image = start.image();
  c.argv = spec.argv;
  c.env = spec.env;
  c.workdir = spec.workdir;
  for (const std::string& dir : {spec.workdir, start.checkpoint_dir()}) {
    if (!dir.empty() && std::find(c.mounts.begin(), c.mounts.end(), dir) == c.mounts.end()) {
      c.mounts.push_back(dir);
    }
  }
  if (!config_.fake_gpus) {
    if (auto it = spec.env.find("CUDA_VISIBLE_DEVICES"); it != spec.env.end()) {
      c.gpu_uuids = absl::StrSplit(it->second, ',', absl::SkipEmpty());
    }
  }
  const Account& who = spec.run_as.has_value() ? Account{*spec.run_as, "", ""} : agent_account_;
  c.uid = who.run_as.uid;
  c.gid = who.run_as.gid;
  {
    absl::MutexLock lock(&cluster_mu_);
    c.name = ContainerName(cluster_id_, start.task());
  }
  if (config_.cgroups != nullptr && !spec.cgroup_dir.empty()) {
    c.cgroup_parent = config_.cgroups->RelativePath(spec.cgroup_dir);
  }
  // Root podman starts the container as the job's uid:gid (--user) itself:
  // the runtime must stay root, so the shim does not drop to the account.
  // It mounts as root, so it never gets the job's paths: the shim opens each
  // as the account and binds what it opened at a stage of the agent's, which
  // podman mounts instead (LaunchSpec::bind_as_account).
  const bool root_podman = runtime->kind() == ContainerRuntimeKind::kPodman &&
                           !runtime->rootless() && spec.run_as.has_value();
  const std::string files = ContainerFilesPrefix(start.task());
  if (runtime->kind() == ContainerRuntimeKind::kPodman) {
    c.env_file = files + ".env";
    absl::StatusOr<std::string> content = runtime->EnvFileContent(c);
    if (!content.ok()) return content.status();
    TC_RETURN_IF_ERROR(WritePrivateFile(c.env_file, *content, c.uid, c.gid));
  }
  if (root_podman) {
    for (size_t i = 0; i < c.mounts.size(); ++i) {
      const std::string stage = absl::StrCat(files, ".mnt/", i);
      std::error_code ec;
      std::filesystem::create_directories(stage, ec);
      if (ec) {
        RemoveContainerFiles(files);
        return absl::InternalError(absl::StrCat("mkdir ", stage, ": ", ec.message()));
      }
      c.mount_sources[c.mounts[i]] = stage;
      spec.bind_as_account.emplace_back(c.mounts[i], stage);
    }
  }
  absl::StatusOr<WrappedLaunch> wrapped = runtime->WrapArgv(c);
  if (!wrapped.ok()) {
    RemoveContainerFiles(files);
    return wrapped.status();
  }
  spec.argv = std::move(wrapped->argv);
  spec.env = std::move(wrapped->env);
  if (root_podman) {
    spec.keep_root = true;
    spec.workdir = "/";  // podman's -w sets the task's
  }
  if (launched != nullptr) *launched = std::move(c);
  return absl::OkStatus();
}

absl::Status Agent::WrapSessionInContainer(const ContainerLaunch& container, bool keep_root,
                                           const v1::SessionOpen& open,
                                           LaunchSpec& spec) const {
  const ContainerRuntime* runtime = config_.container_runtime;
  if (runtime == nullptr) {
    return absl::FailedPreconditionError("this node has no container runtime");
  }
  ContainerExec e;
  e.argv.assign(open.argv().begin(), open.argv().end());
  e.login_shell = e.argv.empty();
  e.stdin_open = open.stdin() || open.tty();
  e.tty = open.tty();
  if (open.tty()) e.term = open.term().empty() ? "xterm-256color" : open.term();
  absl::StatusOr<WrappedLaunch> w = runtime->ExecArgv(container, e);
  if (!w.ok()) return w.status();
  spec.argv = std::move(w->argv);
  spec.env = std::move(w->env);
  // Root podman: `podman exec --user` drops to the task's account itself.
  spec.keep_root = keep_root;
  return absl::OkStatus();
}

std::string Agent::ContainerFilesPrefix(const v1::TaskRef& ref) const {
  absl::MutexLock lock(&cluster_mu_);
  return absl::StrCat(::trainctl::worker::ClusterDir(config_.log_dir, cluster_id_),
                      "/containers/", ContainerName(cluster_id_, ref));
}

void Agent::RemoveContainerFiles(const std::string& prefix) {
  unlink((prefix + ".env").c_str());
  // rmdir only, never a recursive remove: a stage is an empty directory
  // here (the shim's binds live in its own mount namespace); should one ever
  // be a mount point, rmdir fails and nothing under it is touched.
  const std::string stages = prefix + ".mnt";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(stages, ec)) {
    rmdir(entry.path().c_str());
  }
  rmdir(stages.c_str());
}

absl::Status Agent::WritePrivateFile(const std::string& path, const std::string& content,
                                     int uid, int gid) {
  const std::string dir = path.substr(0, path.rfind('/'));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("mkdir ", dir, ": ", ec.message()));
  // Only the agent's account reaches the files through the directory; the
  // task's account reads its own through podman's bind mount.
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);
  unlink(path.c_str());  // left by an agent that died
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);
  if (fd < 0) return absl::InternalError(absl::StrCat("create ", path, ": ", std::strerror(errno)));
  bool ok = static_cast<size_t>(write(fd, content.data(), content.size())) == content.size();
  if (ok && uid >= 0 && static_cast<uid_t>(uid) != geteuid()) {
    ok = fchown(fd, static_cast<uid_t>(uid), static_cast<gid_t>(std::max(gid, 0))) == 0;
  }
  const int err = errno;
  close(fd);
  if (!ok) {
    unlink(path.c_str());
    return absl::InternalError(absl::StrCat("write ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

void Agent::ReleaseCgroup(const std::string& dir, bool reuse) const {
  if (config_.cgroups == nullptr || dir.empty()) return;
  // Usually every process of the task ended with it: then there is nothing
  // to kill or reap. It is on the path from a task's exit to its report (and
  // so to the next task on its GPU): one read of cgroup.events instead of
  // the usage files, the pid lists and cgroup.kill.
  const absl::StatusOr<bool> populated = config_.cgroups->Populated(dir);
  const bool emptied = populated.ok() && !*populated;
  if (!emptied) {
    // Processes that left the task's process group were reparented to the
    // agent (a child subreaper): once killed they are its zombies, which
    // only it can reap. The task's leader is already reaped by the launcher
    // (this runs after its exit), so every pid here is such an escapee or
    // one of its descendants, whose pid cannot be reused before it is
    // reaped.
    absl::StatusOr<CgroupUsage> usage = config_.cgroups->ReadUsage(dir);
    if (absl::Status s = config_.cgroups->Kill(dir); !s.ok() && !absl::IsNotFound(s)) {
      TC_LOG_WARN("cgroup {}: {}", dir, s.ToString());
    }
    if (usage.ok() && !usage->pids.empty()) {
      // A descendant becomes the agent's child only once its parent is
      // reaped: reap round after round until a round reaps nothing.
      for (bool reaped = true; reaped;) {
        reaped = false;
        for (int pid : usage->pids) {
          if (waitpid(pid, nullptr, WNOHANG) == pid) reaped = true;
        }
      }
      TC_LOG_INFO("cgroup {}: killed {} process(es) that left the task's process group",
                  dir, usage->pids.size());
    }
  }
  {
    // An emptied slot goes back to the pool; one whose task left processes
    // behind is never reused.
    absl::MutexLock lock(&cgroup_pool_mu_);
    if (auto slot = slot_users_.find(dir); slot != slot_users_.end()) {
      if (emptied && reuse && cgroup_pool_.size() < kMaxPooledCgroups) {
        cgroup_pool_.emplace_back(slot->second, dir);
        return;
      }
      slot_users_.erase(slot);
    }
  }
  RemoveCgroup(dir);
}

void Agent::RemoveCgroup(const std::string& dir) const {
  if (absl::Status s = config_.cgroups->Remove(dir); !s.ok() && !absl::IsNotFound(s)) {
    TC_LOG_WARN("cgroup {}: {}", dir, s.ToString());
  }
}

absl::StatusOr<LaunchSpec> Agent::SpecFor(const v1::StartTask& start,
                                          ContainerLaunch* container) const {
  const v1::TaskRef& ref = start.task();
  LaunchSpec spec;
  // The account: the job's user (the Slurm rule), else the agent's own (read
  // once at construction: a passwd lookup per task was ~10 % of the agent's
  // CPU on short tasks).
  Account account = agent_account_;
  if (!start.run_as_user().empty() && !config_.run_tasks_as_agent) {
    absl::StatusOr<Account> found = LookupAccount(start.run_as_user());
    if (!found.ok()) {
      return absl::Status(found.status().code(),
                          absl::StrCat(found.status().message(), " (node ",
                                       config_.node_name, ")"));
    }
    if (found->run_as.uid == 0 && !start.allow_root()) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "user %s maps to uid 0 (root) on node %s, and the coordinator does "
          "not allow root jobs (trainctl-coordinator --allow-root-jobs)",
          start.run_as_user(), config_.node_name));
    }
    account = *std::move(found);
    spec.run_as = account.run_as;
  }
  spec.argv.assign(start.argv().begin(), start.argv().end());
  if (start.has_preflight()) {
    // A pre-flight probe: this node's probe program, not the job's command.
    const v1::PreflightProbe& p = start.preflight();
    spec.argv = {config_.preflight_probe, "--preflight",
                 "--bytes", absl::StrCat(p.bytes()),
                 "--iters", absl::StrCat(p.iters()),
                 "--warmup", absl::StrCat(p.warmup()),
                 "--timeout-ms", absl::StrCat(p.timeout_ms())};
  }
  spec.env = config_.base_env;
  // The account's own facts, as login(1) sets them; the job's environment
  // (its export, its --env, the launch contract) goes on top.
  spec.env["USER"] = account.run_as.user;
  spec.env["LOGNAME"] = account.run_as.user;
  if (!account.home.empty()) spec.env["HOME"] = account.home;
  if (!account.shell.empty()) spec.env["SHELL"] = account.shell;
  for (const auto& [k, v] : start.env()) spec.env[k] = v;
  if (config_.mps != nullptr && start.shared_gpu()) {
    const std::string pipe = config_.mps->PipeDirectory(start.shared_gpu_index());
    if (!pipe.empty()) {
      for (const auto& [k, v] : MpsClientEnv(pipe, start.shared_gpu_memory_limit_bytes(),
                                             config_.mps_active_thread_pct)) {
        spec.env[k] = v;
      }
    }
  }
  if (config_.rendezvous_relay != nullptr && !config_.rendezvous_socket.empty() &&
      start.image().empty() && start.env().count("TRAINCTL_TOKEN") > 0) {
    spec.env["TRAINCTL_RENDEZVOUS_SOCKET"] = config_.rendezvous_socket;
  }
  // Empty: the launcher sends stdout and stderr to /dev/null.
  if (!DiscardsOutput(start)) spec.log_path = LogPath(ref);
  spec.workdir = start.workdir();
  if (spec.workdir.empty()) {
    // No workdir in the job: a scratch directory of its own per attempt.
    spec.workdir = DefaultWorkdir(ref);
    std::error_code ec;
    std::filesystem::create_directories(spec.workdir, ec);
    // Private to the task's account; the owner-only rule of logs and work
    // dirs.
    GiveToAccount(spec.workdir, spec.run_as);
  }
  // The job's checkpoint directory (coordinator --checkpoint-root, on a file
  // system shared by the nodes): created here so the task can write into it
  // at once; a failure is left for the task to meet (and report) itself.
  // Only StartTask.checkpoint_dir, which the coordinator derives from its
  // own configuration: never the TRAINCTL_CHECKPOINT_DIR of the task's
  // environment (job_dirs.h).
  if (!start.checkpoint_dir().empty()) {
    if (absl::Status s = MakeCheckpointDir(start.checkpoint_dir(), ref.job_id(), spec.run_as);
        !s.ok()) {
      TC_LOG_WARN("job {}: checkpoint directory: {}", ref.job_id(), s.ToString());
    }
  }
  if (start.has_preflight()) return spec;
  TC_RETURN_IF_ERROR(PlaceInCgroup(start, spec));
  if (!start.image().empty()) {
    if (absl::Status s = WrapInContainer(start, spec, container); !s.ok()) {
      ReleaseCgroup(spec.cgroup_dir);  // made for nothing: the task never starts
      return s;
    }
  }
  return spec;
}

void Agent::Start(const v1::StartTask& start) {
  const v1::TaskRef& ref = start.task();
  const Key key{ref.job_id(), ref.attempt(), ref.probe_run(), ref.rank()};
  {
    absl::MutexLock lock(&mu_);
    if (tasks_.contains(key)) return;  // A repeated start: already running.
    TaskEntry& entry = tasks_[key];
    entry.ref = ref;
    entry.ref.set_pid(0);
    entry.launching = true;
    entry.preflight = start.has_preflight();
    entry.discard_output = DiscardsOutput(start);
  }
  // Without the lock: directories, the program's lookup and the spawn take
  // milliseconds on a busy host, and exits, heartbeats and fencing must not
  // wait for them. Handle() has one caller at a time, so no StopTask for
  // this task can be handled meanwhile; Fence() marks the entry instead.
  auto container = std::make_shared<ContainerLaunch>();
  absl::StatusOr<LaunchSpec> made = SpecFor(start, container.get());
  // Moved out, not copied (its environment is the task's whole one); `made`
  // keeps its status.
  const LaunchSpec spec = made.ok() ? *std::move(made) : LaunchSpec{};
  absl::StatusOr<int> store_port =
      made.ok() ? OpenStoreFor(start) : absl::StatusOr<int>(made.status());
  // Registered before the process exists, so its first rendezvous call
  // finds its token here.
  const std::optional<RelayRank> relay_rank =
      made.ok() ? AddToRelay(start) : std::nullopt;
  absl::StatusOr<int> pid =
      !store_port.ok() ? absl::StatusOr<int>(store_port.status())
      : start.has_preflight() && config_.preflight_probe.empty()
          ? absl::StatusOr<int>(absl::FailedPreconditionError(
                "this agent has no pre-flight probe (--preflight-probe)"))
          : launcher_->Launch(spec, [this, key](ExitInfo info) { OnExit(key, info); });
  if (!pid.ok() && store_port.ok() && *store_port > 0) {
    config_.torch_store->Close(*store_port);
  }
  if (!pid.ok() && made.ok()) {
    ReleaseCgroup(spec.cgroup_dir);
    if (!start.image().empty()) RemoveContainerFiles(ContainerFilesPrefix(ref));
  }
  if (!pid.ok()) RemoveFromRelay(relay_rank);

  int close_port = 0;
  std::optional<RelayRank> remove_relay_rank;
  absl::Cleanup close_store = [this, &close_port, &remove_relay_rank] {
    if (close_port > 0) config_.torch_store->Close(close_port);
    RemoveFromRelay(remove_relay_rank);
  };
  absl::MutexLock lock(&mu_);
  auto it = tasks_.find(key);  // Still there: only a reported exit erases it.
  v1::AgentMessage msg;
  v1::TaskStatus* st = msg.mutable_task_status();
  *st->mutable_task() = ref;
  if (!DiscardsOutput(start)) st->set_log_path(made.ok() ? spec.log_path : LogPath(ref));
  if (!pid.ok()) {
    TC_LOG_WARN("job {} rank {}: could not start: {}", ref.job_id(), ref.rank(),
                pid.status().ToString());
    tasks_.erase(it);
    st->set_state(v1::TASK_STATE_START_FAILED);
    st->set_message(std::string(pid.status().message()));
    EmitLocked(std::move(msg));
    return;
  }
  TaskEntry& entry = it->second;
  entry.launching = false;
  entry.store_port = *store_port;
  entry.relay_rank = relay_rank;
  entry.cgroup_dir = spec.cgroup_dir;
  if (!start.image().empty() && config_.container_runtime != nullptr) {
    std::string name;
    {
      absl::MutexLock cluster_lock(&cluster_mu_);
      name = ContainerName(cluster_id_, ref);
    }
    entry.container_cleanup = config_.container_runtime->CleanupCommands(name);
    if (config_.container_runtime->kind() == ContainerRuntimeKind::kPodman) {
      entry.container_files = ContainerFilesPrefix(ref);
    }
  }
  if (!start.has_preflight()) {
    entry.session_spec = std::make_shared<const LaunchSpec>(spec);
    if (!start.image().empty()) entry.session_container = std::move(container);
  }
  entry.ref.set_pid(*pid);
  st->mutable_task()->set_pid(*pid);
  st->set_state(v1::TASK_STATE_RUNNING);
  if (spec.run_as.has_value()) {
    st->set_run_as(spec.run_as->user);
    st->set_uid(spec.run_as->uid);
  } else {
    st->set_run_as(agent_account_.run_as.user);
    st->set_uid(agent_account_.run_as.uid);
  }
  TC_LOG_INFO("job {} attempt {} rank {} started: pid {}, CUDA_VISIBLE_DEVICES={}",
              ref.job_id(), ref.attempt(), ref.rank(), *pid,
              start.env().count("CUDA_VISIBLE_DEVICES")
                  ? start.env().at("CUDA_VISIBLE_DEVICES")
                  : "");
  EmitLocked(std::move(msg));
  if (entry.early_exit.has_value()) {
    // It ended before we got here: RUNNING first, then the exit, as always.
    // (Rare: the cgroup is released under the lock here, at most a second.)
    ReleaseCgroup(entry.cgroup_dir);
    remove_relay_rank = entry.relay_rank;
    close_port = ReportExitLocked(it, *entry.early_exit);
  } else if (entry.fence_after_launch) {
    TC_LOG_ERROR("FENCING: killing job {} rank {} (pid {}), started while fencing",
                 ref.job_id(), ref.rank(), *pid);
    absl::Status s = launcher_->Stop(*pid, absl::ZeroDuration());
    if (!s.ok()) TC_LOG_WARN("fence: stop pid {}: {}", *pid, s.ToString());
  }
}

void Agent::OnExit(const Key& key, ExitInfo info) {
  int close_port = 0;
  std::string cgroup_dir;
  std::vector<std::vector<std::string>> container_cleanup;
  std::string container_files;
  bool stopped = false;
  std::optional<RelayRank> relay_rank;
  {
    absl::MutexLock lock(&mu_);
    auto it = tasks_.find(key);
    if (it == tasks_.end()) return;
    if (it->second.launching) {
      it->second.early_exit = info;  // Start() reports it after RUNNING.
      return;
    }
    cgroup_dir = it->second.cgroup_dir;
    container_cleanup = it->second.container_cleanup;
    container_files = it->second.container_files;
    stopped = it->second.stopped;
    relay_rank = it->second.relay_rank;
  }
  RemoveFromRelay(relay_rank);
  // Sessions beside it end with it (in its cgroup they die below anyway).
  if (std::get<2>(key) == 0) {
    sessions_->CloseTagged(
        absl::StrCat(std::get<0>(key), "/", std::get<1>(key), "/", std::get<3>(key)));
  }
  // Processes that left the task's process group (setsid, a container's
  // conmon) die with its cgroup before the exit is reported: nothing of the
  // task outlives its report. Without the lock: Kill() waits for them, and
  // the runtime's cleanup (podman stop, rm: a container killed with its
  // `podman run` stays known to podman) runs its commands.
  ReleaseCgroup(cgroup_dir);
  if (stopped || info.exit_code != 0 || info.signal != 0) {
    for (const std::vector<std::string>& argv : container_cleanup) RunAndWait(argv);
  }
  if (!container_files.empty()) RemoveContainerFiles(container_files);
  {
    absl::MutexLock lock(&mu_);
    auto it = tasks_.find(key);
    if (it == tasks_.end()) return;
    close_port = ReportExitLocked(it, info);
  }
  // Outside the lock: the store host answers over a pipe.
  if (close_port > 0) config_.torch_store->Close(close_port);
}

std::optional<RelayRank> Agent::AddToRelay(const v1::StartTask& start) {
  if (config_.rendezvous_relay == nullptr) return std::nullopt;
  std::optional<RelayRank> r = RelayRankFromEnv(start.env());
  if (r.has_value()) {
    config_.rendezvous_relay->AddRank(r->job_id, r->attempt, r->token, r->rank, r->probe_run);
  }
  return r;
}

void Agent::RemoveFromRelay(const std::optional<RelayRank>& r) {
  if (!r.has_value() || config_.rendezvous_relay == nullptr) return;
  config_.rendezvous_relay->RemoveRank(r->job_id, r->attempt, r->rank, r->probe_run);
}

absl::StatusOr<int> Agent::OpenStoreFor(const v1::StartTask& start) {
  if (config_.torch_store == nullptr || start.has_preflight() || start.task().rank() != 0) {
    return 0;
  }
  auto use = start.env().find("TORCHELASTIC_USE_AGENT_STORE");
  if (use == start.env().end() || use->second != "True") return 0;
  int port = 0, world_size = 0;
  auto p = start.env().find("MASTER_PORT");
  auto w = start.env().find("WORLD_SIZE");
  if (p == start.env().end() || w == start.env().end() ||
      !absl::SimpleAtoi(p->second, &port) || !absl::SimpleAtoi(w->second, &world_size) ||
      port <= 0 || world_size <= 0) {
    return absl::InvalidArgumentError(
        "TORCHELASTIC_USE_AGENT_STORE=True without a valid MASTER_PORT and WORLD_SIZE");
  }
  if (absl::Status s = config_.torch_store->Open(port, world_size); !s.ok()) return s;
  return port;
}

int Agent::ReportExitLocked(absl::btree_map<Key, TaskEntry>::iterator it,
                            ExitInfo info) {
  const Key key = it->first;
  it->second.exited = true;
  const int store_port = std::exchange(it->second.store_port, 0);
  v1::AgentMessage msg;
  v1::TaskStatus* st = msg.mutable_task_status();
  *st->mutable_task() = it->second.ref;
  st->set_state(v1::TASK_STATE_EXITED);
  st->set_exit_code(info.exit_code);
  st->set_signal(info.signal);
  if (!it->second.discard_output) st->set_log_path(LogPath(it->second.ref));
  // A container runtime's own failure (an image that would not pull): why.
  const int code = info.exit_code;
  if (!it->second.container_cleanup.empty() && !it->second.discard_output &&
      ((code >= 125 && code <= 127) || code == 255)) {
    std::string why = ContainerRuntimeError(FileTail(LogPath(it->second.ref), 4096));
    if (!why.empty()) st->set_message(absl::StrCat("the container runtime failed: ", why));
  }
  TC_LOG_INFO("job {} rank {} exited: code {}, signal {}", std::get<0>(key),
              std::get<3>(key), info.exit_code, info.signal);
  if (it->second.preflight) {
    std::optional<v1::PreflightProbeResult> result = ParsePreflightResult(
        FileTail(LogPath(it->second.ref), kPreflightScanBytes));
    if (result.has_value()) *st->mutable_preflight_result() = *std::move(result);
  }
  if ((info.exit_code != 0 || info.signal != 0) && !it->second.preflight) {
    // Said before the exit, so the coordinator knows why when the exit comes
    // (a probe's failure is judged from its result line instead).
    std::string line = OutOfMemoryLine(it->second.ref);
    if (!line.empty()) {
      v1::AgentMessage oom;
      v1::TaskOutOfMemory* o = oom.mutable_task_oom();
      o->set_job_id(it->second.ref.job_id());
      o->set_attempt(it->second.ref.attempt());
      o->set_rank(it->second.ref.rank());
      o->set_line(std::move(line));
      EmitLocked(std::move(oom));
    }
  }
  // May erase `it` (an exit is forgotten once sent).
  EmitLocked(std::move(msg));
  return store_port;
}

v1::AgentMessage Agent::ReadLog(const v1::ReadLog& read) const {
  v1::AgentMessage reply;
  *reply.mutable_log_chunk() =
      ReadLogChunk(LogPath(read.task()), read, config_.node_name);
  return reply;
}

}  // namespace trainctl::worker
