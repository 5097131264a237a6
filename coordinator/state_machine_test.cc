// The three edge tables, checked against the diagrams in state_machine.h:
// every pair of states is tried, and only the drawn edges pass.

#include "coordinator/state_machine.h"

#include <set>
#include <utility>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::HasSubstr;
using ::trainctl::testing::StatusIs;

TEST(StateMachineTest, JobEdges_ExactlyTheDrawnOnes) {
  using S = v1::JobState;
  const std::set<std::pair<S, S>> drawn = {
      {v1::JOB_STATE_PENDING, v1::JOB_STATE_SCHEDULED},
      {v1::JOB_STATE_PENDING, v1::JOB_STATE_FAILED},
      {v1::JOB_STATE_PENDING, v1::JOB_STATE_CANCELLED},
      {v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_RUNNING},
      {v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_FAILED},
      {v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_CANCELLED},
      {v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_PENDING},
      {v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED},
      {v1::JOB_STATE_RUNNING, v1::JOB_STATE_FAILED},
      {v1::JOB_STATE_RUNNING, v1::JOB_STATE_CANCELLED},
      {v1::JOB_STATE_RUNNING, v1::JOB_STATE_PENDING},
  };
  for (int from = v1::JobState_MIN; from <= v1::JobState_MAX; ++from) {
    for (int to = v1::JobState_MIN; to <= v1::JobState_MAX; ++to) {
      const std::pair<S, S> edge{static_cast<S>(from), static_cast<S>(to)};
      EXPECT_EQ(IsValidJobEdge(edge.first, edge.second), drawn.count(edge) == 1)
          << v1::JobState_Name(from) << " -> " << v1::JobState_Name(to);
    }
  }
}

TEST(StateMachineTest, TaskEdges_ExactlyTheDrawnOnes) {
  using S = v1::TaskState;
  const std::set<std::pair<S, S>> drawn = {
      {v1::TASK_STATE_UNSPECIFIED, v1::TASK_STATE_STARTING},
      {v1::TASK_STATE_STARTING, v1::TASK_STATE_RUNNING},
      {v1::TASK_STATE_STARTING, v1::TASK_STATE_EXITED},
      {v1::TASK_STATE_STARTING, v1::TASK_STATE_START_FAILED},
      {v1::TASK_STATE_STARTING, v1::TASK_STATE_STOPPING},
      {v1::TASK_STATE_STARTING, v1::TASK_STATE_LOST},
      {v1::TASK_STATE_RUNNING, v1::TASK_STATE_EXITED},
      {v1::TASK_STATE_RUNNING, v1::TASK_STATE_STOPPING},
      {v1::TASK_STATE_RUNNING, v1::TASK_STATE_LOST},
      {v1::TASK_STATE_STOPPING, v1::TASK_STATE_EXITED},
      {v1::TASK_STATE_STOPPING, v1::TASK_STATE_START_FAILED},
      {v1::TASK_STATE_STOPPING, v1::TASK_STATE_LOST},
  };
  for (int from = v1::TaskState_MIN; from <= v1::TaskState_MAX; ++from) {
    for (int to = v1::TaskState_MIN; to <= v1::TaskState_MAX; ++to) {
      const std::pair<S, S> edge{static_cast<S>(from), static_cast<S>(to)};
      EXPECT_EQ(IsValidTaskEdge(edge.first, edge.second), drawn.count(edge) == 1)
          << v1::TaskState_Name(from) << " -> " << v1::TaskState_Name(to);
    }
  }
}

TEST(StateMachineTest, NodeEdges_ExactlyTheDrawnOnes) {
  EXPECT_TRUE(IsValidNodeEdge(v1::NODE_STATE_UNSPECIFIED, v1::NODE_STATE_READY));
  EXPECT_TRUE(IsValidNodeEdge(v1::NODE_STATE_READY, v1::NODE_STATE_READY));
  EXPECT_TRUE(IsValidNodeEdge(v1::NODE_STATE_READY, v1::NODE_STATE_LOST));
  EXPECT_TRUE(IsValidNodeEdge(v1::NODE_STATE_LOST, v1::NODE_STATE_READY));
  EXPECT_FALSE(IsValidNodeEdge(v1::NODE_STATE_UNSPECIFIED, v1::NODE_STATE_LOST));
  EXPECT_FALSE(IsValidNodeEdge(v1::NODE_STATE_LOST, v1::NODE_STATE_LOST));
  EXPECT_FALSE(IsValidNodeEdge(v1::NODE_STATE_READY, v1::NODE_STATE_UNSPECIFIED));
}

TEST(StateMachineTest, TransitionTask_IllegalEdge_InternalAndUnchanged) {
  v1::Task task;
  task.set_rank(3);
  task.set_node("gpu-a");
  TC_ASSERT_OK(TransitionTask(task, v1::TASK_STATE_STARTING));
  TC_ASSERT_OK(TransitionTask(task, v1::TASK_STATE_RUNNING));
  TC_ASSERT_OK(TransitionTask(task, v1::TASK_STATE_EXITED));
  // An exited process does not come back.
  EXPECT_THAT(TransitionTask(task, v1::TASK_STATE_RUNNING),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("rank 3 on gpu-a: illegal task transition "
                                 "TASK_STATE_EXITED -> TASK_STATE_RUNNING")));
  EXPECT_EQ(task.state(), v1::TASK_STATE_EXITED);
}

TEST(StateMachineTest, TransitionNode_IllegalEdge_InternalAndUnchanged) {
  v1::Node node;
  node.set_name("gpu-a");
  EXPECT_THAT(TransitionNode(node, v1::NODE_STATE_LOST),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("node gpu-a")));
  EXPECT_EQ(node.state(), v1::NODE_STATE_UNSPECIFIED);
  TC_ASSERT_OK(TransitionNode(node, v1::NODE_STATE_READY));
  TC_ASSERT_OK(TransitionNode(node, v1::NODE_STATE_LOST));
  TC_ASSERT_OK(TransitionNode(node, v1::NODE_STATE_READY));
}

}  // namespace
}  // namespace trainctl::coord
