// Measures coord::Coordinator::SubmitJob() end to end in the core (validate,
// store, schedule, StartTask sent to the agent) in a steady state:
// items_per_second is accepted submits per second, the time is per SubmitJob
// call (us). Stores: MemoryStateStore, and SqliteStateStore (WAL,
// synchronous=FULL) in a temporary directory, so every submit waits for
// durable commits; the write counters say how many.
//
// Cluster: 16 fake agents x 8 GPUs (80 GiB). Each submit is a one-GPU
// experiment; after each submit the oldest started tasks are reported EXITED
// (HandleAgentMessage, untimed) until `live` tasks remain, so the cluster
// never fills: live:64 keeps half the GPUs busy. The core keeps finished jobs
// in memory, and each submit scans them, so `history` (finished jobs already
// there when timing starts) is an argument, and each case runs a fixed number
// of submits (kSubmits) so history grows the same in every run.
//
// Counters (per case):
//   store_writes_per_submit  StateStore::Put*/EnqueuePut* calls inside SubmitJob
//   commits_per_job          SQLite transactions (fsyncs) per submitted job,
//                            its exit included (group commit coalesces)
//   cycle_jobs_per_s         jobs/s counting the untimed EXITED reports too
//                            (submit + finish: a sustained job stream)
//   history_end              jobs the core held at the end
//
// BM_SubmitJobs: one SubmitJobs call of 64 or 500 jobs (a job array or a
// sweep in one call): jobs accepted per second and commits per call.
//
// Flags (besides Google Benchmark's): --sqlite_dir=DIR where the SQLite file
// goes (default $TMPDIR or /tmp; must be a real disk for honest figures);
// --smoke: tiny sizes for the bench_smoke test.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "benchmark/benchmark.h"
#include "common/clock.h"
#include "common/logging.h"
#include "coordinator/coordinator.h"
#include "coordinator/state_store.h"

namespace trainctl::bench {
namespace {

constexpr int kNodes = 16;
constexpr int kGpusPerNode = 8;
constexpr int64_t kGpuBytes = int64_t{80} << 30;

// Set from the command line in main().
int g_submits = 2000;
int g_big_history = 10000;
std::string g_sqlite_dir;

// Counts writes, forwards to the real store (the queued path too, so the
// coordinator sees the SQLite store's group commit). Thread-safe.
class CountingStateStore : public coord::StateStore {
 public:
  explicit CountingStateStore(coord::StateStore* base) : base_(base) {}
  absl::Status PutJob(const v1::Job& job) override {
    ++writes_;
    return base_->PutJob(job);
  }
  absl::Status PutNode(const v1::Node& node) override {
    ++writes_;
    return base_->PutNode(node);
  }
  absl::StatusOr<coord::WriteTicket> EnqueuePutJob(const v1::Job& job) override {
    ++writes_;
    return base_->EnqueuePutJob(job);
  }
  absl::StatusOr<coord::WriteTicket> EnqueuePutNode(const v1::Node& node) override {
    ++writes_;
    return base_->EnqueuePutNode(node);
  }
  void WhenDurable(coord::WriteTicket ticket,
                   absl::AnyInvocable<void(absl::Status) &&> done) override {
    base_->WhenDurable(ticket, std::move(done));
  }
  void HoldCommits() override { base_->HoldCommits(); }
  void ReleaseCommits() override { base_->ReleaseCommits(); }
  absl::StatusOr<coord::StoredState> Load() override { return base_->Load(); }
  absl::StatusOr<coord::StoredState> LoadSummarized() override {
    return base_->LoadSummarized();
  }
  absl::StatusOr<std::vector<v1::Job>> ReadJobs(const std::vector<int64_t>& ids) override {
    return base_->ReadJobs(ids);
  }
  absl::StatusOr<std::string> ClusterId() override { return base_->ClusterId(); }
  int64_t writes() const { return writes_.load(); }

