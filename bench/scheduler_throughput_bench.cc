// Scheduler throughput: placements per second of scheduler CPU on a
// simulated cluster of N nodes x 8 GPUs with M queued jobs; the target size
// is 1,250 nodes (10,000 GPUs) and 100,000 queued jobs (target: >= 20,000
// placements/s in steady state, bench/README.md).
//
// What "placements/s" means here (both are reported):
// - BM_FillPass: one Schedule() call on an idle cluster with M pending jobs:
//   it places as many as fit (thousands) and answers the rest kRetryLater.
//   placements_per_s = jobs placed / CPU seconds of that call.
// - BM_Drain: the coordinator's steady state. The cluster starts full (one
//   fill pass, not timed); then each step finishes the `finish` running jobs
//   whose (simulated) time is up first, freeing their GPUs, and calls
//   Schedule() over the whole pending queue as the coordinator does on an
//   event; placed jobs start (kPreempting: the victims stop at once, as in
//   the simulator) and as many new jobs are submitted, so the queue stays at
//   M. placements_per_s = placements / CPU seconds spent inside Schedule()
//   (thread CPU time; building the snapshot and applying decisions are the
//   harness, not timed). pass_ms is the CPU time of one such pass.
// - BM_SteadyDrain: the same, with passes as the coordinator runs them now
//   that it coalesces them (Coordinator::RequestScheduleLocked): jobs end at
//   `rate` per second, and the ends that arrive while a pass runs (rate x
//   its CPU time) are all served by the next pass. Reports placements per CPU
//   second, per simulated wall second, ends and placements per pass, and
//   busy (the share of simulated time spent in passes; near 1 = saturated,
//   the pass time is then the added latency of an event).
//
// Workload (seeded, the same every run): nodes of 8 GPUs, 7 of 8 nodes
// 80 GiB GPUs in one NVLink island, every 8th node 141 GiB GPUs in two
// islands of 4. Queue: 60% experiments (0.25 / 0.5 / whole GPU / 10 or
// 20 GiB), 30% one-node gangs of 2/4/8 GPUs, 10% multi-node gangs (2-4 nodes
// x 8, or 16/32 GPUs anywhere); queues prod (weight 3), research (weight 1)
// and default; 50 users, 10 projects; priority 0 (80%), 1 (15%), 2 (5%);
// half the experiments preemptible; a third of jobs with a time limit;
// attained GPU-time spread over the three LAS levels. Durations for the drain:
// 5 min to 10 h, uniform in log.
//
// Complexity of a pass (sched::Scheduler, after the indexed search): with G
// usable GPUs, N nodes, Q pending jobs, R running jobs and C distinct GPU
// memory sizes: O(G log G + R) to set up the pass, O(Q log Q) to order the
// queue, then per job O(C log G) for an experiment, O(L * (B + K log N)) for
// a gang (L layouts, B = GPUs per node, K nodes), each placement
// O(gpus touched x log G) to update the indexes. Jobs left waiting reuse the
// reason worked out for their shape until the cluster changes. Before: every
// job scanned every GPU, O(Q x G) per pass.
// Since the tail path (SchedulePass::DecideTail): one sequential sweep of the
// queue, O(Q) plus O(S) hash lookups for S distinct shapes; the order is
// O(Q) for a queue in submit order (the coordinator's), O(Q + k log k) with
// k jobs out of order. Once the head-of-queue reservation is taken, a
// waiting job whose shape already failed to fit since capacity was last
// added costs O(1) and is never loaded again (the per-job cache miss was
// most of a pass). A pass is then O(Q) with a small constant plus
// O(P x S x log G) for P placements: ~20 ms at 100,000 jobs plus ~15-20 us
// per placement at 10,000 GPUs (bench/README.md).
//
// Run: trainctl-bench-scheduler-throughput [--benchmark_filter=...]
// (bench/README.md has the command for bench/results/scheduler_throughput.json).

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <queue>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "benchmark/benchmark.h"
#include "coordinator/sched/scheduler.h"

