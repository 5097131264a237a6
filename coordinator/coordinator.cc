#include "coordinator/coordinator.h"
#include "coordinator/coordinator_internal.h"

#include <cassert>

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "common/secrets.h"
#include "common/logging.h"
#include "common/metric_rules.h"
#include "common/status_macros.h"
#include "coordinator/job_spec.h"
#include "coordinator/launch_env.h"

namespace trainctl::coord {
namespace {

constexpr int kMaxRequestIdBytes = 128;
constexpr int kDefaultListLimit = 1000;
constexpr int kDefaultLogBytes = 1 << 20;
constexpr int kMaxLogBytes = 2 << 20;  // fits gRPC's default 4 MiB message limit
constexpr absl::Duration kDefaultFetchTimeout = absl::Seconds(120);
constexpr absl::Duration kMaxFetchTimeout = absl::Seconds(3600);
constexpr double kMsPerHour = 3600.0 * 1000.0;

// "EXITED" for TASK_STATE_EXITED.
std::string ShortTaskState(v1::TaskState state) {
  const std::string& name = v1::TaskState_Name(state);
  return std::string(absl::StripPrefix(name, "TASK_STATE_"));
}

v1::AttemptOutcome OutcomeOf(v1::JobState to) {
  switch (to) {
    case v1::JOB_STATE_SUCCEEDED:
      return v1::ATTEMPT_OUTCOME_SUCCEEDED;
    case v1::JOB_STATE_FAILED:
      return v1::ATTEMPT_OUTCOME_FAILED;
    case v1::JOB_STATE_CANCELLED:
      return v1::ATTEMPT_OUTCOME_CANCELLED;
    case v1::JOB_STATE_PENDING:
      return v1::ATTEMPT_OUTCOME_RESTARTED;
    default:
      return v1::ATTEMPT_OUTCOME_UNSPECIFIED;
  }
}

}  // namespace

bool IsFinal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

bool IsLive(v1::TaskState state) {
  return state == v1::TASK_STATE_STARTING || state == v1::TASK_STATE_RUNNING ||
         state == v1::TASK_STATE_STOPPING;
}

Coordinator::Coordinator(CoordinatorConfig config, StateStore* store,
                         const Clock* clock)
    : config_(std::move(config)),
      advertise_address_(config_.advertise_address),
      store_(store),
      clock_(clock),
      scheduler_(config_.scheduler),
      rendezvous_(config_.rendezvous_fanout_threads),
      usage_({config_.usage_sample_period, config_.usage_history_samples,
              config_.usage_finished_jobs, config_.diagnosis}),
      packer_(config_.packer) {
  absl::MutexLock lock(&mu_);
  AddJobEdgeListenersLocked();
}

Coordinator::~Coordinator() {
  if (absl::Status s = WaitForWrites(); !s.ok()) {
    TC_LOG_ERROR("shutdown: the last state writes were not stored: {}", s.ToString());
  }
}

absl::Status Coordinator::WaitForWrites() {
  // Callbacks run in ticket order, so held-back StartTasks up to the last
  // ticket go out before this returns.
  return store_->WaitDurable(LastTicket());
}

WriteTicket Coordinator::LastTicket() const {
  absl::MutexLock lock(&mu_);
  return last_ticket_;
}

void Coordinator::SetAdvertiseAddress(std::string address) {
  absl::MutexLock lock(&mu_);
  advertise_address_ = std::move(address);
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    CoordinatorConfig config, StateStore* store, const Clock* clock) {
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(config), store, clock));
  absl::MutexLock lock(&c->mu_);
  TC_RETURN_IF_ERROR(c->LoadLocked());
  return c;
}

absl::Status Coordinator::LoadLocked() {
  TC_ASSIGN_OR_RETURN(cluster_id_, store_->ClusterId());
  TC_ASSIGN_OR_RETURN(StoredState state, store_->LoadSummarized());
  const absl::Time now = clock_->Now();
  // Retired jobs outside sweeps come as summaries only: their records stay
  // in the store.
  for (const JobSummary& r : state.retired) {
    next_job_id_ = std::max(next_job_id_, r.id + 1);
    next_placement_seq_ = std::max(next_placement_seq_, r.placement_seq + 1);
    if (!r.request_id.empty()) request_ids_[r.request_id] = r.id;
    if (!r.sweep_id.empty()) sweep_jobs_[r.sweep_id].push_back(r.id);
    RetiredEntry& e = retired_[r.id];
    e.user = UserIndexLocked(r.user);
    e.state = static_cast<uint8_t>(r.state);
    ++jobs_by_state_[StateSlot(r.state)];
  }
  state.retired = {};
  for (v1::Job& job : state.jobs) {
    next_job_id_ = std::max(next_job_id_, job.id() + 1);
    next_placement_seq_ = std::max(next_placement_seq_, job.placement_seq() + 1);
    if (!job.request_id().empty()) request_ids_[job.request_id()] = job.id();
    if (!job.spec().sweep_id().empty()) {
      sweep_jobs_[job.spec().sweep_id()].push_back(job.id());
    }
    if (job.state() == v1::JOB_STATE_SCHEDULED ||
        job.state() == v1::JOB_STATE_RUNNING) {
      std::vector<std::string> hosts;
      for (const v1::Task& t : job.tasks()) hosts.push_back(t.node());
      rendezvous_.Open(job.id(), job.attempt(), job.attempt_token(),
                       std::move(hosts));
    }
    // Records stored before Task.whole_gpus existed: a gang's tasks held
    // their GPUs whole (their bytes were the gang's smallest GPU's size).
    if (job.kind() == v1::JOB_KIND_GANG) {
      for (v1::Task& t : *job.mutable_tasks()) t.set_whole_gpus(true);
    }
    const int64_t id = job.id();
    TrackLocked(job);
    if (job.preempted_for_job_id() != 0) {
      victims_of_[job.preempted_for_job_id()].push_back(id);
    }
    if (auto [it, added] = jobs_.emplace(id, std::move(job)); added) {
      ++jobs_by_state_[StateSlot(it->second.state())];
      if (it->second.state() == v1::JOB_STATE_PENDING) {
        ++pending_by_user_[it->second.spec().user()];
      }
      HoldSharedEnvLocked(it->second);
    }
  }
  TC_RETURN_IF_ERROR(LoadSharedEnvsLocked());
  for (auto& [sweep, ids] : sweep_jobs_) {
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  }
  for (const auto& [id, n] : state.metric_points) metric_points_[id] = n;
  for (const auto& [id, job] : jobs_) {
    for (const auto& [step, value] : job.rung_values()) {
      asha_[job.spec().sweep_id()][step][id] = value;
    }
  }
  for (v1::Node& node : state.nodes) {
    NodeEntry& e = nodes_[node.name()];
    e.node = std::move(node);
    // A grace period to re-register before the node's tasks count as lost.
    e.last_heartbeat = now;
  }
  // No waiter, log read or rendezvous fetch exists yet: nothing deferred
  // needs to run.
  Deferred unused;
  const int stale = ResolveStaleReservationsLocked(unused);
  // A gang caught mid-pre-flight is placed and probed again: the probes'
  // rendezvous (in memory) is gone with the old process, so their results
  // could not be trusted. Its probe tasks drain (agents are told to stop
  // them when they re-register); the requeue uses up no restart.
  for (int64_t id : ActiveIdsLocked()) {
    v1::Job& job = jobs_.at(id);
    if (!InPreflight(job)) continue;
    v1::JobPreflight* pf = job.mutable_preflight();
    pf->set_requeues(pf->requeues() + 1);
    TransitionLocked(job, v1::JOB_STATE_PENDING,
                     absl::StrCat("the coordinator restarted during pre-flight ",
                                  pf->runs_size(),
                                  "; the gang is placed and probed again"),
                     unused);
    PersistLocked(job);
  }
  // Sweep trials came as full records (for the ASHA rungs above); retired
  // ones go now.
  for (const auto& [id, job] : jobs_) {
    if (!active_.contains(id)) evict_candidates_.push_back(id);
  }
  EvictRetiredLocked();
  TC_LOG_INFO("loaded {} jobs ({} retired, kept as summaries) and {} nodes from the store{}",
              jobs_.size() + retired_.size(), retired_.size(), nodes_.size(),
              stale == 0 ? ""
                         : absl::StrCat("; ", stale,
                                        " tasks whose end was not stored are "
                                        "taken as ended"));
  return absl::OkStatus();
}

absl::Status Coordinator::PendingLimitLocked(const std::vector<v1::JobSpec>& specs) const {
  const int64_t asked = static_cast<int64_t>(specs.size());
  const int64_t pending = jobs_by_state_[v1::JOB_STATE_PENDING];
  if (config_.max_pending_jobs > 0 && pending + asked > config_.max_pending_jobs) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the cluster has ", pending, " pending jobs and at most ", config_.max_pending_jobs,
        " may wait (trainctl-coordinator --max-pending-jobs); this submit asks for ", asked,
        " more: submit again once jobs have started or ended"));
  }
  if (config_.max_pending_jobs_per_user <= 0) return absl::OkStatus();
  absl::flat_hash_map<std::string, int64_t> per_user;
  for (const v1::JobSpec& spec : specs) ++per_user[spec.user()];
  for (const auto& [user, n] : per_user) {
    auto it = pending_by_user_.find(user);
    const int64_t mine = it == pending_by_user_.end() ? 0 : it->second;
    if (mine + n > config_.max_pending_jobs_per_user) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "user \"", user, "\" has ", mine, " pending jobs and at most ",
          config_.max_pending_jobs_per_user,
          " may wait (trainctl-coordinator --max-pending-jobs-per-user, as Slurm's "
          "MaxSubmitJobs); this submit asks for ", n,
          " more: cancel held jobs or submit again once some have started"));
    }
  }
  return absl::OkStatus();
}

