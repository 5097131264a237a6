// The deterministic cluster simulation (cluster_sim.h, tests/sim/README.md).

#include "tests/sim/cluster_sim.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/notification.h"
#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/logging.h"
#include "absl/algorithm/container.h"
#include "coordinator/coordinator.h"
#include "coordinator/dependency.h"
#include "coordinator/gpu_types.h"
#include "coordinator/sched/scheduler.h"
#include "coordinator/state_store.h"
#include "tests/sim/commit_queue_store.h"
#include "worker/task_paths.h"

namespace trainctl::sim {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
// The GPU models an unlike cluster draws from (SimOptions::unlike_gpus):
// their names as NVML gives them and their memory, GiB.
struct GpuModel {
  const char* name;
  int64_t gib;
};
constexpr GpuModel kGpuModels[] = {
    {"NVIDIA H100 80GB HBM3", 80}, {"NVIDIA A100-SXM4-40GB", 40}, {"NVIDIA H200", 141},
    {"NVIDIA L40S", 48},           {"Tesla T4", 16},              {"NVIDIA A10", 24}};
// GPU memory a forged usage report claims: no real sample comes near it.
constexpr int64_t kForgedGpuMemory = int64_t{1} << 50;
constexpr absl::Duration kStep = absl::Milliseconds(250);

struct EventInfo {
  const char* name;
  int weight;
};
// Weights of GenerateEvents: work and time dominate, faults are rarer.
constexpr EventInfo kEvents[] = {
    {"submit_experiment", 14}, {"submit_gang", 9}, {"submit_sweep", 3},
    {"cancel", 4},             {"deliver", 30},    {"task_exit", 12},
    {"probe_exit", 6},         {"advance", 16},    {"partition", 1},
    {"heal", 2},               {"reconnect", 2},   {"shrink_gpus", 1},
    {"impostor", 2},           {"forged_report", 2}, {"coordinator_crash", 1},
    {"new_cluster", 1},        {"rendezvous", 8},    {"submit_array", 3},
    {"node_admin", 2},         {"submit_dependent", 4},
};
static_assert(sizeof(kEvents) / sizeof(kEvents[0]) ==
              static_cast<int>(EventType::kCount));

// The coordinator's end of a simulated agent's stream: what it sends waits in
// `inbox` until a kDeliver event hands it to the agent.
class SimConn : public coord::AgentConnection {
 public:
  void Send(v1::CoordinatorMessage msg) override {
    if (!closed) inbox.push_back(std::move(msg));
  }
  void Close(const absl::Status&) override { closed = true; }
  std::deque<v1::CoordinatorMessage> inbox;
  bool closed = false;
};

using TaskKey = std::tuple<int64_t, int, int, int>;  // job, attempt, probe_run, rank

TaskKey KeyOfRef(const v1::TaskRef& r) {
  return {r.job_id(), r.attempt(), r.probe_run(), r.rank()};
}

// A process an agent started.
struct Proc {
  v1::TaskRef ref;
  bool probe = false;
  // Agent instance that started it (a displaced agent's processes stay).
  std::string owner;
  // (GPU uuid, bytes reserved on it).
  std::vector<std::pair<std::string, int64_t>> holds;
  // TRAINCTL_TOKEN, TRAINCTL_ATTEMPT and TRAINCTL_PREFLIGHT of its launch
  // environment (its rendezvous group; a probe's is its own), WORLD_SIZE.
  std::string token;
  int rendezvous_attempt = 0;
  int rendezvous_probe_run = 0;
  int world_size = 1;
  // Asked to stop: exits at kill_at at the latest.
  bool stopping = false;
  absl::Time kill_at = absl::InfiniteFuture();
};

// A physical host: its GPUs, the processes on them, its disk.
struct Host {
  std::vector<v1::Gpu> gpus;
  std::map<TaskKey, Proc> procs;
  // Task log path -> the one task that writes it ("cluster/job/attempt/rank").
  std::map<std::string, std::string> disk;
};

// A simulated trainctl-agent: one per node name (plus refused impostors).
struct Agent {
  std::string name;
  int host = 0;
  std::string instance;
  bool fences = true;
  // RegisterNode.probe_tasks: false plays an agent from before probes were
  // tasks of their own; it must never be sent a probe.
  bool probe_tasks = true;
  // GPUs it reports (a subset of its host's after kShrinkGpus).
  std::vector<v1::Gpu> gpus;
  // Node.features (trainctl-agent --features), from its host's number.
  std::vector<std::string> features;
  SimConn* conn = nullptr;  // nullptr: not connected
  bool partitioned = false;
  std::string cluster_id;
  absl::Time next_heartbeat;
  // Heartbeats sent whose LeaseGrant has not come yet (fencing agents).
  std::deque<absl::Time> heartbeats_sent;
  // Its last registration or heartbeat that reached the coordinator.
  absl::Time last_contact = absl::InfinitePast();
  absl::Time lease_end = absl::InfiniteFuture();
  // Its last exits (RegisterNode.finished_tasks), newest last.
  std::deque<v1::TaskStatus> finished;
};

class Simulation {
 public:
  Simulation(uint64_t seed, const SimOptions& options)
      : seed_(seed), options_(options), rng_(seed ^ 0x5eed5eedULL) {}
  ~Simulation() {
    core_.reset();
    sqlite_.reset();
    queued_.reset();
    for (const std::string& p : paths_) {
      std::remove(p.c_str());
      std::remove((p + "-wal").c_str());
      std::remove((p + "-shm").c_str());
    }
  }
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  SimResult Run(const std::vector<Event>& events) {
    if (!StartCluster()) return result_;
    for (size_t i = 0; i < events.size(); ++i) {
      step_ = static_cast<int64_t>(i);
      const Event& e = events[i];
      current_ = kEvents[static_cast<int>(e.type)].name;
      ++result_.events;
      ++result_.events_by_type[current_];
      Apply(e);
      Check(/*full=*/(i % 64) == 63);
      if (!result_.violations.empty() && options_.stop_at_first_violation) break;
    }
    if (options_.drain &&
        (result_.violations.empty() || !options_.stop_at_first_violation)) {
      step_ = static_cast<int64_t>(events.size());
      current_ = "drain";
      Drain();
    }
    for (int64_t id : acked_) {
      auto job = core_->GetJob(id);
      ++result_.job_end_states[job.ok() ? v1::JobState_Name(job->state())
                                        : std::string("MISSING")];
      if (job.ok()) result_.preemptions += job->preemptions();
      if (job.ok() && !job->spec().dependency().empty()) {
        const bool never = job->state() == v1::JOB_STATE_CANCELLED &&
                           absl::StartsWith(job->reason(), "dependency can never be met");
        ++result_.dependency_end_states[never ? "CANCELLED (dependency never met)"
                                              : v1::JobState_Name(job->state())];
      }
    }
    core_.reset();
    return result_;
  }

 private:
  // ------------------------------------------------------------ set-up

  bool StartCluster() {
    std::mt19937_64 shape(seed_);
    // Models from a stream of their own, so the node and GPU counts a seed
    // draws stay as they were before clusters were unlike. A quarter of the
    // seeds keep every node alike (H100 80 GiB).
    std::mt19937_64 models(seed_ ^ 0x6d6f64656c73ULL);
    const bool unlike = options_.unlike_gpus && models() % 4 != 0;
    const int nodes = options_.min_nodes +
                      static_cast<int>(shape() % (options_.max_nodes - options_.min_nodes + 1));
    for (int n = 0; n < nodes; ++n) {
      Host host;
      const int gpus = 1 + static_cast<int>(shape() % options_.max_gpus_per_node);
      const GpuModel model =
          unlike ? kGpuModels[models() % std::size(kGpuModels)] : kGpuModels[0];
      for (int g = 0; g < gpus; ++g) {
        v1::Gpu gpu;
        gpu.set_index(g);
        gpu.set_uuid(absl::StrCat("GPU-sim", n, "-", g));
        gpu.set_name(model.name);
        gpu.set_memory_total_bytes(model.gib * kGiB);
        for (int p = 0; p < gpus; ++p) {
          if (p != g) gpu.add_nvlink_peers(p);
        }
        host.gpus.push_back(gpu);
      }
      hosts_.push_back(std::move(host));
      auto agent = std::make_unique<Agent>();
      agent->name = absl::StrCat("node-", n);
      agent->host = n;
      agent->instance = NewInstance();
      agent->fences = shape() % 4 != 0;
      // Every seventh node runs an older agent (no new draw: seeds replay).
      agent->probe_tasks = n % 7 != 6;
      agent->gpus = hosts_.back().gpus;
      // Features by host number (no new draw: seeds replay): none, ib, or
      // ib and nvlink.
      if (n % 3 >= 1) agent->features.push_back("ib");
      if (n % 3 == 2) agent->features.push_back("nvlink");
      agents_.push_back(std::move(agent));
    }
    config_.node_timeout = absl::Seconds(10);
    config_.heartbeat_interval = absl::Seconds(1);
    config_.stop_grace = absl::Seconds(10);
    config_.preflight.auto_enabled = true;
    config_.preflight.timeout = absl::Seconds(30);
    config_.usage.sample_period = absl::Seconds(2);
    // An authenticated cluster: tasks run as their job's user.
    config_.run_jobs_as_user = true;
    // Fetches are answered on the publishing call: no thread of its own.
    config_.rendezvous_fanout_threads = 1;
    if (!OpenStore(/*fresh=*/true) || !StartCoordinator()) return false;
    for (auto& a : agents_) {
      if (absl::Status s = Register(*a, /*same_instance=*/true); !s.ok()) {
        Violation("setup", absl::StrCat(a->name, " could not register: ", s.ToString()));
        return false;
      }
    }
    Check(false);
    return true;
  }

  std::string NewInstance() { return absl::StrFormat("%016x", rng_()); }

  bool OpenStore(bool fresh) {
    if (options_.store == "sqlite") {
      sqlite_.reset();
      if (fresh) {
        sqlite_path_ = absl::StrCat(options_.sqlite_dir, "/trainctl-sim-", getpid(), "-",
                                    seed_, "-", generation_, ".db");
        std::remove(sqlite_path_.c_str());
        std::remove((sqlite_path_ + "-wal").c_str());
        std::remove((sqlite_path_ + "-shm").c_str());
        paths_.push_back(sqlite_path_);
      }
      auto store = coord::SqliteStateStore::Open(sqlite_path_,
                                                 coord::SqliteStateStore::Sync::kNormal);
      if (!store.ok()) {
        Violation("setup", absl::StrCat("sqlite store: ", store.status().ToString()));
        return false;
      }
      sqlite_ = std::move(*store);
      store_ = sqlite_.get();
    } else if (options_.store == "queue") {
      // A new process: what the last one committed, an empty queue.
      if (fresh) memory_ = std::make_unique<coord::MemoryStateStore>();
      queued_ = std::make_unique<CommitQueueStore>(memory_.get(), &clock_);
      store_ = queued_.get();
    } else if (fresh) {
      memory_ = std::make_unique<coord::MemoryStateStore>();
      store_ = memory_.get();
    }
    return true;
  }

  bool StartCoordinator() {
    auto core = coord::Coordinator::Create(config_, store_, &clock_);
    if (!core.ok()) {
      Violation("recovery", absl::StrCat("the coordinator did not start over its store: ",
                                         core.status().ToString()));
      return false;
    }
    core_ = std::move(*core);
    return true;
  }

