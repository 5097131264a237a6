#ifndef TRAINCTL_COORDINATOR_NODE_REGISTRY_H_
#define TRAINCTL_COORDINATOR_NODE_REGISTRY_H_

// The nodes of the cluster as their agents registered them: inventory, the
// agent's stream, heartbeats and the GPU measurements they carry, and the
// MASTER_PORTs handed out from each node's port range.
//
// Identity rules live here: a node name is held by one connected agent (the
// same agent instance may take it back; a holder silent for
// kHolderSilentHeartbeats heartbeat intervals loses it), and a GPU (by UUID)
// is offered by one node that is not lost (agents sharing a host offer
// disjoint GPUs). Liveness: a node with no heartbeat for node_timeout is
// stale (Stale); the coordinator then marks it lost and fails its tasks.
//
// Not thread-safe: called under the coordinator's lock, which guards it. No
// clock: times come in as arguments. Nothing here changes a node's state
// (state_machine.h's node table is applied by the coordinator).

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/node_admin.h"
#include "coordinator/task_key.h"
#include "trainctl/v1/service.pb.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

// The coordinator's end of one agent's stream. Send() and Close() only queue
// work (they never call back into the Coordinator), so the Coordinator calls
// them under its lock and messages to one agent keep their order. Once the
// Coordinator has returned from AgentDisconnected(node, conn) it never uses
// `conn` again. Implemented by the gRPC reactor, and by fakes in tests.
class AgentConnection {
 public:
  virtual ~AgentConnection() = default;
  // Queues `msg` for the agent (taken by value: callers done with theirs
  // move it in, sparing a copy of a StartTask and its environment).
  virtual void Send(v1::CoordinatorMessage msg) = 0;
  // Ends the stream with `status` (e.g. a newer connection of the same node
  // took over).
  virtual void Close(const absl::Status& status) = 0;
};

// Node names and GPU counts a registration may carry.
inline constexpr int kMaxNodeNameBytes = 253;
inline constexpr int kMaxGpusPerNode = 1024;
// Node.labels: at most this many, each value at most this many bytes.
inline constexpr int kMaxNodeLabels = 64;
inline constexpr size_t kMaxNodeLabelValueBytes = 256;

// One registered node.
struct NodeEntry {
  v1::Node node;
  // The agent's stream; null while disconnected.
  AgentConnection* conn = nullptr;
  absl::Time last_heartbeat;
  // Round-robin cursor in the node's MASTER_PORT range.
  int next_port = 0;
  // GPU index -> utilization smoothed over heartbeats (each new sample
  // weighs half), 0-100; what the packer looks at.
  absl::flat_hash_map<int, double> util_avg;
  // GPU index -> GPM counters smoothed the same way, percent 0-100; only
  // GPUs whose last heartbeat carried GPM (a GPU that stops reporting GPM is
  // dropped and judged by utilization).
  struct GpmAvg {
    double sm_active = 0;
    double sm_occupancy = 0;
    double dram_bw = 0;
  };
  absl::flat_hash_map<int, GpmAvg> gpm_avg;
  // The agent fences itself (RegisterNode.fences): each heartbeat is
  // answered with a LeaseGrant.
  bool fences = false;
  // RegisterNode.agent_instance_id of the agent holding the node.
  std::string instance_id;
  // RegisterNode.probe_tasks: the agent runs pre-flight probes as tasks of
  // their own; an older one gets no pre-flight.
  bool probe_tasks = false;
  // Processes the agent reported running at registration that hold no
  // reservation here (an unknown job, an earlier attempt, an aborted
  // pre-flight's probe, a task already taken for ended) and were told to
  // stop: which GPUs they hold is unknown, so the node gets no placement
  // until the agent reports each one's exit (at most stop_grace). Rebuilt at
  // every registration; cleared when the node is lost.
  absl::flat_hash_set<TaskKey> stopping_unplaced;
};

class NodeRegistry {
 public:
  using Nodes = absl::btree_map<std::string, NodeEntry>;
  // Host -> MASTER_PORTs in use there.
  using PortsByHost = absl::flat_hash_map<std::string, absl::flat_hash_set<int>>;

  // A connected holder of a node name counts as gone after this many
  // heartbeat intervals without a heartbeat (its host died without closing
  // the stream): a new agent may then take the name over.
  static constexpr int kHolderSilentHeartbeats = 3;

  // `heartbeat_interval`: what agents are told to keep; `node_timeout`: a
  // node silent this long is stale (CoordinatorConfig).
  NodeRegistry(absl::Duration heartbeat_interval, absl::Duration node_timeout)
      : heartbeat_interval_(heartbeat_interval), node_timeout_(node_timeout) {}

  // ---- the nodes, by name (as a map)
  Nodes::iterator find(const std::string& name) { return nodes_.find(name); }
  Nodes::const_iterator find(const std::string& name) const { return nodes_.find(name); }
  Nodes::iterator begin() { return nodes_.begin(); }
  Nodes::iterator end() { return nodes_.end(); }
  Nodes::const_iterator begin() const { return nodes_.begin(); }
  Nodes::const_iterator end() const { return nodes_.end(); }
  NodeEntry& operator[](const std::string& name) { return nodes_[name]; }
  // The node `name`, which must exist.
  NodeEntry& at(const std::string& name) { return nodes_.at(name); }
  const NodeEntry& at(const std::string& name) const { return nodes_.at(name); }
  bool empty() const { return nodes_.empty(); }
  size_t size() const { return nodes_.size(); }

