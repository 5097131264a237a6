// What one per-task sample costs the agent (worker/hw/proc_stats.h), the
// old way and the new, side by side: a task of 9 processes (this process
// and 8 children standing for DataLoader workers, one process group) on a
// host with `bg` other processes (idle children of their own process
// groups, on top of the host's own).
//
//   members:0  the walk: every /proc/<pid>/stat on the host is read to find
//              the task's process group (what the agent does for a task
//              without a cgroup, and did for every task before)
//   members:1  the task's processes given (as the agent now takes them from
//              the task's cgroup, CgroupTree::Pids): their 9 stat files only
//
// Each iteration is one ProcessGroupSampler::Sample() of the task. Counter
// procs_on_host: the entries of /proc at the start. Run with
// --benchmark_enable_random_interleaving=true so the cases alternate.
// --smoke: no background processes (bg:0 only), for CI.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "worker/hw/proc_stats.h"

namespace trainctl::bench {
namespace {

constexpr int kWorkers = 8;

// Children that wait until killed: `own_group` puts each in a process group
// of its own (another job's process), else they stay in ours (the task's).
std::vector<pid_t> Spawn(int n, bool own_group) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      if (own_group) setpgid(0, 0);
      for (;;) pause();
    }
    if (pid > 0) pids.push_back(pid);
  }
  return pids;
}

void Reap(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) kill(p, SIGKILL);
  for (pid_t p : pids) waitpid(p, nullptr, 0);
}

int ProcEntries() {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    n += std::isdigit(static_cast<unsigned char>(e.path().filename().string()[0])) != 0;
  }
  return n;
}

void BM_TaskSample(benchmark::State& state) {
  const bool members = state.range(0) != 0;
  const int bg = static_cast<int>(state.range(1));
  // The task leads its own process group, as every task the agent starts.
  setpgid(0, 0);
  const pid_t task = getpid();
  std::vector<pid_t> workers = Spawn(kWorkers, /*own_group=*/false);
  std::vector<pid_t> others = Spawn(bg, /*own_group=*/true);
  std::map<int, std::vector<int>> given;
  if (members) {
    given[task].push_back(task);
    given[task].insert(given[task].end(), workers.begin(), workers.end());
  }
  worker::ProcessGroupSampler sampler;
  size_t found = 0;
  for (auto _ : state) {
    std::map<int, worker::GroupUsage> u = sampler.Sample({task}, given);
    found = u[task].pids.size();
    benchmark::DoNotOptimize(u);
  }
  state.counters["procs_on_host"] = ProcEntries();
  state.counters["task_procs_found"] = static_cast<double>(found);
  Reap(others);
  Reap(workers);
  if (found != kWorkers + 1) state.SkipWithError("the sample did not find the task's processes");
}

bool g_smoke = false;

}  // namespace
}  // namespace trainctl::bench

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--smoke") == 0) {
      trainctl::bench::g_smoke = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  auto* b = benchmark::RegisterBenchmark("BM_TaskSample", trainctl::bench::BM_TaskSample)
                ->ArgNames({"members", "bg"})
                ->Unit(benchmark::kMicrosecond);
  for (int bg : trainctl::bench::g_smoke ? std::vector<int>{0} : std::vector<int>{0, 1000}) {
    b->Args({0, bg})->Args({1, bg});
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