  // ------------------------------------------------------------ helpers

  void Violation(const std::string& invariant, const std::string& detail) {
    if (result_.violations.empty()) {
      result_.first_invariant = invariant;
      result_.first_violation_event = current_ == "drain" ? -1 : step_;
    }
    if (result_.violations.size() < 20) {
      result_.violations.push_back(
          absl::StrCat("seed ", seed_, " step ", step_, " (", current_, "): ", invariant,
                       ": ", detail));
    }
  }

  // After every call into the core: with SQLite, every queued write durable
  // and every StartTask it held back sent, before anything else happens.
  void Settle() {
    if (sqlite_ != nullptr && core_ != nullptr) {
      absl::Status s = core_->WaitForWrites();
      (void)s;  // A failed write is the coordinator's to report; none is injected.
    }
    RecordNewStarts();
  }

  Agent* Holder(const std::string& name) {
    for (auto& a : agents_) {
      if (a->name == name) return a.get();
    }
    return nullptr;
  }

  bool Connected(const Agent& a) const { return a.conn != nullptr && !a.partitioned; }

  // The StartTasks sent since the last look, with the reservation of their
  // task as the coordinator made it (read now, right after the call that
  // sent them; the core's lock is not held while messages sit in an inbox).
  void RecordNewStarts() {
    std::set<std::string> out_of_service;
    bool nodes_read = false;
    for (auto& a : agents_) {
      if (a->conn == nullptr) continue;
      for (v1::CoordinatorMessage& m : a->conn->inbox) {
        if (!m.has_start_task() || reservations_.count(Key(m.start_task().task()))) {
          continue;
        }
        const v1::TaskRef& ref = m.start_task().task();
        std::vector<std::pair<std::string, int64_t>> holds;
        auto job = core_->GetJob(ref.job_id());
        if (!nodes_read) {
          for (const v1::NodeView& n : core_->ListNodes()) {
            if (n.node().admin().state() != v1::NODE_ADMIN_STATE_UNSPECIFIED) {
              out_of_service.insert(n.node().name());
            }
          }
          nodes_read = true;
        }
        // A new placement, not a gang's ranks following their passed
        // pre-flight (placed before the node was drained).
        const bool after_preflight =
            ref.probe_run() == 0 && job.ok() && job->preflight().runs_size() > 0 &&
            job->preflight().runs(job->preflight().runs_size() - 1).verdict() ==
                v1::PREFLIGHT_VERDICT_PASSED;
        const bool verifies_it = job.ok() && job->spec().verify_node() == a->name;
        if (out_of_service.count(a->name) && !after_preflight && !verifies_it) {
          Violation("placed-out-of-service",
                    absl::StrCat("job ", ref.job_id(), " rank ", ref.rank(), " probe run ",
                                 ref.probe_run(), " was started on node ", a->name,
                                 ", which an admin drained or took down"));
        }
        if (job.ok() && (m.start_task().run_as_user() != job->spec().user() ||
                         m.start_task().run_as_user().empty() ||
                         m.start_task().allow_root())) {
          Violation("run-as", absl::StrCat("StartTask of job ", ref.job_id(), " rank ",
                                           ref.rank(), " runs as \"",
                                           m.start_task().run_as_user(), "\", the job's user is \"",
                                           job->spec().user(), "\"",
                                           m.start_task().allow_root() ? " (root allowed)" : ""));
        }
        if (job.ok()) {
          for (const v1::Task& t : job->tasks()) {
            if (t.rank() != ref.rank()) continue;
            std::vector<std::string> owned;
            if (t.local_world_size() == t.gpu_uuids_size() && t.gpu_uuids_size() > 0) {
              owned.push_back(t.gpu_uuids(t.local_rank()));
            } else {
              owned.assign(t.gpu_uuids().begin(), t.gpu_uuids().end());
            }
            for (const std::string& u : owned) {
              holds.push_back({u, HoldBytes(*job, t, GpuTotal(a->host, u))});
            }
          }
        }
        if (holds.empty()) {
          // Not readable any more: count it as holding its GPUs whole.
          auto it = m.start_task().env().find("CUDA_VISIBLE_DEVICES");
          if (it != m.start_task().env().end()) {
            for (absl::string_view u : absl::StrSplit(it->second, ',', absl::SkipEmpty())) {
              holds.push_back({std::string(u), GpuTotal(a->host, std::string(u))});
            }
          }
        }
        reservations_[Key(ref)] = std::move(holds);
      }
    }
  }

  // Memory of GPU `uuid` of host `h`, bytes (0 when the host lost it).
  int64_t GpuTotal(int h, const std::string& uuid) const {
    for (const v1::Gpu& g : hosts_[h].gpus) {
      if (g.uuid() == uuid) return g.memory_total_bytes();
    }
    return 0;
  }

  // What a task of `job` holds on one of its GPUs, `gpu_total` bytes big, by
  // what its user asked for, not by the coordinator's bookkeeping: a gang
  // rank and a whole-GPU experiment hold the whole GPU, whatever its size; a
  // --gpu-mem experiment its bytes; a --gpu-fraction one its share of this
  // GPU. Only an auto-packed trial holds what the coordinator reserved (the
  // packer decides its size).
  static int64_t HoldBytes(const v1::Job& job, const v1::Task& t, int64_t gpu_total) {
    const v1::JobSpec& spec = job.spec();
    if (job.kind() == v1::JOB_KIND_GANG) return gpu_total;
    if (spec.auto_pack()) return t.reserved_bytes_per_gpu();
    if (spec.gpu_memory_bytes() > 0) return spec.gpu_memory_bytes();
    sched::JobRequest r;
    r.gpu_fraction = spec.gpu_fraction() > 0 ? spec.gpu_fraction() : 1.0;
    return sched::ReservationBytes(r, gpu_total);
  }

  std::tuple<int, int64_t, int, int, int> Key(const v1::TaskRef& r) const {
    return {generation_, r.job_id(), r.attempt(), r.probe_run(), r.rank()};
  }

  // ------------------------------------------------------------ agents

  v1::RegisterNode Registration(const Agent& a) const {
    v1::RegisterNode reg;
    v1::Node* n = reg.mutable_node();
    n->set_name(a.name);
    // Hosts 2k and 2k+1 share an address, as two agents on one host
    // (each offering some of its GPUs) do: MASTER_PORTs are per address.
    n->set_address(absl::StrCat("addr-", a.host / 2, ".sim"));
    n->set_cpu_count(32);
    n->set_port_min(29500);
    n->set_port_max(29599);
    n->set_fake_gpus(true);
    for (const v1::Gpu& g : a.gpus) *n->add_gpus() = g;
    for (const std::string& f : a.features) n->add_features(f);
    reg.set_fences(a.fences);
    reg.set_probe_tasks(a.probe_tasks);
    reg.set_agent_instance_id(a.instance);
    for (const auto& [key, p] : hosts_[a.host].procs) {
      if (p.owner == a.instance) *reg.add_running_tasks() = p.ref;
    }
    for (const v1::TaskStatus& st : a.finished) *reg.add_finished_tasks() = st;
    return reg;
  }

  // Registers `a` on a new stream. Returns the coordinator's answer.
  absl::Status Register(Agent& a, bool same_instance) {
    conns_.push_back(std::make_unique<SimConn>());
    SimConn* conn = conns_.back().get();
    if (!same_instance) a.instance = NewInstance();
    absl::Status s = core_->RegisterAgent(Registration(a), conn);
    if (s.ok()) {
      a.conn = conn;
      a.heartbeats_sent.clear();
      a.lease_end = clock_.Now() + config_.node_timeout;
      a.next_heartbeat = clock_.Now() + config_.heartbeat_interval;
      a.last_contact = clock_.Now();
      // The ack is the first message: read at once, as the real agent does.
      if (!conn->inbox.empty() && conn->inbox.front().has_register_ack()) {
        a.cluster_id = conn->inbox.front().register_ack().cluster_id();
        conn->inbox.pop_front();
      } else {
        Violation("protocol", absl::StrCat(a.name, ": no RegisterAck first"));
      }
    }
    Settle();
    return s;
  }

  // Registers `a` again; when the coordinator refuses (its name still held
  // by a live stream, say) the agent stays unregistered, and the Tick loop
  // registers it at its next heartbeat, as the real agent retries.
  void RegisterOrRetryLater(Agent& a) {
    if (absl::Status s = Register(a, /*same_instance=*/true); !s.ok()) {
      TC_LOG_DEBUG("sim: {} not registered yet: {}", a.name, s.ToString());
    }
  }

  void Send(Agent& a, const v1::AgentMessage& msg) {
    if (!Connected(a)) {
      if (msg.has_task_status()) RememberExit(a, msg.task_status());
      return;
    }
    absl::Status s = core_->HandleAgentMessage(a.name, a.conn, msg);
    if (msg.has_task_status()) RememberExit(a, msg.task_status());
    if (absl::IsFailedPrecondition(s)) {
      // Not this node's stream any more: the real agent's stream ends and it
      // registers again.
      a.conn = nullptr;
    }
    Settle();
  }

  void RememberExit(Agent& a, const v1::TaskStatus& st) {
    if (st.state() != v1::TASK_STATE_EXITED && st.state() != v1::TASK_STATE_START_FAILED) {
      return;
    }
    a.finished.push_back(st);
    if (a.finished.size() > 256) a.finished.pop_front();
  }

  // Ends process `key` on a's host and reports it.
  void EndProc(Agent& a, const TaskKey& key, int exit_code, int signal,
               const std::optional<v1::PreflightProbeResult>& probe_result = {}) {
    Host& host = hosts_[a.host];
    auto it = host.procs.find(key);
    if (it == host.procs.end()) return;
    v1::AgentMessage msg;
    v1::TaskStatus* st = msg.mutable_task_status();
    *st->mutable_task() = it->second.ref;
    st->set_state(v1::TASK_STATE_EXITED);
    st->set_exit_code(exit_code);
    st->set_signal(signal);
    if (probe_result) *st->mutable_preflight_result() = *probe_result;
    const bool mine = it->second.owner == a.instance;
    host.procs.erase(it);
    if (mine) Send(a, msg);
  }

