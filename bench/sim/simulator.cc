#include "bench/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace trainctl::sim {
namespace {

namespace muri = ::trainctl::sched::muri;

constexpr double kInf = std::numeric_limits<double>::infinity();

// The artifact's iteration-time inflation (jobs.py itertime_overhead_list[0]).
constexpr double kIterTimeFactor = 1.015;

enum class Status { kAdded, kPending, kRunning, kEnd };

// One job's simulated state. Field names follow upstream's job dict where
// the arithmetic must match it (Muri rule 6, bench/sim/README.md).
struct Job {
  int64_t job_id = 0;
  int num_gpu = 0;
  std::string model;
  double submit_s = 0;
  double iteration_time_s = 0;
  double overhead_s = 0;
  // Per-resource profile (trace resource_time_* in ms; iteration_time the
  // trace's ms x 1.015, as Muri compares groups with it).
  sched::InterleaveProfile profile;
  // Seconds per iteration now: iteration_time_s alone, the group's
  // interleaved iteration time when it shares its GPUs.
  double iter_cur_s = 0;
  // Restart overhead charged per event under --compat muri: overhead_s, or
  // for a Muri-L group the sum of its members' (upstream run_sim.py).
  double overhead_cur_s = 0;

  Status status = Status::kAdded;
  double remaining_iteration = 0;
  double remaining_time = 0;
  double remaining_gputime = 0;
  double last_check = 0;
  double total_executed = 0;
  // Attained service for Tiresias, wall seconds.
  double executed = 0;
  double pending_time = 0;
  std::optional<double> start_time;
  int preempt = 0;
  int queue = 0;
  muri::GpuPlacement placement;
  // kOurs: restart overhead still to pay before progress resumes.
  double overhead_left = 0;
  // sched::Scheduler policies: GPUs by index, and the job it was preempted
  // for (table index + 1; 0 = none).
  sched::Placement lib_placement;
  int64_t preempted_for = 0;
  // When it last entered the queue (submit, or preemption), s: the
  // scheduler's JobRequest.standing.waited_s is now minus this.
  double queued_since_s = 0;
};

// Node names of the simulated cluster for sched::Scheduler.
std::string NodeName(int n) { return absl::StrCat("n", n); }

// The sched::Scheduler policy of `policy` (kFifo, kFifoBackfill, kLas,
// kLasTiresias, kLasOvertake). kLas is the scheduler's default PolicyConfig
// untouched; kLasOvertake is it with overtake_preemption;
// kLasTiresias is the default of before (Tiresias's two thresholds from
// `tiresias`, preemption of same-level jobs that overtook).
sched::SchedulerConfig LibConfig(Policy policy,
                                 const muri::TiresiasConfig& tiresias,
                                 double reservation_min_wait_s) {
  sched::SchedulerConfig c;
  c.wait_reasons = false;
  sched::PolicyConfig& p = c.policy;
  const bool las = policy == Policy::kLas || policy == Policy::kLasTiresias ||
                   policy == Policy::kLasOvertake ||
                   policy == Policy::kLasNoPack;
  p.order = las ? sched::QueueOrder::kLas : sched::QueueOrder::kFifo;
  p.backfill = policy != Policy::kFifo;
  p.preemption = las;
  // Interleave packing stays the default's (on) for las and las-overtake;
  // the baselines run without it.
  p.interleave.enabled = policy == Policy::kLas || policy == Policy::kLasOvertake;
  if (policy == Policy::kLasTiresias) {
    p.las_thresholds_gpu_s = tiresias.thresholds_gpu_s;
    p.overtake_preemption = true;
  }
  if (policy == Policy::kLasOvertake) p.overtake_preemption = true;
  if (reservation_min_wait_s >= 0) {
    p.reservation_min_wait_s = reservation_min_wait_s;
  }
  return c;
}

struct StartEvent {
  double time = 0;
  std::vector<int> jobs;
};

// Python's math.isclose(a, b, rel_tol=1e-9), which upstream uses to file
// events under an existing time (util.py search_dict_list).
bool IsClose(double a, double b) {
  return a == b ||
         std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b));
}

}  // namespace