int Coordinator::ResolveStaleReservationsLocked(Deferred& deferred) {
  struct Claim {
    int64_t seq;
    int64_t job_id;
    int rank;
    bool draining;
    int64_t bytes;
    bool whole;  // holds its GPUs whole: the GPU's own size (TaskBytesOnGpu)
  };
  int resolved = 0;
  // Each round ends one task, so this ends; stale records are rare and few.
  for (;;) {
    std::map<std::pair<std::string, int>, std::vector<Claim>> claims;
    auto add = [&](const v1::Task& t, Claim c) {
      for (int gpu : OwnedGpus(t)) claims[{t.node(), gpu}].push_back(c);
    };
    for (int64_t id : active_) {
      const v1::Job& job = jobs_.at(id);
      for (const v1::Task& t : job.tasks()) {
        if (IsLive(t.state())) {
          add(t, {job.placement_seq(), id, t.rank(), false, t.reserved_bytes_per_gpu(),
                  t.whole_gpus()});
        }
      }
    }
    for (const DrainingTask& d : draining_) {
      add(d.task, {d.placement_seq, d.job_id, d.task.rank(), true,
                   d.task.reserved_bytes_per_gpu(), d.task.whole_gpus()});
    }
    const Claim* stale = nullptr;
    std::string where;
    for (const auto& [gpu, list] : claims) {
      auto node = nodes_.find(gpu.first);
      if (node == nodes_.end()) continue;
      int64_t capacity = -1;
      for (const v1::Gpu& g : node->second.node.gpus()) {
        if (g.index() == gpu.second) capacity = g.memory_total_bytes();
      }
      if (capacity < 0) continue;
      __int128 sum = 0;
      for (const Claim& c : list) sum += c.whole ? capacity : c.bytes;
      if (sum <= capacity) continue;
      for (const Claim& c : list) {
        if (stale == nullptr || std::tie(c.seq, c.job_id) < std::tie(stale->seq, stale->job_id)) {
          stale = &c;
          where = absl::StrCat(gpu.first, " GPU ", gpu.second);
        }
      }
      break;
    }
    if (stale == nullptr) return resolved;
    ++resolved;
    const Claim c = *stale;
    TC_LOG_WARN("job {} rank {}: its stored record and a later placement both "
                "claim {}; taking it as ended (its end was not stored)",
                c.job_id, c.rank, where);
    if (c.draining) {
      for (auto it = draining_.begin(); it != draining_.end(); ++it) {
        if (it->job_id == c.job_id && it->task.rank() == c.rank &&
            it->placement_seq == c.seq) {
          draining_.erase(it);
          break;
        }
      }
      continue;
    }
    v1::Job& job = jobs_.at(c.job_id);
    for (v1::Task& t : *job.mutable_tasks()) {
      if (t.rank() != c.rank || !IsLive(t.state())) continue;
      TaskToLocked(job, t, v1::TASK_STATE_LOST);
      t.set_message(absl::StrCat(
          "its end was not stored before a coordinator restart; a later "
          "placement took its GPU (", where, ")"));
      t.set_end_time_ms(ToUnixMs(clock_->Now()));
    }
    OnTaskEndedLocked(job, deferred);
    PersistLocked(job);
  }
}

v1::Job Coordinator::Redacted(const v1::Job& job) {
  v1::Job copy = job;
  copy.clear_attempt_token();
  if (copy.has_preflight()) {
    // (mutable_preflight() on a job without one would add an empty one.)
    for (v1::PreflightRun& run : *copy.mutable_preflight()->mutable_runs()) {
      run.clear_token();
    }
  }
  return copy;
}

v1::Job Coordinator::ForUserLocked(const v1::Job& job) const {
  v1::Job copy = Redacted(job);
  if (auto it = metric_points_.find(job.id()); it != metric_points_.end()) {
    copy.set_metric_points(it->second);
  }
  if (copy.attempts_size() > 0) {
    v1::AttemptRecord* last = copy.mutable_attempts(copy.attempts_size() - 1);
    if (last->end_time_ms() == 0 && last->start_time_ms() > 0) {
      const int64_t ms =
          std::max<int64_t>(0, ToUnixMs(clock_->Now()) - last->start_time_ms());
      last->set_gpu_hours(last->gpus() * static_cast<double>(ms) / kMsPerHour);
      copy.set_gpu_hours(copy.gpu_hours() + last->gpu_hours());
    }
  }
  return copy;
}

double Coordinator::AttemptGpusLocked(const v1::Job& job) const {
  double gpus = 0;
  for (const v1::Task& t : job.tasks()) {
    auto node = nodes_.find(t.node());
    for (int index : OwnedGpus(t)) {
      double share = TaskShareOfGpu(t, 0);
      if (node != nodes_.end()) {
        for (const v1::Gpu& g : node->second.node.gpus()) {
          if (g.index() == index) share = TaskShareOfGpu(t, g.memory_total_bytes());
        }
      }
      gpus += share;
    }
  }
  return gpus;
}

void Coordinator::RecordAttemptLocked(v1::Job& job, v1::JobState from,
                                      v1::JobState to, int64_t now_ms) {
  if (to == v1::JOB_STATE_SCHEDULED) {
    v1::AttemptRecord* r = job.add_attempts();
    r->set_attempt(job.attempt());
    r->set_start_time_ms(now_ms);
    r->set_gpus(AttemptGpusLocked(job));
    return;
  }
  const bool ended = (from == v1::JOB_STATE_SCHEDULED ||
                      from == v1::JOB_STATE_RUNNING) &&
                     to != v1::JOB_STATE_RUNNING;
  if (!ended || job.attempts_size() == 0) return;
  v1::AttemptRecord* r = job.mutable_attempts(job.attempts_size() - 1);
  if (r->attempt() != job.attempt() || r->end_time_ms() != 0) return;
  r->set_end_time_ms(now_ms);
  r->set_outcome(OutcomeOf(to));
  r->set_reason(job.reason());
  for (const v1::Task& t : job.tasks()) {
    v1::RankRecord* rank = r->add_ranks();
    rank->set_rank(t.rank());
    rank->set_node(t.node());
    rank->set_state(ShortTaskState(t.state()));
    rank->set_exit_code(t.exit_code());
    rank->set_signal(t.signal());
    rank->set_log_path(t.log_path());
  }
  const int64_t ms = std::max<int64_t>(0, now_ms - r->start_time_ms());
  r->set_gpu_hours(r->gpus() * static_cast<double>(ms) / kMsPerHour);
  job.set_gpu_hours(job.gpu_hours() + r->gpu_hours());
}

void Coordinator::RunDeferred(Deferred& deferred) {
  for (auto& fn : deferred) std::move(fn)();
  deferred.clear();
}

void Coordinator::TrackLocked(const v1::Job& job) {
  if (!IsRetired(job)) {
    active_.insert(job.id());
  } else if (active_.erase(job.id()) > 0) {
    evict_candidates_.push_back(job.id());
  }
}

void Coordinator::NoteStoredLocked(int64_t id, const absl::Status& stored) {
  if (stored.ok()) {
    unsaved_.erase(id);
  } else {
    unsaved_.insert(id);
  }
}

uint32_t Coordinator::UserIndexLocked(const std::string& user) {
  auto [it, added] =
      user_index_.try_emplace(user, static_cast<uint32_t>(user_names_.size()));
  if (added) user_names_.push_back(user);
  return it->second;
}

void Coordinator::EvictRetiredLocked() {
  std::vector<int64_t> keep;
  for (int64_t id : evict_candidates_) {
    auto it = jobs_.find(id);
    if (it == jobs_.end() || active_.contains(id) || !IsRetired(it->second)) continue;
    // Kept while the store's record is stale (its last write failed), or
    // while a task of an earlier attempt still drains (ListNodes and the
    // preemption wait look the job up).
    const bool draining =
        std::any_of(draining_.begin(), draining_.end(),
                    [id](const DrainingTask& d) { return d.job_id == id; });
    if (unsaved_.contains(id) || draining) {
      keep.push_back(id);
      continue;
    }
    RetiredEntry& e = retired_[id];
    e.user = UserIndexLocked(it->second.spec().user());
    e.state = static_cast<uint8_t>(it->second.state());
    ReleaseSharedEnvLocked(it->second);
    jobs_.erase(it);
  }
  evict_candidates_ = std::move(keep);
}

bool Coordinator::KnownLocked(int64_t id) const {
  return jobs_.contains(id) || retired_.contains(id);
}

const google::protobuf::Map<std::string, std::string>* Coordinator::ExportedEnvLocked(
    const v1::Job& job) const {
  if (job.exported_env_job_id() == 0) return &job.spec().exported_env();
  auto it = shared_envs_.find(job.exported_env_job_id());
  return it == shared_envs_.end() ? nullptr : &it->second.env;
}

void Coordinator::HoldSharedEnvLocked(const v1::Job& job) {
  if (job.exported_env_job_id() != 0) ++shared_envs_[job.exported_env_job_id()].refs;
}

void Coordinator::ReleaseSharedEnvLocked(const v1::Job& job) {
  if (job.exported_env_job_id() == 0) return;
  auto it = shared_envs_.find(job.exported_env_job_id());
  if (it != shared_envs_.end() && --it->second.refs <= 0) shared_envs_.erase(it);
}

absl::StatusOr<google::protobuf::Map<std::string, std::string>>
Coordinator::HolderEnvLocked(int64_t holder) const {
  v1::Job scratch;
  absl::StatusOr<const v1::Job*> record = LookupLocked(holder, &scratch);
  if (!record.ok()) {
    return absl::DataLossError(absl::StrCat("the exported environment stored with job ",
                                            holder, " cannot be read: ",
                                            record.status().message()));
  }
  return (*record)->spec().exported_env();
}

absl::Status Coordinator::LoadSharedEnvsLocked() {
  for (auto& [holder, shared] : shared_envs_) {
    if (!shared.env.empty()) continue;
    TC_ASSIGN_OR_RETURN(shared.env, HolderEnvLocked(holder));
  }
  return absl::OkStatus();
}