  void HandleStart(Agent& a, const v1::StartTask& start, uint64_t luck) {
    Host& host = hosts_[a.host];
    const TaskKey key = KeyOfRef(start.task());
    if (host.procs.count(key)) return;  // Already running (a repeated start).
    ++result_.processes_started;
    v1::AgentMessage msg;
    v1::TaskStatus* st = msg.mutable_task_status();
    *st->mutable_task() = start.task();
    if (luck % 23 == 0) {
      st->set_state(v1::TASK_STATE_START_FAILED);
      st->set_message("sim: exec failed");
      Send(a, msg);
      return;
    }
    if (start.has_preflight() && !a.probe_tasks) {
      Violation("preflight", absl::StrCat("job ", start.task().job_id(),
                                          ": a probe was sent to ", a.name,
                                          ", whose agent predates probe tasks"));
    }
    Proc p;
    p.ref = start.task();
    p.ref.set_pid(static_cast<int>(1000 + result_.processes_started));
    p.probe = start.has_preflight();
    if (p.probe) ++result_.preflight_runs;
    // The agent discards a task's output exactly when its job asked
    // (--no-logs), and never a pre-flight probe's: its result is read from
    // its log.
    if (absl::StatusOr<v1::Job> job = core_->GetJob(start.task().job_id()); job.ok()) {
      const bool discard = job->spec().discard_output() && !p.probe;
      if (start.discard_output() != discard) {
        Violation("logs", absl::StrCat("job ", start.task().job_id(), " attempt ",
                                       start.task().attempt(), " rank ", start.task().rank(),
                                       p.probe ? " (pre-flight probe)" : "",
                                       ": StartTask.discard_output is ",
                                       start.discard_output(), ", the job asked ",
                                       job->spec().discard_output()));
      }
    }
    // Every task starts with its job's exported environment, however the
    // coordinator stores it (once per array, across its restarts).
    if (std::string missing = MissingExported(start.task().job_id(), start.env());
        !missing.empty()) {
      Violation("environment", absl::StrCat("StartTask of job ", start.task().job_id(),
                                            " attempt ", start.task().attempt(), " rank ",
                                            start.task().rank(), ": exported ", missing));
    }
    p.owner = a.instance;
    const auto& env = start.env();
    if (auto it = env.find("TRAINCTL_TOKEN"); it != env.end()) p.token = it->second;
    if (auto it = env.find("TRAINCTL_ATTEMPT"); it != env.end()) {
      (void)absl::SimpleAtoi(it->second, &p.rendezvous_attempt);
    }
    if (auto it = env.find("TRAINCTL_PREFLIGHT"); it != env.end()) {
      (void)absl::SimpleAtoi(it->second, &p.rendezvous_probe_run);
    }
    if (auto it = env.find("WORLD_SIZE"); it != env.end()) {
      (void)absl::SimpleAtoi(it->second, &p.world_size);
    }
    auto res = reservations_.find(Key(start.task()));
    if (res != reservations_.end()) p.holds = res->second;
    // The log file, where the real agent puts it: one writer per file. A
    // task that discards its output has none.
    std::string path;
    if (!start.discard_output()) {
      path = worker::TaskLogPath("/var/log/trainctl", a.cluster_id, start.task());
      const std::string writer =
          absl::StrCat("cluster ", generation_, " job ", std::get<0>(key), " attempt ",
                       std::get<1>(key), " probe ", std::get<2>(key), " rank ",
                       std::get<3>(key));
      auto [it, fresh] = host.disk.try_emplace(path, writer);
      if (!fresh && it->second != writer) {
        Violation("logs", absl::StrCat("task ", writer, " appends to ", path,
                                       ", the log of task ", it->second));
      }
    }
    *st->mutable_task() = p.ref;
    st->set_state(v1::TASK_STATE_RUNNING);
    st->set_log_path(path);
    host.procs[key] = std::move(p);
    Send(a, msg);
  }

  void HandleStop(Agent& a, const v1::StopTask& stop, uint64_t luck) {
    Host& host = hosts_[a.host];
    const TaskKey key = KeyOfRef(stop.task());
    auto it = host.procs.find(key);
    if (it == host.procs.end() || it->second.owner != a.instance) return;
    if (luck % 3 == 0) {
      EndProc(a, key, 0, 15);  // Exits on SIGTERM at once.
      return;
    }
    it->second.stopping = true;
    const int64_t grace = std::max<int64_t>(stop.grace_ms(), 1);
    it->second.kill_at =
        std::min(it->second.kill_at,
                 clock_.Now() + absl::Milliseconds(static_cast<int64_t>(luck % grace) + 1));
  }

  // Delivers up to `count` messages to `a`.
  void Deliver(Agent& a, int count, uint64_t luck) {
    if (!Connected(a)) return;
    SimConn* conn = a.conn;
    for (int i = 0; i < count && a.conn == conn && !conn->inbox.empty(); ++i) {
      v1::CoordinatorMessage m = std::move(conn->inbox.front());
      conn->inbox.pop_front();
      luck = luck * 6364136223846793005ULL + 1442695040888963407ULL;
      if (m.has_start_task() || m.has_stop_task()) {
        const v1::TaskRef& r =
            m.has_start_task() ? m.start_task().task() : m.stop_task().task();
        TC_LOG_DEBUG("sim: {} receives {} of job {} attempt {} rank {}", a.name,
                     m.has_start_task() ? "StartTask" : "StopTask", r.job_id(),
                     r.attempt(), r.rank());
      }
      switch (m.msg_case()) {
        case v1::CoordinatorMessage::kStartTask:
          HandleStart(a, m.start_task(), luck >> 33);
          break;
        case v1::CoordinatorMessage::kStopTask:
          HandleStop(a, m.stop_task(), luck >> 33);
          break;
        case v1::CoordinatorMessage::kReadLog: {
          v1::AgentMessage reply;
          reply.mutable_log_chunk()->set_request_id(m.read_log().request_id());
          reply.mutable_log_chunk()->set_data("sim log\n");
          Send(a, reply);
          break;
        }
        case v1::CoordinatorMessage::kLeaseGrant:
          if (!a.heartbeats_sent.empty()) {
            a.lease_end = a.heartbeats_sent.front() +
                          absl::Milliseconds(m.lease_grant().lease_ms());
            a.heartbeats_sent.pop_front();
          }
          break;
        default:
          break;
      }
    }
  }

  void Heartbeat(Agent& a) {
    v1::AgentMessage msg;
    v1::Heartbeat* hb = msg.mutable_heartbeat();
    absl::flat_hash_map<std::string, int64_t> used;
    absl::flat_hash_map<std::string, int> procs_on;
    for (const auto& [key, p] : hosts_[a.host].procs) {
      for (const auto& [uuid, bytes] : p.holds) {
        used[uuid] += bytes / 2;
        ++procs_on[uuid];
      }
      if (p.owner != a.instance || p.probe) continue;
      v1::TaskUsage* u = hb->add_task_usage();
      u->set_job_id(p.ref.job_id());
      u->set_attempt(p.ref.attempt());
      u->set_rank(p.ref.rank());
      u->set_cpu_pct(90);
      u->set_rss_bytes(2 * kGiB);
      int64_t mem = 0;
      for (const auto& [uuid, bytes] : p.holds) mem += bytes / 2;
      u->set_gpu_memory_bytes(mem);
      u->set_gpu_memory_known(true);
    }
    for (const v1::Gpu& g : a.gpus) {
      v1::GpuSample* s = hb->add_gpus();
      s->set_index(g.index());
      s->set_memory_used_bytes(used[g.uuid()]);
      s->set_utilization_pct(used[g.uuid()] > 0 ? 60 : 0);
      // Odd GPUs report GPM counters (a Hopper host's), even ones only
      // utilization: the packer sees both kinds. 15 % SM and 8 % DRAM
      // bandwidth per process on the GPU; GPUs 3, 7, ... run launch-bound
      // work instead (2 % SM per process, the small trials of a sweep).
      if (g.index() % 2 == 1) {
        const int sm_per_process = g.index() % 4 == 3 ? 2 : 15;
        s->set_activity_source(v1::GPU_ACTIVITY_SOURCE_GPM);
        s->set_sm_active_pct(std::min(100, sm_per_process * procs_on[g.uuid()]));
        s->set_dram_bw_pct(std::min(100, 8 * procs_on[g.uuid()]));
      } else {
        s->set_activity_source(v1::GPU_ACTIVITY_SOURCE_UTILIZATION);
      }
    }
    if (a.fences) a.heartbeats_sent.push_back(clock_.Now());
    if (Connected(a)) a.last_contact = clock_.Now();
    Send(a, msg);
  }

  // Time passes by `d` in kStep steps.
  void AdvanceBy(absl::Duration d) {
    for (absl::Duration done; done < d; done += kStep) {
      clock_.Advance(kStep);
      const absl::Time now = clock_.Now();
      for (auto& ap : agents_) {
        Agent& a = *ap;
        Host& host = hosts_[a.host];
        // Stop graces run out (SIGKILL).
        std::vector<TaskKey> due;
        for (const auto& [key, p] : host.procs) {
          if (p.stopping && p.kill_at <= now) due.push_back(key);
        }
        for (const TaskKey& k : due) {
          auto it = host.procs.find(k);
          if (it == host.procs.end()) continue;
          if (it->second.owner == a.instance) {
            EndProc(a, k, 0, 9);
          } else if (Holder(a.name) == &a) {
            host.procs.erase(it);  // A displaced agent's leftover.
          }
        }
        // Fencing: the lease ran out unrenewed.
        if (a.fences && now >= a.lease_end) {
          std::vector<TaskKey> mine;
          for (const auto& [key, p] : host.procs) {
            if (p.owner == a.instance) mine.push_back(key);
          }
          for (const TaskKey& k : mine) EndProc(a, k, 0, 9);
        }
        if (a.partitioned) continue;
        if (a.conn == nullptr || a.conn->closed) {
          if (now >= a.next_heartbeat) {
            if (a.conn != nullptr) core_->AgentDisconnected(a.name, a.conn);
            a.conn = nullptr;
            absl::Status s = Register(a, /*same_instance=*/true);
            if (!s.ok()) a.next_heartbeat = now + config_.heartbeat_interval;
          }
          continue;
        }
        if (now >= a.next_heartbeat) {
          a.next_heartbeat = now + config_.heartbeat_interval;
          Heartbeat(a);
        }
      }
      core_->Tick();
      Settle();
    }
  }

  // ------------------------------------------------------------ users

  v1::JobSpec BaseSpec(uint64_t b) {
    v1::JobSpec spec;
    spec.add_command("python");
    spec.add_command("train.py");
    spec.set_name(absl::StrCat("job-", step_));
    spec.set_user(b % 2 == 0 ? "alice" : "bob");
    spec.set_priority(static_cast<int>((b >> 4) % 3));
    spec.set_max_restarts(static_cast<int>((b >> 8) % 3));
    if ((b >> 12) % 6 == 0) {
      spec.set_time_limit_ms(absl::ToInt64Milliseconds(absl::Seconds(20 + (b >> 16) % 100)));
    }
    // `--export ALL` from one of two shells, or `--export NONE`. An array's
    // tasks and a sweep's trials share `b`, so they export the same copy.
    if (const uint64_t shell = (b >> 28) % 3; shell != 0) {
      spec.set_export_policy("ALL");
      auto& env = *spec.mutable_exported_env();
      env["SIM_VENV"] = absl::StrCat("/home/", spec.user(), "/venv", shell);
      env["SIM_PATH"] = absl::StrCat("/home/", spec.user(), "/venv", shell, "/bin:/usr/bin");
      if (shell == 2) env["SIM_HF_HOME"] = "/data/hf";
    }
    return spec;
  }

  // Remembers what job `id` was submitted to export, for the `environment`
  // invariant.
  void NoteExported(int64_t id, const v1::JobSpec& spec) {
    if (spec.exported_env().empty()) return;
    exported_[id] = std::map<std::string, std::string>(spec.exported_env().begin(),
                                                       spec.exported_env().end());
  }

  // The `environment` invariant: what `env` (a StartTask's, or a job's spec
  // as GetJob answers) lacks of job `id`'s submitted exported environment.
  std::string MissingExported(int64_t id,
                              const google::protobuf::Map<std::string, std::string>& env) {
    auto it = exported_.find(id);
    if (it == exported_.end()) return "";
    for (const auto& [k, v] : it->second) {
      auto got = env.find(k);
      if (got == env.end()) return absl::StrCat(k, " is missing");
      if (got->second != v) return absl::StrCat(k, " is ", got->second, ", submitted ", v);
    }
    return "";
  }

