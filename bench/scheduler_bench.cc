// Measures sched::Scheduler::Schedule(): the wall time of one call (ms) and
// jobs decided per second (items_per_second), for clusters of 8/64/512 nodes x
// 8 GPUs (80 GiB, one NVLink island per node) with 100/1000/10000 pending jobs.
//
// The workload is fixed by a seeded RNG so runs compare: half of the cluster's
// GPUs are busy (60% of those held whole by gangs, 40% shared by 1-3
// experiments using 25-75% of the memory); the queue is 70% experiments of
// 0.25/0.5/1 GPU and 30% gangs of 2/4/8/16 GPUs (the scheduler picks the
// nodes), 10% of jobs at priority 1. Counters: placed/retry/infeasible are the
// decisions of one call; gpus is the cluster size.
//
// Run: trainctl-bench-scheduler [--benchmark_filter=...] (see bench/run.sh).

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "coordinator/sched/scheduler.h"

namespace trainctl::bench {
namespace {

constexpr int kGpusPerNode = 8;
constexpr int64_t kGpuBytes = int64_t{80} << 30;
constexpr uint32_t kSeed = 20240601;

// `nodes` x 8 GPUs, half of the GPUs busy.
sched::ClusterSnapshot MakeCluster(int nodes, std::mt19937& rng) {
  sched::ClusterSnapshot cluster;
  std::vector<sched::GpuState*> all;
  cluster.nodes.resize(nodes);
  for (int n = 0; n < nodes; ++n) {
    sched::NodeState& node = cluster.nodes[n];
    node.name = "gpu-node-" + std::to_string(n);
    node.gpus.resize(kGpusPerNode);
    for (int g = 0; g < kGpusPerNode; ++g) {
      sched::GpuState& gpu = node.gpus[g];
      gpu.index = g;
      gpu.uuid = "GPU-" + node.name + "-" + std::to_string(g);
      gpu.memory_total_bytes = kGpuBytes;
      for (int p = 0; p < kGpusPerNode; ++p) {
        if (p != g) gpu.nvlink_peers.push_back(p);
      }
    }
  }
  for (sched::NodeState& node : cluster.nodes) {
    for (sched::GpuState& gpu : node.gpus) all.push_back(&gpu);
  }
  std::shuffle(all.begin(), all.end(), rng);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uniform_int_distribution<int> tasks(1, 3);
  for (size_t i = 0; i < all.size() / 2; ++i) {
    sched::GpuState& gpu = *all[i];
    if (unit(rng) < 0.6) {
      // Held whole by a gang rank.
      gpu.reserved_bytes = kGpuBytes;
      gpu.task_count = 1;
    } else {
      // Shared by experiments: 25-75% of the memory reserved.
      gpu.task_count = tasks(rng);
      gpu.reserved_bytes = static_cast<int64_t>(kGpuBytes * (0.25 + 0.5 * unit(rng)));
    }
  }
  return cluster;
}

// `jobs` pending jobs: 70% experiments of 0.25/0.5/1 GPU, 30% gangs of
// 2/4/8/16 GPUs.
std::vector<sched::JobRequest> MakeQueue(int jobs, std::mt19937& rng) {
  static constexpr double kFractions[] = {0.25, 0.5, 1.0};
  static constexpr int kGangGpus[] = {2, 4, 8, 16};
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uniform_int_distribution<int> pick3(0, 2);
  std::uniform_int_distribution<int> pick4(0, 3);
  std::vector<sched::JobRequest> queue(jobs);
  for (int i = 0; i < jobs; ++i) {
    sched::JobRequest& job = queue[i];
    job.job_id = i + 1;
    job.submit_seq = i + 1;
    job.priority = unit(rng) < 0.1 ? 1 : 0;
    if (unit(rng) < 0.7) {
      job.kind = sched::JobKind::kExperiment;
      job.gpu_fraction = kFractions[pick3(rng)];
    } else {
      job.kind = sched::JobKind::kGang;
      job.total_gpus = kGangGpus[pick4(rng)];
    }
  }
  return queue;
}

// Args: nodes, pending jobs.
void BM_Schedule(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const int jobs = static_cast<int>(state.range(1));
  std::mt19937 rng(kSeed);
  const sched::ClusterSnapshot cluster = MakeCluster(nodes, rng);
  const std::vector<sched::JobRequest> queue = MakeQueue(jobs, rng);
  const sched::Scheduler scheduler;

  std::vector<sched::Decision> decisions;
  for (auto _ : state) {
    decisions = scheduler.Schedule(cluster, queue);
    benchmark::DoNotOptimize(decisions.data());
    benchmark::ClobberMemory();
  }

  int placed = 0, retry = 0, infeasible = 0;
  for (const sched::Decision& d : decisions) {
    switch (d.outcome) {
      case sched::Outcome::kPlaced: ++placed; break;
      case sched::Outcome::kRetryLater:
      case sched::Outcome::kPreempting: ++retry; break;
      case sched::Outcome::kInfeasible: ++infeasible; break;
    }
  }
  state.SetItemsProcessed(state.iterations() * jobs);
  state.counters["gpus"] = nodes * kGpusPerNode;
  state.counters["placed"] = placed;
  state.counters["retry"] = retry;
  state.counters["infeasible"] = infeasible;
}

BENCHMARK(BM_Schedule)
    ->ArgNames({"nodes", "jobs"})
    ->ArgsProduct({{8, 64, 512}, {100, 1000, 10000}})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace trainctl::bench

BENCHMARK_MAIN();