absl::StatusOr<const v1::Job*> Coordinator::LookupLocked(int64_t id,
                                                         v1::Job* scratch) const {
  auto it = jobs_.find(id);
  if (it != jobs_.end()) return &it->second;
  if (!retired_.contains(id)) {
    return absl::NotFoundError(absl::StrCat("job ", id, " does not exist"));
  }
  TC_ASSIGN_OR_RETURN(std::vector<v1::Job> read, store_->ReadJobs({id}));
  if (read.empty()) {
    return absl::DataLossError(absl::StrCat(
        "job ", id, " is finished but its record is missing from the store"));
  }
  *scratch = std::move(read.front());
  return scratch;
}

std::vector<int64_t> Coordinator::ActiveIdsLocked() const {
  return {active_.begin(), active_.end()};
}

absl::Status Coordinator::EnqueueJobLocked(const v1::Job& job, bool lazily) {
  absl::StatusOr<WriteTicket> ticket =
      lazily ? store_->EnqueuePutJobLazily(job) : store_->EnqueuePutJob(job);
  if (!ticket.ok()) return ticket.status();
  last_ticket_ = std::max(last_ticket_, *ticket);
  return absl::OkStatus();
}

void Coordinator::PersistLocked(const v1::Job& job, bool lazily) {
  TrackLocked(job);
  // Queued, not waited for: whoever replies on the strength of this write
  // (SubmitJob, CancelJob, a StartTask) waits for its ticket outside mu_.
  // `s` says whether the store took it (a synchronous store: stored); a
  // queued write that later fails to commit is logged by its waiter.
  absl::Status s = EnqueueJobLocked(job, lazily);
  NoteStoredLocked(job.id(), s);
  if (!s.ok()) {
    TC_LOG_ERROR("could not store job {}: {}", job.id(), s.ToString());
  }
}

void Coordinator::ReportIllegalTransitionLocked(const absl::Status& error) {
  ++illegal_transitions_;
  TC_LOG_ERROR("BUG: {} (the state is left as it was)", std::string(error.message()));
  // Fatal where it costs nothing to users: debug builds and tests built so.
  assert(false && "illegal state transition");
}

bool Coordinator::TaskToLocked(const v1::Job& job, v1::Task& task, v1::TaskState to) {
  absl::Status s = TransitionTask(task, to);
  if (s.ok()) return true;
  ReportIllegalTransitionLocked(
      absl::InternalError(absl::StrCat("job ", job.id(), " ", s.message())));
  return false;
}

bool Coordinator::NodeToLocked(NodeEntry& node, v1::NodeState to) {
  absl::Status s = TransitionNode(node.node, to);
  if (s.ok()) return true;
  ReportIllegalTransitionLocked(s);
  return false;
}

bool Coordinator::TransitionLocked(v1::Job& job, v1::JobState to,
                                   absl::string_view reason, Deferred& deferred) {
  if (!IsValidJobEdge(job.state(), to)) {
    ReportIllegalTransitionLocked(absl::InternalError(absl::StrCat(
        "job ", job.id(), ": illegal job transition ", v1::JobState_Name(job.state()),
        " -> ", v1::JobState_Name(to), reason.empty() ? "" : " (", reason,
        reason.empty() ? "" : ")")));
    return false;
  }
  const v1::JobState from = job.state();
  const int64_t now_ms = ToUnixMs(clock_->Now());
  if (LeavesAttempt(from, to) && job.start_time_ms() > 0) {
    // The attempt's GPU-time counts towards its LAS level.
    job.set_attained_gpu_ms(job.attained_gpu_ms() +
                            std::max<int64_t>(0, now_ms - job.start_time_ms()) *
                                JobGpuCount(job));
  }
  --jobs_by_state_[StateSlot(from)];
  ++jobs_by_state_[StateSlot(to)];
  if (from == v1::JOB_STATE_PENDING) {
    auto it = pending_by_user_.find(job.spec().user());
    if (it != pending_by_user_.end() && --it->second <= 0) pending_by_user_.erase(it);
  }
  if (to == v1::JOB_STATE_PENDING) ++pending_by_user_[job.spec().user()];
  job.set_state(to);
  job.set_reason(std::string(reason));
  if (to == v1::JOB_STATE_RUNNING) job.set_start_time_ms(now_ms);
  if (IsFinal(to)) job.set_end_time_ms(now_ms);
  const JobEdge edge{job, from, to, reason, now_ms, deferred};
  for (const JobEdgeListener& listener : job_edge_listeners_) listener(edge);
  TC_LOG_INFO("job {} {} -> {}{}{}", job.id(), v1::JobState_Name(from),
              v1::JobState_Name(to), reason.empty() ? "" : ": ", std::string(reason));
  return true;
}

void Coordinator::AddJobEdgeListenersLocked() {
  // In this order: metrics read the previous attempt's record before a
  // placement opens the next one; the attempt record reads the attempt's
  // tasks before a new attempt clears them, and a new attempt drains live
  // probes under the probe's key before the pre-flight listener resets it.
  job_edge_listeners_.push_back([this](const JobEdge& e) {
    // Metrics: counters for Stats(), and the queue wait for on_job_placed
    // (observed after the lock).
    if (IsFinal(e.to)) ++counters_.jobs_finished[StateSlot(e.to)];
    if (e.from != v1::JOB_STATE_PENDING || e.to != v1::JOB_STATE_SCHEDULED) return;
    ++counters_.placements;
    if (!config_.on_job_placed) return;
    // Queued since the end of the attempt before (its record is the last
    // one until this placement opens the next), or since the submit.
    int64_t since_ms = e.job.submit_time_ms();
    if (e.job.attempts_size() > 0) {
      since_ms = std::max(since_ms, e.job.attempts(e.job.attempts_size() - 1).end_time_ms());
    }
    const absl::Duration waited =
        absl::Milliseconds(std::max<int64_t>(0, e.now_ms - since_ms));
    e.deferred.push_back([this, waited]() { config_.on_job_placed(waited); });
  });
  job_edge_listeners_.push_back([this](const JobEdge& e) {
    RecordAttemptLocked(e.job, e.from, e.to, e.now_ms);
  });
  job_edge_listeners_.push_back([this](const JobEdge& e) {
    // The attempt's rendezvous group closes with it.
    if (!LeavesAttempt(e.from, e.to)) return;
    rendezvous_.Close(e.job.id(), e.job.attempt(), e.reason);
    rendezvous_opened_.erase({e.job.id(), e.job.attempt()});
  });
  job_edge_listeners_.push_back([this](const JobEdge& e) {
    if (e.to != v1::JOB_STATE_PENDING) return;
    // A new attempt: tasks of the old one that still run keep their GPUs
    // until their exit is reported.
    v1::Job& job = e.job;
    for (const v1::Task& t : job.tasks()) {
      if (IsLive(t.state())) {
        draining_.push_back({job.id(), TaskAttemptOf(job), t, job.placement_seq()});
      }
    }
    job.clear_tasks();
    job.clear_attempt_token();
    job.set_attempt(job.attempt() + 1);
    job.set_start_time_ms(0);
  });
  job_edge_listeners_.push_back([this](const JobEdge& e) {
    if (e.job.preflight().probe_attempt() == 0 || e.from != v1::JOB_STATE_SCHEDULED ||
        e.to == v1::JOB_STATE_SCHEDULED) {
      return;
    }
    // Leaving a pre-flight (requeued, failed, cancelled, preempted): its
    // rendezvous group goes, and a run without a verdict is ABORTED.
    v1::JobPreflight* pf = e.job.mutable_preflight();
    rendezvous_.Close(e.job.id(), pf->probe_attempt(), e.reason);
    if (pf->runs_size() > 0) {
      v1::PreflightRun* run = pf->mutable_runs(pf->runs_size() - 1);
      if (run->verdict() == v1::PREFLIGHT_VERDICT_RUNNING) {
        run->set_verdict(v1::PREFLIGHT_VERDICT_ABORTED);
        ++counters_.preflight_runs[v1::PREFLIGHT_VERDICT_ABORTED];
        run->set_reason(std::string(e.reason));
        run->set_end_time_ms(e.now_ms);
      }
    }
    // A requeue moved the live probe tasks to draining_ under their key;
    // a final job keeps them (and the key, so their exits still match).
    if (e.to == v1::JOB_STATE_PENDING) pf->set_probe_attempt(0);
    preflight_deadline_.erase(e.job.id());
  });
  job_edge_listeners_.push_back([this](const JobEdge& e) {
    if (IsFinal(e.to)) NotifyFinalLocked(e.job, e.deferred);
  });
}

void Coordinator::NotifyFinalLocked(const v1::Job& job, Deferred& deferred) {
  auto it = waiters_.find(job.id());
  if (it == waiters_.end()) return;
  for (Waiter& w : it->second) {
    // Run after the caller's PersistLocked of this state: answered once the
    // end is stored, so a crash never takes back an end a waiter saw.
    deferred.push_back([this, done = std::move(w.done), j = Redacted(job)]() mutable {
      AnswerWhenStored(LastTicket(), std::move(j), std::move(done));
    });
  }
  waiters_.erase(it);
}

// ---------------------------------------------------------------- user API

absl::StatusOr<int64_t> Coordinator::SubmitJob(const v1::JobSpec& spec,
                                               const std::string& request_id) {
  absl::Notification notified;
  absl::StatusOr<int64_t> result;
  SubmitJobAsync(spec, request_id, [&](absl::StatusOr<int64_t> id) {
    result = std::move(id);
    notified.Notify();
  });
  notified.WaitForNotification();
  return result;
}

void Coordinator::SubmitJobAsync(const v1::JobSpec& spec,
                                 const std::string& request_id, SubmitDone done) {
  SubmitBatchAsync({spec}, request_id, /*batch=*/false,
                   [done = std::move(done)](
                       absl::StatusOr<std::vector<int64_t>> ids) mutable {
                     if (!ids.ok()) {
                       std::move(done)(ids.status());
                       return;
                     }
                     std::move(done)(ids->front());
                   });
}