  // Submits `spec`; returns its id when acked (a new job).
  std::optional<int64_t> Submit(const v1::JobSpec& spec, uint64_t b) {
    std::string request_id = absl::StrCat("req-", generation_, "-", step_, "-", submitted_++);
    std::optional<int64_t> expect;
    if ((b >> 20) % 8 == 0 && !request_ids_.empty()) {
      const auto& [rid, id] = request_ids_[(b >> 24) % request_ids_.size()];
      request_id = rid;
      expect = id;
    }
    absl::StatusOr<int64_t> id = core_->SubmitJob(spec, request_id);
    Settle();
    if (!id.ok()) {
      // INVALID_ARGUMENT, or a job no known node could ever hold (refused,
      // never accepted: nothing is lost).
      const bool never_fits = absl::IsFailedPrecondition(id.status()) &&
                              absl::StrContains(id.status().message(),
                                                "cannot run on this cluster");
      if (!absl::IsInvalidArgument(id.status()) && !never_fits) {
        Violation("submit", absl::StrCat("refused with ", id.status().ToString()));
      }
      return std::nullopt;
    }
    if (expect) {
      if (*id != *expect) {
        Violation("exactly-once", absl::StrCat("request id ", request_id, " acked job ",
                                               *expect, " and now job ", *id));
      }
      return std::nullopt;
    }
    request_ids_.push_back({request_id, *id});
    acked_.push_back(*id);
    NoteExported(*id, spec);
    return *id;
  }

  void SubmitExperiment(uint64_t a, uint64_t b) {
    v1::JobSpec spec = BaseSpec(b);
    switch (a % 5) {
      case 0:
        spec.set_gpus(1);
        break;
      case 1:
        spec.set_gpu_fraction((a >> 4) % 2 == 0 ? 0.25 : 0.5);
        break;
      case 2:
        spec.set_gpu_memory_bytes(kGiB * static_cast<int64_t>(8 + (a >> 4) % 40));
        break;
      case 3:
        spec.set_auto_pack(true);
        if ((a >> 4) % 2 == 0) spec.set_gpu_memory_bytes(kGiB * 6);
        break;
      default:
        spec.set_gpu_fraction(0.3);
        break;
    }
    spec.set_preemptible((a >> 10) % 3 == 0);
    AddNodeSelection(a, spec);
    Submit(spec, b);
  }

  // A node selection for one job in four, from bits of `a` no other choice
  // reads (no new draw: seeds replay): a GPU type (one of the models', in
  // the order of preference with a second one), a feature constraint (&
  // and |), an excluded node, or a gang that may mix types.
  void AddNodeSelection(uint64_t a, v1::JobSpec& spec) {
    const uint64_t pick = a >> 40;
    auto type = [](uint64_t i) {
      return coord::GpuTypeOf(kGpuModels[i % std::size(kGpuModels)].name);
    };
    switch (pick % 16) {
      case 0:
        spec.add_gpu_types(type(pick >> 4));
        break;
      case 1:
        spec.add_gpu_types(type(pick >> 4));
        if (type(pick >> 8) != spec.gpu_types(0)) spec.add_gpu_types(type(pick >> 8));
        break;
      case 2:
        spec.set_constraint("ib");
        break;
      case 3:
        spec.set_constraint("ib&nvlink");
        break;
      case 4:
        spec.set_constraint("nvlink|ib");
        break;
      case 5:
        spec.add_exclude_nodes(absl::StrCat("node-", (pick >> 4) % 4));
        break;
      case 6:
        spec.set_allow_mixed_gpu_types(true);
        break;
      default:
        break;
    }
  }

  void SubmitGang(uint64_t a, uint64_t b) {
    v1::JobSpec spec = BaseSpec(b);
    if (a % 2 == 0) {
      spec.set_gpus(2 + static_cast<int>((a >> 2) % 10));
    } else {
      spec.set_nodes(1 + static_cast<int>((a >> 2) % 3));
      spec.set_gpus_per_node(1 + static_cast<int>((a >> 5) % 4));
      if ((a >> 8) % 5 == 0) spec.set_tasks_per_node(1);
    }
    switch ((a >> 12) % 3) {
      case 0:
        spec.set_preflight(v1::PREFLIGHT_MODE_ON);
        break;
      case 1:
        spec.set_preflight(v1::PREFLIGHT_MODE_OFF);
        break;
      default:
        break;  // AUTO: on across nodes.
    }
    if ((a >> 16) % 4 == 0) spec.set_placement(v1::GANG_PLACEMENT_SPREAD);
    spec.set_preemptible((a >> 20) % 6 == 0);
    spec.set_discard_output((a >> 24) % 4 == 0);  // its pre-flight probes keep logs
    AddNodeSelection(a, spec);
    Submit(spec, b);
  }

  void SubmitSweep(uint64_t a, uint64_t b) {
    const int trials = 2 + static_cast<int>(a % 3);
    const std::string sweep = absl::StrCat("sweep-", generation_, "-", step_);
    for (int t = 0; t < trials; ++t) {
      v1::JobSpec spec = BaseSpec(b);
      spec.set_sweep_id(sweep);
      (*spec.mutable_params())["lr"] = absl::StrCat(t);
      if ((a >> 4) % 2 == 0) {
        spec.set_auto_pack(true);
        // Half of the auto-packed sweeps declare their trials' size (packer
        // rule 3a: started together while the declarations fit).
        if ((a >> 5) % 2 == 0) spec.set_gpu_memory_bytes(kGiB * (4 + 12 * ((a >> 6) % 2)));
      } else {
        spec.set_gpu_fraction(0.25);
      }
      Submit(spec, b >> 1);
    }
  }

  // A job array of 2-7 tasks in one call (SubmitJobs with a spec per task,
  // or SubmitJobArray with one spec), at most 0 (no limit), 1 or 2 running
  // at once: all acked or none.
  void SubmitArray(uint64_t a, uint64_t b, const std::string& dependency = "",
                   int count_override = 0) {
    const int count = count_override > 0 ? count_override : 2 + static_cast<int>(a % 6);
    const int max_running = static_cast<int>((a >> 4) % 3);
    std::vector<v1::JobSpec> specs;
    for (int t = 0; t < count; ++t) {
      v1::JobSpec spec = BaseSpec(b);
      if ((a >> 8) % 2 == 0) {
        spec.set_gpus(1);
      } else {
        spec.set_gpu_fraction(0.5);
      }
      spec.mutable_array()->set_task_id(t);
      spec.mutable_array()->set_task_count(count);
      spec.mutable_array()->set_max_running(max_running);
      spec.set_discard_output((a >> 10) % 2 == 0);  // `submit --array --no-logs`
      spec.set_dependency(dependency);
      // Now and then one task exports another environment than the first
      // (a client other than the CLI): it keeps its own copy.
      if (t == 1 && (a >> 12) % 4 == 0) {
        (*spec.mutable_exported_env())["SIM_ONLY_TASK_1"] = "1";
      }
      specs.push_back(std::move(spec));
    }
    const std::vector<v1::JobSpec> submitted = specs;
    const std::string request_id =
        absl::StrCat("req-", generation_, "-", step_, "-", submitted_++);
    absl::Notification done;
    absl::StatusOr<std::vector<int64_t>> ids;
    auto on_done = [&](absl::StatusOr<std::vector<int64_t>> r) {
      ids = std::move(r);
      done.Notify();
    };
    const bool one_env = (a >> 12) % 4 != 0;  // no task exports another environment
    if ((a >> 14) % 2 == 0 && one_env) {
      // `trainctl submit --array`: one spec for every task (SubmitJobArray).
      v1::JobSpec one = specs.front();
      one.clear_array();
      std::vector<int> task_ids(count);
      for (int t = 0; t < count; ++t) task_ids[t] = t;
      core_->SubmitJobArrayAsync(std::move(one), task_ids, max_running, request_id,
                                 std::move(on_done));
    } else {
      core_->SubmitJobsAsync(std::move(specs), request_id, std::move(on_done));
    }
    done.WaitForNotification();
    Settle();
    if (!ids.ok()) {
      if (!absl::IsInvalidArgument(ids.status()) && !absl::IsFailedPrecondition(ids.status())) {
        Violation("submit", absl::StrCat("array refused with ", ids.status().ToString()));
      }
      return;
    }
    if (static_cast<int>(ids->size()) != count) {
      Violation("submit", absl::StrCat("array of ", count, " acked with ", ids->size(), " ids"));
      return;
    }
    for (size_t i = 0; i < ids->size(); ++i) {
      acked_.push_back((*ids)[i]);
      NoteExported((*ids)[i], submitted[i]);
    }
    arrays_.push_back({ids->front(), count});
  }

  // A recent acked job of this cluster, or 0.
  int64_t RecentJob(uint64_t pick) const {
    if (acked_.empty()) return 0;
    const size_t window = std::min<size_t>(acked_.size(), 12);
    return acked_[acked_.size() - 1 - pick % window];
  }

  // Jobs with dependencies (kSubmitDependent), Slurm's shapes: a chain of
  // three (prep -> train afterok -> eval afterany), one more link on a
  // recent job (any type), a diamond (afterok on two), any-of (afterok ? 
  // afternotok), two singleton jobs of one name, or an array after a recent
  // array (afterok on the whole array, or aftercorr task by task). Some
  // are refused at submit (their dependency can never be met): nothing is
  // acked then.
  void SubmitDependent(uint64_t a, uint64_t b) {
    static constexpr const char* kTypes[] = {"after", "afterany", "afterok", "afternotok"};
    auto one = [&](const std::string& dependency, uint64_t salt) {
      v1::JobSpec spec = BaseSpec(b ^ salt);
      spec.set_gpu_fraction((salt % 2) == 0 ? 0.5 : 1.0);
      spec.set_dependency(dependency);
      return spec;
    };
    switch (a % 6) {
      case 0: {
        std::optional<int64_t> prep = Submit(one("", 0), b);
        if (!prep) return;
        std::optional<int64_t> train = Submit(one(absl::StrCat("afterok:", *prep), 1), b >> 1);
        if (!train) return;
        Submit(one(absl::StrCat("afterany:", *train), 2), b >> 2);
        break;
      }
      case 1: {
        const int64_t up = RecentJob(a >> 8);
        if (up == 0) return;
        Submit(one(absl::StrCat(kTypes[(a >> 4) % 4], ":", up), 3), b);
        break;
      }
      case 2: {
        const int64_t x = RecentJob(a >> 8), y = RecentJob(a >> 16);
        if (x == 0) return;
        Submit(one(absl::StrCat("afterok:", x, ",afterok:", y), 4), b);
        break;
      }
      case 3: {
        const int64_t x = RecentJob(a >> 8), y = RecentJob(a >> 16);
        if (x == 0) return;
        Submit(one(absl::StrCat("afterok:", x, "?afternotok:", y), 5), b);
        break;
      }
      case 4: {
        // One user's two jobs of one name: the second waits for the first.
        for (int k = 0; k < 2; ++k) {
          v1::JobSpec spec = one("singleton", 6 + static_cast<uint64_t>(k));
          spec.set_user("alice");
          spec.set_name(absl::StrCat("single-", (a >> 4) % 2));
          if (std::optional<int64_t> id = Submit(spec, b >> k)) singletons_.push_back(*id);
        }
        break;
      }
      default: {
        if (arrays_.empty()) return;
        const auto& [first, count] = arrays_[(a >> 8) % arrays_.size()];
        const bool corr = (a >> 4) % 2 == 0;
        SubmitArray(a >> 20, b, absl::StrCat(corr ? "aftercorr:" : "afterok:", first),
                    count);
        break;
      }
    }
  }

