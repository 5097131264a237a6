#ifndef TRAINCTL_WORKER_AGENT_H_
#define TRAINCTL_WORKER_AGENT_H_

// The agent's core: turns coordinator messages into processes on this host
// and reports back. No gRPC: the transport (agent_client.h) feeds it messages
// and gives it an outbox; GPUs and processes sit behind GpuInventory and
// ProcessLauncher.
//
// A task on this host:  StartTask ──spawned──▶ running ──exit──▶ exited,
// report pending ──reported──▶ forgotten. A StartTask whose spawn fails is
// reported START_FAILED at once. Reports made while no coordinator is
// connected wait in a queue and go out after the next registration, which
// lists every task not yet reported as ended, so the coordinator sees real
// exit codes across reconnects.

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/btree_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "trainctl/v1/service.pb.h"
#include "worker/hw/accounts.h"
#include "worker/hw/cgroup.h"
#include "worker/hw/container_runtime.h"
#include "worker/hw/gpu_inventory.h"
#include "worker/hw/mps_control.h"
#include "worker/hw/proc_stats.h"
#include "worker/hw/process_launcher.h"
#include "worker/nccl/rendezvous_relay.h"
#include "worker/pty_session.h"
#include "worker/task_paths.h"
#include "worker/torch_store.h"

namespace trainctl::worker {


struct AgentConfig {
  std::string node_name;
  // Address other hosts reach this node at (MASTER_ADDR when rank 0 is here).
  std::string address = "127.0.0.1";
  // GPU indices this agent offers; empty means all of the host's.
  std::vector<int> offered_gpus;
  // Task logs go to <log_dir>/cluster-<id>/jobs-<k>/job-<id>.attempt-<n>.rank-<r>.log
  // (LogPath()); tasks of jobs without a workdir run in
  // <log_dir>/work/job-<id>/attempt-<n>/.
  std::string log_dir;
  // MASTER_PORT range offered for jobs whose rank 0 runs here, inclusive.
  int port_min = 29500;
  int port_max = 29999;
  bool fake_gpus = false;
  int cpu_count = 1;
  // Node.features and Node.labels (--features, --labels; node_offer.h).
  std::vector<std::string> features;
  std::map<std::string, std::string> labels;
  // What a task gets of the agent's own environment, under the launch
  // environment: the pass-through variables only (main.cc: PATH, locale,
  // CUDA_*/NCCL_* site settings, --task-env names, TRAINCTL_TLS_CA), never
  // the whole environment, which may hold the agent's secrets.
  std::map<std::string, std::string> base_env;
  // Every task runs as the agent's own account, whatever StartTask.run_as_user
  // says (trainctl-agent --run-tasks-as-agent: a node given to one tenant).
  // Registrations say which (Node.runs_as_job_user).
  bool run_tasks_as_agent = false;
  // Per-task cgroups (worker/hw/cgroup.h), not owned; null: process groups
  // only (the agent said why at start), and tasks asking for --cpus/--mem
  // fail to start here.
  const CgroupTree* cgroups = nullptr;
  // The node's container runtime (worker/hw/container_runtime.h), not owned;
  // null: tasks with an image fail to start here (the coordinator places
  // them only on nodes that report one).
  const ContainerRuntime* container_runtime = nullptr;
  // Where per-task CPU use is read from (proc(5)); tests point it at a fake
  // tree.
  std::string proc_root = "/proc";
  // Heartbeats per sample of the running tasks' use (each task's processes
  // from its cgroup, or a /proc scan for a task without one, and the
  // inventory's per-process queries behind `top`, accounting's
  // GPU-seconds used and an interactive job's idle check): 1, every
  // heartbeat; N, every Nth; 0, never (Slurm's JobAcctGatherFrequency
  // plays this part there). The GPUs' own samples go with every heartbeat.
  int task_usage_period = 1;
  // Fence (kill every task) when the lease with the coordinator ends
  // (lease.h): registrations say so (RegisterNode.fences) and the
  // coordinator then answers heartbeats with lease grants.
  bool fences = false;
  // The pre-flight probe run for StartTask.preflight instead of its argv
  // (docs/preflight.md): trainctl-nccl-allreduce, or with fake GPUs
  // trainctl-fake-preflight-probe (main.cc picks the one next to the agent).
  // Empty, missing or not executable: the registration says so
  // (Node.preflight_probe_error) and the coordinator runs no pre-flight on
  // this node; a probe task sent anyway fails to start.
  std::string preflight_probe;
  // Hosts the PyTorch TCPStore of each gang whose rank 0 runs here
  // (torch_store.h), not owned; null: this node hosts none (the
  // registration says so, and its gangs' rank 0 creates the store itself).
  TorchStore* torch_store = nullptr;
  // The node's MPS daemons, one per offered GPU (trainctl-agent --mps;
  // mps_control.h), not owned; null: no MPS. Registrations say which
  // (Node.mps). A task sharing its GPU (StartTask.shared_gpu) becomes an MPS
  // client of its GPU's daemon, capped at StartTask's memory limit.
  const MpsControl* mps = nullptr;
  // CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for MPS clients, 1-99; 0: not set
  // (every client may use all SMs).
  int mps_active_thread_pct = 0;
  // This node's rendezvous relay (worker/nccl/rendezvous_relay.h), not
  // owned, and the unix socket it is served on; either unset: none, and
  // ranks ask the coordinator directly. Each task with a TRAINCTL_TOKEN is
  // registered with it from its launch to its exit, and gets
  // TRAINCTL_RENDEZVOUS_SOCKET (not tasks in containers, which do not see
  // the host's socket).
  RendezvousRelay* rendezvous_relay = nullptr;
  std::string rendezvous_socket;
};

// Thread-safe: Handle() runs on the transport's reader thread (one caller at
// a time), exit callbacks on launcher threads, Heartbeat() and Fence() on
// others. A StartTask's launch (log directory, spawn) runs on the caller's
// thread without the agent's lock, so exit reports, heartbeats and fencing
// never wait behind a launch; a task that ends before its launch has been
// recorded has its exit reported right after its RUNNING report.
class Agent {
 public:
  // Sends one message to the coordinator (by value: a session's output
  // chunk is moved in, not copied); called under the agent's lock, so it
  // must only queue or write, never call back into the Agent.
  using Outbox = absl::AnyInvocable<void(v1::AgentMessage)>;