void Coordinator::SubmitJobsAsync(std::vector<v1::JobSpec> specs,
                                  const std::string& request_id,
                                  SubmitJobsDone done) {
  SubmitBatchAsync(std::move(specs), request_id, /*batch=*/true, std::move(done));
}

void Coordinator::SubmitJobArrayAsync(v1::JobSpec spec, const std::vector<int>& task_ids,
                                      int max_running, const std::string& request_id,
                                      SubmitJobsDone done) {
  absl::Status invalid;
  if (spec.has_array()) {
    invalid = absl::InvalidArgumentError(
        "spec.array: must be unset; the array is given by task_ids and max_running");
  } else if (task_ids.empty()) {
    invalid = absl::InvalidArgumentError("task_ids: empty; give at least one task id");
  } else if (task_ids.size() > static_cast<size_t>(kMaxArrayTasks)) {
    invalid = absl::InvalidArgumentError(absl::StrCat(
        "task_ids: at most ", kMaxArrayTasks, " tasks per array, got ", task_ids.size()));
  } else if (max_running < 0) {
    invalid = absl::InvalidArgumentError(
        absl::StrCat("max_running: ", max_running, " is negative; 0 means no limit"));
  } else if (max_running > 0 && spec.auto_pack()) {
    invalid = absl::InvalidArgumentError(
        "max_running: a limit (%P) cannot apply to auto-packed jobs");
  } else {
    absl::flat_hash_set<int> seen;
    for (size_t i = 0; i < task_ids.size() && invalid.ok(); ++i) {
      if (task_ids[i] < 0) {
        invalid = absl::InvalidArgumentError(
            absl::StrCat("task_ids[", i, "]: ", task_ids[i], " is negative"));
      } else if (!seen.insert(task_ids[i]).second) {
        invalid = absl::InvalidArgumentError(
            absl::StrCat("task_ids[", i, "]: ", task_ids[i], " appears twice"));
      }
    }
  }
  if (invalid.ok()) invalid = ValidateJobSpec(spec, config_.scheduler.policy);
  if (!invalid.ok()) {
    std::move(done)(std::move(invalid));
    return;
  }
  // One copy of the spec per task, without the exported environment: the
  // first job keeps it and the others share it.
  google::protobuf::Map<std::string, std::string> exported;
  exported.swap(*spec.mutable_exported_env());
  std::vector<v1::JobSpec> specs(task_ids.size(), spec);
  specs.front().mutable_exported_env()->swap(exported);
  const int count = static_cast<int>(task_ids.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    v1::JobArray* array = specs[i].mutable_array();
    array->set_task_id(task_ids[i]);
    array->set_task_count(count);
    array->set_max_running(max_running);
  }
  SubmitBatchAsync(std::move(specs), request_id, /*batch=*/true, std::move(done),
                   /*exported_from_first=*/true);
}

