#ifndef TRAINCTL_COORDINATOR_COORDINATOR_INTERNAL_H_
#define TRAINCTL_COORDINATOR_COORDINATOR_INTERNAL_H_

// Small helpers shared by the files that implement Coordinator
// (coordinator.cc, coordinator_agents.cc, coordinator_scheduling.cc,
// coordinator_preflight.cc, coordinator_telemetry.cc). Private to them:
// nothing else includes this.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "coordinator/coordinator.h"
#include "coordinator/job_facts.h"
#include "coordinator/state_store.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

// Holds the store's commits for one locked section (StateStore::HoldCommits):
// the writes of one event go in one transaction. Declared after the
// MutexLock, so it ends before mu_ is released.
class CommitHold {
 public:
  explicit CommitHold(StateStore* store) : store_(store) { store_->HoldCommits(); }
  ~CommitHold() { store_->ReleaseCommits(); }
  CommitHold(const CommitHold&) = delete;
  CommitHold& operator=(const CommitHold&) = delete;

 private:
  StateStore* const store_;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_COORDINATOR_INTERNAL_H_
