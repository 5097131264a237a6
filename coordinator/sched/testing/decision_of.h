#ifndef TRAINCTL_COORDINATOR_SCHED_TESTING_DECISION_OF_H_
#define TRAINCTL_COORDINATOR_SCHED_TESTING_DECISION_OF_H_

// For scheduler tests: a job's decision out of a Schedule() result.

#include <cstdint>
#include <vector>

#include "coordinator/sched/scheduler.h"
#include "gtest/gtest.h"

namespace trainctl::sched::testing {

// The decision about job `id` in `decisions`; when there is none, a test
// failure and an empty Decision.
inline const Decision& Of(const std::vector<Decision>& decisions, int64_t id) {
  for (const Decision& d : decisions) {
    if (d.job_id == id) return d;
  }
  static const Decision kNone;
  ADD_FAILURE() << "no decision for job " << id;
  return kNone;
}

}  // namespace trainctl::sched::testing

#endif  // TRAINCTL_COORDINATOR_SCHED_TESTING_DECISION_OF_H_
