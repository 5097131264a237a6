#ifndef TRAINCTL_COORDINATOR_STATE_MACHINE_H_
#define TRAINCTL_COORDINATOR_STATE_MACHINE_H_

// The coordinator's three state machines as edge tables, and the one
// function per machine that changes a record's state. Pure: protobuf
// messages in, absl::Status out; no lock, no clock.
//
// Job (docs/design.md §2):
//
//   PENDING ──placed──▶ SCHEDULED ──all ranks started──▶ RUNNING ──all exit 0──▶ SUCCEEDED
//    │  │                  │  │                            │ │
//    │  └──infeasible──▶ FAILED ◀──attempt failed, no restart left──┘ │
//    └──cancel──▶ CANCELLED ◀─────cancel─────┘  └─────cancel──────────┘
//   SCHEDULED/RUNNING ──restart left, preempted, pre-flight failed──▶ PENDING
//   SUCCEEDED, FAILED, CANCELLED: final, no edge out.
//
// Task (one rank's process of one attempt, or one pre-flight probe):
//
//   (new) ──▶ STARTING ──agent started it──▶ RUNNING ──exit──▶ EXITED
//                │ │ └──spawn failed──▶ START_FAILED            ▲
//                │ └──exit before RUNNING was reported──────────┤
//                └──────stop──────▶ STOPPING ──exit──────────────┘
//   RUNNING ──stop──▶ STOPPING;  STOPPING ──spawn failed──▶ START_FAILED
//   STARTING, RUNNING, STOPPING ──node lost / gone at re-registration──▶ LOST
//   EXITED, START_FAILED, LOST: final, no edge out.
//
// Node:
//
//   (new) ──registers──▶ READY ──no heartbeat for node_timeout──▶ LOST
//                          ▲                                      │
//                          └───────────registers again────────────┘

#include "absl/status/status.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

// Whether the job may move `from` -> `to` (the table above; `from` == `to`
// is not an edge).
bool IsValidJobEdge(v1::JobState from, v1::JobState to);
// Whether a task may move `from` -> `to`; UNSPECIFIED -> STARTING is a new
// task's first state.
bool IsValidTaskEdge(v1::TaskState from, v1::TaskState to);
// Whether a node may move `from` -> `to`; UNSPECIFIED -> READY is a new
// node's registration, READY -> READY a re-registration.
bool IsValidNodeEdge(v1::NodeState from, v1::NodeState to);

// Sets task.state to `to`. Errors: INTERNAL naming the task's rank and node
// and both states when the edge is not in the table (the task is unchanged).
absl::Status TransitionTask(v1::Task& task, v1::TaskState to);
// Sets node.state to `to`. Errors: INTERNAL naming the node and both states
// when the edge is not in the table (the node is unchanged).
absl::Status TransitionNode(v1::Node& node, v1::NodeState to);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_STATE_MACHINE_H_