  // `inventory` and `launcher` are not owned and must outlive the Agent; the
  // launcher must have made its last exit callback (e.g. been destroyed)
  // before the Agent is destroyed.
  Agent(AgentConfig config, GpuInventory* inventory, ProcessLauncher* launcher);
  // Removes the pooled slot cgroups (PlaceInCgroup); task cgroups in use are
  // their tasks' to release.
  ~Agent();

  // Checks the offered GPUs exist. Errors: INVALID_ARGUMENT naming a GPU
  // index this host does not have; UNAVAILABLE from the inventory.
  absl::Status Validate();

  // The first message of a stream: node inventory and the tasks not yet
  // reported as ended (one being launched is listed with pid 0).
  // Errors: UNAVAILABLE from the inventory.
  absl::StatusOr<v1::RegisterNode> Registration();

  // One sample of the offered GPUs, and (every task_usage_period-th call
  // while tasks run) the use of every running task's process group: CPU
  // (since the previous sample) and resident memory from /proc, GPU memory
  // and SM utilization of its processes from the inventory's per-process
  // accounting where it has it.
  // Errors: UNAVAILABLE from the inventory's Sample() (per-process failures
  // only leave the GPU figures of the tasks unknown).
  absl::StatusOr<v1::Heartbeat> Heartbeat();

  // Attaches the outbox of a newly registered stream and sends the queued
  // reports through it. `cluster_id` is the coordinator's
  // (RegisterAck.cluster_id): task logs and default work dirs of tasks
  // started from now on go under <log_dir>/cluster-<cluster_id>/ (directly
  // under <log_dir> when it is empty, from a coordinator that sends none).
  void Connected(Outbox outbox, const std::string& cluster_id = "");

  // This agent process's RegisterNode.agent_instance_id: 128 random bits in
  // hex, made at construction.
  const std::string& instance_id() const { return instance_id_; }
  // The stream ended: reports queue until the next Connected().
  void Disconnected();

