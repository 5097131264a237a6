#ifndef TRAINCTL_COORDINATOR_PREFLIGHT_H_
#define TRAINCTL_COORDINATOR_PREFLIGHT_H_

// The pre-flight verdict of a gang (a short NCCL probe on its nodes before its
// processes start): a pure function from what each rank's probe reported to
// pass/fail and the nodes to exclude. No clock, no I/O; the coordinator
// (coordinator.h) runs the probes and applies the verdict. The whole design is
// in docs/preflight.md.
//
// Rules, in order:
//  1. Culprits are the ranks that ERRORED (the probe said so, exited non-zero
//     without a result, could not start, or their node was lost) or are
//     MISSING (no result by the coordinator's deadline: hung). Ranks that
//     TIMED_OUT (gave up waiting on their own) or were STOPPED after another
//     rank failed are their victims and are not blamed.
//  2. With no culprit but ranks that timed out, nobody else is to blame: the
//     timed-out ranks that never got a communicator (comm_ready_ms == 0) are
//     the culprits, or, when all of them got one, all of them (the fault is
//     on a link between them and cannot be pinned on one node).
//  3. With every rank OK, a rank is slow when its bus bandwidth in a link
//     class is below min_busbw_ratio x the median of its PEERS' figures in
//     that class (the other ranks measuring the same class; no peers, no
//     comparison). Classes: the gang-wide all-reduce is INTRA_NODE when the
//     gang is on one node and NETWORK otherwise (a ring's bandwidth is bounded
//     by the slowest link it crosses); intra_node_busbw_gbps, where measured,
//     is INTRA_NODE.
//  4. Culprits or slow ranks: FAILED, and each of their nodes is excluded
//     (once, with the first reason). Otherwise PASSED.
//
// Why 50 %: NCCL's all-reduce bandwidth on healthy, identical links varies
// by a few percent between runs (nccl-tests' published H100/H200 runs); a
// degraded NVLink (links down, falling back to PCIe) or a NIC at a lower
// rate costs 2x or more. Half the median of the peers sits between the two.
// The median (not the mean) keeps one bad peer from lowering the bar.

#include <string>
#include <vector>

#include "trainctl/v1/preflight.pb.h"

namespace trainctl::coord {

struct PreflightPolicy {
  // A rank slower than this share of the median of its peers in a link
  // class is slow (rule 3). In (0, 1]; 0 turns the bandwidth rule off.
  double min_busbw_ratio = 0.5;
};

struct PreflightDecision {
  bool passed = false;
  // (node, why) in node order of first appearance; empty when passed.
  std::vector<std::pair<std::string, std::string>> excluded;
  // Per link class, over the OK ranks that measured it.
  std::vector<v1::PreflightLinkSummary> links;
  // The slowest OK rank's comm_ready_ms (0 when none).
  double comm_ready_max_ms = 0;
  // One sentence for users ("passed: 4 ranks on 2 nodes, network busbw
  // median 42.1 GB/s" / "failed: node-c excluded: rank 2 errored: ...").
  std::string reason;
  // The ranks with `blamed` and, for slow ranks, `detail` filled in.
  std::vector<v1::PreflightRank> ranks;
};

// Judges a finished pre-flight: every rank of `ranks` must have a final
// status (not RUNNING or UNSPECIFIED; such ranks count as MISSING).
// `single_node`: the gang is on one node (its gang-wide figure is then
// INTRA_NODE). Never fails; an empty `ranks` passes.
PreflightDecision EvaluatePreflight(const std::vector<v1::PreflightRank>& ranks,
                                    bool single_node,
                                    const PreflightPolicy& policy);

// The median of `values` (the mean of the middle two for an even count);
// 0 for none.
double Median(std::vector<double> values);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_PREFLIGHT_H_