  void Cancel(uint64_t a) {
    if (acked_.empty()) return;
    const int64_t id = acked_[a % acked_.size()];
    auto before = core_->GetJob(id);
    absl::StatusOr<v1::Job> r = core_->CancelJob(id);
    Settle();
    if (!before.ok()) return;  // Reported by Check().
    if (coord::IsFinal(before->state())) {
      if (!absl::IsFailedPrecondition(r.status())) {
        Violation("cancel", absl::StrCat("cancel of job ", id, " that was ",
                                         v1::JobState_Name(before->state()),
                                         " answered ", r.status().ToString()));
      }
    } else if (!r.ok()) {
      Violation("cancel", absl::StrCat("cancel of live job ", id, " answered ",
                                       r.status().ToString()));
    }
  }

  // ------------------------------------------------------------ faults

  std::vector<TaskKey> LiveProcs(const Agent& a, bool probes) const {
    std::vector<TaskKey> out;
    for (const auto& [key, p] : hosts_[a.host].procs) {
      if (p.owner == a.instance && p.probe == probes && !p.stopping) out.push_back(key);
    }
    return out;
  }

  void TaskExit(uint64_t a, uint64_t b) {
    std::vector<std::pair<Agent*, TaskKey>> all;
    for (auto& ap : agents_) {
      for (const TaskKey& k : LiveProcs(*ap, /*probes=*/false)) all.push_back({ap.get(), k});
    }
    if (all.empty()) return;
    auto [agent, key] = all[a % all.size()];
    switch (b % 10) {
      case 6:
      case 7:
        EndProc(*agent, key, 1, 0);
        break;
      case 8: {
        v1::AgentMessage oom;
        oom.mutable_task_oom()->set_job_id(std::get<0>(key));
        oom.mutable_task_oom()->set_attempt(std::get<1>(key));
        oom.mutable_task_oom()->set_rank(std::get<3>(key));
        oom.mutable_task_oom()->set_line("torch.OutOfMemoryError: CUDA out of memory.");
        Send(*agent, oom);
        EndProc(*agent, key, 1, 0);
        break;
      }
      case 9:
        EndProc(*agent, key, 0, 9);
        break;
      default:
        EndProc(*agent, key, 0, 0);
        break;
    }
  }

  void ProbeExit(uint64_t a, uint64_t b) {
    std::vector<std::pair<Agent*, TaskKey>> all;
    for (auto& ap : agents_) {
      for (const TaskKey& k : LiveProcs(*ap, /*probes=*/true)) all.push_back({ap.get(), k});
    }
    if (all.empty()) return;
    auto [agent, key] = all[a % all.size()];
    v1::PreflightProbeResult r;
    r.set_rank(std::get<3>(key));
    if (b % 5 == 0) {
      r.set_error("sim: ncclCommInitRank: unhandled system error");
      EndProc(*agent, key, 1, 0, r);
    } else {
      r.set_comm_ready_ms(400 + static_cast<double>(b % 100));
      r.set_busbw_gbps(100 + static_cast<double>((b >> 8) % 10));
      EndProc(*agent, key, 0, 0, r);
    }
  }

  void Partition(uint64_t a) {
    Agent& ag = *agents_[a % agents_.size()];
    ag.partitioned = true;
  }

  void Heal(uint64_t a) {
    std::vector<Agent*> cut;
    for (auto& ap : agents_) {
      if (ap->partitioned) cut.push_back(ap.get());
    }
    if (cut.empty()) return;
    Agent& ag = *cut[a % cut.size()];
    ag.partitioned = false;
    if (ag.conn != nullptr) core_->AgentDisconnected(ag.name, ag.conn);
    ag.conn = nullptr;
    RegisterOrRetryLater(ag);
  }

  void Reconnect(uint64_t a, uint64_t b) {
    Agent& ag = *agents_[a % agents_.size()];
    if (ag.partitioned) return;
    SimConn* old = ag.conn;
    if (b % 2 == 0 && old != nullptr) core_->AgentDisconnected(ag.name, old);
    ag.conn = nullptr;
    RegisterOrRetryLater(ag);
    if (b % 2 != 0 && old != nullptr) core_->AgentDisconnected(ag.name, old);
  }

  void ShrinkGpus(uint64_t a) {
    Agent& ag = *agents_[a % agents_.size()];
    int total = 0;
    for (const auto& ap : agents_) total += static_cast<int>(ap->gpus.size());
    if (ag.gpus.size() < 2 || total <= 3 || ag.partitioned) return;
    const std::string gone = ag.gpus.back().uuid();
    ag.gpus.pop_back();
    // The GPU fell off the bus: its processes crash.
    std::vector<TaskKey> dead;
    for (const auto& [key, p] : hosts_[ag.host].procs) {
      for (const auto& [uuid, bytes] : p.holds) {
        if (uuid == gone && p.owner == ag.instance) dead.push_back(key);
      }
    }
    if (ag.conn != nullptr) core_->AgentDisconnected(ag.name, ag.conn);
    ag.conn = nullptr;
    for (const TaskKey& k : dead) EndProc(ag, k, 1, 0);  // Remembered, not sent.
    // Its processes are gone from the GPU; the restarted agent registers.
    RegisterOrRetryLater(ag);
  }

  // An admin's lever on node #a: drain (a third of them with a deadline of
  // 1-120 s), down, resume, or resume --verify. Only NOT_FOUND (a node a new
  // cluster has not seen yet) may refuse it, and FAILED_PRECONDITION a
  // verify (the node is not connected, or not empty).
  void NodeAdmin(uint64_t a, uint64_t b) {
    const Agent& ag = *agents_[a % agents_.size()];
    v1::UpdateNodesRequest req;
    req.add_nodes(ag.name);
    switch (b % 6) {
      case 0:
      case 1:
        req.set_action(v1::NODE_ACTION_DRAIN);
        break;
      case 2:
        req.set_action(v1::NODE_ACTION_DRAIN);
        req.set_deadline_s(static_cast<int64_t>(b / 6 % 120) + 1);
        break;
      case 3:
        req.set_action(v1::NODE_ACTION_DOWN);
        break;
      case 4:
        req.set_action(v1::NODE_ACTION_RESUME);
        break;
      default:
        req.set_action(v1::NODE_ACTION_RESUME);
        req.set_verify(true);  // refused unless the node is connected and empty
    }
    if (req.action() != v1::NODE_ACTION_RESUME) req.set_reason("simulated maintenance");
    absl::StatusOr<v1::UpdateNodesResponse> views = core_->UpdateNodes(req, "ops");
    Settle();
    if (!views.ok() && views.status().code() != absl::StatusCode::kNotFound &&
        !(req.verify() && views.status().code() == absl::StatusCode::kFailedPrecondition)) {
      Violation("node-admin", absl::StrCat("UpdateNodes: ", views.status().ToString()));
    }
  }

  // Resumes every node (before the end, so that what waits can run).
  void ResumeAll() {
    if (core_ == nullptr) return;
    for (const auto& ap : agents_) {
      v1::UpdateNodesRequest req;
      req.add_nodes(ap->name);
      req.set_action(v1::NODE_ACTION_RESUME);
      (void)core_->UpdateNodes(req, "ops");
      Settle();  // what the resume placed
    }
  }

  void Impostor(uint64_t a, uint64_t b) {
    Agent& holder = *agents_[a % agents_.size()];
    // Only while the holder is connected and heartbeating (the coordinator
    // frees a name silent for 3 heartbeat intervals).
    if (!Connected(holder) || holder.conn->closed ||
        clock_.Now() - holder.last_contact > 2 * config_.heartbeat_interval) {
      return;
    }
    if ((b >> 1) % 2 == 1 && !holder.gpus.empty()) {
      // A second agent on the same host started with its own --node-name
      // but without --gpus: it offers the holder's GPUs (the same UUIDs).
      Agent thief;
      thief.name = absl::StrCat(holder.name, "-bis");
      thief.host = holder.host;
      thief.instance = NewInstance();
      thief.gpus = holder.gpus;
      conns_.push_back(std::make_unique<SimConn>());
      absl::Status s = core_->RegisterAgent(Registration(thief), conns_.back().get());
      Settle();
      if (!absl::IsAlreadyExists(s)) {
        Violation("identity",
                  absl::StrCat("node ", thief.name, " was registered with the GPUs of live node ",
                               holder.name, " (answer: ", s.ToString(), ")"));
      }
      return;
    }
    // A second agent on the same host, started without --node-name.
    auto impostor = std::make_unique<Agent>();
    impostor->name = holder.name;
    impostor->host = holder.host;
    impostor->instance = NewInstance();
    impostor->fences = holder.fences;
    impostor->gpus = holder.gpus;
    conns_.push_back(std::make_unique<SimConn>());
    SimConn* conn = conns_.back().get();
    absl::Status s = core_->RegisterAgent(Registration(*impostor), conn);
    Settle();
    if (absl::IsAlreadyExists(s)) return;
    Violation("identity",
              absl::StrCat("a second agent took over live node ", holder.name,
                           " (holder heartbeating; answer: ", s.ToString(), ")"));
    if (!s.ok()) return;
    // What follows a takeover: the holder's processes stay on the GPUs until
    // its lease ends; the impostor is the node's agent now.
    for (auto& [key, p] : hosts_[holder.host].procs) {
      if (p.owner == holder.instance) {
        p.stopping = true;
        p.kill_at = std::min(p.kill_at, holder.fences ? holder.lease_end
                                                       : clock_.Now() + config_.node_timeout);
      }
    }
    impostor->conn = conn;
    impostor->lease_end = clock_.Now() + config_.node_timeout;
    impostor->next_heartbeat = clock_.Now() + config_.heartbeat_interval;
    if (!conn->inbox.empty() && conn->inbox.front().has_register_ack()) {
      impostor->cluster_id = conn->inbox.front().register_ack().cluster_id();
      conn->inbox.pop_front();
    }
    for (auto& ap : agents_) {
      if (ap.get() == &holder) ap = std::move(impostor);
    }
  }

