// Differential test of the scheduler's free-capacity indexes: on random
// clusters, queues and policies, Schedule() and Explain() with the indexes
// (the default) must give exactly the decisions of the linear scans
// (SchedulerConfig.linear_search, the reference): same outcome, placement,
// reason, victims, ETA and interleave packing for every job, in the same
// order.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/sched/scheduler.h"
#include "gtest/gtest.h"

namespace trainctl::sched {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// One decision in words, for comparison and for readable failures.
std::string Describe(const Decision& d) {
  std::vector<std::string> nodes;
  for (const NodeAssignment& a : d.placement.nodes) {
    nodes.push_back(absl::StrCat(a.node, "[", absl::StrJoin(a.gpu_indices, ","),
                                 "]"));
  }
  return absl::StrCat("job ", d.job_id, " outcome ", static_cast<int>(d.outcome),
                      " packed_with ", absl::StrJoin(d.packed_with, ","),
                      " on ", absl::StrJoin(nodes, " "), " bytes ",
                      d.placement.reserved_bytes_per_gpu, " preempt ",
                      absl::StrJoin(d.preempt, ","), " eta ", d.eta_s,
                      " reason: ", d.reason);
}

std::string Describe(const Explanation& e) {
  return absl::StrCat(Describe(e.decision), " | position ", e.position,
                      " queue ", e.queue, " quota ", e.quota, " nodes ",
                      absl::StrJoin(e.nodes, "; "), " reservation ",
                      e.reservation_job, " ", e.reservation, " ",
                      e.reservation_eta_s, " preempted_for ", e.preempted_for);
}

class RandomCase {
 public:
  explicit RandomCase(uint32_t seed) : rng_(seed), profile_rng_(seed) {}

  // Interleave profiles come from their own generator, so the other draws
  // (and the cases they make) stay as they were before profiles existed.
  // Half the jobs get one of three Muri 4-GPU profiles (gpt2, shufflenet,
  // resnet18), the rest none.
  InterleaveProfile RandomProfile() {
    static const InterleaveProfile kProfiles[] = {
        {{0.6, 413, 20}, 439.5}, {{703, 62, 17}, 899.3}, {{723, 113, 73}, 934.8}};
    if (!std::bernoulli_distribution(0.5)(profile_rng_)) return {};
    return kProfiles[std::uniform_int_distribution<int>(0, 2)(profile_rng_)];
  }

  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  SchedulerConfig Config() {
    SchedulerConfig config;
    config.max_tasks_per_gpu = 1 + Pick(4);
    config.wait_reasons = Chance(0.8);
    PolicyConfig& p = config.policy;
    p.order = Chance(0.5) ? QueueOrder::kLas : QueueOrder::kFifo;
    p.backfill = Chance(0.8);
    p.preemption = Chance(0.7);
    p.max_preemption_searches = 1 + Pick(4);
    if (Chance(0.5)) p.queues = {{"a", 2.0}, {"b", 1.0}};
    if (Chance(0.3)) p.user_gpu_quota = {{"u0", 2.0}, {"*", 6.0}};
    if (Chance(0.2)) p.project_gpu_quota = {{"p1", 3.5}};
    if (Chance(0.3)) p.reservation_min_wait_s = 600;
    return config;
  }

  ClusterSnapshot Cluster() {
    static constexpr int64_t kMemories[] = {16, 24, 80, 141};
    ClusterSnapshot cluster;
    const int nodes = Pick(9);  // Sometimes none.
    for (int n = 0; n < nodes; ++n) {
      NodeState node;
      // Names not in position order, so the name tie-break matters.
      node.name = absl::StrCat("node-", (n * 7) % 11, "-", n);
      node.schedulable = !Chance(0.1);
      const int gpus = Pick(9);
      const int64_t memory = kMemories[Pick(4)] * kGiB;
      // NVML indexes, unique on a node, sometimes not in position order.
      const bool reversed = Chance(0.2);
      for (int g = 0; g < gpus; ++g) {
        GpuState gpu;
        gpu.index = reversed ? gpus - 1 - g : g;
        gpu.uuid = absl::StrCat("GPU-", n, "-", g);
        gpu.memory_total_bytes = Chance(0.05) ? 0 : memory;
        node.gpus.push_back(gpu);
      }
      // NVLink islands: halves, or all, or none.
      const int mode = Pick(3);
      for (GpuState& gpu : node.gpus) {
        for (const GpuState& peer : node.gpus) {
          if (peer.index == gpu.index || mode == 0) continue;
          if (mode == 1 || (peer.index < gpus / 2) == (gpu.index < gpus / 2)) {
            gpu.nvlink_peers.push_back(peer.index);
          }
        }
      }
      cluster.nodes.push_back(std::move(node));
    }
    // Running jobs on some GPUs (their reservations added to the GPUs), and
    // some usage no running job accounts for.
    int64_t id = 1000;
    for (NodeState& node : cluster.nodes) {
      for (GpuState& gpu : node.gpus) {
        if (gpu.memory_total_bytes <= 0 || !Chance(0.5)) continue;
        const int tasks = 1 + Pick(3);
        for (int t = 0; t < tasks; ++t) {
          const bool whole = t == 0 && Chance(0.3);
          const int64_t bytes =
              whole ? gpu.memory_total_bytes : gpu.memory_total_bytes / (2 + Pick(4));
          if (gpu.reserved_bytes + bytes > gpu.memory_total_bytes) break;
          gpu.reserved_bytes += bytes;
          ++gpu.task_count;
          if (Chance(0.2)) continue;  // Unknown to the scheduler.
          RunningJob r;
          r.job_id = ++id;
          r.priority = Pick(3) - 1;
          r.submit_seq = Pick(60);
          r.queue = Chance(0.5) ? "a" : "b";
          r.user = absl::StrCat("u", Pick(3));
          r.project = absl::StrCat("p", Pick(2));
          r.preemptible = Chance(0.6);
          r.attained_gpu_s = Pick(3) * 4000.0;
          r.remaining_s = Chance(0.6) ? Pick(5000) : -1;
          r.placement.nodes.push_back({node.name, {gpu.index}});
          r.placement.reserved_bytes_per_gpu = bytes;
          r.interleave = RandomProfile();
          cluster.running.push_back(std::move(r));
          if (whole) break;
        }
      }
    }
    return cluster;
  }