absl::StatusOr<Policy> ParsePolicy(const std::string& name) {
  if (name == "srtf") return Policy::kSrtf;
  if (name == "srsf") return Policy::kSrsf;
  if (name == "tiresias") return Policy::kTiresias;
  if (name == "fifo") return Policy::kFifo;
  if (name == "fifo-backfill") return Policy::kFifoBackfill;
  if (name == "las") return Policy::kLas;
  if (name == "las-tiresias") return Policy::kLasTiresias;
  if (name == "las-overtake") return Policy::kLasOvertake;
  if (name == "las-nopack") return Policy::kLasNoPack;
  if (name == "muri-l") return Policy::kMuriL;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown policy '", name,
      "'; expected one of las, las-nopack, las-tiresias, las-overtake, "
      "muri-l, srtf, srsf, tiresias, fifo, fifo-backfill"));
}

double RestartOverheadS(int num_gpu, const std::string& model) {
  // run_sim.py overhead_dict: columns vgg16, vgg19, resnet18,
  // shufflenet_v2_x1_0, bert, gpt2, a2c, dqn.
  static const auto* kTable = new absl::flat_hash_map<int, std::vector<int>>{
      {1, {7, 7, 4, 4, 10, 10, 38, 5}},   {2, {7, 7, 5, 4, 10, 10, 39, 5}},
      {4, {8, 8, 5, 5, 10, 10, 39, 6}},   {8, {9, 9, 7, 5, 10, 10, 46, 6}},
      {16, {9, 10, 7, 7, 10, 10, 46, 8}}, {32, {10, 10, 7, 8, 10, 10, 46, 8}}};
  static const std::vector<std::string> kModels = {
      "vgg16", "vgg19", "resnet18", "shufflenet_v2_x1_0",
      "bert",  "gpt2",  "a2c",      "dqn"};
  auto row = kTable->find(num_gpu);
  auto col = std::find(kModels.begin(), kModels.end(), model);
  if (row == kTable->end() || col == kModels.end()) return 10;
  return row->second[col - kModels.begin()];
}