namespace trainctl::bench {
namespace {

constexpr int kGpusPerNode = 8;
constexpr int64_t kGiB = int64_t{1} << 30;
constexpr uint32_t kSeed = 20261122;

// CPU seconds of this thread.
double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// `nodes` idle nodes of 8 GPUs (see the file comment for the mix).
sched::ClusterSnapshot MakeCluster(int nodes) {
  sched::ClusterSnapshot cluster;
  cluster.nodes.resize(nodes);
  for (int n = 0; n < nodes; ++n) {
    sched::NodeState& node = cluster.nodes[n];
    node.name = "gpu-node-" + std::to_string(n);
    const bool big = n % 8 == 7;
    node.gpus.resize(kGpusPerNode);
    for (int g = 0; g < kGpusPerNode; ++g) {
      sched::GpuState& gpu = node.gpus[g];
      gpu.index = g;
      gpu.uuid = "GPU-" + node.name + "-" + std::to_string(g);
      gpu.memory_total_bytes = (big ? 141 : 80) * kGiB;
      const int island = big ? g / 4 : 0;
      for (int p = 0; p < kGpusPerNode; ++p) {
        if (p != g && (big ? p / 4 : 0) == island) gpu.nvlink_peers.push_back(p);
      }
    }
  }
  return cluster;
}

// Makes pending jobs from one seeded stream; ids and submit order increase.
class JobMaker {
 public:
  explicit JobMaker(uint32_t seed) : rng_(seed) {}

  sched::JobRequest Next() {
    sched::JobRequest job;
    job.job_id = ++last_id_;
    job.submit_seq = last_id_;
    const double p = unit_(rng_);
    job.priority = p < 0.8 ? 0 : (p < 0.95 ? 1 : 2);
    static const char* const kQueues[] = {"prod", "research", ""};
    job.queue = kQueues[Pick(3)];
    job.user = "user" + std::to_string(Pick(50));
    job.project = "project" + std::to_string(Pick(10));
    if (unit_(rng_) < 0.33) job.time_limit_s = 600 + Pick(36000);
    const double level = unit_(rng_);
    job.attained_gpu_s = level < 0.6 ? 0 : (level < 0.85 ? 4000 : 9000);
    const double kind = unit_(rng_);
    if (kind < 0.6) {
      job.kind = sched::JobKind::kExperiment;
      job.preemptible = unit_(rng_) < 0.5;
      switch (Pick(4)) {
        case 0: job.gpu_fraction = 0.25; break;
        case 1: job.gpu_fraction = 0.5; break;
        case 2: job.gpu_fraction = 1.0; break;
        default: job.gpu_memory_bytes = (Pick(2) + 1) * 10 * kGiB; break;
      }
    } else if (kind < 0.9) {
      job.kind = sched::JobKind::kGang;
      static const int kGpus[] = {2, 4, 8};
      job.total_gpus = kGpus[Pick(3)];
    } else {
      job.kind = sched::JobKind::kGang;
      if (Pick(2) == 0) {
        job.nodes = 2 + Pick(3);
        job.gpus_per_node = 8;
        job.total_gpus = job.nodes * 8;
      } else {
        job.total_gpus = Pick(2) == 0 ? 16 : 32;
      }
    }
    return job;
  }

  // Seconds the job runs once started: 5 min to 10 h, uniform in log.
  double Duration() { return 300.0 * std::exp(unit_(rng_) * std::log(120.0)); }

 private:
  int Pick(int n) { return static_cast<int>(unit_(rng_) * n) % n; }

  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> unit_{0.0, 1.0};
  int64_t last_id_ = 0;
};

// A simulated cluster the scheduler's decisions are applied to: what the
// coordinator does between passes, without the store and the agents.
class Harness {
 public:
  Harness(int nodes, int jobs) : maker_(kSeed), cluster_(MakeCluster(nodes)) {
    for (int n = 0; n < nodes; ++n) node_of_[cluster_.nodes[n].name] = n;
    queue_.reserve(jobs);
    for (int i = 0; i < jobs; ++i) queue_.push_back(maker_.Next());
  }

  const sched::ClusterSnapshot& cluster() const { return cluster_; }
  const std::vector<sched::JobRequest>& queue() const { return queue_; }
  size_t running() const { return cluster_.running.size(); }

