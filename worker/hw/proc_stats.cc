#include "worker/hw/proc_stats.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainctl::worker {
namespace {

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

}  // namespace

ProcessGroupSampler::ProcessGroupSampler(std::string proc_root)
    : root_(std::move(proc_root)),
      ticks_per_s_(std::max(1L, sysconf(_SC_CLK_TCK))),
      page_bytes_(std::max(1L, sysconf(_SC_PAGESIZE))) {}

std::map<int, GroupUsage> ProcessGroupSampler::Sample(
    const std::vector<int>& pgids, const std::map<int, std::vector<int>>& members) {
  std::map<int, GroupUsage> out;
  std::map<int, int64_t> ticks;
  const absl::flat_hash_set<int> wanted(pgids.begin(), pgids.end());
  for (int g : pgids) {
    out[g];
    ticks[g] = 0;
  }
  std::string text;
  double uptime = 0;
  if (!ReadFile(root_ + "/uptime", &text)) return out;
  {
    std::vector<std::string> parts = absl::StrSplit(text, ' ');
    if (parts.empty() || !absl::SimpleAtod(parts[0], &uptime)) return out;
  }
  // Adds process `pid` (its /proc/<pid>/stat `text`) to group `g`, or with
  // g == 0 to its own process group if that is wanted and has no members
  // given.
  auto add = [&](int pid, int g, const std::string& text) {
    // The command name (field 2) may hold spaces and parentheses: the fields
    // after it start after the last ')'.
    const size_t close = text.rfind(')');
    if (close == std::string::npos) return;
    std::vector<std::string> f =
        absl::StrSplit(text.substr(close + 1), ' ', absl::SkipEmpty());
    // f[0] is field 3 (state); field n is f[n - 3].
    if (f.size() < 22) return;
    int pgrp = 0;
    int64_t utime = 0, stime = 0, rss = 0;
    if (!absl::SimpleAtoi(f[2], &pgrp)) return;
    if (g == 0) {
      if (!wanted.contains(pgrp) || members.count(pgrp) != 0) return;
      g = pgrp;
    }
    if (!absl::SimpleAtoi(f[11], &utime) || !absl::SimpleAtoi(f[12], &stime) ||
        !absl::SimpleAtoi(f[21], &rss)) {
      return;
    }
    GroupUsage& u = out[g];
    u.pids.push_back(pid);
    u.rss_bytes += rss * page_bytes_;
    ticks[g] += utime + stime;
  };
  bool walk = false;
  for (int g : pgids) {
    auto m = members.find(g);
    if (m == members.end()) {
      walk = true;
      continue;
    }
    for (int pid : m->second) {
      if (ReadFile(absl::StrCat(root_, "/", pid, "/stat"), &text)) add(pid, g, text);
    }
  }
  std::error_code ec;
  if (walk) {
    for (const auto& entry : std::filesystem::directory_iterator(root_, ec)) {
      int pid = 0;
      if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
      if (ReadFile(entry.path().string() + "/stat", &text)) add(pid, 0, text);
    }
  }
  absl::MutexLock lock(&mu_);
  for (auto& [g, u] : out) {
    std::sort(u.pids.begin(), u.pids.end());
    if (u.pids.empty()) {
      last_.erase(g);
      continue;
    }
    auto it = last_.find(g);
    if (it != last_.end() && uptime > it->second.first) {
      const double cpu_s =
          static_cast<double>(ticks[g] - it->second.second) / ticks_per_s_;
      u.cpu_pct = std::max(0.0, 100.0 * cpu_s / (uptime - it->second.first));
    }
    last_[g] = {uptime, ticks[g]};
  }
  // Forget groups no longer asked about.
  for (auto it = last_.begin(); it != last_.end();) {
    if (wanted.contains(it->first)) {
      ++it;
    } else {
      it = last_.erase(it);
    }
  }
  return out;
}

}  // namespace trainctl::worker