 private:
  coord::StateStore* const base_;
  std::atomic<int64_t> writes_{0};
};

// An agent's stream that drops everything but remembers the tasks it was told
// to start. Thread-safe (StartTask may come from the store's commit thread).
class FakeAgentConnection : public coord::AgentConnection {
 public:
  void Send(v1::CoordinatorMessage msg) override {
    if (!msg.has_start_task()) return;
    absl::MutexLock lock(&mu_);
    started_.push_back(msg.start_task().task());
  }
  void Close(const absl::Status& status) override {}
  std::vector<v1::TaskRef> TakeStarted() {
    absl::MutexLock lock(&mu_);
    return std::exchange(started_, {});
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::TaskRef> started_ ABSL_GUARDED_BY(mu_);
};

enum class StoreKind { kMemory, kSqlite };

// A coordinator core with kNodes registered fake agents, fed one-GPU
// experiments whose tasks exit so that at most `live` stay running.
class SteadyCluster {
 public:
  // Errors: the store's or the coordinator's.
  static absl::StatusOr<std::unique_ptr<SteadyCluster>> Create(StoreKind kind,
                                                               int live) {
    auto c = std::unique_ptr<SteadyCluster>(new SteadyCluster(live));
    if (kind == StoreKind::kMemory) {
      c->base_store_ = std::make_unique<coord::MemoryStateStore>();
    } else {
      char tmpl[4096];
      std::snprintf(tmpl, sizeof(tmpl), "%s/trainctl-bench-XXXXXX",
                    g_sqlite_dir.c_str());
      if (mkdtemp(tmpl) == nullptr) {
        return absl::UnavailableError(
            absl::StrCat("mkdtemp in ", g_sqlite_dir, ": ", std::strerror(errno)));
      }
      c->temp_dir_ = tmpl;
      auto sqlite = coord::SqliteStateStore::Open(c->temp_dir_ + "/state.db");
      if (!sqlite.ok()) return sqlite.status();
      c->base_store_ = std::move(*sqlite);
    }
    c->store_ = std::make_unique<CountingStateStore>(c->base_store_.get());
    auto core = coord::Coordinator::Create({}, c->store_.get(), &c->clock_);
    if (!core.ok()) return core.status();
    c->core_ = std::move(*core);
    for (int n = 0; n < kNodes; ++n) {
      v1::RegisterNode reg;
      v1::Node* node = reg.mutable_node();
      node->set_name(absl::StrCat("gpu-node-", n));
      node->set_address(absl::StrCat("gpu-node-", n, ".example"));
      node->set_cpu_count(64);
      node->set_port_min(29500);
      node->set_port_max(29599);
      for (int g = 0; g < kGpusPerNode; ++g) {
        v1::Gpu* gpu = node->add_gpus();
        gpu->set_index(g);
        gpu->set_uuid(absl::StrCat("GPU-", n, "-", g));
        gpu->set_name("Fake H200");
        gpu->set_memory_total_bytes(kGpuBytes);
      }
      c->agents_.push_back(std::make_unique<FakeAgentConnection>());
      absl::Status s = c->core_->RegisterAgent(reg, c->agents_.back().get());
      if (!s.ok()) return s;
    }
    c->spec_.add_command("python");
    c->spec_.add_command("train.py");
    c->spec_.set_name("bench");
    c->spec_.set_gpus(1);
    return c;
  }

  ~SteadyCluster() {
    core_.reset();
    store_.reset();
    base_store_.reset();
    if (!temp_dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(temp_dir_, ec);
    }
  }

