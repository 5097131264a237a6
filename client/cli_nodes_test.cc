// Tests of `trainctl node drain|resume|down|describe` and of how `trainctl
// nodes` shows nodes an admin took out of service, against a mock
// coordinator stub (client/testing/cli_harness.h).

#include <string>
#include <vector>

#include "client/cli.h"
#include "client/testing/cli_harness.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace trainctl::cli {
namespace {

namespace v1 = ::trainctl::v1;
using ::testing::_;
using ::testing::DoAll;
using ::testing::HasSubstr;
using ::testing::Return;
using ::testing::SaveArg;
using ::testing::SetArgPointee;

class CliNodesTest : public CliHarness<> {};

// Node "a" drained by ops 5 minutes before the harness's now, with a
// deadline 25 minutes after it, one job still running on it.
v1::NodeView DrainingA() {
  return Proto<v1::NodeView>(R"pb(
    node {
      name: "a"
      state: NODE_STATE_READY
      address: "10.0.0.7"
      gpus { index: 0 name: "NVIDIA H100 80GB HBM3" memory_total_bytes: 85899345920 }
      admin {
        state: NODE_ADMIN_STATE_DRAIN
        reason: "swap PSU"
        by: "ops"
        since_ms: 1699999700000
        deadline_ms: 1700001500000
      }
    }
    gpu_tasks { tasks { job_id: 7 } }
    service_state: NODE_SERVICE_STATE_DRAINING
  )pb");
}

TEST_F(CliNodesTest, Drain_SendsNodesReasonAndDeadline_PrintsEachNodesState) {
  v1::UpdateNodesRequest sent;
  v1::UpdateNodesResponse answer;
  *answer.add_nodes() = DrainingA();
  EXPECT_CALL(stub_, UpdateNodes(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&sent), SetArgPointee<2>(answer), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"node", "drain", "a", "b", "--reason", "swap PSU", "--deadline", "30m"}), 0)
      << err_.str();
  EXPECT_THAT(sent.nodes(), ::testing::ElementsAre("a", "b"));
  EXPECT_EQ(sent.action(), v1::NODE_ACTION_DRAIN);
  EXPECT_EQ(sent.reason(), "swap PSU");
  EXPECT_EQ(sent.deadline_s(), 1800);
  EXPECT_EQ(out_.str(),
            "a: draining (1 job still running) - DRAIN by ops 5m ago: swap PSU, "
            "deadline in 25m\n");
}

TEST_F(CliNodesTest, DrainWithoutReason_OrWithABadDeadline_IsAUsageErrorAndSendsNothing) {
  EXPECT_NE(Run({"node", "drain", "a"}), 0);
  EXPECT_THAT(err_.str(), HasSubstr("--reason"));
  EXPECT_NE(Run({"node", "drain", "a", "--reason", "x", "--deadline", "soon"}), 0);
  EXPECT_THAT(err_.str(), HasSubstr("--deadline: 'soon' is not a duration"));
  EXPECT_NE(Run({"node", "down", "a"}), 0);
  EXPECT_THAT(err_.str(), HasSubstr("--reason"));
}

TEST_F(CliNodesTest, ResumeVerify_AndDown_SendTheirAction) {
  std::vector<v1::UpdateNodesRequest> sent;
  EXPECT_CALL(stub_, UpdateNodes(_, _, _))
      .Times(2)
      .WillRepeatedly([&](grpc::ClientContext*, const v1::UpdateNodesRequest& r,
                          v1::UpdateNodesResponse*) {
        sent.push_back(r);
        return grpc::Status::OK;
      });
  ASSERT_EQ(Run({"node", "resume", "a", "--verify"}), 0) << err_.str();
  ASSERT_EQ(Run({"node", "down", "a", "--reason", "PSU"}), 0) << err_.str();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].action(), v1::NODE_ACTION_RESUME);
  EXPECT_TRUE(sent[0].verify());
  EXPECT_EQ(sent[1].action(), v1::NODE_ACTION_DOWN);
  EXPECT_EQ(sent[1].reason(), "PSU");
}

TEST_F(CliNodesTest, Refused_PrintsTheCoordinatorsMessage) {
  EXPECT_CALL(stub_, UpdateNodes(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                    "user bob may not drain, resume or down nodes: admins only")));
  EXPECT_NE(Run({"node", "drain", "a", "--reason", "x"}), 0);
  EXPECT_THAT(err_.str(), HasSubstr("admins only"));
}

TEST_F(CliNodesTest, Nodes_ShowsDrainingAndTheReasonUnderTheTable) {
  v1::ListNodesResponse nodes;
  *nodes.add_nodes() = DrainingA();
  EXPECT_CALL(stub_, ListNodes(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(nodes), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"nodes"}), 0);
  const std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 3u) << out_.str();
  EXPECT_THAT(lines[1], HasSubstr("draining"));
  EXPECT_EQ(lines[2], "a: DRAIN by ops 5m ago: swap PSU, deadline in 25m");
}

TEST_F(CliNodesTest, Describe_ShowsStateReasonAndGpus_UnknownNodeIsNotFound) {
  v1::ListNodesResponse nodes;
  *nodes.add_nodes() = DrainingA();
  EXPECT_CALL(stub_, ListNodes(_, _, _))
      .Times(2)
      .WillRepeatedly(DoAll(SetArgPointee<2>(nodes), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"node", "describe", "a"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("State:         draining\n"));
  EXPECT_THAT(out_.str(), HasSubstr("Reason:        DRAIN by ops 5m ago: swap PSU"));
  EXPECT_THAT(out_.str(), HasSubstr("0  NVIDIA H100 80GB HBM3  80 GiB  jobs: 7/0"));
  EXPECT_NE(Run({"node", "describe", "zz"}), 0);
  EXPECT_THAT(err_.str(), HasSubstr("no node zz"));
}

}  // namespace
}  // namespace trainctl::cli