  // Applies `decisions`: starts placed jobs (stopping victims at once),
  // drops infeasible ones, submits one new job per job that left the queue.
  // Returns the number of jobs started.
  int Apply(const std::vector<sched::Decision>& decisions) {
    absl::flat_hash_map<int64_t, const sched::Decision*> started;
    for (const sched::Decision& d : decisions) {
      if (d.outcome == sched::Outcome::kPreempting) {
        for (int64_t victim : d.preempt) Finish(victim, /*requeue=*/true);
      }
      if (d.outcome == sched::Outcome::kPlaced ||
          d.outcome == sched::Outcome::kPreempting ||
          d.outcome == sched::Outcome::kInfeasible) {
        started[d.job_id] = &d;
      }
    }
    // The queue stays in job id order, as the coordinator's is (its queue
    // comes from an id-ordered set): the jobs left, the preempted ones
    // merged back by id, then the new submits.
    int count = 0;
    int left = 0;
    std::vector<sched::JobRequest> next;
    next.reserve(queue_.size() + requeued_.size());
    for (sched::JobRequest& job : queue_) {
      auto it = started.find(job.job_id);
      if (it == started.end()) {
        next.push_back(std::move(job));
        continue;
      }
      if (it->second->outcome != sched::Outcome::kInfeasible) {
        Start(job, it->second->placement);
        ++count;
      }
      ++left;
    }
    auto by_id = [](const sched::JobRequest& a, const sched::JobRequest& b) {
      return a.job_id < b.job_id;
    };
    const size_t kept = next.size();
    std::sort(requeued_.begin(), requeued_.end(), by_id);
    for (sched::JobRequest& job : requeued_) next.push_back(std::move(job));
    std::inplace_merge(next.begin(), next.begin() + static_cast<ptrdiff_t>(kept),
                       next.end(), by_id);
    requeued_.clear();
    for (int i = 0; i < left; ++i) next.push_back(maker_.Next());
    queue_ = std::move(next);
    return count;
  }

  // Finishes the `count` running jobs that end first.
  void FinishSome(int count) {
    for (int i = 0; i < count && !ends_.empty(); ++i) {
      const auto [end, id] = ends_.top();
      ends_.pop();
      now_ = std::max(now_, end);
      Finish(id, /*requeue=*/false);
    }
  }

 private:
  struct Running {
    size_t index = 0;  // in cluster_.running
    sched::JobRequest request;
  };

  void Start(const sched::JobRequest& job, const sched::Placement& p) {
    sched::RunningJob r;
    r.job_id = job.job_id;
    r.priority = job.priority;
    r.submit_seq = job.submit_seq;
    r.queue = job.queue;
    r.user = job.user;
    r.project = job.project;
    r.preemptible = job.preemptible;
    r.attained_gpu_s = job.attained_gpu_s;
    r.remaining_s = job.time_limit_s > 0 ? job.time_limit_s : -1;
    r.placement = p;
    Reserve(p, +1);
    running_[job.job_id] = Running{cluster_.running.size(), job};
    cluster_.running.push_back(std::move(r));
    ends_.push({now_ + maker_.Duration(), job.job_id});
  }

  void Finish(int64_t id, bool requeue) {
    auto it = running_.find(id);
    if (it == running_.end()) return;  // Preempted earlier.
    const size_t index = it->second.index;
    Reserve(cluster_.running[index].placement, -1);
    if (requeue) requeued_.push_back(it->second.request);
    running_.erase(it);
    if (index + 1 != cluster_.running.size()) {
      cluster_.running[index] = std::move(cluster_.running.back());
      running_[cluster_.running[index].job_id].index = index;
    }
    cluster_.running.pop_back();
  }

  void Reserve(const sched::Placement& p, int sign) {
    for (const sched::NodeAssignment& a : p.nodes) {
      sched::NodeState& node = cluster_.nodes[node_of_.at(a.node)];
      for (int index : a.gpu_indices) {
        sched::GpuState& gpu = node.gpus[index];
        gpu.reserved_bytes += sign * p.reserved_bytes_per_gpu;
        gpu.task_count += sign;
      }
    }
  }

