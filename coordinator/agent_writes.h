#ifndef TRAINCTL_COORDINATOR_AGENT_WRITES_H_
#define TRAINCTL_COORDINATOR_AGENT_WRITES_H_

// How the coordinator's messages to one agent are written: one write in
// flight at a time (gRPC's rule for a stream), and starts that queue up
// behind it (a scheduling pass that placed several tasks on the node, or
// placements whose commits landed together) go out as one
// CoordinatorMessage.start_task_batch: one write and one read per burst,
// not per task. The mirror of the agent's task_status_batch
// (worker/outbox_queue.h). Pure: messages only.

#include <cstddef>
#include <deque>

#include "trainctl/v1/service.pb.h"

namespace trainctl::coord {

// The most starts one start_task_batch carries, and the most bytes of starts
// (a start holds the task's environment; the agent takes messages up to
// 16 MiB). A longer run is sent as several batches.
inline constexpr int kMaxStartsPerBatch = 256;
inline constexpr size_t kMaxStartBatchBytes = size_t{1} << 20;

// Replaces the run of start_task messages at the front of `queue`, when it
// has two or more, with one start_task_batch holding them in order (at most
// kMaxStartsPerBatch of them, kMaxStartBatchBytes in all; the rest of the
// run stays queued behind it). A lone start, or any other message at the
// front, is left as it is. Returns how many starts were merged (0: none).
int CoalesceLeadingStarts(std::deque<v1::CoordinatorMessage>& queue);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_AGENT_WRITES_H_