  void ForgedReport(uint64_t a, uint64_t b) {
    if (agents_.size() < 2) return;
    Agent& liar = *agents_[a % agents_.size()];
    if (!Connected(liar)) return;
    // A live task of another node, from the coordinator's view.
    std::vector<std::pair<int64_t, v1::Task>> victims;
    for (int64_t id : acked_) {
      auto job = core_->GetJob(id);
      if (!job.ok() || coord::IsFinal(job->state())) continue;
      for (const v1::Task& t : job->tasks()) {
        if (t.node() != liar.name && coord::IsLive(t.state())) victims.push_back({id, t});
      }
    }
    if (victims.empty()) return;
    const auto& [id, task] = victims[b % victims.size()];
    auto before = core_->GetJob(id);
    v1::TaskRef ref;
    ref.set_job_id(id);
    ref.set_attempt(before->attempt());
    ref.set_rank(task.rank());
    v1::AgentMessage exit;
    *exit.mutable_task_status()->mutable_task() = ref;
    exit.mutable_task_status()->set_state(v1::TASK_STATE_EXITED);
    exit.mutable_task_status()->set_exit_code(1);
    v1::AgentMessage hb;
    v1::TaskUsage* u = hb.mutable_heartbeat()->add_task_usage();
    u->set_job_id(id);
    u->set_attempt(before->attempt());
    u->set_rank(task.rank());
    u->set_gpu_memory_bytes(kForgedGpuMemory);
    u->set_gpu_memory_known(true);
    u->set_cpu_pct(1e6);
    (void)core_->HandleAgentMessage(liar.name, liar.conn, exit);
    (void)core_->HandleAgentMessage(liar.name, liar.conn, hb);
    Settle();
    auto after = core_->GetJob(id);
    if (!after.ok()) return;
    for (const v1::Task& t : after->tasks()) {
      if (t.rank() == task.rank() && after->attempt() == before->attempt() &&
          t.state() != task.state() && t.state() == v1::TASK_STATE_EXITED) {
        Violation("forged-report",
                  absl::StrCat("node ", liar.name, " ended job ", id, " rank ", t.rank(),
                               " which runs on ", t.node()));
      }
    }
  }

  void CoordinatorCrash() {
    // kill -9: the writes still queued are lost and none of their callbacks
    // runs (StartTasks held back for them are never sent).
    if (queued_ != nullptr) result_.writes_lost += queued_->Crash();
    core_.reset();
    if (!OpenStore(/*fresh=*/false) || !StartCoordinator()) return;
    for (auto& ap : agents_) {
      ap->conn = nullptr;  // Every stream broke; agents register again.
      ap->next_heartbeat = clock_.Now();
    }
    Settle();
    // Final states survive a restart: remembered ones are checked in Check().
  }

  void NewCluster() {
    core_.reset();
    ++generation_;
    if (!OpenStore(/*fresh=*/true) || !StartCoordinator()) return;
    acked_.clear();
    arrays_.clear();
    singletons_.clear();
    request_ids_.clear();
    final_.clear();
    exported_.clear();
    // The operator restarts the agents against the new coordinator: their
    // processes end with them (SIGTERM on agent shutdown); their disks stay.
    for (auto& ap : agents_) {
      Host& host = hosts_[ap->host];
      for (auto it = host.procs.begin(); it != host.procs.end();) {
        it = it->second.owner == ap->instance ? host.procs.erase(it) : std::next(it);
      }
      ap->instance = NewInstance();
      ap->finished.clear();
      ap->conn = nullptr;
      ap->next_heartbeat = clock_.Now();
      ap->partitioned = false;
    }
  }

  // The id rank 0 of (job, rendezvous attempt) publishes in this cluster:
  // 128 bytes, so a rank that gets another group's id is caught.
  std::string UniqueId(int64_t job, int attempt, int probe_run) const {
    std::string id =
        absl::StrCat("id/", generation_, "/", job, "/", attempt, "/", probe_run, "/");
    id.resize(128, '.');
    return id;
  }

  // A live rank of a gang publishes (rank 0) or fetches its group's id; or,
  // one time in three, a rank of another job asks for that group's id with
  // its own token, which must never open it.
  void Rendezvous(uint64_t a, uint64_t b) {
    std::vector<const Proc*> ranks;
    for (const Host& h : hosts_) {
      for (const auto& [key, p] : h.procs) {
        if (!p.stopping && !p.token.empty() && p.world_size > 1) ranks.push_back(&p);
      }
    }
    if (ranks.empty()) return;
    const Proc& p = *ranks[a % ranks.size()];
    const int64_t job = p.ref.job_id();
    const int attempt = p.rendezvous_attempt;
    const int probe_run = p.rendezvous_probe_run;
    const std::string expect = UniqueId(job, attempt, probe_run);
    // Most times rank 0 of the group publishes first (once; a repeat of the
    // same id is accepted).
    if ((b >> 4) % 4 != 0) {
      for (const Proc* q : ranks) {
        if (q->ref.job_id() != job || q->rendezvous_attempt != attempt ||
            q->rendezvous_probe_run != probe_run || q->ref.rank() != 0) {
          continue;
        }
        v1::PublishUniqueIdRequest req;
        req.set_job_id(job);
        req.set_attempt(attempt);
        req.set_probe_run(probe_run);
        req.set_rank(0);
        req.set_token(q->token);
        req.set_unique_id(expect);
        (void)core_->PublishUniqueId(req);  // Refused once the group closed.
        Settle();
        break;
      }
    }
    if (b % 3 == 0) {
      const Proc* other = nullptr;
      for (const Proc* q : ranks) {
        if (q->ref.job_id() != job && q->token != p.token) other = q;
      }
      if (other == nullptr) return;
      v1::FetchUniqueIdRequest req;
      req.set_job_id(job);
      req.set_attempt(attempt);
      req.set_probe_run(probe_run);
      req.set_rank(p.ref.rank());
      req.set_token(other->token);
      req.set_timeout_ms(1000);
      const std::string who = absl::StrCat("job ", other->ref.job_id(), "'s token");
      core_->FetchUniqueIdAsync(req, [this, who, job](absl::StatusOr<std::string> id) {
        if (id.ok()) {
          Violation("rendezvous", absl::StrCat(who, " fetched the ncclUniqueId of job ", job));
        }
      });
      Settle();
      return;
    }
    if (p.ref.rank() == 0) return;
    v1::FetchUniqueIdRequest req;
    req.set_job_id(job);
    req.set_attempt(attempt);
    req.set_probe_run(probe_run);
    req.set_rank(p.ref.rank());
    req.set_token(p.token);
    req.set_timeout_ms(static_cast<int64_t>(1000 + (b >> 8) % 30000));
    if ((b >> 6) % 2 == 1) {
      // As a node relay asks: once for the ranks of the group on p's host
      // (relayed_ranks), sometimes only reporting arrivals. The same
      // promise: only this group's id, only with its token.
      for (const Host& h : hosts_) {
        bool here = false;
        for (const auto& [key, q] : h.procs) here = here || &q == &p;
        if (!here) continue;
        for (const auto& [key, q] : h.procs) {
          if (!q.stopping && q.token == p.token && q.ref.job_id() == job &&
              q.rendezvous_attempt == attempt && q.rendezvous_probe_run == probe_run) {
            req.add_relayed_ranks(q.ref.rank());
          }
        }
      }
      req.set_arrivals_only((b >> 7) % 4 == 0);
      core_->FetchUniqueIdsAsync(
          req, [this, expect, job, attempt](absl::StatusOr<std::vector<std::string>> ids) {
            if (!ids.ok()) return;
            if (ids->size() == 1 && ids->front() == expect) ++result_.rendezvous_fetched;
            for (const std::string& id : *ids) {
              if (id != expect) {
                Violation("rendezvous",
                          absl::StrCat("job ", job, " attempt ", attempt,
                                       ": a relay got the ncclUniqueId of another group"));
              }
            }
          });
      Settle();
      return;
    }
    core_->FetchUniqueIdAsync(
        req, [this, expect, job, attempt, rank = p.ref.rank()](absl::StatusOr<std::string> id) {
          if (id.ok() && *id == expect) ++result_.rendezvous_fetched;
          if (id.ok() && *id != expect) {
            Violation("rendezvous",
                      absl::StrCat("job ", job, " attempt ", attempt, " rank ", rank,
                                   " got the ncclUniqueId of another group"));
          }
        });
    Settle();
  }

  // ------------------------------------------------------------ dispatch

  void Apply(const Event& e) {
    // Between events the commit thread catches up, except when the event is
    // the crash that interrupts it.
    if (queued_ != nullptr && e.type != EventType::kCoordinatorCrash) {
      if (absl::Status s = queued_->CommitThreadTurn(); !s.ok()) {
        Violation("setup", absl::StrCat("commit: ", s.ToString()));
      }
    }
    switch (e.type) {
      case EventType::kSubmitExperiment:
        SubmitExperiment(e.a, e.b);
        break;
      case EventType::kSubmitGang:
        SubmitGang(e.a, e.b);
        break;
      case EventType::kSubmitArray:
        SubmitArray(e.a, e.b);
        break;
      case EventType::kSubmitSweep:
        SubmitSweep(e.a, e.b);
        break;
      case EventType::kCancel:
        Cancel(e.a);
        break;
      case EventType::kDeliver:
        Deliver(*agents_[e.a % agents_.size()], 1 + static_cast<int>(e.b % 8), e.b);
        break;
      case EventType::kTaskExit:
        TaskExit(e.a, e.b);
        break;
      case EventType::kProbeExit:
        ProbeExit(e.a, e.b);
        break;
      case EventType::kAdvance: {
        absl::Duration d = absl::Milliseconds(250 * static_cast<int64_t>(1 + e.a % 12));
        if ((e.a >> 8) % 25 == 0) d = absl::Seconds(12 + static_cast<int64_t>(e.b % 50));
        AdvanceBy(d);
        break;
      }
      case EventType::kPartition:
        Partition(e.a);
        break;
      case EventType::kHeal:
        Heal(e.a);
        break;
      case EventType::kReconnect:
        Reconnect(e.a, e.b);
        break;
      case EventType::kShrinkGpus:
        ShrinkGpus(e.a);
        break;
      case EventType::kImpostor:
        Impostor(e.a, e.b);
        break;
      case EventType::kForgedReport:
        ForgedReport(e.a, e.b);
        break;
      case EventType::kCoordinatorCrash:
        CoordinatorCrash();
        break;
      case EventType::kNewCluster:
        NewCluster();
        break;
      case EventType::kRendezvous:
        Rendezvous(e.a, e.b);
        break;
      case EventType::kNodeAdmin:
        NodeAdmin(e.a, e.b);
        break;
      case EventType::kSubmitDependent:
        SubmitDependent(e.a, e.b);
        break;
      case EventType::kCount:
        break;
    }
  }

  // ------------------------------------------------------------ invariants

