// The coordinator's cost per scheduling event with a deep pending queue:
// what a task exit costs in coord::Coordinator (its lock held:
// building the scheduler's queue and snapshot, Schedule(), applying every
// decision) when `jobs` jobs wait, and how coalescing serves a burst of exits
// that arrive together.
//
// Setup (untimed): `jobs` PENDING jobs written to a MemoryStateStore and
// loaded by Coordinator::Create (as after a restart: submitting them one by
// one would run a pass per submit); `nodes` fake agents x 8 GPUs (80 GiB)
// register, and every task started is reported RUNNING. The queue: 1-GPU
// experiments (40%), half-GPU experiments (30%), 2/4/8-GPU gangs (30%), in
// two queues, priorities 0 and 1.
//
// - BM_ExitEvent: one thread; each iteration reports one running task EXITED
//   (HandleAgentMessage), which runs one pass; the replacement jobs it starts
//   are reported RUNNING untimed. Time per iteration = the event's cost, lock
//   held nearly all of it.
// - BM_ExitBurst: each iteration, `burst` threads report one exit each at
//   once; passes_per_burst counts the passes that served them (one per exit
//   before coalescing).
//
// Counters: passes (per event or burst), pass_ms (CoordinatorConfig::
// on_schedule_pass, RealClock), started (jobs started per iteration).
//
// Run: trainctl-bench-coordinator-depth [--benchmark_filter=...]
// (bench/README.md, "Scheduler throughput", has the command for
// bench/results/coordinator_depth.json).

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "common/clock.h"
#include "common/logging.h"
#include "coordinator/coordinator.h"
#include "coordinator/job_spec.h"
#include "coordinator/state_store.h"
#include "coordinator/testing/fake_agent_connection.h"

namespace trainctl::bench {
namespace {

using coord::testing::FakeAgentConnection;

constexpr int kGpusPerNode = 8;

v1::JobSpec SpecFor(int64_t id) {
  v1::JobSpec spec;
  spec.add_command("python");
  spec.add_command("train.py");
  spec.set_queue(id % 3 == 0 ? "research" : "prod");
  spec.set_user(absl::StrCat("user", id % 20));
  if (id % 10 == 0) spec.set_priority(1);
  const int kind = static_cast<int>(id % 10);
  if (kind < 4) {
    spec.set_gpus(1);
  } else if (kind < 7) {
    spec.set_gpu_fraction(0.5);
  } else {
    static const int kGang[] = {2, 4, 8};
    spec.set_gpus(kGang[kind - 7]);
  }
  return spec;
}

// A coordinator with `jobs` pending jobs and `nodes` busy agents.
class DeepQueue {
 public:
  DeepQueue(int nodes, int jobs) {
    for (int64_t id = 1; id <= jobs; ++id) {
      v1::Job job;
      job.set_id(id);
      *job.mutable_spec() = SpecFor(id);
      job.set_kind(coord::KindOf(job.spec()));
      job.set_state(v1::JOB_STATE_PENDING);
      job.set_reason("waiting to be scheduled");
      job.set_submit_time_ms(1);
      store_.PutJob(job).IgnoreError();
    }
    coord::CoordinatorConfig config;
    config.advertise_address = "coord.example:50051";
    config.scheduler.policy.queues = {{"prod", 3.0}, {"research", 1.0}};
    config.hooks.on_schedule_pass = [this](absl::Duration took) {
      passes_.fetch_add(1);
      pass_ns_.fetch_add(absl::ToInt64Nanoseconds(took));
    };
    core_ = *coord::Coordinator::Create(config, &store_, &clock_);
    conns_.resize(nodes);
    for (int n = 0; n < nodes; ++n) {
      conns_[n] = std::make_unique<FakeAgentConnection>();
      v1::RegisterNode reg =
          coord::testing::FakeNodeRegistration(NodeName(n), kGpusPerNode);
      // A MASTER_PORT for each of up to 8 x 8 tasks sharing the GPUs.
      reg.mutable_node()->set_port_max(29599);
      core_->RegisterAgent(reg, conns_[n].get()).IgnoreError();
    }
    core_->WaitForWrites().IgnoreError();
    ReportNewStarts();
  }