namespace {

// One scheduling instant through sched::Scheduler: the cluster as
// `cluster` nodes of 80 GiB GPUs with the running jobs' GPUs taken, the
// runnable jobs not running as the queue (gangs of num_gpu whole GPUs,
// arrival order as submit order, attained GPU-time for LAS). Running jobs
// keep their GPUs unless preempted; a preemptor starts at once (the
// simulator stops its victims instantly). Updates each job's lib_placement
// and preempted_for.
muri::Decision LibDecide(const sched::Scheduler& scheduler,
                         const muri::GpuCluster& cluster, std::vector<Job>& jobs,
                         const std::vector<int>& runnable, int64_t gpu_bytes,
                         bool preemptible, double now_s) {
  const int n = static_cast<int>(jobs.size());
  sched::ClusterSnapshot snap;
  snap.nodes.resize(cluster.num_nodes);
  for (int i = 0; i < cluster.num_nodes; ++i) {
    sched::NodeState& node = snap.nodes[i];
    node.name = NodeName(i);
    node.gpus.resize(cluster.gpus_per_node);
    for (int g = 0; g < cluster.gpus_per_node; ++g) {
      node.gpus[g].index = g;
      node.gpus[g].memory_total_bytes = gpu_bytes;
    }
  }
  std::vector<sched::JobRequest> queue;
  for (int j : runnable) {
    const Job& job = jobs[j];
    if (job.status == Status::kRunning) {
      sched::RunningJob& r = snap.running.emplace_back();
      r.job_id = j + 1;
      r.submit_seq = j + 1;
      r.preemptible = preemptible;
      r.attained_gpu_s = job.executed * job.num_gpu;
      r.placement = job.lib_placement;
      r.interleave = job.profile;
      // Jobs packed on the same GPUs each count their reservation.
      for (const sched::NodeAssignment& a : job.lib_placement.nodes) {
        const int node = std::stoi(a.node.substr(1));
        for (int g : a.gpu_indices) {
          snap.nodes[node].gpus[g].reserved_bytes += gpu_bytes;
          snap.nodes[node].gpus[g].task_count += 1;
        }
      }
      continue;
    }
    sched::JobRequest& q = queue.emplace_back();
    q.job_id = j + 1;
    q.submit_seq = j + 1;
    q.kind = sched::JobKind::kGang;
    q.total_gpus = job.num_gpu;
    q.preemptible = preemptible;
    q.attained_gpu_s = job.executed * job.num_gpu;
    q.standing.preempted_for = job.preempted_for;
    q.standing.waited_s = now_s - job.queued_since_s;
    q.interleave = job.profile;
  }
  muri::Decision out;
  out.run.assign(n, false);
  out.placement.assign(n, {});
  for (int j : runnable) {
    if (jobs[j].status == Status::kRunning) {
      out.run[j] = true;
      out.placement[j] = jobs[j].placement;
    }
  }
  if (queue.empty()) return out;
  auto to_muri = [](const sched::Placement& p) {
    muri::GpuPlacement shares;
    for (const sched::NodeAssignment& a : p.nodes) {
      shares.push_back({std::stoi(a.node.substr(1)),
                        static_cast<int>(a.gpu_indices.size())});
    }
    std::sort(shares.begin(), shares.end(),
              [](const muri::NodeShare& x, const muri::NodeShare& y) {
                return x.node < y.node;
              });
    return shares;
  };
  absl::flat_hash_set<int64_t> placed;
  for (const sched::Decision& d : scheduler.Schedule(snap, queue)) {
    const int j = static_cast<int>(d.job_id) - 1;
    if (d.outcome == sched::Outcome::kPreempting) {
      for (int64_t victim : d.preempt) {
        const int v = static_cast<int>(victim) - 1;
        out.run[v] = false;
        out.placement[v].clear();
        jobs[v].lib_placement = {};
        jobs[v].preempted_for = d.job_id;
      }
    }
    if (d.outcome == sched::Outcome::kPlaced ||
        d.outcome == sched::Outcome::kPreempting) {
      out.run[j] = true;
      out.placement[j] = to_muri(d.placement);
      jobs[j].lib_placement = d.placement;
      placed.insert(d.job_id);
    }
  }
  // A job preempted for X waits only until X is placed (the no-ping-pong
  // rule: not restarted until X is placed or gone), as the coordinator does
  // (StartAttemptLocked clears the victims' preempted_for): X being queued
  // again later (itself preempted) does not hold its old victims back.
  if (!placed.empty()) {
    for (int k : runnable) {
      if (placed.contains(jobs[k].preempted_for)) jobs[k].preempted_for = 0;
    }
  }
  return out;
}

}  // namespace

SimMetrics ComputeMetrics(const std::vector<JobRecord>& jobs) {
  SimMetrics m;
  m.jobs = static_cast<int64_t>(jobs.size());
  if (jobs.empty()) return m;
  std::vector<double> jct;
  jct.reserve(jobs.size());
  double sum = 0;
  for (const JobRecord& r : jobs) {
    jct.push_back(r.jct_s);
    sum += r.jct_s;
    m.makespan_s = std::max(m.makespan_s, r.end_time_s);
  }
  m.avg_jct_s = sum / static_cast<double>(jobs.size());
  std::sort(jct.begin(), jct.end());
  size_t idx = static_cast<size_t>(0.99 * static_cast<double>(jct.size()));
  m.p99_jct_s = jct[std::min(idx, jct.size() - 1)];
  return m;
}

