#include "coordinator/node_registry.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1000);
constexpr absl::Duration kBeat = absl::Seconds(1);
constexpr absl::Duration kTimeout = absl::Seconds(10);

class Conn : public AgentConnection {
 public:
  void Send(v1::CoordinatorMessage) override {}
  void Close(const absl::Status& s) override { closed = s; }
  absl::Status closed;
};

v1::RegisterNode Reg(const std::string& name, const std::string& uuid,
                     const std::string& instance = "") {
  v1::RegisterNode reg;
  v1::Node* n = reg.mutable_node();
  n->set_name(name);
  n->set_address("10.0.0.1");
  n->set_port_min(29500);
  n->set_port_max(29501);
  v1::Gpu* g = n->add_gpus();
  g->set_index(0);
  g->set_uuid(uuid);
  g->set_memory_total_bytes(80LL << 30);
  reg.set_agent_instance_id(instance);
  return reg;
}

NodeEntry& Admit(NodeRegistry& r, const v1::RegisterNode& reg, Conn* conn, absl::Time now) {
  v1::Node ready = reg.node();
  ready.set_state(v1::NODE_STATE_READY);
  return *r.Admit(reg, ready, conn, now).first;
}

TEST(NodeRegistryTest, Validate_NamesTheField) {
  v1::Node n = Reg("a", "GPU-1").node();
  EXPECT_TRUE(NodeRegistry::Validate(n).ok());
  n.add_gpus()->CopyFrom(n.gpus(0));
  absl::Status s = NodeRegistry::Validate(n);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("node.gpus: GPU index 0 appears twice"));
  n = Reg("a", "GPU-1").node();
  n.set_port_min(30000);
  EXPECT_THAT(NodeRegistry::Validate(n).message(), HasSubstr("node.port_min/port_max"));
  n.set_name("");
  EXPECT_THAT(NodeRegistry::Validate(n).message(), HasSubstr("node.name"));
}

TEST(NodeRegistryTest, Validate_FeaturesAndLabelsNameTheField) {
  v1::Node n = Reg("a", "GPU-1").node();
  n.add_features("ib");
  n.add_features("nv-link_2");
  (*n.mutable_labels())["rack"] = "R1 / row 3";
  EXPECT_TRUE(NodeRegistry::Validate(n).ok());
  n.add_features("IB");
  absl::Status s = NodeRegistry::Validate(n);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("node.features: \"IB\""));
  n = Reg("a", "GPU-1").node();
  (*n.mutable_labels())["Rack"] = "r1";
  s = NodeRegistry::Validate(n);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("node.labels: key \"Rack\""));
}

TEST(NodeRegistryTest, ANameHeldByAConnectedAgent_IsRefusedUntilItFallsSilent) {
  NodeRegistry r(kBeat, kTimeout);
  Conn first, second;
  Admit(r, Reg("a", "GPU-1", "agent-1"), &first, kT0);
  absl::Status s = r.CheckNameFree(Reg("a", "GPU-2", "agent-2"), &second, kT0 + kBeat);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("held by the connected agent at 10.0.0.1"));
  // The same agent instance takes its node back at once.
  EXPECT_TRUE(r.CheckNameFree(Reg("a", "GPU-1", "agent-1"), &second, kT0 + kBeat).ok());
  // Any agent may, once the holder missed kHolderSilentHeartbeats beats.
  const absl::Time silent =
      kT0 + NodeRegistry::kHolderSilentHeartbeats * kBeat + absl::Milliseconds(1);
  EXPECT_TRUE(r.CheckNameFree(Reg("a", "GPU-2", "agent-2"), &second, silent).ok());
  Admit(r, Reg("a", "GPU-2", "agent-2"), &second, silent);
  EXPECT_EQ(first.closed.code(), absl::StatusCode::kAlreadyExists);  // old stream closed
}

TEST(NodeRegistryTest, AGpuOfferedByTwoNodes_IsRefused) {
  NodeRegistry r(kBeat, kTimeout);
  Conn a, b;
  Admit(r, Reg("a", "GPU-1"), &a, kT0);
  absl::Status s = r.CheckGpusFree(Reg("b", "GPU-1"));
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("already offered by node a"));
  r.find("a")->second.conn = nullptr;  // a's agent went away, a not yet lost
  EXPECT_EQ(r.CheckGpusFree(Reg("b", "GPU-1")).code(), absl::StatusCode::kUnavailable);
  r.find("a")->second.node.set_state(v1::NODE_STATE_LOST);
  EXPECT_TRUE(r.CheckGpusFree(Reg("b", "GPU-1")).ok());
  EXPECT_TRUE(r.CheckGpusFree(Reg("b", "GPU-9")).ok());
}

TEST(NodeRegistryTest, Stale_NodesSilentPastTheTimeout) {
  NodeRegistry r(kBeat, kTimeout);
  Conn a, b;
  Admit(r, Reg("a", "GPU-1"), &a, kT0);
  NodeEntry& eb = Admit(r, Reg("b", "GPU-2"), &b, kT0);
  v1::Heartbeat hb;
  v1::GpuSample* g = hb.add_gpus();
  g->set_index(0);
  g->set_utilization_pct(80);
  NodeRegistry::RecordHeartbeat(eb, hb, kT0 + absl::Seconds(5));
  EXPECT_EQ(eb.node.gpus(0).utilization_pct(), 80);
  g->set_utilization_pct(40);
  NodeRegistry::RecordHeartbeat(eb, hb, kT0 + absl::Seconds(6));
  EXPECT_DOUBLE_EQ(eb.util_avg.at(0), 60);  // each sample weighs half
  EXPECT_TRUE(r.Stale(kT0 + kTimeout).empty());
  EXPECT_THAT(r.Stale(kT0 + kTimeout + absl::Seconds(1)), ElementsAre("a"));
}

TEST(NodeRegistryTest, Ports_RoundRobinOverTheRangeAndSharedByHost) {
  NodeRegistry r(kBeat, kTimeout);
  Conn a;
  NodeEntry& e = Admit(r, Reg("a", "GPU-1"), &a, kT0);
  EXPECT_EQ(r.PortHost("a"), "10.0.0.1");
  EXPECT_EQ(r.PortHost("unknown"), "unknown");
  absl::flat_hash_set<int> used;
  EXPECT_EQ(NodeRegistry::AllocatePort(e, used), 29500);
  EXPECT_EQ(NodeRegistry::AllocatePort(e, used), 29501);
  // Both taken: the first is reused (and logged).
  EXPECT_EQ(NodeRegistry::AllocatePort(e, used), 29500);
  used = {29501};
  EXPECT_EQ(NodeRegistry::AllocatePort(e, used), 29500);
  EXPECT_EQ(r.pass_ports(), nullptr);
  r.BeginPass();
  EXPECT_EQ(r.pass_ports(), &r.snapshot_ports());
  r.EndPass();
  EXPECT_EQ(r.pass_ports(), nullptr);
}

}  // namespace
}  // namespace trainctl::coord