  // Up to `max_jobs` pending jobs (fewer, sometimes none).
  std::vector<JobRequest> Queue(int max_jobs = 40) {
    std::vector<JobRequest> queue;
    const int jobs = Pick(max_jobs);
    for (int i = 0; i < jobs; ++i) {
      JobRequest job;
      job.job_id = i + 1;
      job.submit_seq = Pick(80);
      job.priority = Pick(3) - 1;
      job.queue = Chance(0.4) ? "a" : (Chance(0.5) ? "b" : "");
      job.user = absl::StrCat("u", Pick(3));
      job.project = absl::StrCat("p", Pick(2));
      job.time_limit_s = Chance(0.4) ? Pick(6000) : 0;
      job.preemptible = Chance(0.4);
      job.attained_gpu_s = Pick(3) * 4000.0;
      if (Chance(0.1) && i > 0) job.standing.preempted_for = 1 + Pick(i + 3);
      job.standing.victims_stopping = Chance(0.05);
      job.standing.waited_s = Pick(1200);
      if (Chance(0.55)) {
        job.kind = JobKind::kExperiment;
        static constexpr double kFractions[] = {0.1, 0.25, 0.5, 1.0, 0.3};
        job.gpu_fraction = kFractions[Pick(5)];
        if (Chance(0.25)) job.gpu_memory_bytes = (1 + Pick(30)) * kGiB;
        if (Chance(0.02)) job.gpu_fraction = 1.5;  // Malformed.
      } else {
        job.kind = JobKind::kGang;
        if (Chance(0.5)) {
          job.total_gpus = 1 + Pick(16);
        } else {
          job.nodes = 1 + Pick(3);
          job.gpus_per_node = 1 + Pick(8);
          job.total_gpus = job.nodes * job.gpus_per_node;
        }
        if (Chance(0.3)) job.placement = GangPlacement::kSpread;
        job.interleave = RandomProfile();
      }
      queue.push_back(job);
    }
    return queue;
  }

 private:
  std::mt19937 rng_;
  std::mt19937 profile_rng_;
};

// Schedule() and Explain() with the indexes against the linear scans on
// `seeds` random cases of up to `max_jobs` pending jobs. Returns the counts
// of placed, preempting and waiting decisions.
struct Counts {
  int placed = 0, preempting = 0, waiting = 0, packed = 0;
};
Counts CompareOnRandomCases(uint32_t first_seed, int seeds, int max_jobs) {
  Counts counts;
  int& placed = counts.placed;
  int& preempting = counts.preempting;
  int& waiting = counts.waiting;
  int& packed = counts.packed;
  for (uint32_t seed = first_seed; seed < first_seed + seeds; ++seed) {
    RandomCase random(seed);
    SchedulerConfig config = random.Config();
    const ClusterSnapshot cluster = random.Cluster();
    const std::vector<JobRequest> queue = random.Queue(max_jobs);
    SchedulerConfig linear = config;
    linear.linear_search = true;
    const std::vector<Decision> got = Scheduler(config).Schedule(cluster, queue);
    const std::vector<Decision> want =
        Scheduler(linear).Schedule(cluster, queue);
    EXPECT_EQ(got.size(), want.size()) << "seed " << seed;
    if (got.size() != want.size()) return counts;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(Describe(got[i]), Describe(want[i]))
          << "seed " << seed << ", decision " << i;
      if (Describe(got[i]) != Describe(want[i])) return counts;
      placed += got[i].outcome == Outcome::kPlaced;
      preempting += got[i].outcome == Outcome::kPreempting;
      waiting += got[i].outcome == Outcome::kRetryLater;
      packed += !got[i].packed_with.empty();
    }
    if (!queue.empty()) {
      const int64_t id = queue[seed % queue.size()].job_id;
      const std::optional<Explanation> e =
          Scheduler(config).Explain(cluster, queue, id);
      const std::optional<Explanation> w =
          Scheduler(linear).Explain(cluster, queue, id);
      EXPECT_TRUE(e.has_value() && w.has_value());
      if (!e.has_value() || !w.has_value()) return counts;
      EXPECT_EQ(Describe(*e), Describe(*w)) << "seed " << seed;
    }
  }
  return counts;
}

TEST(SchedulerIndexTest, Schedule_RandomClusters_IndexesDecideAsLinearScans) {
  const Counts counts = CompareOnRandomCases(1, 1500, 40);
  // The cases exercise every path, not only one.
  EXPECT_GT(counts.placed, 1000);
  EXPECT_GT(counts.preempting, 50);
  EXPECT_GT(counts.waiting, 1000);
  EXPECT_GT(counts.packed, 20);
}

// Long queues on small clusters: most jobs wait behind the head-of-queue
// hold, where the tail's fast path (SchedulePass::DecideTail) decides them
// from their shape without the full rules. It must decide exactly as the
// linear scans do, reasons included.
TEST(SchedulerIndexTest, Schedule_LongQueues_TailDecidesAsLinearScans) {
  const Counts counts = CompareOnRandomCases(5001, 150, 400);
  EXPECT_GT(counts.placed, 500);
  EXPECT_GT(counts.waiting, 10000);
}

}  // namespace
}  // namespace trainctl::sched
