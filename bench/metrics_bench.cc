// Measures Coordinator::ReportMetrics() in the core, the cost that the
// batching of metric reports trades against (worker/nccl/metrics_reporter.h):
// each report is validated, authenticated and stored durably in one store
// transaction. items_per_second is metric points stored per second of wall
// time (UseRealTime: the fsyncs are waiting, not CPU); the time
// is per report. Stores: MemoryStateStore and SqliteStateStore (WAL,
// synchronous=FULL: one fsync per report) in a temporary directory. Also
// GetMetrics() over a job's history (summary, the `trainctl metrics` table).
//
// Flags (besides Google Benchmark's): --sqlite_dir=DIR where the SQLite file
// goes (default $TMPDIR or /tmp; must be a real disk for honest figures);
// --smoke: tiny sizes for the bench_smoke test.

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "common/clock.h"
#include "common/logging.h"
#include "coordinator/coordinator.h"
#include "coordinator/state_store.h"

namespace trainctl::bench {
namespace {

std::string g_sqlite_dir;
bool g_smoke = false;

class NullConnection : public coord::AgentConnection {
 public:
  void Send(v1::CoordinatorMessage msg) override {
    if (msg.has_start_task()) last_start = msg.start_task();
  }
  void Close(const absl::Status&) override {}
  v1::StartTask last_start;
};

// A coordinator with one node running one experiment; `report` is rank 0's
// report template (identity and token filled in).
struct Fixture {
  FakeClock clock;
  std::unique_ptr<coord::StateStore> store;
  std::unique_ptr<coord::Coordinator> core;
  NullConnection conn;
  v1::ReportMetricsRequest report;
  std::string dir;

  explicit Fixture(bool sqlite) {
    if (sqlite) {
      dir = absl::StrCat(g_sqlite_dir, "/trainctl-metrics-bench-", getpid());
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
      store = std::move(*coord::SqliteStateStore::Open(dir + "/state.db"));
    } else {
      store = std::make_unique<coord::MemoryStateStore>();
    }
    coord::CoordinatorConfig config;
    config.limits.max_metric_points_per_job = int64_t{1} << 40;
    core = std::move(*coord::Coordinator::Create(config, store.get(), &clock));
    v1::RegisterNode reg;
    reg.mutable_node()->set_name("n");
    reg.mutable_node()->set_port_min(29500);
    reg.mutable_node()->set_port_max(29509);
    v1::Gpu* g = reg.mutable_node()->add_gpus();
    g->set_uuid("GPU-0");
    g->set_memory_total_bytes(int64_t{80} << 30);
    (void)core->RegisterAgent(reg, &conn);
    v1::JobSpec spec;
    spec.add_command("train");
    const int64_t id = *core->SubmitJob(spec, "");
    report.set_job_id(id);
    report.set_token(conn.last_start.env().at("TRAINCTL_TOKEN"));
  }
  ~Fixture() {
    core.reset();
    store.reset();
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
};

// args: store (0 memory, 1 sqlite), points per report.
void BM_ReportMetrics(benchmark::State& state) {
  Fixture f(state.range(0) == 1);
  const int batch = static_cast<int>(state.range(1));
  v1::ReportMetricsRequest req = f.report;
  for (int i = 0; i < batch; ++i) {
    v1::MetricPoint* p = req.add_points();
    p->set_key(i % 2 == 0 ? "loss" : "samples_per_s");
    p->set_value(0.5 + i);
  }
  int64_t step = 0;
  for (auto _ : state) {
    for (v1::MetricPoint& p : *req.mutable_points()) p.set_step(step);
    ++step;
    auto r = f.core->ReportMetrics(req);
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["points_per_report"] = batch;
}

// args: store, points already stored (two keys). Summary of every key.
void BM_GetMetricsSummary(benchmark::State& state) {
  Fixture f(state.range(0) == 1);
  const int64_t total = state.range(1);
  v1::ReportMetricsRequest req = f.report;
  for (int64_t done = 0; done < total;) {
    req.clear_points();
    for (int i = 0; i < 1000 && done < total; ++i, ++done) {
      v1::MetricPoint* p = req.add_points();
      p->set_key(done % 2 == 0 ? "loss" : "acc");
      p->set_value(1.0 / (done + 1));
      p->set_step(done / 2);
    }
    (void)f.core->ReportMetrics(req);
  }
  v1::GetMetricsRequest get;
  get.set_job_id(f.report.job_id());
  get.set_summary_only(true);
  for (auto _ : state) {
    auto r = f.core->GetMetrics(get);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations() * total);
}

void Register() {
  std::vector<int64_t> batches = g_smoke ? std::vector<int64_t>{1, 64}
                                         : std::vector<int64_t>{1, 8, 64, 1000};
  for (int64_t store : {0, 1}) {
    for (int64_t b : batches) {
      auto* bm = benchmark::RegisterBenchmark(
          absl::StrCat("BM_ReportMetrics/", store ? "sqlite" : "memory",
                       "/points_per_report:", b).c_str(),
          BM_ReportMetrics);
      bm->Args({store, b})->Unit(benchmark::kMicrosecond)->UseRealTime();
      if (g_smoke) bm->Iterations(20);
    }
    for (int64_t total : g_smoke ? std::vector<int64_t>{100}
                                 : std::vector<int64_t>{10000, 100000}) {
      auto* bm = benchmark::RegisterBenchmark(
          absl::StrCat("BM_GetMetricsSummary/", store ? "sqlite" : "memory",
                       "/points:", total).c_str(),
          BM_GetMetricsSummary);
      bm->Args({store, total})->Unit(benchmark::kMillisecond)->UseRealTime();
      if (g_smoke) bm->Iterations(3);
    }
  }
}

}  // namespace
}  // namespace trainctl::bench

int main(int argc, char** argv) {
  const char* tmp = std::getenv("TMPDIR");
  trainctl::bench::g_sqlite_dir = tmp != nullptr ? tmp : "/tmp";
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--smoke") == 0) {
      trainctl::bench::g_smoke = true;
    } else if (std::strncmp(argv[i], "--sqlite_dir=", 13) == 0) {
      trainctl::bench::g_sqlite_dir = argv[i] + 13;
    } else {
      rest.push_back(argv[i]);
    }
  }
  trainctl::InitLogging("bench", "error");
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  trainctl::bench::Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
