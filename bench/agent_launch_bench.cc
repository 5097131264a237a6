// How fast the agent starts tasks: worker::Agent with a
// real PosixProcessLauncher (posix_spawn, process groups, log files) and a
// fake GPU inventory, fed StartTask messages the way the coordinator sends
// them for one-GPU experiments on an 8-GPU node: at most `slots` tasks run at
// once, and each reported exit lets the next StartTask in (as the coordinator
// does when a GPU frees). No coordinator, no gRPC: this is the agent's own
// floor for the end-to-end comparison with Slurm (bench/slurm/compare.sh).
//
// One iteration runs kTasks tasks (--smoke: 20). Counters:
//   tasks_per_s       tasks started and reported EXITED per second
//   start_p50_us,     StartTask handed to the agent -> its RUNNING report
//   start_p99_us      emitted (the spawn, on the agent's side)
//   cycle_p50_us,     StartTask -> EXITED report (spawn, the process's whole
//   cycle_p99_us      life, reaping, the report)
//   agent_cpu_us_per_task  CPU time of this process (the agent's side) per
//                     task, and of the tasks themselves (the shim and what it
//   task_cpu_us_per_task   runs; reaped children): steadier than wall time
//                     on a shared machine
//
// Cases: shim:0/1 (tasks started directly, as a non-root trainctl-agent
// does, its guard process (worker/hw/agent_guard.h) keeping tasks from
// outliving it; or through trainctl-task-shim, as a root agent does by
// default); cmd:0 `true`, cmd:1 the Slurm comparison's job
// `sh -c 'date +%s%N > FILE'`; runas:1 (root only, else skipped): each task
// runs as the account "nobody", the shim dropping to it (setgroups, setgid,
// setuid) before it execs the task, as for a job of an authenticated user.
//
// Flags (besides Google Benchmark's): --shim=PATH of trainctl-task-shim
// (default: next to this binary); --dir=DIR for the task logs (default
// $TMPDIR: compare a disk with tmpfs, /dev/shm, to see what creating each
// task's log directory and file costs); --smoke: 20 tasks per iteration.

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "common/logging.h"
#include "worker/agent.h"
#include "worker/hw/fake_gpu_inventory.h"
#include "worker/hw/posix_process_launcher.h"

namespace trainctl::bench {
namespace {

namespace fs = std::filesystem;
using worker::Agent;
using worker::AgentConfig;
using worker::FakeGpuInventory;
using worker::FakeGpuSpec;
using worker::PosixProcessLauncher;

int g_tasks = 1000;
constexpr int kSlots = 8;
std::string g_shim;
std::string g_dir;  // --dir: where logs and stamps go (default $TMPDIR)

// CPU seconds (user + system) of this process, or of its reaped children
// (the tasks, with their own children).
double CpuSeconds(int who) {
  rusage u{};
  getrusage(who, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::max(1.0, std::ceil(v.size() * p / 100)));
  return v[std::min(v.size(), rank) - 1];
}

// What the agent reports, with the time each report was emitted.
class Recorder {
 public:
  void Record(const v1::AgentMessage& msg) {
    if (!msg.has_task_status()) return;
    absl::MutexLock lock(&mu_);
    const int64_t job = msg.task_status().task().job_id();
    if (msg.task_status().state() == v1::TASK_STATE_RUNNING) {
      running_[job] = absl::Now();
    } else {
      exited_.push_back(job);
      exit_times_[job] = absl::Now();
      if (msg.task_status().exit_code() != 0) ++failed_;
    }
  }
  // Blocks until an exit not yet taken was reported; returns its job id.
  int64_t NextExit() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](std::deque<int64_t>* q) { return !q->empty(); }, &exited_));
    const int64_t job = exited_.front();
    exited_.pop_front();
    return job;
  }
  absl::Time RunningAt(int64_t job) {
    absl::MutexLock lock(&mu_);
    return running_[job];
  }
  absl::Time ExitedAt(int64_t job) {
    absl::MutexLock lock(&mu_);
    return exit_times_[job];
  }
  int failed() {
    absl::MutexLock lock(&mu_);
    return failed_;
  }

 private:
  absl::Mutex mu_;
  std::deque<int64_t> exited_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, absl::Time> running_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, absl::Time> exit_times_ ABSL_GUARDED_BY(mu_);
  int failed_ ABSL_GUARDED_BY(mu_) = 0;
};

v1::CoordinatorMessage StartMessage(int64_t job, int gpu, bool date_cmd,
                                    const std::string& stamp_dir) {
  v1::CoordinatorMessage msg;
  v1::StartTask* s = msg.mutable_start_task();
  s->mutable_task()->set_job_id(job);
  s->mutable_task()->set_attempt(0);
  s->mutable_task()->set_rank(0);
  if (date_cmd) {
    s->add_argv("sh");
    s->add_argv("-c");
    s->add_argv(absl::StrCat("date +%s%N > ", stamp_dir, "/", job));
  } else {
    s->add_argv("true");
  }
  auto& env = *s->mutable_env();
  env["CUDA_VISIBLE_DEVICES"] = absl::StrCat("GPU-fake-", gpu);
  env["RANK"] = "0";
  env["WORLD_SIZE"] = "1";
  env["LOCAL_RANK"] = "0";
  env["LOCAL_WORLD_SIZE"] = "1";
  env["TRAINCTL_JOB_ID"] = absl::StrCat(job);
  env["TRAINCTL_ATTEMPT"] = "0";
  env["PATH"] = "/usr/bin:/bin";
  return msg;
}