  void Check(bool full) {
    if (core_ == nullptr) return;
    // No GPU over-committed, counting every process the agents run.
    for (size_t h = 0; h < hosts_.size(); ++h) {
      absl::flat_hash_map<std::string, int64_t> held;
      absl::flat_hash_map<std::string, std::string> who;
      for (const auto& [key, p] : hosts_[h].procs) {
        for (const auto& [uuid, bytes] : p.holds) {
          held[uuid] += bytes;
          absl::StrAppend(&who[uuid], who[uuid].empty() ? "" : ", ", "job ",
                          p.ref.job_id(), p.probe ? " probe" : " attempt ",
                          p.probe ? "" : absl::StrCat(p.ref.attempt()), " rank ",
                          p.ref.rank(), " (", bytes / kGiB, " GiB)");
        }
      }
      for (const v1::Gpu& g : hosts_[h].gpus) {
        if (held[g.uuid()] > g.memory_total_bytes()) {
          Violation("gpu-overcommit",
                    absl::StrCat(g.uuid(), " holds ", held[g.uuid()] / kGiB, " GiB of ",
                                 g.memory_total_bytes() / kGiB, " GiB: ", who[g.uuid()],
                                 "; the coordinator counts: ", CoordinatorView(h, g)));
        }
      }
    }
    const coord::CoordinatorStats stats = core_->Stats();
    if (stats.illegal_transitions != illegal_seen_) {
      Violation("state-machine",
                absl::StrCat(stats.illegal_transitions - illegal_seen_,
                             " illegal transition(s) tried (see the error log)"));
      illegal_seen_ = stats.illegal_transitions;
    }
    // Jobs never leave a final state, so the jobs that reached one since this
    // coordinator started (a Prometheus counter) are at most the jobs in it.
    for (v1::JobState s :
         {v1::JOB_STATE_SUCCEEDED, v1::JOB_STATE_FAILED, v1::JOB_STATE_CANCELLED}) {
      if (stats.counters.jobs_finished[s] > stats.jobs_by_state[s]) {
        Violation("metrics-counters",
                  absl::StrCat(stats.counters.jobs_finished[s], " jobs counted as reaching ",
                               v1::JobState_Name(s), " but ", stats.jobs_by_state[s],
                               " are in it"));
      }
    }
    std::set<std::string> lost;
    for (const v1::NodeView& n : core_->ListNodes()) {
      if (n.node().state() == v1::NODE_STATE_LOST) lost.insert(n.node().name());
    }
    // A fencing agent runs nothing once its node is lost.
    for (const auto& ap : agents_) {
      if (!ap->fences || !lost.count(ap->name)) continue;
      for (const auto& [key, p] : hosts_[ap->host].procs) {
        if (p.owner == ap->instance) {
          Violation("lost-node",
                    absl::StrCat("node ", ap->name, " is lost but its fencing agent still runs job ",
                                 p.ref.job_id(), " rank ", p.ref.rank()));
          break;
        }
      }
    }
    // Jobs of each job array holding GPUs (SCHEDULED or RUNNING), against
    // its %P limit.
    absl::flat_hash_map<int64_t, std::pair<int, int>> array_running;
    // (MASTER_ADDR, MASTER_PORT) of the jobs with live tasks: no two share one.
    std::map<std::pair<std::string, int>, int64_t> master_ports;
    for (int64_t id : acked_) {
      auto fin = final_.find(id);
      if (fin != final_.end() && !full) continue;
      absl::StatusOr<v1::Job> job = core_->GetJob(id);
      if (job.ok() && job->spec().has_array() &&
          (job->state() == v1::JOB_STATE_SCHEDULED || job->state() == v1::JOB_STATE_RUNNING)) {
        auto& [running, limit] = array_running[job->spec().array().array_job_id()];
        ++running;
        limit = job->spec().array().max_running();
      }
      if (!job.ok()) {
        Violation("acked-job-lost", absl::StrCat("job ", id, ": ", job.status().ToString()));
        continue;
      }
      if (std::string missing = MissingExported(id, job->spec().exported_env());
          !missing.empty()) {
        Violation("environment", absl::StrCat("GetJob(", id, "): exported ", missing));
      }
      if (fin != final_.end()) {
        if (job->state() != fin->second.first || job->end_time_ms() != fin->second.second) {
          Violation("final-changed",
                    absl::StrCat("job ", id, " was ", v1::JobState_Name(fin->second.first),
                                 " and is now ", v1::JobState_Name(job->state())));
        }
        continue;
      }
      if (coord::IsFinal(job->state())) {
        final_[id] = {job->state(), job->end_time_ms()};
      }
      CheckJob(*job, lost);
      CheckDependency(*job);
      const bool live = std::any_of(job->tasks().begin(), job->tasks().end(),
                                    [](const v1::Task& t) { return coord::IsLive(t.state()); });
      if (live && !coord::IsFinal(job->state()) && job->master_port() > 0) {
        auto [it, fresh] =
            master_ports.try_emplace({job->master_addr(), job->master_port()}, id);
        if (!fresh) {
          Violation("master-port", absl::StrCat("jobs ", it->second, " and ", id,
                                                " both have MASTER_PORT ", job->master_port(),
                                                " on ", job->master_addr()));
        }
      }
    }
    for (const auto& [array, rl] : array_running) {
      if (rl.second > 0 && rl.first > rl.second) {
        Violation("array-throttle", absl::StrCat("job array ", array, " has ", rl.first,
                                                 " jobs scheduled or running; its limit is ",
                                                 rl.second));
      }
    }
    if (full) CheckExactlyOnce();
  }

  // What the coordinator holds on GPU `g` of host `h` (ListNodes).
  std::string CoordinatorView(size_t h, const v1::Gpu& g) {
    std::string out;
    for (const auto& ap : agents_) {
      if (ap->host != static_cast<int>(h)) continue;
      for (const v1::NodeView& n : core_->ListNodes()) {
        if (n.node().name() != ap->name) continue;
        for (int i = 0; i < n.node().gpus_size() && i < n.gpu_tasks_size(); ++i) {
          if (n.node().gpus(i).uuid() != g.uuid()) continue;
          for (const v1::GpuTaskRef& t : n.gpu_tasks(i).tasks()) {
            absl::StrAppend(&out, out.empty() ? "" : ", ", "job ", t.job_id(), " rank ",
                            t.rank(), " (", t.reserved_bytes() / kGiB, " GiB)");
          }
        }
      }
      break;
    }
    return out.empty() ? "nothing" : out;
  }

  // The dependency invariants (coordinator/dependency.h), judged from what
  // GetJob answers for the jobs named (their conditions only ever move from
  // waiting to met or to never, so a verdict now also held before):
  //   dependency-order: a SCHEDULED or RUNNING job's dependency holds (it was
  //     not placed before), and a singleton job was placed while no other
  //     job of its name and user held GPUs (placement order);
  //   dependency-never-waits: no PENDING job waits on a dependency that can
  //     no longer be met (it is ended in the same event);
  //   dependency-spurious-end: a job ended for its dependency had one that
  //     can truly never be met.
  void CheckDependency(const v1::Job& job) {
    if (job.spec().dependency().empty()) return;
    absl::StatusOr<coord::Dependency> dep = coord::ParseDependency(job.spec().dependency());
    if (!dep.ok()) {
      Violation("dependency-order", absl::StrCat("job ", job.id(), " was accepted with \"",
                                                 job.spec().dependency(), "\": ",
                                                 dep.status().ToString()));
      return;
    }
    const bool placed =
        job.state() == v1::JOB_STATE_SCHEDULED || job.state() == v1::JOB_STATE_RUNNING;
    const bool ended_for_it = job.state() == v1::JOB_STATE_CANCELLED &&
                              absl::StartsWith(job.reason(), "dependency can never be met");
    if (!placed && job.state() != v1::JOB_STATE_PENDING && !ended_for_it) return;
    auto facts = [&](int64_t id) -> std::optional<coord::DepJobFacts> {
      // PeekJob: no wait for the store (a check must not commit writes a
      // crash would lose).
      absl::StatusOr<v1::Job> t = core_->PeekJob(id);
      if (!t.ok()) return std::nullopt;
      coord::DepJobFacts f;
      f.state = t->state();
      f.started = t->state() != v1::JOB_STATE_PENDING || t->attempt() > 0;
      f.user = t->spec().user();
      f.array_job_id = t->spec().array().array_job_id();
      f.task_id = t->spec().array().task_id();
      f.task_count = t->spec().array().task_count();
      return f;
    };
    const coord::DepSelf self{job.id(), job.spec().has_array(), job.spec().array().task_id()};
    // Singleton is judged below by placement order; here without peers.
    const coord::DepVerdict v = coord::EvaluateDependency(*dep, self, facts, {});
    if (placed && v.outcome != coord::DepOutcome::kSatisfied) {
      Violation("dependency-order",
                absl::StrCat("job ", job.id(), " is ", v1::JobState_Name(job.state()),
                             " with dependency ", job.spec().dependency(), ": ", v.reason));
    }
    if (job.state() == v1::JOB_STATE_PENDING && v.outcome == coord::DepOutcome::kNever) {
      Violation("dependency-never-waits",
                absl::StrCat("job ", job.id(), " still waits: ", v.reason));
    }
    if (ended_for_it && v.outcome != coord::DepOutcome::kNever) {
      Violation("dependency-spurious-end",
                absl::StrCat("job ", job.id(), " was ended (", job.reason(),
                             ") but its dependency ", job.spec().dependency(), " is ",
                             v.outcome == coord::DepOutcome::kSatisfied ? "met" : "still open"));
    }
    if (placed && dep->HasSingleton()) {
      // Only singleton jobs have "single-*" names here.
      for (int64_t other : singletons_) {
        if (other == job.id() || final_.count(other)) continue;
        absl::StatusOr<v1::Job> o = core_->PeekJob(other);
        if (!o.ok() || o->spec().name() != job.spec().name() ||
            o->spec().user() != job.spec().user()) {
          continue;
        }
        const bool o_placed =
            o->state() == v1::JOB_STATE_SCHEDULED || o->state() == v1::JOB_STATE_RUNNING;
        if (o_placed && o->placement_seq() < job.placement_seq()) {
          Violation("dependency-order",
                    absl::StrCat("singleton job ", job.id(), " (", job.spec().name(),
                                 ") was placed while job ", other, " of the same name and "
                                 "user held GPUs"));
        }
      }
    }
  }

  void CheckJob(const v1::Job& job, const std::set<std::string>& lost) {
    CheckNodeSelection(job);
    for (const v1::Task& t : job.tasks()) {
      if (coord::IsLive(t.state()) && lost.count(t.node()) &&
          !coord::IsFinal(job.state())) {
        Violation("lost-node", absl::StrCat("job ", job.id(), " rank ", t.rank(), " is ",
                                            v1::TaskState_Name(t.state()), " on lost node ",
                                            t.node()));
      }
    }
    // A job all of whose ranks run is RUNNING: also when their RUNNING
    // reports died with a coordinator and came back with the registrations.
    if (job.state() == v1::JOB_STATE_SCHEDULED && job.preflight().probe_run() == 0 &&
        job.tasks_size() > 0 &&
        std::all_of(job.tasks().begin(), job.tasks().end(), [](const v1::Task& t) {
          return t.state() == v1::TASK_STATE_RUNNING;
        })) {
      Violation("running-state", absl::StrCat("job ", job.id(),
                                              " is SCHEDULED with every rank RUNNING"));
    }
    if (job.kind() != v1::JOB_KIND_GANG) return;
    if (job.state() != v1::JOB_STATE_SCHEDULED && job.state() != v1::JOB_STATE_RUNNING) {
      return;
    }
    if (job.tasks_size() != job.world_size()) {
      Violation("gang", absl::StrCat("job ", job.id(), " is ", v1::JobState_Name(job.state()),
                                     " with ", job.tasks_size(), " of ", job.world_size(),
                                     " ranks placed"));
    }
    if (job.state() != v1::JOB_STATE_RUNNING) return;
    for (const v1::Task& t : job.tasks()) {
      const bool failed = t.state() == v1::TASK_STATE_START_FAILED ||
                          t.state() == v1::TASK_STATE_LOST ||
                          (t.state() == v1::TASK_STATE_EXITED &&
                           (t.exit_code() != 0 || t.signal() != 0));
      if (failed) {
        Violation("gang", absl::StrCat("job ", job.id(), " is RUNNING with rank ", t.rank(),
                                       " ", v1::TaskState_Name(t.state())));
      }
    }
  }