  JobMaker maker_;
  sched::ClusterSnapshot cluster_;
  absl::flat_hash_map<std::string, int> node_of_;
  std::vector<sched::JobRequest> queue_;
  std::vector<sched::JobRequest> requeued_;
  absl::flat_hash_map<int64_t, Running> running_;
  // (end time, job id), earliest first.
  std::priority_queue<std::pair<double, int64_t>,
                      std::vector<std::pair<double, int64_t>>, std::greater<>>
      ends_;
  double now_ = 0;
};

sched::Scheduler MakeScheduler() {
  sched::SchedulerConfig config;
  config.policy.queues = {{"prod", 3.0}, {"research", 1.0}, {"default", 1.0}};
  // As the coordinator runs it: user-facing reasons for every waiting job.
  config.wait_reasons = true;
  return sched::Scheduler(config);
}

// Args: nodes, pending jobs.
void BM_FillPass(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const int jobs = static_cast<int>(state.range(1));
  Harness harness(nodes, jobs);
  const sched::Scheduler scheduler = MakeScheduler();
  int placed = 0;
  double cpu = 0;
  for (auto _ : state) {
    const double t0 = ThreadCpuSeconds();
    std::vector<sched::Decision> decisions =
        scheduler.Schedule(harness.cluster(), harness.queue());
    const double t = ThreadCpuSeconds() - t0;
    state.SetIterationTime(t);
    cpu += t;
    placed = 0;
    for (const sched::Decision& d : decisions) {
      placed += d.outcome == sched::Outcome::kPlaced;
    }
    benchmark::DoNotOptimize(decisions.data());
  }
  state.counters["gpus"] = nodes * kGpusPerNode;
  state.counters["placed"] = placed;
  state.counters["placements_per_s"] =
      cpu > 0 ? placed * static_cast<double>(state.iterations()) / cpu : 0;
}

// Ends `finish` running jobs, then times one Schedule() pass over the whole
// queue (thread CPU, also the iteration's manual time) and applies its
// decisions. Returns the pass's CPU seconds; adds its placements to *placed.
double TimedPass(Harness& harness, const sched::Scheduler& scheduler, int finish,
                 benchmark::State& state, int64_t* placed) {
  harness.FinishSome(finish);
  const double t0 = ThreadCpuSeconds();
  std::vector<sched::Decision> decisions =
      scheduler.Schedule(harness.cluster(), harness.queue());
  const double t = ThreadCpuSeconds() - t0;
  state.SetIterationTime(t);
  *placed += harness.Apply(decisions);
  return t;
}

// The counters both drains report: GPUs, placements per pass, ms per pass
// and placements per CPU second inside Schedule().
void SetPassCounters(benchmark::State& state, int nodes, int64_t placed,
                     int64_t passes, double cpu) {
  state.counters["gpus"] = nodes * kGpusPerNode;
  state.counters["placed_per_pass"] =
      passes > 0 ? static_cast<double>(placed) / passes : 0;
  state.counters["pass_ms"] = passes > 0 ? 1e3 * cpu / passes : 0;
  state.counters["placements_per_s"] =
      cpu > 0 ? static_cast<double>(placed) / cpu : 0;
}

// Args: nodes, pending jobs, jobs finished before each pass.
void BM_Drain(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const int jobs = static_cast<int>(state.range(1));
  const int finish = static_cast<int>(state.range(2));
  Harness harness(nodes, jobs);
  const sched::Scheduler scheduler = MakeScheduler();
  // Fill the cluster (not timed), then one settling pass.
  harness.Apply(scheduler.Schedule(harness.cluster(), harness.queue()));
  harness.Apply(scheduler.Schedule(harness.cluster(), harness.queue()));
  int64_t placed = 0;
  int64_t passes = 0;
  double cpu = 0;
  for (auto _ : state) {
    cpu += TimedPass(harness, scheduler, finish, state, &placed);
    ++passes;
  }
  SetPassCounters(state, nodes, placed, passes, cpu);
  state.counters["running"] = static_cast<double>(harness.running());
}

// Args: nodes, pending jobs, job ends per second. Passes as the coordinator
// runs them since it coalesces them (Coordinator::RequestScheduleLocked):
// every job end that arrives while a pass runs is served by the next pass.
// So a pass that took t seconds is followed by one after round(rate x t)
// ends (at least 1: an idle coordinator runs a pass per event).
void BM_SteadyDrain(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const int jobs = static_cast<int>(state.range(1));
  const double rate = static_cast<double>(state.range(2));
  Harness harness(nodes, jobs);
  const sched::Scheduler scheduler = MakeScheduler();
  harness.Apply(scheduler.Schedule(harness.cluster(), harness.queue()));
  harness.Apply(scheduler.Schedule(harness.cluster(), harness.queue()));
  int64_t placed = 0;
  int64_t passes = 0;
  int64_t ended = 0;
  double cpu = 0;
  // Simulated wall time: a pass serving k ends covers max(its CPU time, the
  // k / rate seconds over which they arrived).
  double elapsed = 0;
  double carry = 0;
  int ends = 1;
  for (auto _ : state) {
    const double t = TimedPass(harness, scheduler, ends, state, &placed);
    ended += ends;
    cpu += t;
    elapsed += std::max(t, ends / rate);
    ++passes;
    // Ends that arrive during this pass wait for the next one.
    carry += rate * t;
    ends = std::max(1, static_cast<int>(carry));
    carry = std::max(0.0, carry - ends);
  }
  SetPassCounters(state, nodes, placed, passes, cpu);
  state.counters["ends_per_pass"] =
      passes > 0 ? static_cast<double>(ended) / passes : 0;
  // Per second of simulated wall time, and the share of it spent in passes
  // (below 1: the scheduler keeps up with the rate).
  state.counters["placements_per_wall_s"] =
      elapsed > 0 ? static_cast<double>(placed) / elapsed : 0;
  state.counters["busy"] = elapsed > 0 ? cpu / elapsed : 0;
}

BENCHMARK(BM_FillPass)
    ->ArgNames({"nodes", "jobs"})
    ->ArgsProduct({{125, 1250, 5000}, {1000, 10000, 100000}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Rows {nodes, jobs, load}: the target size (1,250 nodes, 100,000 jobs) at
// each of `loads`, then the scaling in nodes (125, 5,000) and queue length
// (1,000, 10,000) at `scaling_load`.
void TargetSizeThenScaling(benchmark::internal::Benchmark* b,
                           std::initializer_list<int64_t> loads, int64_t scaling_load) {
  for (int64_t load : loads) b->Args({1250, 100000, load});
  b->Args({125, 100000, scaling_load});
  b->Args({5000, 100000, scaling_load});
  b->Args({1250, 1000, scaling_load});
  b->Args({1250, 10000, scaling_load});
}

// 1/10/100/1000 completions per pass; the scaling at 100.
BENCHMARK(BM_Drain)
    ->ArgNames({"nodes", "jobs", "finish"})
    ->Apply([](benchmark::internal::Benchmark* b) {
      TargetSizeThenScaling(b, {1, 10, 100, 1000}, 100);
    })
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// 200 / 2,000 / 20,000 / 50,000 job ends per second; the scaling at 20,000/s.
BENCHMARK(BM_SteadyDrain)
    ->ArgNames({"nodes", "jobs", "rate"})
    ->Apply([](benchmark::internal::Benchmark* b) {
      TargetSizeThenScaling(b, {200, 2000, 20000, 50000}, 20000);
    })
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Tiny, for the ctest smoke entry.
BENCHMARK(BM_Drain)
    ->Name("BM_DrainSmoke")
    ->ArgNames({"nodes", "jobs", "finish"})
    ->Args({8, 200, 4})
    ->UseManualTime()
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SteadyDrain)
    ->Name("BM_SteadyDrainSmoke")
    ->ArgNames({"nodes", "jobs", "rate"})
    ->Args({8, 200, 1000})
    ->UseManualTime()
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace trainctl::bench

BENCHMARK_MAIN();