  // Handles StartTask (alone or in a StartTaskBatch, started in order),
  // StopTask and ReadLog. One caller at a time (the stream's reader): a
  // StartTask's launch runs here without the agent's lock, and a StopTask
  // must not overtake it. Interactive sessions (CoordinatorMessage.session)
  // go to the agent's SessionHost (pty_session.h).
  void Handle(const v1::CoordinatorMessage& msg);

  // Interactive sessions open on this agent now.
  int OpenSessions() const { return sessions_->Count(); }

  // Fencing: kills (SIGKILL to the process group, no grace) every task
  // whose process runs now, because the coordinator has stopped hearing
  // from this host and has failed them; `why` goes to the log. Their exits
  // are reported as usual (queued until the next registration). Returns how
  // many tasks were killed. A task being launched meanwhile is killed as
  // soon as its launch returns (not counted). No errors (a failed kill is
  // logged).
  int Fence(const std::string& why);

  // Tasks whose process runs now.
  int RunningTasks() const;

  // Log file of a task (also for tasks already forgotten) in the current
  // cluster (Connected()'s cluster id, C below), one flat file per task,
  // grouped by 1,000 job ids (k = id rounded down to a multiple of 1,000):
  // <log_dir>/cluster-C/jobs-<k>/job-<id>.attempt-<n>.rank-<r>.log, and for
  // a pre-flight probe (TaskRef.probe_run = run)
  // .../job-<id>.preflight-<run>.rank-<r>.log. Per cluster because job ids
  // start again at 1 in a new cluster: without it a new cluster's job 1
  // would append to, and `trainctl logs` would show, an older cluster's
  // job 1. Why flat: on ext4 creating a directory costs several times
  // creating a file, and a layout with two new directories per job was
  // most of the agent's CPU per short task (70-85 %; bench/README.md).
  // The file is created with mode 0600.
  std::string LogPath(const v1::TaskRef& ref) const;
  // Working directory of a task whose StartTask has none (created at start,
  // mode 0700): <log_dir>/cluster-C/work/job-<id>/attempt-<n>.
  std::string DefaultWorkdir(const v1::TaskRef& ref) const;

  // The prefix of the result line a pre-flight probe prints (then the
  // v1::PreflightProbeResult as JSON).
  static constexpr char kPreflightResultPrefix[] = "trainctl-preflight: ";

  // The last result line in the log text `tail`, parsed; nullopt when there
  // is none or it does not parse.
  static std::optional<v1::PreflightProbeResult> ParsePreflightResult(
      absl::string_view tail);

 private:
  using Key = std::tuple<int64_t, int, int, int>;  // job, attempt, probe_run, rank
  struct TaskEntry {
    v1::TaskRef ref;
    bool exited = false;
    // A pre-flight probe: its exit carries the probe's result line.
    bool preflight = false;
    // StartTask.discard_output: no log file, and none reported.
    bool discard_output = false;
    // Between StartTask and the launch's result (ref.pid() is 0 meanwhile).
    bool launching = false;
    // Fence() came while launching: kill the task once it has a pid.
    bool fence_after_launch = false;
    // The agent stopped it (StopTask, Fence): its container, if any, is
    // removed at its exit whatever the exit code (`podman run` stopped
    // while it creates the container exits 0 and leaves it behind).
    bool stopped = false;
    // The exit, when it came while launching (reported after RUNNING).
    std::optional<ExitInfo> early_exit;
    // Port of the PyTorch store opened for this task's job attempt (rank 0
    // only; 0: none), closed when the task exits.
    int store_port = 0;
    // Registered with the rendezvous relay as (job, attempt, rank,
    // probe_run) of its launch environment; removed at its exit.
    std::optional<RelayRank> relay_rank;
    // The task's cgroup (empty: none), killed and removed at its exit.
    std::string cgroup_dir;
    // A container task: the runtime commands that remove what a killed
    // container leaves (ContainerRuntime::CleanupCommands), run at its exit.
    std::vector<std::vector<std::string>> container_cleanup;
    // A podman task: the prefix of its environment file and mount stages
    // (ContainerFilesPrefix), removed at its exit.
    std::string container_files;
    // The task's launch (account, cgroup, environment, work dir), what an
    // interactive session beside it starts with; null for a pre-flight
    // probe. For a container task, the runtime's launch (its account,
    // cgroup, runtime environment), with session_container set.
    std::shared_ptr<const LaunchSpec> session_spec;
    // A container task: what it was launched with (WrapInContainer), from
    // which a session's `podman exec` (or `apptainer exec`) is made
    // (ContainerRuntime::ExecArgv); null otherwise.
    std::shared_ptr<const ContainerLaunch> session_container;
  };