namespace {

// `s` with its field path moved under specs[index] ("spec.gpus: ..." ->
// "specs[3].gpus: ..."; "user: ..." -> "specs[3].user: ...") when `batch`.
absl::Status AtIndex(const absl::Status& s, bool batch, size_t index) {
  if (!batch || s.ok()) return s;
  absl::string_view message = s.message();
  absl::ConsumePrefix(&message, "spec.");
  return absl::Status(s.code(), absl::StrCat("specs[", index, "].", message));
}

// Cross-spec rules of one SubmitJobs call's job array: either no spec has
// JobSpec.array or every one does, with task_count = the number of specs,
// one max_running and distinct task ids.
absl::Status ValidateArray(const std::vector<v1::JobSpec>& specs) {
  if (specs.empty() || !specs.front().has_array()) {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].has_array()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "specs[", i, "].array: set, but specs[0].array is not: either "
            "every spec of a job array carries it or none does"));
      }
    }
    return absl::OkStatus();
  }
  const v1::JobArray& first = specs.front().array();
  absl::flat_hash_set<int32_t> seen;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!specs[i].has_array()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "specs[", i, "].array: missing; every spec of a job array carries it"));
    }
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const v1::JobArray& a = specs[i].array();
    if (a.task_count() != static_cast<int>(specs.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "specs[", i, "].array.task_count: ", a.task_count(),
          ", but the request holds ", specs.size(), " specs"));
    }
    if (a.max_running() != first.max_running()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "specs[", i, "].array.max_running: ", a.max_running(),
          ", but specs[0] has ", first.max_running(), "; one limit per array"));
    }
    if (!seen.insert(a.task_id()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "specs[", i, "].array.task_id: ", a.task_id(),
          " appears twice in the array"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void Coordinator::SubmitBatchAsync(std::vector<v1::JobSpec> specs,
                                   const std::string& request_id, bool batch,
                                   SubmitJobsDone done, bool exported_from_first) {
  if (specs.empty()) {
    std::move(done)(absl::InvalidArgumentError("specs: empty; give at least one job"));
    return;
  }
  if (specs.size() > static_cast<size_t>(kMaxArrayTasks)) {
    std::move(done)(absl::InvalidArgumentError(absl::StrCat(
        "specs: at most ", kMaxArrayTasks, " jobs per call, got ", specs.size())));
    return;
  }
  // Specs exporting the same environment as the first (an array's tasks
  // and a sweep's trials each carry a copy of the submitter's) keep it once:
  // the first job's record holds it, the others refer to it
  // (Job.exported_env_job_id), and it is validated once.
  std::vector<bool> shares_env(specs.size(), false);
  if (exported_from_first) {
    if (!specs[0].exported_env().empty()) {
      std::fill(shares_env.begin() + 1, shares_env.end(), true);
    }
  } else if (!specs[0].exported_env().empty()) {
    const google::protobuf::Map<std::string, std::string>& first = specs[0].exported_env();
    for (size_t i = 1; i < specs.size(); ++i) {
      const google::protobuf::Map<std::string, std::string>& env = specs[i].exported_env();
      if (env.size() != first.size()) continue;
      const bool same = std::all_of(env.begin(), env.end(), [&first](const auto& kv) {
        auto it = first.find(kv.first);
        return it != first.end() && it->second == kv.second;
      });
      if (!same) continue;
      shares_env[i] = true;
      specs[i].clear_exported_env();
    }
  }
  // All or nothing: every spec is checked before anything is stored.
  for (size_t i = 0; i < specs.size(); ++i) {
    if (absl::Status s = ValidateJobSpec(specs[i], config_.scheduler.policy);
        !s.ok()) {
      std::move(done)(AtIndex(s, batch, i));
      return;
    }
    if (config_.run_jobs_as_user && !config_.allow_root_jobs &&
        specs[i].user() == "root") {
      std::move(done)(AtIndex(
          absl::PermissionDeniedError(
              "user: jobs of root are refused (tasks run as their user, and "
              "this coordinator does not allow uid 0: trainctl-coordinator "
              "--allow-root-jobs)"),
          batch, i));
      return;
    }
  }
  // A single SubmitJob with spec.array is an array of its own: only
  // SubmitJobs has several specs to check against each other.
  if (absl::Status s = batch ? ValidateArray(specs) : absl::OkStatus(); !s.ok()) {
    std::move(done)(s);
    return;
  }
  if (request_id.size() > kMaxRequestIdBytes) {
    std::move(done)(absl::InvalidArgumentError(
        absl::StrCat("request_id: at most ", kMaxRequestIdBytes, " bytes")));
    return;
  }
  absl::Status refused;
  Deferred deferred;
  std::vector<int64_t> ids;
  WriteTicket durable_at = 0;
  bool retried = false;
  bool await_pass = false;
  {
    EventLock lock(this);
    if (!request_id.empty()) {
      auto it = request_ids_.find(request_id);
      if (it != request_ids_.end()) {
        // A retry: the first call may not have seen its write durable yet.
        // Only the first job carries the request id; the call's jobs have
        // consecutive ids.
        for (size_t i = 0; i < specs.size(); ++i) ids.push_back(it->second + i);
        durable_at = last_ticket_;
        retried = true;
      }
    }
    if (!retried) refused = PendingLimitLocked(specs);
    if (!retried && refused.ok() && !nodes_.empty()) {
      // A job no registered node could ever hold is refused, not accepted
      // to fail at once (with no node yet, the cluster is still starting).
      const sched::ClusterSnapshot snapshot = SnapshotLocked();
      // A job array's tasks are mostly one request: it is checked once.
      const v1::JobSpec* checked = nullptr;
      for (size_t i = 0; i < specs.size() && refused.ok(); ++i) {
        if (specs[i].hold()) continue;
        if (checked != nullptr && SameSchedulingRequest(*checked, specs[i])) continue;
        checked = &specs[i];
        v1::Job candidate;
        // The spec without its environment (ToJobRequest reads none of it):
        // the maps are swapped out and back, not copied.
        google::protobuf::Map<std::string, std::string> env, exported;
        env.swap(*specs[i].mutable_env());
        exported.swap(*specs[i].mutable_exported_env());
        *candidate.mutable_spec() = specs[i];
        specs[i].mutable_env()->swap(env);
        specs[i].mutable_exported_env()->swap(exported);
        candidate.set_kind(KindOf(specs[i]));
        if (std::optional<std::string> never =
                scheduler_.WhyNeverFits(snapshot, ToJobRequest(candidate))) {
          refused = absl::FailedPreconditionError(absl::StrCat(
              batch ? absl::StrCat("specs[", i, "]: ") : "",
              "cannot run on this cluster: ", *never,
              "; submit with --hold (spec.hold) to keep it waiting for nodes "
              "that will join"));
        }
      }
    }
    if (!retried && refused.ok()) {
      // The jobs' PENDING records and the placements they get below commit
      // together: one transaction (one fsync) per call, however many jobs.
      CommitHold hold(store_);
      const int64_t first_id = next_job_id_;
      const int64_t now_ms = ToUnixMs(clock_->Now());
      std::vector<v1::Job> jobs(specs.size());
      for (size_t i = 0; i < specs.size(); ++i) {
        const int64_t id = first_id + static_cast<int64_t>(i);
        v1::Job& job = jobs[i];
        job.set_id(id);
        *job.mutable_spec() = std::move(specs[i]);
        if (job.spec().has_array()) {
          job.mutable_spec()->mutable_array()->set_array_job_id(first_id);
        }
        if (shares_env[i]) job.set_exported_env_job_id(first_id);
        job.set_kind(KindOf(job.spec()));
        job.set_state(v1::JOB_STATE_PENDING);
        job.set_reason("waiting to be scheduled");
        job.set_submit_time_ms(now_ms);
        if (i == 0) job.set_request_id(request_id);
        if (!config_.checkpoint_root.empty()) {
          job.set_checkpoint_dir(absl::StrCat(
              absl::StripSuffix(config_.checkpoint_root, "/"), "/", id));
        }
        // Queued first (a store that refuses at once refuses the call), then
        // placed; a job placed in this pass has its SCHEDULED record replace
        // the PENDING one still queued, so both go in one commit.
        absl::Status stored = EnqueueJobLocked(job);
        if (!stored.ok()) {
          // Nothing of the call is taken into memory, and the ids are given
          // out again, so a later submit overwrites any record a synchronous
          // store kept of the jobs before this one.
          refused = absl::UnavailableError(absl::StrCat(
              batch ? "the jobs were" : "the job was", " not accepted: ",
              stored.message()));
          break;
        }
      }
      if (refused.ok()) {
        next_job_id_ = first_id + static_cast<int64_t>(jobs.size());
        if (!request_id.empty()) request_ids_[request_id] = first_id;
        if (std::find(shares_env.begin(), shares_env.end(), true) != shares_env.end()) {
          shared_envs_[first_id].env = jobs.front().spec().exported_env();
        }
        for (v1::Job& job : jobs) {
          const int64_t id = job.id();
          ids.push_back(id);
          if (!job.spec().sweep_id().empty()) {
            sweep_jobs_[job.spec().sweep_id()].push_back(id);
          }
          TrackLocked(job);
          HoldSharedEnvLocked(job);
          ++pending_by_user_[job.spec().user()];
          jobs_.emplace(id, std::move(job));
          ++jobs_by_state_[v1::JOB_STATE_PENDING];
          ++counters_.jobs_submitted;
        }
        if (ids.size() == 1) {
          TC_LOG_INFO("job {} submitted", ids.front());
        } else {
          TC_LOG_INFO("jobs {}-{} submitted", ids.front(), ids.back());
        }
        await_pass = RequestScheduleLocked(deferred);
        durable_at = last_ticket_;
      }
    }
    if (!await_pass) ServeScheduleLocked(deferred);
  }
  RunDeferred(deferred);
  if (await_pass) AwaitSchedulePass();
  if (!refused.ok()) {
    std::move(done)(std::move(refused));
    return;
  }
  // The ack waits for the jobs' writes (a retry: for whatever was queued
  // when it came, which covers the first call's writes), outside mu_.
  store_->WhenDurable(durable_at, [ids = std::move(ids), done = std::move(done)](
                                      absl::Status stored) mutable {
    if (!stored.ok()) {
      std::move(done)(absl::UnavailableError(absl::StrCat(
          ids.size() == 1 ? absl::StrCat("job ", ids.front())
                          : absl::StrCat("jobs ", ids.front(), "-", ids.back()),
          " may not have been stored: ", stored.message(),
          "; retry with the same request id")));
      return;
    }
    std::move(done)(std::move(ids));
  });
}

absl::Status Coordinator::WaitStored(WriteTicket ticket) const {
  absl::Status s = store_->WaitDurable(ticket);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("not stored: ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> Coordinator::JobNow(int64_t job_id, WriteTicket* durable_at) const {
  absl::MutexLock lock(&mu_);
  v1::Job scratch;
  TC_ASSIGN_OR_RETURN(const v1::Job* job, LookupLocked(job_id, &scratch));
  v1::Job out = ForUserLocked(*job);
  if (IsFinal(job->state())) *durable_at = last_ticket_;
  if (job->exported_env_job_id() != 0) {
    // The environment it shares: in memory while a job refers to it, else
    // in the holder's record.
    if (const auto* env = ExportedEnvLocked(*job); env != nullptr) {
      *out.mutable_spec()->mutable_exported_env() = *env;
    } else {
      TC_ASSIGN_OR_RETURN(*out.mutable_spec()->mutable_exported_env(),
                          HolderEnvLocked(job->exported_env_job_id()));
    }
  }
  return out;
}

absl::StatusOr<v1::Job> Coordinator::GetJob(int64_t job_id) const {
  WriteTicket durable_at = 0;
  TC_ASSIGN_OR_RETURN(v1::Job out, JobNow(job_id, &durable_at));
  // A final state is shown once stored: a crash never takes it back.
  if (durable_at != 0) TC_RETURN_IF_ERROR(WaitStored(durable_at));
  return out;
}

absl::StatusOr<v1::Job> Coordinator::PeekJob(int64_t job_id) const {
  WriteTicket unused = 0;
  return JobNow(job_id, &unused);
}

std::vector<v1::Job> Coordinator::ListJobs(const std::vector<v1::JobState>& states,
                                           int limit,
                                           const std::string& sweep_id,
                                           const std::string& user,
                                           int64_t array_job_id) const {
  if (limit <= 0) limit = kDefaultListLimit;
  absl::flat_hash_set<int> wanted(states.begin(), states.end());
  std::vector<v1::Job> out;
  // Retired jobs picked: their index in `out` (a placeholder until read from
  // the store outside the lock) and metric point count.
  std::vector<int64_t> retired_ids;
  std::vector<size_t> retired_slots;
  std::vector<int64_t> retired_points;
  WriteTicket durable_at = 0;
  {
    absl::MutexLock lock(&mu_);
    const auto user_it = user.empty() ? user_index_.end() : user_index_.find(user);
    auto keep_job = [&](const v1::Job& job) {
      if (!wanted.empty() && !wanted.contains(job.state())) return false;
      return user.empty() || job.spec().user() == user;
    };
    auto keep_retired = [&](const RetiredEntry& e) {
      if (!wanted.empty() && !wanted.contains(e.state)) return false;
      return user.empty() || (user_it != user_index_.end() && e.user == user_it->second);
    };
    auto add_retired = [&](int64_t id) {
      retired_ids.push_back(id);
      retired_slots.push_back(out.size());
      auto points = metric_points_.find(id);
      retired_points.push_back(points == metric_points_.end() ? 0 : points->second);
      out.emplace_back().set_id(id);
    };
    // Visits job `id` (newest first); false once `limit` jobs are kept.
    auto visit = [&](int64_t id) {
      if (static_cast<int>(out.size()) >= limit) return false;
      if (auto it = jobs_.find(id); it != jobs_.end()) {
        if (keep_job(it->second)) out.push_back(ForUserLocked(it->second));
      } else if (auto r = retired_.find(id); r != retired_.end()) {
        if (keep_retired(r->second)) add_retired(id);
      }
      return true;
    };
    if (array_job_id > 0) {
      // A job array's tasks have the ids array_job_id .. + task_count - 1.
      v1::Job scratch;
      absl::StatusOr<const v1::Job*> first = LookupLocked(array_job_id, &scratch);
      if (!first.ok() || (*first)->spec().array().array_job_id() != array_job_id) {
        return out;
      }
      const int64_t count = (*first)->spec().array().task_count();
      for (int64_t id = array_job_id + count - 1; id >= array_job_id; --id) {
        if (!visit(id)) break;
      }
    } else if (!sweep_id.empty()) {
      auto sweep = sweep_jobs_.find(sweep_id);
      if (sweep == sweep_jobs_.end()) return out;
      for (auto id = sweep->second.rbegin(); id != sweep->second.rend(); ++id) {
        if (!visit(*id)) break;
      }
    } else {
      // Both maps newest first, merged by id (they hold disjoint ids).
      auto j = jobs_.rbegin();
      auto r = retired_.rbegin();
      while (static_cast<int>(out.size()) < limit &&
             (j != jobs_.rend() || r != retired_.rend())) {
        if (r == retired_.rend() || (j != jobs_.rend() && j->first > r->first)) {
          if (keep_job(j->second)) out.push_back(ForUserLocked(j->second));
          ++j;
        } else {
          if (keep_retired(r->second)) add_retired(r->first);
          ++r;
        }
      }
    }
    // (Retired jobs are placeholders here, read from the store below.)
    if (std::any_of(out.begin(), out.end(),
                    [](const v1::Job& job) { return IsFinal(job.state()); })) {
      durable_at = last_ticket_;
    }
  }
  // Final states are shown once stored (as GetJob); reading retired records
  // from the store below waits for its queue as well.
  if (durable_at != 0) {
    if (absl::Status s = WaitStored(durable_at); !s.ok()) {
      TC_LOG_ERROR("list: final states shown before they were stored: {}", s.ToString());
    }
  }
  if (retired_ids.empty()) return out;
  absl::StatusOr<std::vector<v1::Job>> read = store_->ReadJobs(retired_ids);
  if (!read.ok()) {
    TC_LOG_ERROR("list: could not read {} finished jobs from the store: {}",
                 retired_ids.size(), read.status().ToString());
    read = std::vector<v1::Job>();
  }
  absl::flat_hash_map<int64_t, v1::Job*> by_id;
  for (v1::Job& job : *read) by_id[job.id()] = &job;
  std::vector<bool> missing(out.size(), false);
  for (size_t i = 0; i < retired_ids.size(); ++i) {
    auto it = by_id.find(retired_ids[i]);
    if (it == by_id.end()) {
      missing[retired_slots[i]] = true;
      continue;
    }
    v1::Job& slot = out[retired_slots[i]];
    slot = std::move(*it->second);
    // As ForUserLocked: a retired job has no running attempt to count.
    slot.clear_attempt_token();
    if (retired_points[i] > 0) slot.set_metric_points(retired_points[i]);
  }
  if (std::find(missing.begin(), missing.end(), true) != missing.end()) {
    std::vector<v1::Job> kept;
    for (size_t i = 0; i < out.size(); ++i) {
      if (!missing[i]) kept.push_back(std::move(out[i]));
    }
    out = std::move(kept);
  }
  return out;
}

absl::StatusOr<v1::Job> Coordinator::CancelJob(int64_t job_id) {
  Deferred deferred;
  v1::Job result;
  WriteTicket durable_at = 0;
  bool await_pass = false;
  absl::Status refused;
  {
    EventLock lock(this);
    v1::Job scratch;
    TC_ASSIGN_OR_RETURN(const v1::Job* found, LookupLocked(job_id, &scratch));
    if (IsFinal(found->state())) {
      // Nothing changes; the passes other events left to this one still run.
      ServeScheduleLocked(deferred);
      refused = absl::FailedPreconditionError(absl::StrCat(
          "job ", job_id, " has already ended: ",
          absl::AsciiStrToLower(absl::StripPrefix(v1::JobState_Name(found->state()),
                                                  "JOB_STATE_")),
          found->reason().empty() ? "" : absl::StrCat(" (", found->reason(), ")"),
          "; nothing to cancel"));
    } else {
      v1::Job& job = jobs_.at(job_id);  // not final: never retired
      for (v1::Task& t : *job.mutable_tasks()) {
        if (IsLive(t.state())) StopTaskLocked(job, t);
      }
      TransitionLocked(job, v1::JOB_STATE_CANCELLED, "cancelled by user", deferred);
      PersistLocked(job);
      await_pass = RequestScheduleLocked(deferred);
      result = Redacted(job);
      durable_at = last_ticket_;
    }
  }
  RunDeferred(deferred);
  if (await_pass) AwaitSchedulePass();
  if (!refused.ok()) return refused;
  absl::Status stored = store_->WaitDurable(durable_at);
  if (!stored.ok()) {
    TC_LOG_ERROR("could not store the cancel of job {}: {}", job_id,
                 stored.ToString());
  }
  return result;
}

void Coordinator::WaitJobAsync(int64_t job_id, absl::Duration timeout,
                               JobDone done) {
  absl::StatusOr<v1::Job> now_result;
  WriteTicket durable_at = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      // Unknown, or retired (final).
      v1::Job scratch;
      absl::StatusOr<const v1::Job*> job = LookupLocked(job_id, &scratch);
      if (job.ok()) {
        now_result = Redacted(**job);
      } else {
        now_result = job.status();
      }
    } else if (IsFinal(it->second.state()) || timeout <= absl::ZeroDuration()) {
      now_result = Redacted(it->second);
    } else {
      waiters_[job_id].push_back({clock_->Now() + timeout, std::move(done)});
      return;
    }
    if (now_result.ok() && IsFinal(now_result->state())) durable_at = last_ticket_;
  }
  AnswerWhenStored(durable_at, std::move(now_result), std::move(done));
}

void Coordinator::AnswerWhenStored(WriteTicket ticket, absl::StatusOr<v1::Job> job,
                                   JobDone done) const {
  store_->WhenDurable(ticket, [job = std::move(job), done = std::move(done)](
                                  absl::Status stored) mutable {
    if (!stored.ok()) {
      done(absl::UnavailableError(absl::StrCat(
          "job ", job.ok() ? job->id() : 0, " ended, but its end may not have been stored: ",
          stored.message(), "; wait again")));
      return;
    }
    done(std::move(job));
  });
}

absl::StatusOr<v1::WhyJobResponse> Coordinator::WhyJob(int64_t job_id) const {
  absl::MutexLock lock(&mu_);
  v1::Job scratch;
  TC_ASSIGN_OR_RETURN(const v1::Job* found, LookupLocked(job_id, &scratch));
  const v1::Job& job = *found;
  v1::WhyJobResponse out;
  out.set_job_id(job_id);
  out.set_state(job.state());
  out.set_queue(job.spec().queue().empty() ? "default" : job.spec().queue());
  out.set_preemptions(job.preemptions());
  for (const v1::ExcludedNode& e : job.preflight().excluded()) {
    out.add_excluded_nodes(absl::StrCat(e.node(), ": pre-flight ", e.run(), ": ",
                                        e.reason()));
  }
  if (job.state() != v1::JOB_STATE_PENDING) {
    out.set_summary(absl::StrCat(
        "job ", job_id, " is not waiting: it is ",
        absl::AsciiStrToLower(v1::JobState_Name(job.state()).substr(10)),
        job.reason().empty() ? "" : absl::StrCat(" (", job.reason(), ")")));
    return out;
  }
  std::optional<sched::Explanation> e =
      scheduler_.Explain(SnapshotLocked(), PendingQueueLocked(), job_id);
  if (!e.has_value()) {
    out.set_summary(job.reason());
    return out;
  }
  out.set_summary(e->decision.outcome == sched::Outcome::kPlaced
                      ? "it fits now and starts at the next scheduling pass"
                      : e->decision.reason);
  out.set_position(e->position);
  out.set_queue(e->queue);
  out.set_quota(e->quota);
  for (std::string& line : e->nodes) out.add_nodes(std::move(line));
  out.set_reservation_job_id(e->reservation_job);
  out.set_reservation(e->reservation);
  if (e->reservation_eta_s >= 0) {
    out.set_reservation_eta_ms(
        ToUnixMs(clock_->Now() + absl::Seconds(e->reservation_eta_s)));
  }
  out.set_preempted_for_job_id(e->preempted_for);
  return out;
}

void Coordinator::GetLogsAsync(int64_t job_id, int rank, int64_t offset,
                               int max_bytes, LogsDone done) {
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    v1::Job scratch;
    absl::StatusOr<const v1::Job*> found = LookupLocked(job_id, &scratch);
    if (offset < 0) {
      error = absl::InvalidArgumentError("offset: must not be negative");
    } else if (max_bytes < 0 || max_bytes > kMaxLogBytes) {
      error = absl::InvalidArgumentError(
          absl::StrCat("max_bytes: must be in [0, ", kMaxLogBytes, "]"));
    } else if (!found.ok()) {
      error = found.status();
    } else {
      const v1::Job& job = **found;
      const v1::Task* task = nullptr;
      for (const v1::Task& t : job.tasks()) {
        if (t.rank() == rank) task = &t;
      }
      auto node = task ? nodes_.find(task->node()) : nodes_.end();
      if (job.spec().discard_output()) {
        error = absl::FailedPreconditionError(absl::StrCat(
            "job ", job_id, " discards its output (submitted with --no-logs): "
            "no log was kept"));
      } else if (task == nullptr) {
        error = absl::NotFoundError(
            job.tasks().empty()
                ? absl::StrCat("job ", job_id, " has no logs yet: it is ",
                               v1::JobState_Name(job.state()))
                : absl::StrCat("job ", job_id, " has no rank ", rank,
                               " (world size ", job.world_size(), ")"));
      } else if (node == nodes_.end() || node->second.conn == nullptr ||
                 node->second.node.state() != v1::NODE_STATE_READY) {
        error = absl::FailedPreconditionError(absl::StrCat(
            "node ", task->node(), " is not connected; rank ", rank,
            "'s log is at ", task->log_path().empty() ? "?" : task->log_path(),
            " on that host"));
      } else {
        const int64_t request_id = next_log_request_++;
        v1::CoordinatorMessage msg;
        v1::ReadLog* read = msg.mutable_read_log();
        read->set_request_id(request_id);
        *read->mutable_task() = RefOf(job, *task);
        read->set_offset(offset);
        read->set_max_bytes(max_bytes == 0 ? kDefaultLogBytes : max_bytes);
        log_reads_[request_id] = LogRead{clock_->Now() + config_.log_read_timeout,
                                         job_id, rank, std::move(done), task->node()};
        node->second.conn->Send(msg);
        return;
      }
    }
  }
  done(error);
}