  // Submits one job; returns the seconds SubmitJob took. Errors: SubmitJob's,
  // or INTERNAL when the job was not started at once.
  absl::StatusOr<double> SubmitOne() {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<int64_t> id = core_->SubmitJob(spec_, "");
    const auto end = std::chrono::steady_clock::now();
    if (!id.ok()) return id.status();
    size_t before = live_.size();
    for (int n = 0; n < kNodes; ++n) {
      for (v1::TaskRef& ref : agents_[n]->TakeStarted()) {
        live_.push_back({n, std::move(ref)});
      }
    }
    if (live_.size() != before + 1) {
      return absl::InternalError(absl::StrCat(
          "job ", *id, " was not started at once (", live_.size() - before,
          " tasks started); the cluster should have room"));
    }
    ++jobs_;
    return std::chrono::duration<double>(end - start).count();
  }

  // Reports EXITED (exit 0) for the oldest tasks until at most `live` remain.
  absl::Status FinishDown() {
    while (static_cast<int>(live_.size()) > live_target_) {
      auto [n, ref] = std::move(live_.front());
      live_.pop_front();
      v1::AgentMessage msg;
      v1::TaskStatus* st = msg.mutable_task_status();
      *st->mutable_task() = ref;
      st->mutable_task()->set_pid(1000);
      st->set_state(v1::TASK_STATE_EXITED);
      st->set_exit_code(0);
      absl::Status s = core_->HandleAgentMessage(absl::StrCat("gpu-node-", n),
                                                 agents_[n].get(), msg);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  int64_t store_writes() const { return store_->writes(); }
  // Transactions (fsyncs) the SQLite store committed so far; 0 for memory.
  int64_t commits() const {
    auto* sqlite = dynamic_cast<coord::SqliteStateStore*>(base_store_.get());
    return sqlite != nullptr ? sqlite->commit_stats().commits : 0;
  }

  // Submits `n` jobs in one SubmitJobsAsync call (as `trainctl submit
  // --array` and `sweep` do) and waits for its ack; returns the seconds it
  // took. Errors: SubmitJobs'.
  absl::StatusOr<double> SubmitBatch(int n) {
    std::vector<v1::JobSpec> specs(n, spec_);
    absl::Notification done;
    absl::Status status;
    const auto start = std::chrono::steady_clock::now();
    core_->SubmitJobsAsync(std::move(specs), "",
                           [&](absl::StatusOr<std::vector<int64_t>> ids) {
                             status = ids.status();
                             done.Notify();
                           });
    done.WaitForNotification();
    const auto end = std::chrono::steady_clock::now();
    if (!status.ok()) return status;
    jobs_ += n;
    return std::chrono::duration<double>(end - start).count();
  }

  // Submits one job from one of several threads; the caller serialises
  // Collect() calls. Returns the seconds SubmitJob took.
  absl::StatusOr<double> SubmitConcurrent() {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<int64_t> id = core_->SubmitJob(spec_, "");
    const auto end = std::chrono::steady_clock::now();
    if (!id.ok()) return id.status();
    return std::chrono::duration<double>(end - start).count();
  }
  // Takes the started tasks from every agent, then finishes the oldest down
  // to `live`. Not thread-safe.
  absl::Status Collect() {
    for (int n = 0; n < kNodes; ++n) {
      for (v1::TaskRef& ref : agents_[n]->TakeStarted()) {
        live_.push_back({n, std::move(ref)});
        ++jobs_;
      }
    }
    return FinishDown();
  }
  int64_t jobs() const { return jobs_; }

 private:
  explicit SteadyCluster(int live) : live_target_(live) {}

  const int live_target_;
  FakeClock clock_;
  std::string temp_dir_;
  // Declared in dependency order: the core uses the stores.
  std::unique_ptr<coord::StateStore> base_store_;
  std::unique_ptr<CountingStateStore> store_;
  std::unique_ptr<coord::Coordinator> core_;
  std::vector<std::unique_ptr<FakeAgentConnection>> agents_;
  v1::JobSpec spec_;
  std::deque<std::pair<int, v1::TaskRef>> live_;
  int64_t jobs_ = 0;
};

// Args: live tasks kept running, finished jobs in the core before timing.
void BM_SubmitJob(benchmark::State& state, StoreKind kind) {
  const int live = static_cast<int>(state.range(0));
  const int history = static_cast<int>(state.range(1));
  auto cluster = SteadyCluster::Create(kind, live);
  if (!cluster.ok()) {
    state.SkipWithError(std::string(cluster.status().message()).c_str());
    return;
  }
  SteadyCluster& c = **cluster;
  // Untimed: the history, then `live` tasks running.
  for (int i = 0; i < history + live; ++i) {
    absl::Status s = c.SubmitOne().status();
    if (s.ok()) s = c.FinishDown();
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }

  const int64_t writes_before = c.store_writes();
  const int64_t commits_before = c.commits();
  int64_t submit_writes = 0;
  double cycle_seconds = 0;
  for (auto _ : state) {
    const auto cycle_start = std::chrono::steady_clock::now();
    const int64_t w0 = c.store_writes();
    absl::StatusOr<double> seconds = c.SubmitOne();
    submit_writes += c.store_writes() - w0;
    absl::Status s = seconds.status();
    if (s.ok()) s = c.FinishDown();
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      break;
    }
    state.SetIterationTime(*seconds);
    cycle_seconds += std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - cycle_start)
                         .count();
  }
  const double n = static_cast<double>(state.iterations());
  state.SetItemsProcessed(state.iterations());
  state.counters["store_writes_per_submit"] = n > 0 ? submit_writes / n : 0;
  state.counters["store_writes_per_job"] =
      n > 0 ? (c.store_writes() - writes_before) / n : 0;
  state.counters["cycle_jobs_per_s"] = cycle_seconds > 0 ? n / cycle_seconds : 0;
  state.counters["commits_per_job"] =
      n > 0 ? (c.commits() - commits_before) / n : 0;
  state.counters["history_end"] = static_cast<double>(c.jobs());
  if (kind == StoreKind::kSqlite) state.SetLabel("sqlite in " + g_sqlite_dir);
}

// `threads` clients submit at once (kSubmits in all), as a loaded
// coordinator sees them; one timed iteration. items_per_second: accepted
// submits per second of wall time; commits_per_submit: SQLite transactions
// (each one fsync with synchronous=FULL) per submit, which group commit keeps
// below one. Tasks are finished down to 64 live between submits (under a
// bench-side mutex, timed: it is coordinator work too).
void BM_SubmitJobConcurrent(benchmark::State& state, StoreKind kind) {
  const int threads = static_cast<int>(state.range(0));
  auto cluster = SteadyCluster::Create(kind, 64);
  if (!cluster.ok()) {
    state.SkipWithError(std::string(cluster.status().message()).c_str());
    return;
  }
  SteadyCluster& c = **cluster;
  absl::Mutex collect_mu;
  for (auto _ : state) {
    const int64_t commits0 = c.commits();
    std::vector<std::vector<double>> latencies(threads);
    std::vector<absl::Status> errors(threads);
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        for (int i = t; i < g_submits; i += threads) {
          absl::StatusOr<double> took = c.SubmitConcurrent();
          absl::Status s = took.status();
          if (s.ok()) {
            latencies[t].push_back(*took);
            absl::MutexLock lock(&collect_mu);
            s = c.Collect();
          }
          if (!s.ok()) {
            errors[t] = s;
            return;
          }
        }
      });
    }
    for (std::thread& w : workers) w.join();
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const absl::Status& s : errors) {
      if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    }
    state.SetIterationTime(wall);
    std::vector<double> all;
    for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
    std::sort(all.begin(), all.end());
    if (!all.empty()) {
      state.counters["submit_p50_us"] = all[all.size() / 2] * 1e6;
      state.counters["submit_p99_us"] = all[all.size() * 99 / 100] * 1e6;
    }
    state.counters["commits_per_submit"] =
        static_cast<double>(c.commits() - commits0) / g_submits;
  }
  state.SetItemsProcessed(g_submits);
  if (kind == StoreKind::kSqlite) state.SetLabel("sqlite in " + g_sqlite_dir);
}