  // Opens a session beside a running task (payload.open) or passes a
  // client message on to its session; a session that cannot open is
  // answered with its error (SessionServerMessage.error).
  void HandleSession(const v1::SessionToAgent& msg) ABSL_LOCKS_EXCLUDED(mu_);

  // Launches `start` (no lock held while spawning) and reports RUNNING or
  // START_FAILED.
  void Start(const v1::StartTask& start) ABSL_LOCKS_EXCLUDED(mu_);
  // The launch of `start`: argv, environment, account, log path, working
  // directory (created, private to the account, when it is the default).
  // Errors: NOT_FOUND when the job's user has no account here;
  // PERMISSION_DENIED for a uid-0 account without StartTask.allow_root;
  // FAILED_PRECONDITION when the task needs what this node lacks (a
  // container runtime, cgroup controllers for its limits); those of
  // CgroupTree::CreateTaskCgroup and ContainerRuntime::WrapArgv.
  // With an image and `container` set, *container gets what the task's
  // container was launched with (WrapInContainer's `launched`).
  absl::StatusOr<LaunchSpec> SpecFor(const v1::StartTask& start,
                                     ContainerLaunch* container = nullptr) const;
  // Gives `spec` a cgroup of its own with the task's limits (when the agent
  // has cgroups): named after the task
  // (<cluster>-<node>-job-J.attempt-A.rank-R) when it has limits (--cpus,
  // --mem) or an image; otherwise a slot (<cluster>-<node>-slot-N), taken
  // from the pool of emptied slots when there is one that last held a task of
  // the same account. The node's name is in both, as agents sharing a host
  // share the `tasks` directory. Errors:
  // FAILED_PRECONDITION for limits without cgroups; those of
  // CgroupTree::CreateTaskCgroup.
  absl::Status PlaceInCgroup(const v1::StartTask& start, LaunchSpec& spec) const;
  // Wraps `spec` in the node's container runtime for start.image(); sets
  // *launched (when not null) to the ContainerLaunch it wrapped.
  // Errors: FAILED_PRECONDITION without a runtime; those of WrapArgv.
  absl::Status WrapInContainer(const v1::StartTask& start, LaunchSpec& spec,
                               ContainerLaunch* launched = nullptr) const;
  // The launch of a session's command in the container of a task launched
  // with `container` (ContainerRuntime::ExecArgv): rewrites `spec` (the
  // task's runtime launch, as SessionHost hands it) for `open`; root podman
  // stays root (`keep_root`) to run `podman exec --user`.
  // Errors: those of ExecArgv; FAILED_PRECONDITION without a runtime.
  absl::Status WrapSessionInContainer(const ContainerLaunch& container, bool keep_root,
                                      const v1::SessionOpen& open, LaunchSpec& spec) const;
  // Where a podman task's files go: <ClusterDir>/containers/<container
  // name>, then ".env" for its environment file (ContainerLaunch::env_file)
  // and ".mnt/<i>" for the stages where the shim binds its mounts (root
  // podman), in a directory of mode 0700 only the agent's account enters.
  std::string ContainerFilesPrefix(const v1::TaskRef& ref) const;
  // Removes the environment file and the (empty) stages of `prefix`
  // (ContainerFilesPrefix); never removes anything below a stage.
  static void RemoveContainerFiles(const std::string& prefix);
  // Writes `content` to a new file at `path` (mode 0400, owned by uid:gid
  // when uid >= 0; a file already there is replaced, a link never
  // followed), creating its directory with mode 0700.
  // Errors: INTERNAL with errno's text when it cannot be made or written.
  static absl::Status WritePrivateFile(const std::string& path, const std::string& content,
                                       int uid, int gid);
  // Kills what is left in a task's cgroup and removes it (logs failures);
  // an emptied slot cgroup goes back to the pool instead while `reuse` and
  // the pool has room (kMaxPooledCgroups).
  void ReleaseCgroup(const std::string& dir, bool reuse = true) const;
  // Removes the cgroup `dir` (logs a failure; one already gone is fine).
  void RemoveCgroup(const std::string& dir) const;
  void OnExit(const Key& key, ExitInfo info);
  // Reports the exit of `it`'s task (and an out-of-memory line first).
  // Returns the port of a PyTorch store to close once mu_ is released (0:
  // none).
  int ReportExitLocked(absl::btree_map<Key, TaskEntry>::iterator it, ExitInfo info)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Opens the job attempt's PyTorch store when `start` is rank 0 of a gang
  // told to use the agent's store (TORCHELASTIC_USE_AGENT_STORE=True) and
  // this agent hosts stores. Returns the port opened (0: none).
  // Errors: those of TorchStore::Open (the task then fails to start).
  absl::StatusOr<int> OpenStoreFor(const v1::StartTask& start);
  // Registers `start`'s rank with the rendezvous relay when there is one
  // and its environment names a job attempt, rank and token; returns what
  // was registered.
  std::optional<RelayRank> AddToRelay(const v1::StartTask& start);
  void RemoveFromRelay(const std::optional<RelayRank>& rank);
  void EmitLocked(v1::AgentMessage msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::AgentMessage ReadLog(const v1::ReadLog& read) const;
  // The line of the end of a task's log that says CUDA ran out of memory;
  // empty when none does.
  std::string OutOfMemoryLine(const v1::TaskRef& ref) const;

  // <log_dir>/cluster-<id> of the current cluster (<log_dir> when the
  // coordinator sent no cluster id).
  std::string ClusterDir() const ABSL_LOCKS_EXCLUDED(cluster_mu_);

  const AgentConfig config_;
  GpuInventory* const inventory_;
  ProcessLauncher* const launcher_;
  ProcessGroupSampler proc_sampler_;
  // Heartbeats with running tasks so far (task_usage_period's count); only
  // Heartbeat() touches it, one call at a time.
  int64_t busy_heartbeats_ = 0;
  // The account the agent runs as (tasks run as it without run_as).
  const Account agent_account_;
  const std::string instance_id_;
  // Its own lock: LogPath() is called with and without mu_ held.
  // Emptied slot cgroups (PlaceInCgroup), reused by later tasks: every
  // removed memory cgroup stays in the kernel, dying, while page cache its
  // task charged is cached (every file it wrote), so a new cgroup per short
  // task piles up thousands of them (bench/README.md, "What the cgroup per
  // task costs"). Removed when the agent is destroyed.
  static constexpr size_t kMaxPooledCgroups = 64;
  mutable absl::Mutex cgroup_pool_mu_;
  // (account the slot's last task ran as, its directory), newest last.
  mutable std::vector<std::pair<std::string, std::string>> cgroup_pool_
      ABSL_GUARDED_BY(cgroup_pool_mu_);
  // Slot cgroups given to running tasks, and the account of each.
  mutable absl::flat_hash_map<std::string, std::string> slot_users_
      ABSL_GUARDED_BY(cgroup_pool_mu_);
  mutable std::atomic<int64_t> next_cgroup_slot_{0};
  mutable absl::Mutex cluster_mu_;
  std::string cluster_id_ ABSL_GUARDED_BY(cluster_mu_);

  mutable absl::Mutex mu_;
  absl::btree_map<Key, TaskEntry> tasks_ ABSL_GUARDED_BY(mu_);
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  Outbox outbox_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::AgentMessage> queued_ ABSL_GUARDED_BY(mu_);
  // Exits already sent, newest last, re-sent in the next registration
  // (RegisterNode.finished_tasks); at most kRecentExits.
  std::deque<v1::TaskStatus> recent_exits_ ABSL_GUARDED_BY(mu_);
  // Interactive sessions; sends through the outbox while connected (takes
  // mu_ itself: never called with it held). Last member: destroyed first.
  std::unique_ptr<SessionHost> sessions_;
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_AGENT_H_
