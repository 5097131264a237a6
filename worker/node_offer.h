#ifndef TRAINCTL_WORKER_NODE_OFFER_H_
#define TRAINCTL_WORKER_NODE_OFFER_H_

// What an agent offers besides its GPUs, from its flags: node features
// (trainctl-agent --features ib,nvlink: Node.features, matched by
// `trainctl submit --constraint`) and free labels (--labels rack=r1,zone=a:
// Node.labels, shown by `trainctl nodes`).

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainctl::worker {

// The features of `items` (the comma-separated --features, split by the
// flag parser), duplicates dropped, in order. Errors: INVALID_ARGUMENT
// naming the flag when one is not 1-64 characters of [a-z0-9_-] (the
// coordinator refuses such a registration too).
absl::StatusOr<std::vector<std::string>> ParseFeatures(
    const std::vector<std::string>& items);

// The labels of `items` ("key=value" each; --labels split at commas by the
// flag parser). Errors: INVALID_ARGUMENT naming the flag for an item
// without "=", a key not of 1-64 characters of [a-z0-9_-], or a key given
// twice.
absl::StatusOr<std::map<std::string, std::string>> ParseLabels(
    const std::vector<std::string>& items);

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_NODE_OFFER_H_