// One SubmitJobs call of `batch` one-GPU jobs (the cluster's 128 GPUs take
// the first 128; the rest wait): items_per_second is jobs accepted per
// second of the call, commits_per_call the SQLite transactions (fsyncs) it
// caused (one: the jobs and the placements they get commit together).
void BM_SubmitJobs(benchmark::State& state, StoreKind kind) {
  const int batch = static_cast<int>(state.range(0));
  auto cluster = SteadyCluster::Create(kind, 0);
  if (!cluster.ok()) {
    state.SkipWithError(std::string(cluster.status().message()).c_str());
    return;
  }
  SteadyCluster& c = **cluster;
  for (auto _ : state) {
    const int64_t commits0 = c.commits();
    absl::StatusOr<double> seconds = c.SubmitBatch(batch);
    if (!seconds.ok()) {
      state.SkipWithError(std::string(seconds.status().message()).c_str());
      break;
    }
    state.SetIterationTime(*seconds);
    state.counters["commits_per_call"] = static_cast<double>(c.commits() - commits0);
  }
  state.SetItemsProcessed(state.iterations() * batch);
  if (kind == StoreKind::kSqlite) state.SetLabel("sqlite in " + g_sqlite_dir);
}

void Register() {
  struct Case {
    const char* store;
    StoreKind kind;
    int live;
    int history;
  };
  const Case cases[] = {
      {"memory", StoreKind::kMemory, 0, 0},
      {"memory", StoreKind::kMemory, 64, 0},
      {"memory", StoreKind::kMemory, 64, g_big_history},
      {"sqlite", StoreKind::kSqlite, 0, 0},
      {"sqlite", StoreKind::kSqlite, 64, 0},
      {"sqlite", StoreKind::kSqlite, 64, g_big_history},
  };
  for (const Case& c : cases) {
    benchmark::RegisterBenchmark(
        absl::StrCat("BM_SubmitJob/", c.store).c_str(),
        [kind = c.kind](benchmark::State& state) { BM_SubmitJob(state, kind); })
        ->ArgNames({"live", "history"})
        ->Args({c.live, c.history})
        ->Iterations(g_submits)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  for (auto [store, kind] : {std::pair{"memory", StoreKind::kMemory},
                             std::pair{"sqlite", StoreKind::kSqlite}}) {
    benchmark::RegisterBenchmark(
        absl::StrCat("BM_SubmitJobConcurrent/", store).c_str(),
        [kind = kind](benchmark::State& state) { BM_SubmitJobConcurrent(state, kind); })
        ->ArgNames({"threads"})
        ->Arg(1)
        ->Arg(16)
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (auto [store, kind] : {std::pair{"memory", StoreKind::kMemory},
                             std::pair{"sqlite", StoreKind::kSqlite}}) {
    benchmark::RegisterBenchmark(
        absl::StrCat("BM_SubmitJobs/", store).c_str(),
        [kind = kind](benchmark::State& state) { BM_SubmitJobs(state, kind); })
        ->ArgNames({"batch"})
        ->Arg(64)
        ->Arg(500)
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace
}  // namespace trainctl::bench

int main(int argc, char** argv) {
  using trainctl::bench::g_big_history;
  using trainctl::bench::g_sqlite_dir;
  using trainctl::bench::g_submits;
  const char* tmp = std::getenv("TMPDIR");
  g_sqlite_dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  // Take our flags out before Google Benchmark sees the rest.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--smoke") {
      g_submits = 20;
      g_big_history = 100;
    } else if (arg.rfind("--sqlite_dir=", 0) == 0) {
      g_sqlite_dir = arg.substr(std::strlen("--sqlite_dir="));
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  // The core logs every submit at info; that would be timed too.
  trainctl::InitLogging("trainctl-bench-submit", "warn");
  trainctl::bench::Register();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