  // ---- registration
  // Checks a registration's inventory. Errors: INVALID_ARGUMENT naming the
  // field: an empty or too long name (kMaxNodeNameBytes), more than
  // kMaxGpusPerNode GPUs, a GPU index or UUID given twice, a GPU of no
  // memory, a port range outside 1-65535 or reversed, a feature or label key
  // outside [a-z0-9_-] (1-64 characters; sched::IsValidSelectionName), more
  // than kMaxNodeLabels labels or a value over kMaxNodeLabelValueBytes.
  static absl::Status Validate(const v1::Node& node);
  // OK when `reg` may take node reg.node.name at `now`: nobody holds it, the
  // holder's stream is gone or is `conn`, the holder is the same agent
  // instance (RegisterNode.agent_instance_id), or it has been silent for
  // kHolderSilentHeartbeats heartbeat intervals. Errors: ALREADY_EXISTS
  // naming the holder's address and its last heartbeat, otherwise.
  absl::Status CheckNameFree(const v1::RegisterNode& reg, const AgentConnection* conn,
                             absl::Time now) const;
  // OK when no other node that is not lost offers a GPU with a UUID of
  // reg.node's (UUIDs are the same for a GPU whichever agent finds it).
  // Errors: ALREADY_EXISTS naming the other node and GPU when that node's
  // agent is connected; UNAVAILABLE when it is disconnected but not yet lost
  // (saying when it will be).
  absl::Status CheckGpusFree(const v1::RegisterNode& reg) const;
  // Takes the registration: node `updated` (already READY) now held by the
  // agent of `reg` on `conn`, heard from at `now`. An older stream of the
  // node is closed (ALREADY_EXISTS). The port cursor is kept, or reset to the
  // range's start when it fell outside the new range. Returns the entry and
  // whether the node had been lost.
  std::pair<NodeEntry*, bool> Admit(const v1::RegisterNode& reg, v1::Node updated,
                                    AgentConnection* conn, absl::Time now);

  // The cluster's id (StateStore::ClusterId, read at load), sent to agents.
  void set_cluster_id(std::string id) { cluster_id_ = std::move(id); }
  // The RegisterAck an admitted agent gets first, before any other message:
  // the heartbeat interval, the lease (node_timeout), the cluster id, and
  // that TaskStatusBatch is understood.
  v1::CoordinatorMessage Ack() const;

  // ---- heartbeats and liveness
  // Records heartbeat `hb` of `e` at `now`: its time, and each GPU's memory,
  // utilization, temperature, power and activity counters, with the
  // smoothed averages the packer reads.
  static void RecordHeartbeat(NodeEntry& e, const v1::Heartbeat& hb, absl::Time now);
  // The nodes, not lost, with no heartbeat for more than node_timeout at
  // `now`, by name.
  std::vector<std::string> Stale(absl::Time now) const;
  absl::Duration node_timeout() const { return node_timeout_; }

  // ---- admin state (node_admin.h): drain, down, resume
  // A node's admin state is its entry's node.admin(), stored with the node.
  // Sets node `name`'s admin record (the node must exist). The caller stores
  // the node first (NodeEntry.node is what is stored).
  void SetAdmin(const std::string& name, v1::NodeAdmin admin) {
    *nodes_.at(name).node.mutable_admin() = std::move(admin);
  }
  // The admin record a registration of `name` keeps: the stored node's, or
  // none for a new node. An agent never sets it (RegisterNode.node.admin is
  // ignored), so an agent restart never clears a drain.
  v1::NodeAdmin AdminOf(const std::string& name) const {
    auto it = nodes_.find(name);
    return it == nodes_.end() ? v1::NodeAdmin() : it->second.node.admin();
  }
  // Automatic drains on repeated pre-flight exclusions (configured once).
  AutoDrain& auto_drain() { return auto_drain_; }
  void set_auto_drain(AutoDrain a) { auto_drain_ = std::move(a); }

  // ---- MASTER_PORTs
  // The host a node's ports belong to: its address (agents that share a host
  // share its ports), or its name when it gave none.
  const std::string& PortHost(const std::string& node) const;
  // The ports in use by host as the last cluster snapshot found them (the
  // coordinator's snapshot walk fills it, and every pass starts with a
  // snapshot); a pass's placements add theirs. Mutable under a const
  // registry: the snapshot is a const view that fills it as it walks.
  PortsByHost& snapshot_ports() const { return snapshot_ports_; }
  // A scheduling pass starts / ends: while it runs, placements take ports
  // from snapshot_ports() (one scan of the jobs serves all its placements).
  void BeginPass() { in_pass_ = true; }
  void EndPass() { in_pass_ = false; }
  // snapshot_ports() while a pass runs, else null (scan the jobs instead).
  PortsByHost* pass_ports() { return in_pass_ ? &snapshot_ports_ : nullptr; }
  // A MASTER_PORT of `node`'s range not in `used` (ports of its host),
  // round-robin from the node's cursor; added to `used`. When every port is
  // taken, the range's first (logged).
  static int AllocatePort(NodeEntry& node, absl::flat_hash_set<int>& used);

 private:
  const absl::Duration heartbeat_interval_;
  const absl::Duration node_timeout_;
  std::string cluster_id_;
  Nodes nodes_;
  AutoDrain auto_drain_;
  bool in_pass_ = false;
  mutable PortsByHost snapshot_ports_;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_NODE_REGISTRY_H_