absl::StatusOr<SimResult> Simulate(const SimConfig& config,
                                   const std::vector<TraceJob>& trace) {
  const muri::GpuCluster& cluster = config.cluster;
  const int total_gpus = cluster.total_gpus();
  if (total_gpus <= 0) {
    return absl::InvalidArgumentError("the cluster has no GPUs");
  }
  const bool compat = config.cost_model == CostModel::kMuri;
  const Policy policy = config.policy;
  const bool tiresias = policy == Policy::kTiresias;
  // Through the coordinator's scheduler library.
  const bool lib = !compat && (policy == Policy::kFifo ||
                               policy == Policy::kFifoBackfill ||
                               policy == Policy::kLas ||
                               policy == Policy::kLasTiresias ||
                               policy == Policy::kLasOvertake ||
                               policy == Policy::kLasNoPack);
  const bool las = policy == Policy::kLas || policy == Policy::kLasTiresias ||
                   policy == Policy::kLasOvertake ||
                   policy == Policy::kLasNoPack;
  const bool muril = policy == Policy::kMuriL;
  if (compat && las) {
    return absl::InvalidArgumentError(
        "--policy las and las-tiresias have no Muri counterpart; run them "
        "without --compat");
  }
  if (muril && !std::any_of(trace.begin(), trace.end(), [](const TraceJob& t) {
        return !t.resource_time_ms.empty();
      })) {
    // Upstream draws random profiles then; we do not guess.
    return absl::InvalidArgumentError(
        "--policy muri-l needs resource_time_* columns in the trace");
  }
  // LAS levels change while jobs run: demotion instants are events.
  const bool demotions = tiresias || las;
  sched::SchedulerConfig lib_config =
      LibConfig(policy, config.tiresias, config.reservation_min_wait_s);
  // Muri-L packs up to 4 jobs (run_sim.py --packing_num 4).
  if (muril) lib_config.policy.interleave.max_jobs = 4;
  if (config.interleave_max_jobs >= 0) {
    lib_config.policy.interleave.max_jobs = config.interleave_max_jobs;
  }
  if (config.interleave_min_gain >= 0) {
    lib_config.policy.interleave.min_gain = config.interleave_min_gain;
  }
  const sched::Scheduler lib_scheduler(lib_config);
  constexpr int64_t kSimGpuBytes = int64_t{80} << 30;

  // Jobs in upstream's order: stable by submit time (jobs.py sort_all_jobs).
  std::vector<Job> jobs;
  jobs.reserve(trace.size());
  for (const TraceJob& t : trace) {
    if (t.num_gpu > total_gpus) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job ", t.job_id, " needs ", t.num_gpu, " GPUs but the cluster has ",
          total_gpus, "; it could never run"));
    }
    if (t.num_gpu > cluster.gpus_per_node &&
        t.num_gpu / cluster.gpus_per_node > cluster.num_nodes) {
      return absl::InvalidArgumentError(
          absl::StrCat("job ", t.job_id, " needs more whole nodes than exist"));
    }
    Job j;
    j.job_id = t.job_id;
    j.num_gpu = t.num_gpu;
    j.model = t.model_name;
    j.submit_s = t.submit_time_ms / 1000;
    j.iteration_time_s = t.iteration_time_ms * kIterTimeFactor / 1000;
    j.remaining_iteration = t.iterations;
    j.overhead_s = RestartOverheadS(t.num_gpu, t.model_name);
    j.overhead_cur_s = j.overhead_s;
    j.iter_cur_s = j.iteration_time_s;
    j.profile.resource_time = t.resource_time_ms;
    j.profile.iteration_time = t.iteration_time_ms * kIterTimeFactor;
    jobs.push_back(std::move(j));
  }
  std::stable_sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) {
    return a.submit_s < b.submit_s;
  });
  // Arrival events. Upstream (jobs.py prepare_job_start_events) files a job
  // under the first existing event whose time is math.isclose (rel 1e-9) to
  // its submit time, so near-simultaneous arrivals share the earliest one's
  // instant; our own model groups equal times only.
  std::vector<StartEvent> starts;
  for (int i = 0; i < static_cast<int>(jobs.size()); ++i) {
    StartEvent* event = nullptr;
    if (compat) {
      for (StartEvent& e : starts) {
        if (IsClose(e.time, jobs[i].submit_s)) {
          event = &e;
          break;
        }
      }
    } else if (!starts.empty() && starts.back().time == jobs[i].submit_s) {
      event = &starts.back();
    }
    if (event == nullptr) {
      starts.push_back({jobs[i].submit_s, {}});
      event = &starts.back();
    }
    event->jobs.push_back(i);
  }
  std::stable_sort(starts.begin(), starts.end(),
                   [](const StartEvent& a, const StartEvent& b) {
                     return a.time < b.time;
                   });

  const int n = static_cast<int>(jobs.size());
  SimResult result;
  result.jobs.reserve(jobs.size());
  std::vector<int> runnable;
  // Muri-L's groups of the last instant and their iteration times (ms).
  std::vector<std::vector<int>> muril_groups;
  std::vector<double> muril_group_time;
  // The interleave model the scheduler packs with; the cost model uses the
  // same one.
  const sched::InterleaveConfig interleave =
      lib_scheduler.config().policy.interleave;
  muri::TiresiasQueues queues = muri::MakeTiresiasQueues(config.tiresias);
  std::vector<muri::TiresiasJob> las_table(jobs.size());
  for (int i = 0; i < n; ++i) las_table[i].num_gpu = jobs[i].num_gpu;

  size_t next_start = 0;
  bool have_end = false;
  double end_time = kInf;
  std::vector<int> end_jobs;
  double next_jump = kInf;

  double prev_time = starts.empty() ? 0 : starts.front().time;
  const double first_submit = prev_time;
  int running_gpus = 0;
  double gpu_seconds = 0;
  // Jobs submitted and not running (waiting or preempted), and the seconds
  // and GPU-seconds of the intervals where at least one was.
  int waiting_jobs = 0;
  double queued_s = 0;
  double queued_gpu_seconds = 0;
  int64_t same_time_events = 0;
  double last_event_time = -kInf;

  auto set_running = [&](int j, bool run) {
    Job& job = jobs[j];
    if (run) {
      job.status = Status::kRunning;
      running_gpus += job.num_gpu;
    } else {
      job.status = Status::kPending;
      running_gpus -= job.num_gpu;
    }
    las_table[j].running = run;
  };

  while (next_start < starts.size() || !runnable.empty()) {
    if (next_start == starts.size() && !have_end) {
      return absl::InternalError(absl::StrCat(
          runnable.size(),
          " jobs are runnable but none runs and none arrives: the cluster "
          "cannot place them"));
    }
    // Next event: an arrival, a completion (arrivals first on a tie, both
    // handled), or for Tiresias a demotion instant if earlier.
    const double start_time =
        next_start < starts.size() ? starts[next_start].time : kInf;
    const double e_time = have_end ? end_time : kInf;
    bool take_start = false;
    bool take_end = false;
    double t;
    if (e_time < start_time) {
      t = e_time;
      take_end = true;
    } else if (e_time > start_time) {
      t = start_time;
      take_start = true;
    } else {
      t = start_time;
      take_start = take_end = true;
    }
    if (demotions && t > next_jump) {
      t = next_jump;
      take_start = take_end = false;
    }
    ++result.metrics.events;
    if (t == last_event_time) {
      if (++same_time_events > config.max_events_at_one_time) {
        return absl::InternalError(
            absl::StrCat("simulated time stopped advancing at t=", t));
      }
    } else {
      same_time_events = 0;
      last_event_time = t;
    }
    gpu_seconds += running_gpus * (t - prev_time);
    if (waiting_jobs > 0) {
      queued_s += t - prev_time;
      queued_gpu_seconds += running_gpus * (t - prev_time);
    }
    prev_time = t;

    if (take_end) {
      for (int j : end_jobs) {
        Job& job = jobs[j];
        job.total_executed = job.total_executed + (t - job.last_check);
        running_gpus -= job.num_gpu;
        job.status = Status::kEnd;
        runnable.erase(std::find(runnable.begin(), runnable.end(), j));
        if (tiresias) {
          auto& q = queues.queues[job.queue];
          q.erase(std::find(q.begin(), q.end(), j));
        }
        JobRecord r;
        r.job_id = job.job_id;
        r.num_gpu = job.num_gpu;
        r.submit_time_s = job.submit_s;
        r.start_time_s = job.start_time.value_or(t);
        r.end_time_s = t;
        r.jct_s = t - job.submit_s;
        r.pending_time_s = job.pending_time;
        r.preempt = job.preempt;
        result.jobs.push_back(r);
      }
    }
    if (take_start) {
      for (int j : starts[next_start].jobs) {
        Job& job = jobs[j];
        job.status = Status::kPending;
        job.last_check = job.submit_s;
        job.queued_since_s = job.submit_s;
        job.remaining_time = job.remaining_iteration * job.iteration_time_s;
        job.remaining_gputime = job.remaining_time * job.num_gpu;
        runnable.push_back(j);
        if (tiresias) {
          job.queue = 0;
          queues.queues[0].push_back(j);
        }
      }
      ++next_start;
    }

    // Credit progress since the last check (Muri rule 3, bench/sim/README.md).
    for (int j : runnable) {
      Job& job = jobs[j];
      if (job.status == Status::kRunning) {
        double progress_s;
        if (compat) {
          progress_s = std::max(t - job.last_check - job.overhead_cur_s, 0.0);
        } else {
          const double dt = t - job.last_check;
          const double paid = std::min(dt, job.overhead_left);
          job.overhead_left -= paid;
          progress_s = dt - paid;
        }
        job.remaining_iteration -= progress_s / job.iter_cur_s;
        job.total_executed = job.total_executed + t - job.last_check;
        if (demotions) {
          job.executed = job.executed + t - job.last_check;
        }
        job.last_check = t;
        if (tiresias) {
          const double attained_gpu_s = job.executed * job.num_gpu;
          const int q = muri::TiresiasQueueAfter(config.tiresias, job.queue,
                                                 attained_gpu_s);
          if (q != job.queue) {
            muri::TiresiasMove(queues, j, job.queue, q);
            job.queue = q;
          }
        } else {
          job.remaining_time = job.remaining_iteration * job.iteration_time_s;
          if (policy == Policy::kSrsf) {
            job.remaining_gputime = job.remaining_time * job.num_gpu;
          }
        }
      } else if (job.status == Status::kPending) {
        job.pending_time = job.pending_time + (t - job.last_check);
        job.last_check = t;
      }
    }

    // Ask the policy.
    muri::Decision decision;
    switch (policy) {
      case Policy::kSrtf:
      case Policy::kSrsf: {
        std::vector<muri::ShortestFirstJob> list;
        list.reserve(runnable.size());
        for (int j : runnable) {
          list.push_back({j, jobs[j].num_gpu, jobs[j].remaining_time,
                          jobs[j].remaining_gputime});
        }
        decision = muri::ScheduleShortestFirst(
            cluster,
            policy == Policy::kSrtf ? muri::ShortestKey::kRemainingTime
                                    : muri::ShortestKey::kRemainingGpuTime,
            list, n);
        for (size_t i = 0; i < list.size(); ++i) runnable[i] = list[i].job;
        break;
      }
      case Policy::kTiresias:
        decision = muri::ScheduleTiresias(total_gpus, queues, las_table);
        break;
      case Policy::kMuriL: {
        std::vector<muri::MuriLJob> list;
        list.reserve(runnable.size());
        for (int j : runnable) {
          list.push_back({j, jobs[j].num_gpu,
                          jobs[j].total_executed * jobs[j].num_gpu,
                          &jobs[j].profile});
        }
        muri::MuriLDecision d =
            muri::ScheduleMuriL(cluster, list, interleave, n);
        for (size_t i = 0; i < list.size(); ++i) runnable[i] = list[i].job;
        decision = std::move(d.decision);
        muril_groups = std::move(d.groups);
        muril_group_time = std::move(d.group_time);
        break;
      }
      case Policy::kFifo:
      case Policy::kFifoBackfill:
      case Policy::kLas:
      case Policy::kLasTiresias:
      case Policy::kLasOvertake:
      case Policy::kLasNoPack: {
        if (lib) {
          decision = LibDecide(lib_scheduler, cluster, jobs, runnable,
                               kSimGpuBytes, las, t);
          break;
        }
        std::vector<muri::FifoJob> list;
        list.reserve(runnable.size());
        for (int j : runnable) {
          muri::FifoJob f;
          f.job = j;
          f.num_gpu = jobs[j].num_gpu;
          if (jobs[j].status == Status::kRunning) f.placement = jobs[j].placement;
          list.push_back(std::move(f));
        }
        decision = muri::ScheduleFifo(cluster, list,
                                      policy == Policy::kFifoBackfill, n);
        break;
      }
    }

    // Apply it: preempt, start, migrate.
    for (int j : runnable) {
      Job& job = jobs[j];
      const bool run = decision.run[j];
      if (job.status == Status::kRunning && !run) {
        set_running(j, false);
        job.queued_since_s = t;
        ++job.preempt;
        ++result.metrics.preemptions;
        job.placement.clear();
      } else if (job.status == Status::kPending && run) {
        set_running(j, true);
        if (!job.start_time.has_value()) job.start_time = t;
        job.overhead_left = job.overhead_s;
        job.placement = decision.placement[j];
        job.preempted_for = 0;
      } else if (run) {
        const muri::GpuPlacement& p = decision.placement[j];
        const bool moved =
            p.size() != job.placement.size() ||
            !std::equal(p.begin(), p.end(), job.placement.begin(),
                        [](const muri::NodeShare& a, const muri::NodeShare& b) {
                          return a.node == b.node && a.gpus == b.gpus;
                        });
        if (moved && !p.empty()) job.overhead_left = job.overhead_s;
        job.placement = p;
      }
    }

    if (lib || muril) {
      // Jobs sharing GPUs: each progresses at its group's interleaved
      // iteration time; GPUs held count once (SimMetrics).
      std::vector<std::vector<int>> groups;
      std::vector<double> group_ms;
      if (muril) {
        groups = muril_groups;
        group_ms = muril_group_time;
      } else {
        absl::flat_hash_map<std::string, size_t> index;
        for (int j : runnable) {
          if (jobs[j].status != Status::kRunning) continue;
          std::string key;
          for (const sched::NodeAssignment& a : jobs[j].lib_placement.nodes) {
            absl::StrAppend(&key, a.node, ":");
            for (int g : a.gpu_indices) absl::StrAppend(&key, g, ",");
          }
          auto [it, added] = index.try_emplace(key, groups.size());
          if (added) groups.emplace_back();
          groups[it->second].push_back(j);
        }
        for (const std::vector<int>& g : groups) {
          std::vector<const sched::InterleaveProfile*> p;
          for (int j : g) p.push_back(&jobs[j].profile);
          group_ms.push_back(g.size() == 1 ? 0
                                           : sched::InterleavedIterationTime(
                                                 absl::MakeConstSpan(p),
                                                 interleave));
        }
      }
      running_gpus = 0;
      for (size_t i = 0; i < groups.size(); ++i) {
        const std::vector<int>& g = groups[i];
        if (g.empty()) continue;
        running_gpus += jobs[g[0]].num_gpu;
        double oh = 0;
        for (int j : g) oh += jobs[j].overhead_s;
        for (int j : g) {
          Job& job = jobs[j];
          if (g.size() == 1) {
            job.iter_cur_s = job.iteration_time_s;
            job.overhead_cur_s = job.overhead_s;
          } else {
            const double ms = group_ms[i];
            double solo = 0;
            for (int m : g) solo += jobs[m].iteration_time_s;
            // Not interleavable (never chosen so): time-sliced.
            job.iter_cur_s = std::isfinite(ms) && ms > 0 ? ms / 1000 : solo;
            job.overhead_cur_s = oh;
          }
        }
      }
    }

    waiting_jobs = 0;
    for (int j : runnable) {
      if (jobs[j].status == Status::kPending) ++waiting_jobs;
    }

    // Next completion: the earliest, all jobs tied at it.
    have_end = false;
    end_time = kInf;
    end_jobs.clear();
    if (compat && !tiresias) {
      // Upstream shortest_first_sim_jobs: each running job, in list order,
      // joins the first end event whose time isclose() to its own end time
      // (or opens one); the earliest event ends all its jobs at its time.
      std::vector<StartEvent> groups;
      for (int j : runnable) {
        const Job& job = jobs[j];
        if (job.status != Status::kRunning) continue;
        const double e = t + job.remaining_iteration * job.iter_cur_s;
        auto g = std::find_if(groups.begin(), groups.end(),
                              [&](const StartEvent& x) {
                                return IsClose(x.time, e);
                              });
        if (g == groups.end()) {
          groups.push_back({e, {j}});
        } else {
          g->jobs.push_back(j);
        }
      }
      // The first group of least time (stable sort, then [0]).
      auto best = std::min_element(groups.begin(), groups.end(),
                                   [](const StartEvent& a,
                                      const StartEvent& b) {
                                     return a.time < b.time;
                                   });
      if (best != groups.end()) {
        have_end = true;
        end_time = best->time;
        end_jobs = best->jobs;
      }
    } else {
      for (int j : runnable) {
        const Job& job = jobs[j];
        if (job.status != Status::kRunning) continue;
        double e;
        if (compat) {
          e = t + job.remaining_iteration * job.iter_cur_s;
        } else {
          e = t + (job.overhead_left +
                   job.remaining_iteration * job.iter_cur_s);
        }
        if (e < end_time) {
          end_time = e;
          end_jobs.assign(1, j);
          have_end = true;
        } else if (e == end_time) {
          end_jobs.push_back(j);
        }
      }
    }
    // Next demotion instant (Tiresias, LAS).
    next_jump = kInf;
    if (las) {
      for (int j : runnable) {
        const Job& job = jobs[j];
        if (job.status != Status::kRunning) continue;
        const double attained = job.executed * job.num_gpu;
        for (double threshold :
             lib_scheduler.config().policy.las_thresholds_gpu_s) {
          if (attained < threshold) {
            next_jump = std::min(next_jump,
                                 t + (threshold - attained) / job.num_gpu);
            break;
          }
        }
      }
    }
    if (tiresias) {
      for (int j : runnable) {
        const Job& job = jobs[j];
        if (job.status != Status::kRunning) continue;
        std::optional<double> jump = muri::TiresiasNextDemotion(
            config.tiresias, job.queue, job.num_gpu, job.executed, t);
        if (jump.has_value() && *jump < next_jump) next_jump = *jump;
      }
    }
  }

  SimMetrics m = ComputeMetrics(result.jobs);
  m.events = result.metrics.events;
  m.preemptions = result.metrics.preemptions;
  const double span = m.makespan_s - first_submit;
  m.gpu_allocation = span > 0 ? gpu_seconds / (total_gpus * span) : 0;
  m.queued_s = queued_s;
  m.gpu_allocation_while_queued =
      queued_s > 0 ? queued_gpu_seconds / (total_gpus * queued_s) : 1.0;
  result.metrics = m;
  return result;
}

}  // namespace trainctl::sim
