#include "coordinator/state_machine.h"

#include "absl/strings/str_cat.h"

namespace trainctl::coord {

bool IsValidJobEdge(v1::JobState from, v1::JobState to) {
  switch (from) {
    case v1::JOB_STATE_PENDING:
      return to == v1::JOB_STATE_SCHEDULED || to == v1::JOB_STATE_FAILED ||
             to == v1::JOB_STATE_CANCELLED;
    case v1::JOB_STATE_SCHEDULED:
      return to == v1::JOB_STATE_RUNNING || to == v1::JOB_STATE_FAILED ||
             to == v1::JOB_STATE_CANCELLED || to == v1::JOB_STATE_PENDING;
    case v1::JOB_STATE_RUNNING:
      return to == v1::JOB_STATE_SUCCEEDED || to == v1::JOB_STATE_FAILED ||
             to == v1::JOB_STATE_CANCELLED || to == v1::JOB_STATE_PENDING;
    default:
      return false;
  }
}

bool IsValidTaskEdge(v1::TaskState from, v1::TaskState to) {
  switch (from) {
    case v1::TASK_STATE_UNSPECIFIED:
      return to == v1::TASK_STATE_STARTING;
    case v1::TASK_STATE_STARTING:
      return to == v1::TASK_STATE_RUNNING || to == v1::TASK_STATE_EXITED ||
             to == v1::TASK_STATE_START_FAILED || to == v1::TASK_STATE_STOPPING ||
             to == v1::TASK_STATE_LOST;
    case v1::TASK_STATE_RUNNING:
      return to == v1::TASK_STATE_EXITED || to == v1::TASK_STATE_STOPPING ||
             to == v1::TASK_STATE_LOST;
    case v1::TASK_STATE_STOPPING:
      return to == v1::TASK_STATE_EXITED || to == v1::TASK_STATE_START_FAILED ||
             to == v1::TASK_STATE_LOST;
    default:
      return false;
  }
}

bool IsValidNodeEdge(v1::NodeState from, v1::NodeState to) {
  switch (from) {
    case v1::NODE_STATE_UNSPECIFIED:
      return to == v1::NODE_STATE_READY;
    case v1::NODE_STATE_READY:
      return to == v1::NODE_STATE_READY || to == v1::NODE_STATE_LOST;
    case v1::NODE_STATE_LOST:
      return to == v1::NODE_STATE_READY;
    default:
      return false;
  }
}

absl::Status TransitionTask(v1::Task& task, v1::TaskState to) {
  if (!IsValidTaskEdge(task.state(), to)) {
    return absl::InternalError(absl::StrCat(
        "rank ", task.rank(), " on ", task.node(), ": illegal task transition ",
        v1::TaskState_Name(task.state()), " -> ", v1::TaskState_Name(to)));
  }
  task.set_state(to);
  return absl::OkStatus();
}

absl::Status TransitionNode(v1::Node& node, v1::NodeState to) {
  if (!IsValidNodeEdge(node.state(), to)) {
    return absl::InternalError(absl::StrCat(
        "node ", node.name(), ": illegal node transition ",
        v1::NodeState_Name(node.state()), " -> ", v1::NodeState_Name(to)));
  }
  node.set_state(to);
  return absl::OkStatus();
}

}  // namespace trainctl::coord