// ---------------------------------------------------------------- metrics

absl::StatusOr<v1::ReportMetricsResponse> Coordinator::ReportMetrics(
    const v1::ReportMetricsRequest& req) {
  if (req.points_size() == 0 || req.points_size() > kMaxPointsPerReport) {
    return absl::InvalidArgumentError(absl::StrCat(
        "points: need 1 to ", kMaxPointsPerReport, " points, got ", req.points_size()));
  }
  for (int i = 0; i < req.points_size(); ++i) {
    const v1::MetricPoint& p = req.points(i);
    TC_RETURN_IF_ERROR(
        CheckMetricPoint(absl::StrCat("points[", i, "]"), p.key(), p.value(), p.step()));
  }
  if (req.token().empty()) {
    return absl::UnauthenticatedError(
        "token: missing; a metric report needs the TRAINCTL_TOKEN of the job "
        "attempt (set in the task's environment by trainctl)");
  }
  const int64_t job_id = req.job_id();
  const int64_t n = req.points_size();
  std::vector<v1::MetricPoint> points(req.points().begin(), req.points().end());
  int64_t stored_after;
  {
    absl::MutexLock lock(&mu_);
    v1::Job scratch;
    TC_ASSIGN_OR_RETURN(const v1::Job* found, LookupLocked(job_id, &scratch));
    const v1::Job& job = *found;
    if (req.attempt() != job.attempt()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "attempt ", req.attempt(), " is not job ", job_id,
          "'s current attempt (", job.attempt(), "); only its ranks may report"));
    }
    if (job.attempt_token().empty() || !SameSecret(req.token(), job.attempt_token())) {
      return absl::PermissionDeniedError(absl::StrCat(
          "token: not the token of job ", job_id, " attempt ", job.attempt()));
    }
    if (req.rank() < 0 || req.rank() >= std::max(1, job.world_size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank: ", req.rank(), " is outside job ", job_id, "'s ",
          job.world_size(), " ranks"));
    }
    int64_t& count = metric_points_[job_id];
    if (count + n > config_.max_metric_points_per_job) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "job ", job_id, " has stored ", count, " metric points; ", n,
          " more would pass the cap of ", config_.max_metric_points_per_job,
          " per job (report less often, e.g. every 10 steps)"));
    }
    // Reserved now, so concurrent reports cannot pass the cap together.
    count += n;
    stored_after = count;
    const int64_t now_ms = ToUnixMs(clock_->Now());
    for (v1::MetricPoint& p : points) {
      p.set_time_ms(now_ms);
      p.set_attempt(job.attempt());
      p.set_rank(req.rank());
    }
  }
  absl::Status stored = store_->AppendMetrics(job_id, points);
  if (!stored.ok()) {
    absl::MutexLock lock(&mu_);
    metric_points_[job_id] -= n;
    return absl::UnavailableError(
        absl::StrCat("the metrics were not stored: ", stored.message()));
  }
  // Reported throughput feeds the auto-packer's back-off and probe (newest
  // point of the report wins).
  for (auto p = points.rbegin(); p != points.rend(); ++p) {
    if (p->key() == kThroughputMetricKey) {
      // The value was checked above, so this fails only for a job that no
      // longer exists; the points are stored either way.
      if (absl::Status s = ReportThroughput(job_id, p->value()); !s.ok()) {
        TC_LOG_WARN("job {}: reported {} not passed to the auto-packer: {}", job_id,
                    kThroughputMetricKey, s.ToString());
      }
      break;
    }
  }
  // Early stopping (ASHA) of a sweep trial by its metric.
  Deferred deferred;
  bool await_pass = false;
  {
    EventLock lock(this);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end() && it->second.spec().has_early_stop() &&
        !IsFinal(it->second.state()) && it->second.attempt() == req.attempt()) {
      v1::Job& job = it->second;
      const v1::EarlyStop& cfg = job.spec().early_stop();
      AshaRungs& rungs = asha_[job.spec().sweep_id()];
      for (const v1::MetricPoint& p : points) {
        if (p.key() != cfg.metric()) continue;
        const AshaVerdict v = AshaOnReport(cfg, rungs, job_id, p.step(), p.value());
        if (!v.recorded) continue;
        (*job.mutable_rung_values())[v.rung_step] = v.value;
        if (!v.stop) {
          PersistLocked(job);
          continue;
        }
        for (v1::Task& t : *job.mutable_tasks()) {
          if (IsLive(t.state())) StopTaskLocked(job, t);
        }
        const std::string why = absl::StrFormat(
            "stopped early (ASHA): %s %g at step %d is not within the best 1/%d "
            "of the %d other trial(s) at that rung (cutoff %g)",
            cfg.metric(), v.value, v.rung_step,
            cfg.reduction_factor() == 0 ? 3 : cfg.reduction_factor(), v.others,
            v.cutoff);
        TransitionLocked(job, v1::JOB_STATE_CANCELLED, why, deferred);
        PersistLocked(job);
        await_pass = RequestScheduleLocked(deferred);
        break;
      }
    }
    if (!await_pass) ServeScheduleLocked(deferred);
  }
  RunDeferred(deferred);
  if (await_pass) AwaitSchedulePass();
  v1::ReportMetricsResponse resp;
  resp.set_stored_points(stored_after);
  return resp;
}

