#include "client/top.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace trainctl::cli {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// U+2581 LOWER ONE EIGHTH BLOCK .. U+2588 FULL BLOCK, UTF-8.
constexpr const char* kLevels[] = {"\u2581", "\u2582", "\u2583", "\u2584",
                                   "\u2585", "\u2586", "\u2587", "\u2588"};

std::string Bar(double pct, int width) {
  const int full = std::clamp(static_cast<int>(pct * width / 100.0 + 0.5), 0, width);
  return absl::StrCat("[", std::string(full, '#'), std::string(width - full, ' '), "]");
}

std::string Gib(int64_t bytes) { return absl::StrFormat("%.1f", bytes / kGiB); }

// Pads `s` to `n` display columns (the sparkline's multi-byte characters
// count one column each).
std::string Pad(const std::string& s, int n) {
  int cols = 0;
  for (unsigned char c : s) cols += (c & 0xC0) != 0x80;
  return cols >= n ? s : s + std::string(n - cols, ' ');
}

}  // namespace

std::string Sparkline(const std::vector<double>& values, double max, int width) {
  if (values.empty() || width <= 0 || max <= 0) return "";
  const int n = static_cast<int>(values.size());
  const int buckets = std::min(n, width);
  std::string out;
  for (int b = 0; b < buckets; ++b) {
    const int lo = static_cast<int>(static_cast<int64_t>(b) * n / buckets);
    const int hi = static_cast<int>(static_cast<int64_t>(b + 1) * n / buckets);
    double sum = 0;
    for (int i = lo; i < hi; ++i) sum += values[i];
    const double v = std::clamp(sum / std::max(1, hi - lo) / max, 0.0, 1.0);
    out += kLevels[std::min(7, static_cast<int>(v * 8))];
  }
  return out;
}

std::string RenderTop(const v1::TopFrame& frame, int width) {
  if (width <= 0) width = 120;
  int gpus = 0, ready = 0;
  for (const v1::NodeView& v : frame.nodes()) {
    gpus += v.node().gpus_size();
    ready += v.node().state() == v1::NODE_STATE_READY;
  }
  // Jobs with tasks on a GPU now (finished jobs keep a history for a while;
  // the live view leaves them out).
  std::set<int64_t> on_gpus;
  for (const v1::NodeView& v : frame.nodes()) {
    for (const v1::GpuTasks& g : v.gpu_tasks()) {
      for (const v1::GpuTaskRef& t : g.tasks()) on_gpus.insert(t.job_id());
    }
  }
  std::map<int64_t, const v1::JobUsage*> usage;
  for (const v1::JobUsage& u : frame.jobs()) {
    if (on_gpus.count(u.job_id()) > 0) usage[u.job_id()] = &u;
  }
  int running = static_cast<int>(on_gpus.size());

  std::string out = absl::StrFormat(
      "trainctl top  %s  nodes %d/%d ready  GPUs %d  jobs on GPUs %d\n\n",
      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixMillis(frame.time_ms()),
                       absl::UTCTimeZone()),
      ready, frame.nodes_size(), gpus, running);

  // GPUs.
  absl::StrAppendFormat(&out, "%-12s %3s %-16s %-18s %-21s %6s %5s  %-8s %s\n", "NODE",
                        "GPU", "MODEL", "UTIL", "MEMORY GiB", "POWER", "TEMP",
                        "SM/DRAM", "JOBS");
  for (const v1::NodeView& v : frame.nodes()) {
    const v1::Node& node = v.node();
    std::string name = node.name();
    if (node.state() == v1::NODE_STATE_LOST) name += " (lost)";
    if (node.gpus_size() == 0) {
      absl::StrAppendFormat(&out, "%-12s %3s (no GPUs)\n", name, "-");
    }
    for (int i = 0; i < node.gpus_size(); ++i) {
      const v1::Gpu& g = node.gpus(i);
      std::vector<std::string> jobs;
      if (i < v.gpu_tasks_size()) {
        for (const v1::GpuTaskRef& t : v.gpu_tasks(i).tasks()) {
          jobs.push_back(t.rank() > 0 ? absl::StrCat(t.job_id(), "/", t.rank())
                                      : absl::StrCat(t.job_id()));
        }
      }
      const double mem_pct = g.memory_total_bytes() > 0
                                 ? 100.0 * g.memory_used_bytes() / g.memory_total_bytes()
                                 : 0;
      // SM activity and DRAM bandwidth (NVML GPM) where the GPU has them.
      const std::string gpm =
          g.activity_source() == v1::GPU_ACTIVITY_SOURCE_GPM
              ? absl::StrFormat("%.0f/%.0f%%", g.sm_active_pct(), g.dram_bw_pct())
              : "-";
      absl::StrAppendFormat(
          &out, "%-12s %3d %-16s %-13s %3d%% %-21s %5.0fW %4dC  %-8s %s\n", name,
          g.index(), g.name().substr(0, 16), Bar(g.utilization_pct(), 11),
          g.utilization_pct(),
          absl::StrFormat("%s/%s (%.0f%%)", Gib(g.memory_used_bytes()),
                          Gib(g.memory_total_bytes()), mem_pct),
          g.power_w(), g.temperature_c(), gpm,
          jobs.empty() ? "-" : absl::StrJoin(jobs, ","));
    }
  }

  // Jobs.
  const int spark = std::clamp(width - 90, 10, 40);
  out += "\n";
  absl::StrAppendFormat(&out, "%-6s %-16s %s %-13s %-9s %6s %4s  %s\n", "JOB", "NAME",
                        Pad("GPU UTIL HISTORY", spark), "UTIL min/avg/max", "MEM GiB",
                        "CPU%", "SM%", "DIAGNOSIS");
  for (const auto& [id, u] : usage) {
    if (u->samples_size() == 0) continue;
    std::vector<double> util;
    double lo = 100, hi = 0, sum = 0, cpu = 0;
    int64_t mem = 0;
    for (const v1::JobUsageSample& s : u->samples()) {
      util.push_back(s.gpu_util_pct());
      lo = std::min(lo, s.gpu_util_pct());
      hi = std::max(hi, s.gpu_util_pct());
      sum += s.gpu_util_pct();
      mem = std::max(mem, s.gpu_memory_used_bytes());
    }
    const v1::JobUsageSample& last = u->samples(u->samples_size() - 1);
    cpu = last.cpu_pct();
    // The latest SM activity (NVML GPM) where its GPUs report it.
    const std::string sm = last.activity_source() == v1::GPU_ACTIVITY_SOURCE_GPM
                               ? absl::StrFormat("%.0f", last.sm_active_pct())
                               : "-";
    std::vector<std::string> codes;
    for (const v1::UsageFinding& f : u->findings()) {
      // A job too young to judge shows no code.
      if (f.code() != "not_enough_samples") codes.push_back(f.code());
    }
    absl::StrAppendFormat(
        &out, "%-6d %-16s %s %-16s %-9s %6.0f %4s  %s\n", id, u->job_name().substr(0, 16),
        Pad(Sparkline(util, 100, spark), spark),
        absl::StrFormat("%.0f/%.0f/%.0f%%", lo, sum / util.size(), hi), Gib(mem), cpu,
        sm, codes.empty() ? "-" : absl::StrJoin(codes, ","));
  }
  return out;
}

}  // namespace trainctl::cli