  // Reports RUNNING for tasks started since the last call; returns how many.
  int ReportNewStarts() {
    int count = 0;
    for (size_t n = 0; n < conns_.size(); ++n) {
      FakeAgentConnection& c = *conns_[n];
      for (; seen_[n] < c.sent.size(); ++seen_[n]) {
        if (!c.sent[seen_[n]].has_start_task()) continue;
        const v1::StartTask& start = c.sent[seen_[n]].start_task();
        core_->HandleAgentMessage(NodeName(static_cast<int>(n)), &c,
                                  Status(start, v1::TASK_STATE_RUNNING))
            .IgnoreError();
        running_.push_back({static_cast<int>(n), start});
        ++count;
      }
    }
    return count;
  }

  // Reports the oldest running task EXITED.
  void ExitOne() {
    std::pair<int, v1::StartTask> t;
    {
      absl::MutexLock lock(&mu_);
      t = std::move(running_.front());
      running_.pop_front();
    }
    core_->HandleAgentMessage(NodeName(t.first), conns_[t.first].get(),
                              Status(t.second, v1::TASK_STATE_EXITED))
        .IgnoreError();
  }

  int64_t passes() const { return passes_.load(); }
  int64_t pass_ns() const { return pass_ns_.load(); }

 private:
  static std::string NodeName(int n) { return absl::StrCat("node-", n); }

  static v1::AgentMessage Status(const v1::StartTask& start, v1::TaskState state) {
    v1::AgentMessage msg;
    v1::TaskStatus* st = msg.mutable_task_status();
    *st->mutable_task() = start.task();
    st->mutable_task()->set_pid(100);
    st->set_state(state);
    st->set_exit_code(0);
    return msg;
  }

  RealClock clock_;
  coord::MemoryStateStore store_;
  std::unique_ptr<coord::Coordinator> core_;
  std::vector<std::unique_ptr<FakeAgentConnection>> conns_;
  std::vector<size_t> seen_ = std::vector<size_t>(4096, 0);
  absl::Mutex mu_;
  std::deque<std::pair<int, v1::StartTask>> running_;
  std::atomic<int64_t> passes_{0};
  std::atomic<int64_t> pass_ns_{0};
};

// Args: nodes, pending jobs.
void BM_ExitEvent(benchmark::State& state) {
  DeepQueue q(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  const int64_t passes0 = q.passes();
  const int64_t ns0 = q.pass_ns();
  int64_t started = 0;
  for (auto _ : state) {
    q.ExitOne();
    state.PauseTiming();
    started += q.ReportNewStarts();
    state.ResumeTiming();
  }
  const double events = static_cast<double>(state.iterations());
  const double passes = static_cast<double>(q.passes() - passes0);
  state.counters["passes"] = passes / events;
  state.counters["pass_ms"] =
      passes > 0 ? 1e-6 * static_cast<double>(q.pass_ns() - ns0) / passes : 0;
  state.counters["started"] = static_cast<double>(started) / events;
}

// Args: nodes, pending jobs, exits per burst.
void BM_ExitBurst(benchmark::State& state) {
  DeepQueue q(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  const int burst = static_cast<int>(state.range(2));
  const int64_t passes0 = q.passes();
  int64_t started = 0;
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (int i = 0; i < burst; ++i) threads.emplace_back([&q] { q.ExitOne(); });
    for (std::thread& t : threads) t.join();
    state.PauseTiming();
    started += q.ReportNewStarts();
    state.ResumeTiming();
  }
  const double bursts = static_cast<double>(state.iterations());
  state.counters["passes_per_burst"] =
      static_cast<double>(q.passes() - passes0) / bursts;
  state.counters["started"] = static_cast<double>(started) / bursts;
}

BENCHMARK(BM_ExitEvent)
    ->ArgNames({"nodes", "jobs"})
    ->Args({125, 1000})
    ->Args({125, 10000})
    ->Args({125, 100000})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExitBurst)
    ->ArgNames({"nodes", "jobs", "burst"})
    ->Args({125, 100000, 16})
    ->Unit(benchmark::kMillisecond);

// Tiny, for the ctest smoke entry.
BENCHMARK(BM_ExitEvent)
    ->Name("BM_ExitEventSmoke")
    ->ArgNames({"nodes", "jobs"})
    ->Args({4, 200})
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExitBurst)
    ->Name("BM_ExitBurstSmoke")
    ->ArgNames({"nodes", "jobs", "burst"})
    ->Args({4, 200, 4})
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace trainctl::bench

int main(int argc, char** argv) {
  trainctl::InitLogging("trainctl-bench-coordinator-depth", "warn");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