absl::StatusOr<v1::GetMetricsResponse> Coordinator::GetMetrics(
    const v1::GetMetricsRequest& req) const {
  if (!req.key().empty()) TC_RETURN_IF_ERROR(CheckMetricKey("key", req.key()));
  v1::GetMetricsResponse resp;
  {
    absl::MutexLock lock(&mu_);
    if (!KnownLocked(req.job_id())) {
      return absl::NotFoundError(
          absl::StrCat("job ", req.job_id(), " does not exist"));
    }
    auto it = metric_points_.find(req.job_id());
    resp.set_points_left(std::max<int64_t>(
        0, config_.max_metric_points_per_job -
               (it == metric_points_.end() ? 0 : it->second)));
  }
  TC_ASSIGN_OR_RETURN(std::vector<v1::MetricPoint> points,
                      store_->ReadMetrics(req.job_id(), req.key()));
  // The store orders points by key, then as appended.
  v1::MetricSeries* series = nullptr;
  for (v1::MetricPoint& p : points) {
    if (series == nullptr || series->key() != p.key()) {
      series = resp.add_series();
      series->set_key(p.key());
      series->set_min(p.value());
      series->set_max(p.value());
    }
    series->set_count(series->count() + 1);
    series->set_last(p.value());
    series->set_last_step(p.step());
    series->set_min(std::min(series->min(), p.value()));
    series->set_max(std::max(series->max(), p.value()));
    if (!req.summary_only()) *series->add_points() = std::move(p);
  }
  return resp;
}

// ---------------------------------------------------------------- agents

absl::Status Coordinator::HandleAgentMessage(const std::string& node,
                                             AgentConnection* conn,
                                             const v1::AgentMessage& msg) {
  Deferred deferred;
  bool await_pass = false;
  {
    EventLock lock(this);
    // A task exit and the placements it makes room for commit together.
    CommitHold hold(store_);
    auto it = nodes_.find(node);
    if (it == nodes_.end() || it->second.conn != conn) {
      return absl::FailedPreconditionError(
          absl::StrCat("node ", node, " is not registered on this stream"));
    }
    NodeEntry& e = it->second;
    switch (msg.msg_case()) {
      case v1::AgentMessage::kHeartbeat:
        e.last_heartbeat = clock_->Now();
        if (e.fences) {
          v1::CoordinatorMessage grant;
          grant.mutable_lease_grant()->set_lease_ms(
              absl::ToInt64Milliseconds(config_.node_timeout));
          conn->Send(grant);
        }
        for (const v1::GpuSample& s : msg.heartbeat().gpus()) {
          for (v1::Gpu& g : *e.node.mutable_gpus()) {
            if (g.index() != s.index()) continue;
            g.set_memory_used_bytes(s.memory_used_bytes());
            g.set_utilization_pct(s.utilization_pct());
            g.set_temperature_c(s.temperature_c());
            g.set_power_w(s.power_w());
            auto [avg, fresh] = e.util_avg.try_emplace(s.index(), s.utilization_pct());
            if (!fresh) avg->second = 0.5 * avg->second + 0.5 * s.utilization_pct();
            g.set_activity_source(s.activity_source());
            g.set_sm_active_pct(s.sm_active_pct());
            g.set_sm_occupancy_pct(s.sm_occupancy_pct());
            g.set_dram_bw_pct(s.dram_bw_pct());
            if (s.activity_source() == v1::GPU_ACTIVITY_SOURCE_GPM) {
              const NodeEntry::GpmAvg now{s.sm_active_pct(), s.sm_occupancy_pct(),
                                          s.dram_bw_pct()};
              auto [gpm, first] = e.gpm_avg.try_emplace(s.index(), now);
              if (!first) {
                gpm->second.sm_active = 0.5 * gpm->second.sm_active + 0.5 * now.sm_active;
                gpm->second.sm_occupancy =
                    0.5 * gpm->second.sm_occupancy + 0.5 * now.sm_occupancy;
                gpm->second.dram_bw = 0.5 * gpm->second.dram_bw + 0.5 * now.dram_bw;
              }
            } else {
              e.gpm_avg.erase(s.index());
            }
          }
        }
        RecordTaskUsageLocked(node, msg.heartbeat());
        break;
      case v1::AgentMessage::kTaskOom: {
        const v1::TaskOutOfMemory& oom = msg.task_oom();
        auto jt = jobs_.find(oom.job_id());
        if (jt == jobs_.end() || jt->second.attempt() != oom.attempt()) break;
        for (v1::Task& t : *jt->second.mutable_tasks()) {
          if (t.rank() == oom.rank() && t.node() == node) t.set_out_of_memory(true);
        }
        TC_LOG_WARN("job {} rank {} on {} ran out of GPU memory: {}", oom.job_id(),
                    oom.rank(), node, oom.line());
        break;
      }
      case v1::AgentMessage::kTaskStatus:
        HandleTaskStatusLocked(node, msg.task_status(), deferred);
        // A task reported running frees nothing and queues nothing: the pass
        // would decide as the last one did (a pass over a long queue costs
        // milliseconds; bench/README.md, scheduler throughput).
        if (msg.task_status().state() != v1::TASK_STATE_RUNNING) {
          await_pass = RequestScheduleLocked(deferred);
        }
        break;
      case v1::AgentMessage::kTaskStatusBatch: {
        // Tasks that ended in the same heartbeat period: each handled as its
        // own task_status would be, then one scheduling pass for them all.
        bool frees = false;
        for (const v1::TaskStatus& st : msg.task_status_batch().statuses()) {
          HandleTaskStatusLocked(node, st, deferred);
          frees = frees || st.state() != v1::TASK_STATE_RUNNING;
        }
        if (frees) await_pass = RequestScheduleLocked(deferred);
        break;
      }
      case v1::AgentMessage::kLogChunk: {
        const v1::LogChunk& chunk = msg.log_chunk();
        auto rt = log_reads_.find(chunk.request_id());
        if (rt == log_reads_.end()) break;  // Timed out already.
        if (rt->second.node != node) {
          // Request ids are sequential: another node could guess one and
          // answer with a forged log. Leave the read to its node.
          return absl::PermissionDeniedError(absl::StrCat(
              "node ", node, " answered log read ", chunk.request_id(),
              " that was sent to node ", rt->second.node));
        }
        LogRead read = std::move(rt->second);
        log_reads_.erase(rt);
        absl::StatusOr<v1::GetLogsResponse> result;
        if (!chunk.error().empty()) {
          result = absl::NotFoundError(chunk.error());
        } else {
          v1::GetLogsResponse resp;
          resp.set_data(chunk.data());
          resp.set_next_offset(chunk.next_offset());
          // At the end when the task is over and nothing more came back.
          auto jt = jobs_.find(read.job_id);
          bool ended = true;
          if (jt != jobs_.end()) {
            for (const v1::Task& t : jt->second.tasks()) {
              if (t.rank() == read.rank && IsLive(t.state())) ended = false;
            }
          }
          resp.set_eof(ended && chunk.data().empty());
          result = std::move(resp);
        }
        deferred.push_back([done = std::move(read.done), r = std::move(result)]() mutable {
          done(std::move(r));
        });
        break;
      }
      default:
        return absl::InvalidArgumentError("agent message: unexpected kind");
    }
    if (!await_pass) ServeScheduleLocked(deferred);
  }
  RunDeferred(deferred);
  if (await_pass) AwaitSchedulePass();
  return absl::OkStatus();
}

