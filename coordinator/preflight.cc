#include "coordinator/preflight.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace trainctl::coord {
namespace {

std::string ClassName(v1::LinkClass c) {
  return c == v1::LINK_CLASS_INTRA_NODE ? "intra-node" : "network";
}

void Exclude(std::vector<std::pair<std::string, std::string>>& out,
             const std::string& node, const std::string& why) {
  for (const auto& [n, w] : out) {
    if (n == node) return;
  }
  out.emplace_back(node, why);
}

}  // namespace

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

PreflightDecision EvaluatePreflight(const std::vector<v1::PreflightRank>& ranks,
                                    bool single_node,
                                    const PreflightPolicy& policy) {
  PreflightDecision d;
  d.ranks = ranks;
  for (v1::PreflightRank& r : d.ranks) {
    r.set_blamed(false);
    if (r.status() == v1::PREFLIGHT_RANK_STATUS_RUNNING ||
        r.status() == v1::PREFLIGHT_RANK_STATUS_UNSPECIFIED) {
      r.set_status(v1::PREFLIGHT_RANK_STATUS_MISSING);
      if (r.detail().empty()) r.set_detail("no result by the pre-flight deadline");
    }
  }
  auto blame = [&](v1::PreflightRank& r, const std::string& what) {
    r.set_blamed(true);
    Exclude(d.excluded, r.node(), absl::StrCat("rank ", r.rank(), " ", what));
  };

  // Rule 1: errors and ranks missing at the deadline.
  for (v1::PreflightRank& r : d.ranks) {
    if (r.status() == v1::PREFLIGHT_RANK_STATUS_ERROR) {
      blame(r, absl::StrCat("errored: ", r.detail()));
    } else if (r.status() == v1::PREFLIGHT_RANK_STATUS_MISSING) {
      blame(r, absl::StrCat("did not finish: ", r.detail()));
    }
  }
  // Rule 2: only time-outs.
  if (d.excluded.empty()) {
    std::vector<v1::PreflightRank*> timed_out, never_ready;
    for (v1::PreflightRank& r : d.ranks) {
      if (r.status() != v1::PREFLIGHT_RANK_STATUS_TIMED_OUT) continue;
      timed_out.push_back(&r);
      if (r.comm_ready_ms() <= 0) never_ready.push_back(&r);
    }
    const std::vector<v1::PreflightRank*>& culprits =
        never_ready.empty() ? timed_out : never_ready;
    for (v1::PreflightRank* r : culprits) {
      blame(*r, absl::StrCat("timed out",
                             r->comm_ready_ms() <= 0
                                 ? " before its communicator was ready"
                                 : " in the all-reduce (the fault is on a link "
                                   "between the timed-out ranks)",
                             r->detail().empty() ? "" : ": ", r->detail()));
    }
  }

  // Figures of the OK ranks, per link class.
  std::map<v1::LinkClass, std::vector<std::pair<v1::PreflightRank*, double>>> by_class;
  for (v1::PreflightRank& r : d.ranks) {
    if (r.status() != v1::PREFLIGHT_RANK_STATUS_OK) continue;
    d.comm_ready_max_ms = std::max(d.comm_ready_max_ms, r.comm_ready_ms());
    by_class[single_node ? v1::LINK_CLASS_INTRA_NODE : v1::LINK_CLASS_NETWORK]
        .push_back({&r, r.busbw_gbps()});
    if (!single_node && r.intra_node_busbw_gbps() > 0) {
      by_class[v1::LINK_CLASS_INTRA_NODE].push_back({&r, r.intra_node_busbw_gbps()});
    }
  }
  for (const auto& [cls, figures] : by_class) {
    v1::PreflightLinkSummary& s = d.links.emplace_back();
    s.set_link_class(cls);
    s.set_ranks(static_cast<int>(figures.size()));
    std::vector<double> all;
    for (const auto& f : figures) all.push_back(f.second);
    s.set_min_busbw_gbps(*std::min_element(all.begin(), all.end()));
    s.set_max_busbw_gbps(*std::max_element(all.begin(), all.end()));
    s.set_median_busbw_gbps(Median(all));
  }

  // Rule 3: slow ranks, only when nothing failed (a failure already decides).
  if (d.excluded.empty() && policy.min_busbw_ratio > 0) {
    for (const auto& [cls, figures] : by_class) {
      for (size_t i = 0; i < figures.size(); ++i) {
        std::vector<double> peers;
        for (size_t j = 0; j < figures.size(); ++j) {
          if (j != i) peers.push_back(figures[j].second);
        }
        if (peers.empty()) continue;
        const double median = Median(peers);
        const double floor = policy.min_busbw_ratio * median;
        if (figures[i].second >= floor) continue;
        v1::PreflightRank& r = *figures[i].first;
        const std::string why = absl::StrFormat(
            "is slow: %s busbw %.2f GB/s < %.0f%% of its peers' median %.2f "
            "GB/s (%.2f GB/s)",
            ClassName(cls), figures[i].second, policy.min_busbw_ratio * 100,
            median, floor);
        r.set_detail(why);
        blame(r, why);
      }
    }
  }

  int ok = 0;
  std::vector<std::string> nodes;
  for (const v1::PreflightRank& r : d.ranks) {
    if (r.status() == v1::PREFLIGHT_RANK_STATUS_OK) ++ok;
    if (std::find(nodes.begin(), nodes.end(), r.node()) == nodes.end()) {
      nodes.push_back(r.node());
    }
  }
  d.passed = d.excluded.empty();
  if (d.passed) {
    std::vector<std::string> parts;
    for (const v1::PreflightLinkSummary& s : d.links) {
      parts.push_back(absl::StrFormat("%s busbw median %.2f GB/s",
                                      ClassName(s.link_class()),
                                      s.median_busbw_gbps()));
    }
    d.reason = absl::StrFormat(
        "passed: %d ranks on %d nodes, communicator ready in %.0f ms%s%s", ok,
        nodes.size(), d.comm_ready_max_ms, parts.empty() ? "" : ", ",
        absl::StrJoin(parts, ", "));
  } else {
    std::vector<std::string> parts;
    for (const auto& [node, why] : d.excluded) {
      parts.push_back(absl::StrCat(node, " (", why, ")"));
    }
    d.reason = absl::StrCat("failed: excluded ", absl::StrJoin(parts, "; "));
  }
  return d;
}

}  // namespace trainctl::coord