  // A job's live tasks run only where its node selection allows: nodes
  // whose features satisfy its constraint, not excluded, GPUs of its
  // types; a gang's GPUs share one type unless it allows mixing.
  void CheckNodeSelection(const v1::Job& job) {
    const v1::JobSpec& spec = job.spec();
    const sched::FeatureConstraint constraint =
        sched::ParseFeatureConstraint(spec.constraint()).value_or(sched::FeatureConstraint{});
    std::set<std::string> types;
    for (const v1::Task& t : job.tasks()) {
      if (!coord::IsLive(t.state())) continue;
      const Agent* agent = nullptr;
      for (const auto& a : agents_) {
        if (a->name == t.node()) agent = a.get();
      }
      if (agent == nullptr) continue;
      const std::string where = absl::StrCat("job ", job.id(), " rank ", t.rank(), " on ",
                                             t.node());
      if (!constraint.SatisfiedBy(agent->features)) {
        Violation("node-selection", absl::StrCat(where, " lacks --constraint ",
                                                 spec.constraint()));
      }
      if (absl::c_linear_search(spec.exclude_nodes(), t.node())) {
        Violation("node-selection", absl::StrCat(where, ", a node it excludes"));
      }
      for (int index : t.gpu_indices()) {
        for (const v1::Gpu& g : hosts_[agent->host].gpus) {
          if (g.index() != index) continue;
          const std::string type = coord::GpuTypeOf(g.name());
          types.insert(type);
          if (spec.gpu_types_size() > 0 && !absl::c_linear_search(spec.gpu_types(), type)) {
            Violation("node-selection", absl::StrCat(where, " has GPU ", index, " of type ",
                                                     type, ", not --gpu-type ",
                                                     absl::StrJoin(spec.gpu_types(), ",")));
          }
        }
      }
    }
    if (job.kind() == v1::JOB_KIND_GANG && !spec.allow_mixed_gpu_types() && types.size() > 1) {
      Violation("node-selection", absl::StrCat("gang ", job.id(), " mixes GPU types ",
                                               absl::StrJoin(types, ", ")));
    }
  }

  void CheckExactlyOnce() {
    std::vector<v1::Job> all = core_->ListJobs({}, 1 << 30);
    std::set<int64_t> seen;
    for (const v1::Job& j : all) {
      if (!seen.insert(j.id()).second) {
        Violation("exactly-once", absl::StrCat("job ", j.id(), " is listed twice"));
      }
    }
    for (int64_t id : acked_) {
      if (!seen.count(id)) {
        Violation("acked-job-lost", absl::StrCat("job ", id, " is not listed"));
      }
    }
  }

  // Heals every fault and lets the work finish; then every job must be final
  // or PENDING with a reason.
  void Drain() {
    ResumeAll();
    for (auto& ap : agents_) {
      if (ap->partitioned) {
        ap->partitioned = false;
        if (ap->conn != nullptr) core_->AgentDisconnected(ap->name, ap->conn);
        ap->conn = nullptr;
      }
    }
    for (int round = 0; round < 400; ++round) {
      bool busy = false;
      for (auto& ap : agents_) {
        if (ap->conn != nullptr && !ap->conn->inbox.empty()) {
          busy = true;
          Deliver(*ap, 1 << 20, static_cast<uint64_t>(round) * 7919);
        }
      }
      for (auto& ap : agents_) {
        for (const TaskKey& k : LiveProcs(*ap, /*probes=*/true)) {
          busy = true;
          v1::PreflightProbeResult r;
          r.set_rank(std::get<3>(k));
          r.set_comm_ready_ms(400);
          r.set_busbw_gbps(100);
          EndProc(*ap, k, 0, 0, r);
        }
        if (round % 4 == 3) {
          for (const TaskKey& k : LiveProcs(*ap, /*probes=*/false)) {
            busy = true;
            EndProc(*ap, k, 0, 0);
          }
        }
      }
      AdvanceBy(absl::Seconds(1));
      Check(round % 16 == 15);
      if (!busy && round > 80) {
        bool settled = true;
        for (int64_t id : acked_) {
          auto job = core_->GetJob(id);
          if (job.ok() && !coord::IsFinal(job->state()) &&
              job->state() != v1::JOB_STATE_PENDING) {
            settled = false;
          }
        }
        if (settled) break;
      }
    }
    for (int64_t id : acked_) {
      auto job = core_->GetJob(id);
      if (!job.ok() || coord::IsFinal(job->state())) continue;
      if (job->state() != v1::JOB_STATE_PENDING || job->reason().empty()) {
        Violation("liveness",
                  absl::StrCat("job ", id, " is still ", v1::JobState_Name(job->state()),
                               job->reason().empty() ? " with no reason"
                                                     : absl::StrCat(": ", job->reason()),
                               " after the cluster drained"));
      }
    }
    // No forged usage ever reached a job's history.
    auto usage = core_->GetJobUsage({}, 0);
    if (usage.ok()) {
      for (const v1::JobUsage& u : *usage) {
        for (const v1::JobUsageSample& s : u.samples()) {
          if (s.gpu_memory_used_bytes() >= kForgedGpuMemory) {
            Violation("forged-report",
                      absl::StrCat("job ", u.job_id(),
                                   "'s usage history holds another node's forged sample"));
            return;
          }
        }
      }
    }
  }

  const uint64_t seed_;
  const SimOptions options_;
  std::mt19937_64 rng_;
  SimResult result_;
  int64_t step_ = -1;
  std::string current_ = "start";
  FakeClock clock_;
  coord::CoordinatorConfig config_;
  // Store, then the coordinator over it (destroyed first).
  std::unique_ptr<coord::MemoryStateStore> memory_;
  std::unique_ptr<coord::SqliteStateStore> sqlite_;
  // Store "queue": over memory_, which keeps what it committed.
  std::unique_ptr<CommitQueueStore> queued_;
  std::string sqlite_path_;
  std::vector<std::string> paths_;
  coord::StateStore* store_ = nullptr;
  std::vector<std::unique_ptr<SimConn>> conns_;
  std::unique_ptr<coord::Coordinator> core_;
  std::vector<Host> hosts_;
  std::vector<std::unique_ptr<Agent>> agents_;
  // Cluster generation (kNewCluster): job ids restart in each.
  int generation_ = 0;
  std::vector<int64_t> acked_;
  // Job arrays acked in this cluster: (array id, tasks).
  std::vector<std::pair<int64_t, int>> arrays_;
  // Acked singleton jobs of this cluster (named "single-*").
  std::vector<int64_t> singletons_;
  std::vector<std::pair<std::string, int64_t>> request_ids_;
  int64_t submitted_ = 0;
  // Acked jobs seen final: their state and end time.
  std::map<int64_t, std::pair<v1::JobState, int64_t>> final_;
  // Acked job id -> the exported environment it was submitted with.
  absl::flat_hash_map<int64_t, std::map<std::string, std::string>> exported_;
  // (generation, job, attempt, probe run, rank) -> GPUs and bytes its StartTask reserved.
  std::map<std::tuple<int, int64_t, int, int, int>, std::vector<std::pair<std::string, int64_t>>>
      reservations_;
  int64_t illegal_seen_ = 0;
};

}  // namespace

const char* EventName(EventType type) {
  const int i = static_cast<int>(type);
  return i >= 0 && i < static_cast<int>(EventType::kCount) ? kEvents[i].name : "?";
}

std::vector<Event> GenerateEvents(uint64_t seed, int64_t count) {
  std::mt19937_64 rng(seed);
  std::vector<int> weights;
  for (const EventInfo& e : kEvents) weights.push_back(e.weight);
  std::discrete_distribution<int> pick(weights.begin(), weights.end());
  std::vector<Event> events;
  events.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    Event e;
    e.type = static_cast<EventType>(pick(rng));
    e.a = rng();
    e.b = rng();
    events.push_back(e);
  }
  return events;
}

SimResult RunEvents(uint64_t seed, const std::vector<Event>& events,
                    const SimOptions& options) {
  Simulation sim(seed, options);
  return sim.Run(events);
}

SimResult RunSeed(uint64_t seed, int64_t count, const SimOptions& options) {
  return RunEvents(seed, GenerateEvents(seed, count), options);
}

std::vector<Event> Shrink(uint64_t seed, std::vector<Event> events,
                          const std::string& invariant, const SimOptions& options,
                          int max_runs) {
  SimOptions o = options;
  o.stop_at_first_violation = true;
  auto fails = [&](const std::vector<Event>& list) {
    return RunEvents(seed, list, o).first_invariant == invariant;
  };
  int runs = 0;
  // Nothing after the failing event matters.
  SimResult first = RunEvents(seed, events, o);
  ++runs;
  if (first.first_invariant != invariant) return events;
  if (first.first_violation_event >= 0) {
    std::vector<Event> cut(events.begin(), events.begin() + first.first_violation_event + 1);
    o.drain = false;
    if (fails(cut)) {
      events = std::move(cut);
    } else {
      o.drain = options.drain;
    }
    ++runs;
  }
  for (size_t chunk = std::max<size_t>(events.size() / 2, 1); chunk >= 1 && runs < max_runs;
       chunk /= 2) {
    bool removed = true;
    while (removed && runs < max_runs) {
      removed = false;
      for (size_t start = 0; start < events.size() && runs < max_runs;) {
        std::vector<Event> candidate(events.begin(), events.begin() + start);
        candidate.insert(candidate.end(),
                         events.begin() + std::min(events.size(), start + chunk),
                         events.end());
        ++runs;
        if (!candidate.empty() && fails(candidate)) {
          events = std::move(candidate);
          removed = true;
        } else {
          start += chunk;
        }
      }
    }
    if (chunk == 1) break;
  }
  return events;
}

std::string FormatScenario(const Scenario& scenario) {
  std::string out = absl::StrCat("seed ", scenario.seed, "\n");
  if (scenario.store != "memory") absl::StrAppend(&out, "store ", scenario.store, "\n");
  for (const Event& e : scenario.events) {
    absl::StrAppend(&out, EventName(e.type), " ", e.a, " ", e.b, "\n");
  }
  return out;
}

absl::StatusOr<Scenario> ParseScenario(const std::string& text) {
  Scenario scenario;
  bool have_seed = false;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (!have_seed) {
      if (words.size() != 2 || words[0] != "seed" ||
          !absl::SimpleAtoi(words[1], &scenario.seed)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "scenario line ", line_no, ": want 'seed <n>' first, got '", line, "'"));
      }
      have_seed = true;
      continue;
    }
    if (words[0] == "store" && scenario.events.empty()) {
      if (words.size() != 2 ||
          std::find(std::begin(kStores), std::end(kStores), words[1]) == std::end(kStores)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "scenario line ", line_no, ": want 'store ", absl::StrJoin(kStores, "|"),
            "', got '", line, "'"));
      }
      scenario.store = std::string(words[1]);
      continue;
    }
    Event e;
    int type = -1;
    for (int i = 0; i < static_cast<int>(EventType::kCount); ++i) {
      if (words[0] == kEvents[i].name) type = i;
    }
    if (words.size() != 3 || type < 0 || !absl::SimpleAtoi(words[1], &e.a) ||
        !absl::SimpleAtoi(words[2], &e.b)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "scenario line ", line_no,
          ": want '<event> <a> <b>' with a known event, got '", line, "'"));
    }
    e.type = static_cast<EventType>(type);
    scenario.events.push_back(e);
  }
  if (!have_seed) return absl::InvalidArgumentError("scenario: no 'seed <n>' line");
  return scenario;
}

}  // namespace trainctl::sim