// ---------------------------------------------------------------- rendezvous

absl::Status Coordinator::PublishUniqueId(const v1::PublishUniqueIdRequest& req) {
  TC_RETURN_IF_ERROR(rendezvous_.Publish(req.job_id(), req.attempt(), req.rank(),
                                         req.token(), req.unique_id(),
                                         req.id_index(), req.id_count()));
  absl::Duration took;
  {
    absl::MutexLock lock(&mu_);
    auto it = rendezvous_opened_.find({req.job_id(), req.attempt()});
    // Absent: published before (a repeat), or a group restored at start-up.
    if (it == rendezvous_opened_.end()) return absl::OkStatus();
    took = clock_->Now() - it->second;
    rendezvous_opened_.erase(it);
  }
  if (config_.on_rendezvous_published) config_.on_rendezvous_published(took);
  return absl::OkStatus();
}

void Coordinator::FetchUniqueIdAsync(const v1::FetchUniqueIdRequest& req,
                                     RendezvousTable::FetchDone done) {
  if (req.timeout_ms() < 0) {
    done(absl::InvalidArgumentError("timeout_ms: must not be negative"));
    return;
  }
  absl::Duration timeout = req.timeout_ms() == 0
                               ? kDefaultFetchTimeout
                               : std::min(absl::Milliseconds(req.timeout_ms()),
                                          kMaxFetchTimeout);
  rendezvous_.FetchAsync(req.job_id(), req.attempt(), req.rank(), req.token(),
                         clock_->Now(), timeout, std::move(done));
}

void Coordinator::FetchUniqueIdsAsync(const v1::FetchUniqueIdRequest& req,
                                      RendezvousTable::FetchIdsDone done) {
  if (req.timeout_ms() < 0) {
    done(absl::InvalidArgumentError("timeout_ms: must not be negative"));
    return;
  }
  absl::Duration timeout = req.timeout_ms() == 0
                               ? kDefaultFetchTimeout
                               : std::min(absl::Milliseconds(req.timeout_ms()),
                                          kMaxFetchTimeout);
  RendezvousTable::FetchOptions options;
  options.relayed_ranks.assign(req.relayed_ranks().begin(), req.relayed_ranks().end());
  options.id_count = req.id_count();
  options.arrivals_only = req.arrivals_only();
  if (!options.arrivals_only) {
    if (options.relayed_ranks.empty()) {
      rendezvous_fetches_direct_.fetch_add(1, std::memory_order_relaxed);
    } else {
      rendezvous_fetches_relayed_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  rendezvous_ranks_relayed_.fetch_add(static_cast<int64_t>(options.relayed_ranks.size()),
                                      std::memory_order_relaxed);
  rendezvous_.FetchIdsAsync(req.job_id(), req.attempt(), req.rank(), req.token(),
                            clock_->Now(), timeout, options, std::move(done));
}

// ---------------------------------------------------------------- metrics

CoordinatorStats Coordinator::Stats() const {
  CoordinatorStats stats;
  absl::MutexLock lock(&mu_);
  stats.jobs_by_state = jobs_by_state_;
  stats.illegal_transitions = illegal_transitions_;
  stats.ignored_task_usage = ignored_task_usage_;
  stats.counters = counters_;
  stats.counters.rendezvous_fetches_direct =
      rendezvous_fetches_direct_.load(std::memory_order_relaxed);
  stats.counters.rendezvous_fetches_relayed =
      rendezvous_fetches_relayed_.load(std::memory_order_relaxed);
  stats.counters.rendezvous_ranks_relayed =
      rendezvous_ranks_relayed_.load(std::memory_order_relaxed);
  stats.pending_jobs = jobs_by_state_[v1::JOB_STATE_PENDING];
  stats.jobs_in_memory = static_cast<int64_t>(jobs_.size());
  stats.pending_by_queue["default"] = 0;
  for (const auto& q : config_.scheduler.policy.queues) stats.pending_by_queue[q.name] = 0;
  for (int64_t id : active_) {
    const v1::Job& job = jobs_.at(id);
    if (job.state() != v1::JOB_STATE_PENDING) continue;
    ++stats.pending_by_queue[job.spec().queue().empty() ? "default" : job.spec().queue()];
  }
  // GPUs with a reservation: live tasks of active jobs (current attempts
  // and pre-flight probes) and of earlier attempts still draining.
  absl::flat_hash_set<std::pair<std::string, int>> allocated;
  for (int64_t id : active_) {
    for (const v1::Task& t : jobs_.at(id).tasks()) {
      if (!IsLive(t.state())) continue;
      for (int gpu : OwnedGpus(t)) allocated.insert({t.node(), gpu});
    }
  }
  for (const DrainingTask& d : draining_) {
    for (int gpu : OwnedGpus(d.task)) allocated.insert({d.task.node(), gpu});
  }
  for (const auto& [name, e] : nodes_) {
    const bool ready = e.node.state() == v1::NODE_STATE_READY;
    if (ready) ++stats.nodes_ready;
    if (e.node.state() == v1::NODE_STATE_LOST) ++stats.nodes_lost;
    for (const v1::Gpu& g : e.node.gpus()) {
      GpuStats& gs = stats.gpus.emplace_back();
      gs.node = name;
      gs.node_ready = ready;
      gs.index = g.index();
      gs.uuid = g.uuid();
      gs.model = g.name();
      gs.memory_used_bytes = g.memory_used_bytes();
      gs.memory_total_bytes = g.memory_total_bytes();
      gs.utilization_pct = g.utilization_pct();
      gs.power_w = g.power_w();
      gs.temperature_c = g.temperature_c();
      gs.allocated = allocated.contains({name, g.index()});
    }
  }
  for (int64_t id : active_) {
    const v1::Job& job = jobs_.at(id);
    // Distinct GPUs of the live tasks: packed experiments share a GPU, and a
    // task with all of its node's GPUs owns several.
    absl::flat_hash_set<std::pair<std::string, int>> owned;
    for (const v1::Task& t : job.tasks()) {
      if (!IsLive(t.state())) continue;
      for (int gpu : OwnedGpus(t)) owned.insert({t.node(), gpu});
    }
    if (owned.empty()) continue;
    JobGpuStats& js = stats.jobs.emplace_back();
    js.job_id = id;
    js.job_name = job.spec().name();
    int64_t sum = 0;
    for (const auto& [node, index] : owned) {
      auto it = nodes_.find(node);
      if (it == nodes_.end()) continue;
      for (const v1::Gpu& g : it->second.node.gpus()) {
        if (g.index() != index) continue;
        sum += g.utilization_pct();
        ++js.gpus;
      }
    }
    if (js.gpus > 0) js.utilization_pct = static_cast<double>(sum) / js.gpus;
  }
  return stats;
}

// ---------------------------------------------------------------- time

void Coordinator::ExpireWaitersLocked(absl::Time now, Deferred& deferred) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    auto& ws = it->second;
    const v1::Job& job = jobs_.at(it->first);
    auto keep = std::partition(ws.begin(), ws.end(),
                               [now](const Waiter& w) { return w.deadline > now; });
    for (auto w = keep; w != ws.end(); ++w) {
      deferred.push_back([done = std::move(w->done), j = Redacted(job)]() mutable {
        done(std::move(j));
      });
    }
    ws.erase(keep, ws.end());
    if (ws.empty()) {
      waiters_.erase(it++);
    } else {
      ++it;
    }
  }
}

void Coordinator::Tick() {
  const absl::Time now = clock_->Now();
  rendezvous_.Expire(now);
  Deferred deferred;
  bool await_pass = false;
  {
    EventLock lock(this);
    const bool lost = ExpireStaleNodesLocked(now, deferred);
    ExpireWaitersLocked(now, deferred);
    for (auto it = log_reads_.begin(); it != log_reads_.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      deferred.push_back([done = std::move(it->second.done)]() mutable {
        done(absl::DeadlineExceededError("the agent did not answer the log read in time"));
      });
      log_reads_.erase(it++);
    }
    const bool timed_out = EnforceTimeLimitsLocked(now, deferred);
    const bool preflights_judged = ExpirePreflightsLocked(now, deferred);
    bool sampled = false;
    if (now >= next_usage_sample_) {
      SampleUsageLocked(now);
      next_usage_sample_ = now + config_.usage_sample_period;
      sampled = true;
    }
    // Only a lost node or a stopped job changes what can be placed here; new
    // measurements change where auto-packed trials fit. Every other change
    // schedules where it happens.
    if (lost || timed_out || preflights_judged) {
      await_pass = RequestScheduleLocked(deferred);
    } else {
      // A pass left to this event by another (or overdue) runs here.
      const bool served = ServeScheduleLocked(deferred);
      if (served && sampled) PackPendingLocked(deferred);
    }
    // Jobs that retired since the last tick leave memory (their records are
    // stored; reads go to the store).
    EvictRetiredLocked();
  }
  RunDeferred(deferred);
  if (await_pass) AwaitSchedulePass();
}

}  // namespace trainctl::coord
