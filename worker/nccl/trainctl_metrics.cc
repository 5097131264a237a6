// C ABI of metric reporting (see trainctl_nccl.h) over MetricsReporter.
// Nothing throws across it.
//
// One reporter per process, created at the first call from the launch
// environment: a C ABI has no object to hold it (the one process-wide state of
// this library; the C++ API, MetricsReporter, has none).

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "absl/base/call_once.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "worker/nccl/metrics_reporter.h"
#include "worker/nccl/trainctl_nccl.h"

namespace {

using trainctl::worker::MetricsReporter;

struct Process {
  trainctl::RealClock clock;
  std::unique_ptr<trainctl::worker::MetricsSink> sink;
  std::unique_ptr<MetricsReporter> reporter;
  absl::Status init_error;
};

thread_local std::string last_error;

// Never destroyed: gRPC objects must not be torn down by static destructors
// that run after gRPC's own.
Process& TheProcess() {
  static absl::once_flag once;
  static Process* process = new Process();
  absl::call_once(once, [] {
    absl::StatusOr<trainctl::worker::RankEnv> env =
        trainctl::worker::RankEnvFromEnv();
    if (!env.ok()) {
      process->init_error = env.status();
      return;
    }
    auto sink = trainctl::worker::NewGrpcMetricsSink(env->coordinator);
    if (!sink.ok()) {
      process->init_error = sink.status();
      return;
    }
    process->sink = std::move(*sink);
    process->reporter = std::make_unique<MetricsReporter>(
        *env, process->sink.get(), &process->clock);
  });
  return *process;
}

int Done(const absl::Status& status) {
  if (!status.ok()) last_error = std::string(status.message());
  return static_cast<int>(status.code());
}

// The reporter, or null with the reason recorded.
MetricsReporter* Reporter() {
  Process& p = TheProcess();
  if (p.reporter == nullptr) {
    last_error = absl::StrCat("trainctl metrics: ", p.init_error.message(),
                              " (report from inside a trainctl task)");
  }
  return p.reporter.get();
}

}  // namespace

extern "C" int trainctl_report_metric(const char* key, double value, int64_t step) {
  if (key == nullptr) return Done(absl::InvalidArgumentError("key is NULL"));
  MetricsReporter* r = Reporter();
  if (r == nullptr) return static_cast<int>(TheProcess().init_error.code());
  return Done(r->Report(key, value, step));
}

extern "C" int trainctl_report_metrics(const char* const* keys, const double* values,
                                       size_t n, int64_t step) {
  if (n > 0 && (keys == nullptr || values == nullptr)) {
    return Done(absl::InvalidArgumentError("keys or values is NULL"));
  }
  MetricsReporter* r = Reporter();
  if (r == nullptr) return static_cast<int>(TheProcess().init_error.code());
  for (size_t i = 0; i < n; ++i) {
    if (keys[i] == nullptr) {
      return Done(absl::InvalidArgumentError(absl::StrCat("keys[", i, "] is NULL")));
    }
    if (absl::Status s = r->Report(keys[i], values[i], step); !s.ok()) return Done(s);
  }
  return 0;
}

extern "C" int trainctl_flush_metrics(void) {
  MetricsReporter* r = Reporter();
  if (r == nullptr) return static_cast<int>(TheProcess().init_error.code());
  return Done(r->Flush());
}

extern "C" size_t trainctl_metrics_last_error(char* buf, size_t len) {
  if (buf != nullptr && len > 0) {
    const size_t n = std::min(last_error.size(), len - 1);
    std::memcpy(buf, last_error.data(), n);
    buf[n] = '\0';
  }
  return last_error.size();
}
