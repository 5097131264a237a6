// Accounting (coordinator/accounting.h) at the target size: 1,000,000
// finished attempts kept in a SqliteStateStore (WAL), spread over 35 days,
// 200 users, 20 projects, 4 queues, 64 nodes of 2 GPU types, one attempt in
// ten a 2-node gang, lengths of 1 minute to 12 hours.
//   BM_Open           the start-up rebuild of the rollups from the store
//                     (Accounting::Open), ms
//   BM_Usage/by:N     GetUsage --since 30d (edges not on an hour), by user
//                     (0), project (1), queue (2), gpu-type (3), node (4), ms
//   BM_HistoryStream  every record of the 35 days through History in pages
//                     of 1,000 (what ListHistory streams), ms; counters: rows,
//                     and the RSS it added (a bounded buffer: one page)
//
// Flags (besides Google Benchmark's): --smoke: 2,000 attempts, for the
// ctest entry; --attempts=N.

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "benchmark/benchmark.h"
#include "common/logging.h"
#include "coordinator/accounting.h"
#include "coordinator/state_store.h"

namespace trainctl::bench {
namespace {

int64_t g_attempts = 1'000'000;
constexpr int64_t kNowMs = int64_t{1'800'000'000'000} + 1234567;  // not on an hour
constexpr int64_t kDayMs = int64_t{86400} * 1000;

// Resident set size now, KiB (/proc/self/status VmRSS).
int64_t RssKib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return 0;
}

struct Fixture {
  std::string dir;
  std::unique_ptr<coord::SqliteStateStore> store;
  std::unique_ptr<coord::Accounting> acct;
};

// The store, filled once per process.
Fixture& Data() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    std::string tmpl = (std::filesystem::temp_directory_path() / "tc-acct-bench-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::fprintf(stderr, "mkdtemp: %s\n", std::strerror(errno));
      std::exit(1);
    }
    fx->dir = tmpl;
    fx->store = std::move(*coord::SqliteStateStore::Open(
        fx->dir + "/state.db", coord::SqliteStateStore::Sync::kNormal));
    fx->acct = std::move(*coord::Accounting::Open(fx->store.get()));
    std::mt19937_64 rng(35);
    for (int64_t i = 1; i <= g_attempts; ++i) {
      v1::UsageRecord r;
      r.set_job_id(i);
      r.set_user(absl::StrCat("user", rng() % 200));
      r.set_project(absl::StrCat("proj", rng() % 20));
      r.set_queue(absl::StrCat("q", rng() % 4));
      r.set_name("train");
      const int64_t end = kNowMs - static_cast<int64_t>(rng() % (35 * kDayMs));
      const int64_t len = 60'000 + static_cast<int64_t>(rng() % (12 * 3600'000));
      r.set_start_time_ms(std::max<int64_t>(0, end - len));
      r.set_end_time_ms(end);
      r.set_outcome(static_cast<v1::AttemptOutcome>(1 + rng() % 5));
      const bool gang = rng() % 10 == 0;
      const int node = static_cast<int>(rng() % 64);
      const double gpus = gang ? 16 : 1 + static_cast<double>(rng() % 8);
      r.set_gpus(gpus);
      r.set_gpu_seconds_allocated(gpus * static_cast<double>(len) / 1000);
      r.set_gpu_seconds_used(r.gpu_seconds_allocated() * static_cast<double>(rng() % 100) / 100);
      for (int n = 0; n < (gang ? 2 : 1); ++n) {
        v1::UsageSlice* s = r.add_slices();
        s->set_node(absl::StrCat("node", (node + n) % 64));
        s->set_gpu_type((node + n) % 64 < 32 ? "h100" : "a100");
        s->set_gpus(gang ? 8 : gpus);
        s->set_gpu_seconds_used(r.gpu_seconds_used() / (gang ? 2 : 1));
      }
      // Every 10,000th waits for durability, so the queue stays short.
      absl::Notification durable;
      const bool wait = i % 10'000 == 0 || i == g_attempts;
      absl::Status s = fx->acct->Record(r, wait ? std::function<void(absl::Status)>(
                                                     [&](absl::Status) { durable.Notify(); })
                                                : nullptr);
      if (!s.ok()) {
        std::fprintf(stderr, "record: %s\n", s.ToString().c_str());
        std::exit(1);
      }
      if (wait) durable.WaitForNotification();
    }
    return fx;
  }();
  return *f;
}

void BM_Open(benchmark::State& state) {
  Fixture& f = Data();
  for (auto _ : state) {
    auto opened = coord::Accounting::Open(f.store.get());
    if (!opened.ok()) state.SkipWithError(opened.status().ToString().c_str());
    benchmark::DoNotOptimize(opened);
  }
  state.counters["records"] = static_cast<double>(g_attempts);
}
BENCHMARK(BM_Open)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_Usage(benchmark::State& state) {
  Fixture& f = Data();
  const auto by = static_cast<coord::UsageBy>(state.range(0));
  size_t rows = 0;
  for (auto _ : state) {
    auto u = f.acct->Usage({by, kNowMs - 30 * kDayMs, kNowMs, ""});
    if (!u.ok()) state.SkipWithError(u.status().ToString().c_str());
    rows = u->rows_size();
    benchmark::DoNotOptimize(u);
  }
  state.counters["rows"] = static_cast<double>(rows);
}
BENCHMARK(BM_Usage)->ArgName("by")->DenseRange(0, 4)->Unit(benchmark::kMillisecond);

void BM_HistoryStream(benchmark::State& state) {
  Fixture& f = Data();
  int64_t rows = 0;
  int64_t added_kib = 0;
  for (auto _ : state) {
    rows = 0;
    const int64_t before = RssKib();
    int64_t peak = before;
    absl::Status s = f.acct->History(
        {0, kNowMs + 1, "", "", 1000}, [&](const v1::ListHistoryResponse& page) {
          rows += page.records_size();
          if (rows % 100'000 < 1000) peak = std::max(peak, RssKib());
          return true;
        });
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    added_kib = std::max(added_kib, peak - before);
  }
  state.counters["rows"] = static_cast<double>(rows);
  state.counters["rss_added_kib"] = static_cast<double>(added_kib);
}
BENCHMARK(BM_HistoryStream)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace trainctl::bench

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--smoke") {
      trainctl::bench::g_attempts = 2000;
    } else if (a.rfind("--attempts=", 0) == 0) {
      trainctl::bench::g_attempts = std::atoll(a.c_str() + 11);
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  std::filesystem::remove_all(trainctl::bench::Data().dir, ec);
  return 0;
}