void BM_AgentLaunch(benchmark::State& state) {
  const bool shim = state.range(0) != 0;
  const bool date_cmd = state.range(1) != 0;
  const bool run_as = state.range(2) != 0;
  if (run_as && geteuid() != 0) {
    state.SkipWithError("runas:1 needs root (the shim's setuid)");
    for (auto _ : state) {
    }
    return;
  }
  const fs::path dir = (g_dir.empty() ? fs::temp_directory_path() : fs::path(g_dir)) /
                       absl::StrCat("trainctl-launch-bench-", getpid());
  std::vector<double> start_us, cycle_us;
  int64_t next_job = 1;
  int failed = 0;
  double agent_cpu = 0, task_cpu = 0;
  for (auto _ : state) {
    state.PauseTiming();
    fs::remove_all(dir);
    fs::create_directories(dir / "stamps");
    // Tasks running as "nobody" write their stamps here too.
    fs::permissions(dir, fs::perms::all);
    fs::permissions(dir / "stamps", fs::perms::all);
    PosixProcessLauncher::Options options;
    if (shim) options.task_shim = g_shim;
    auto launcher = std::make_unique<PosixProcessLauncher>(options);
    FakeGpuSpec spec;
    spec.count = kSlots;
    FakeGpuInventory inventory(spec, "bench-node");
    AgentConfig config;
    config.node_name = "bench-node";
    config.log_dir = (dir / "logs").string();
    config.fake_gpus = true;
    Agent agent(config, &inventory, launcher.get());
    Recorder recorder;
    agent.Connected([&recorder](const v1::AgentMessage& m) { recorder.Record(m); });
    std::map<int64_t, absl::Time> sent;
    std::map<int64_t, int> gpu_of;
    const double self0 = CpuSeconds(RUSAGE_SELF);
    const double children0 = CpuSeconds(RUSAGE_CHILDREN);
    state.ResumeTiming();

    int started = 0, done = 0;
    auto start_one = [&](int gpu) {
      const int64_t job = next_job++;
      sent[job] = absl::Now();
      gpu_of[job] = gpu;
      v1::CoordinatorMessage msg = StartMessage(job, gpu, date_cmd, (dir / "stamps").string());
      if (run_as) msg.mutable_start_task()->set_run_as_user("nobody");
      agent.Handle(msg);
      ++started;
    };
    for (int g = 0; g < kSlots && started < g_tasks; ++g) start_one(g);
    while (done < g_tasks) {
      const int64_t job = recorder.NextExit();
      ++done;
      if (started < g_tasks) start_one(gpu_of[job]);
    }

    state.PauseTiming();
    agent_cpu += CpuSeconds(RUSAGE_SELF) - self0;
    task_cpu += CpuSeconds(RUSAGE_CHILDREN) - children0;
    for (const auto& [job, at] : sent) {
      start_us.push_back(absl::ToDoubleMicroseconds(recorder.RunningAt(job) - at));
      cycle_us.push_back(absl::ToDoubleMicroseconds(recorder.ExitedAt(job) - at));
    }
    failed += recorder.failed();
    launcher.reset();  // Before the agent: its exit callbacks reach the agent.
    fs::remove_all(dir);
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * g_tasks);
  state.counters["tasks_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * g_tasks),
                         benchmark::Counter::kIsRate);
  state.counters["start_p50_us"] = Percentile(start_us, 50);
  state.counters["start_p99_us"] = Percentile(start_us, 99);
  state.counters["cycle_p50_us"] = Percentile(cycle_us, 50);
  state.counters["cycle_p99_us"] = Percentile(cycle_us, 99);
  const double tasks = static_cast<double>(state.iterations() * g_tasks);
  state.counters["agent_cpu_us_per_task"] = agent_cpu * 1e6 / tasks;
  state.counters["task_cpu_us_per_task"] = task_cpu * 1e6 / tasks;
  state.counters["failed"] = failed;
  if (failed > 0) state.SkipWithError("some tasks exited non-zero");
}
BENCHMARK(BM_AgentLaunch)
    ->ArgNames({"shim", "cmd", "runas"})
    ->Args({0, 0, 0})
    ->Args({1, 0, 0})
    ->Args({1, 0, 1})
    ->Args({0, 1, 0})
    ->Args({1, 1, 0})
    ->Args({1, 1, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);

}  // namespace
}  // namespace trainctl::bench

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--smoke") {
      trainctl::bench::g_tasks = 20;
    } else if (arg.rfind("--dir=", 0) == 0) {
      trainctl::bench::g_dir = arg.substr(6);
    } else if (arg.rfind("--shim=", 0) == 0) {
      trainctl::bench::g_shim = arg.substr(7);
    } else {
      args.push_back(argv[i]);
    }
  }
  if (trainctl::bench::g_shim.empty()) {
    std::error_code ec;
    trainctl::bench::g_shim =
        (std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() /
         "trainctl-task-shim")
            .string();
  }
  if (access(trainctl::bench::g_shim.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "no trainctl-task-shim at %s; pass --shim=PATH\n",
                 trainctl::bench::g_shim.c_str());
    return 2;
  }
  trainctl::InitLogging("bench", "warn");
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
