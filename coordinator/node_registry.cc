#include "coordinator/node_registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/logging.h"
#include "coordinator/sched/node_selection.h"

namespace trainctl::coord {

absl::Status NodeRegistry::Validate(const v1::Node& n) {
  if (n.name().empty() || n.name().size() > kMaxNodeNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("node.name: must be 1 to ", kMaxNodeNameBytes, " bytes"));
  }
  if (n.gpus_size() > kMaxGpusPerNode) {
    return absl::InvalidArgumentError(
        absl::StrCat("node.gpus: at most ", kMaxGpusPerNode, " GPUs"));
  }
  absl::flat_hash_set<int> indices;
  absl::flat_hash_set<std::string> uuids;
  for (const v1::Gpu& g : n.gpus()) {
    if (!indices.insert(g.index()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("node.gpus: GPU index ", g.index(), " appears twice"));
    }
    if (!g.uuid().empty() && !uuids.insert(g.uuid()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("node.gpus: GPU UUID ", g.uuid(), " appears twice"));
    }
    if (g.memory_total_bytes() <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node.gpus[", g.index(), "].memory_total_bytes: must be > 0"));
    }
  }
  for (const std::string& f : n.features()) {
    if (!sched::IsValidSelectionName(f)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node.features: \"", f,
          "\" must be 1-64 characters of a-z, 0-9, _ and - (agent --features)"));
    }
  }
  if (n.labels_size() > kMaxNodeLabels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node.labels: at most ", kMaxNodeLabels, " labels (agent --labels)"));
  }
  for (const auto& [key, value] : n.labels()) {
    if (!sched::IsValidSelectionName(key) || value.size() > kMaxNodeLabelValueBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node.labels: key \"", key,
          "\" must be 1-64 characters of a-z, 0-9, _ and -, its value at most ",
          kMaxNodeLabelValueBytes, " bytes (agent --labels)"));
    }
  }
  if (n.port_min() <= 0 || n.port_max() > 65535 || n.port_min() > n.port_max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node.port_min/port_max: need 0 < min <= max <= 65535, got ", n.port_min(), "-",
        n.port_max()));
  }
  return absl::OkStatus();
}

absl::Status NodeRegistry::CheckNameFree(const v1::RegisterNode& reg,
                                         const AgentConnection* conn,
                                         absl::Time now) const {
  auto it = nodes_.find(reg.node().name());
  if (it == nodes_.end()) return absl::OkStatus();
  const NodeEntry& holder = it->second;
  if (holder.conn == nullptr || holder.conn == conn) return absl::OkStatus();
  if (!reg.agent_instance_id().empty() && reg.agent_instance_id() == holder.instance_id) {
    return absl::OkStatus();
  }
  const absl::Duration silent = now - holder.last_heartbeat;
  if (silent > kHolderSilentHeartbeats * heartbeat_interval_) return absl::OkStatus();
  return absl::AlreadyExistsError(absl::StrCat(
      "node name ", reg.node().name(), " is held by the connected agent at ",
      holder.node.address(), " (last heartbeat ",
      absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(1))),
      " ago): start this agent with another --node-name, or stop that one first"));
}

absl::Status NodeRegistry::CheckGpusFree(const v1::RegisterNode& reg) const {
  absl::flat_hash_map<absl::string_view, int> mine;  // UUID -> index
  for (const v1::Gpu& g : reg.node().gpus()) {
    if (!g.uuid().empty()) mine.emplace(g.uuid(), g.index());
  }
  if (mine.empty()) return absl::OkStatus();
  for (const auto& [name, e] : nodes_) {
    if (name == reg.node().name() || e.node.state() == v1::NODE_STATE_LOST) continue;
    for (const v1::Gpu& g : e.node.gpus()) {
      auto it = mine.find(g.uuid());
      if (it == mine.end()) continue;
      const std::string what = absl::StrCat(
          "node.gpus: GPU ", it->second, " (", g.uuid(), ") is already offered by node ",
          name, " at ", e.node.address(), " as its GPU ", g.index());
      if (e.conn != nullptr) {
        return absl::AlreadyExistsError(
            absl::StrCat(what, ": agents sharing a host must offer disjoint GPUs (--gpus)"));
      }
      return absl::UnavailableError(absl::StrCat(
          what, ", whose agent is gone; it is free once that node is lost (",
          absl::FormatDuration(node_timeout_), " after its last heartbeat)"));
    }
  }
  return absl::OkStatus();
}

std::pair<NodeEntry*, bool> NodeRegistry::Admit(const v1::RegisterNode& reg,
                                                v1::Node updated, AgentConnection* conn,
                                                absl::Time now) {
  NodeEntry& e = nodes_[updated.name()];
  if (e.conn != nullptr && e.conn != conn) {
    // CheckNameFree let it through: the same agent instance reconnecting, or
    // a holder silent past its heartbeats.
    e.conn->Close(absl::AlreadyExistsError("this agent's node registered again on a newer stream"));
  }
  e.instance_id = reg.agent_instance_id();
  const bool was_lost = e.node.state() == v1::NODE_STATE_LOST;
  e.node = std::move(updated);
  e.conn = conn;
  e.fences = reg.fences();
  e.probe_tasks = reg.probe_tasks();
  e.last_heartbeat = now;
  if (e.next_port < e.node.port_min() || e.next_port > e.node.port_max()) {
    e.next_port = e.node.port_min();
  }
  return {&e, was_lost};
}

v1::CoordinatorMessage NodeRegistry::Ack() const {
  v1::CoordinatorMessage ack;
  v1::RegisterAck* a = ack.mutable_register_ack();
  a->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(heartbeat_interval_));
  a->set_lease_ms(absl::ToInt64Milliseconds(node_timeout_));
  a->set_cluster_id(cluster_id_);
  a->set_accepts_task_status_batch(true);
  return ack;
}

void NodeRegistry::RecordHeartbeat(NodeEntry& e, const v1::Heartbeat& hb, absl::Time now) {
  e.last_heartbeat = now;
  for (const v1::GpuSample& s : hb.gpus()) {
    for (v1::Gpu& g : *e.node.mutable_gpus()) {
      if (g.index() != s.index()) continue;
      g.set_memory_used_bytes(s.memory_used_bytes());
      g.set_utilization_pct(s.utilization_pct());
      g.set_temperature_c(s.temperature_c());
      g.set_power_w(s.power_w());
      auto [avg, fresh] = e.util_avg.try_emplace(s.index(), s.utilization_pct());
      if (!fresh) avg->second = 0.5 * avg->second + 0.5 * s.utilization_pct();
      g.set_activity_source(s.activity_source());
      g.set_sm_active_pct(s.sm_active_pct());
      g.set_sm_occupancy_pct(s.sm_occupancy_pct());
      g.set_dram_bw_pct(s.dram_bw_pct());
      if (s.activity_source() == v1::GPU_ACTIVITY_SOURCE_GPM) {
        const NodeEntry::GpmAvg sample{s.sm_active_pct(), s.sm_occupancy_pct(),
                                       s.dram_bw_pct()};
        auto [gpm, first] = e.gpm_avg.try_emplace(s.index(), sample);
        if (!first) {
          gpm->second.sm_active = 0.5 * gpm->second.sm_active + 0.5 * sample.sm_active;
          gpm->second.sm_occupancy =
              0.5 * gpm->second.sm_occupancy + 0.5 * sample.sm_occupancy;
          gpm->second.dram_bw = 0.5 * gpm->second.dram_bw + 0.5 * sample.dram_bw;
        }
      } else {
        e.gpm_avg.erase(s.index());
      }
    }
  }
}

std::vector<std::string> NodeRegistry::Stale(absl::Time now) const {
  std::vector<std::string> out;
  for (const auto& [name, e] : nodes_) {
    if (e.node.state() == v1::NODE_STATE_LOST) continue;
    if (now - e.last_heartbeat > node_timeout_) out.push_back(name);
  }
  return out;
}

const std::string& NodeRegistry::PortHost(const std::string& node) const {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.node.address().empty()) return node;
  return it->second.node.address();
}

int NodeRegistry::AllocatePort(NodeEntry& node, absl::flat_hash_set<int>& used) {
  const int lo = node.node.port_min();
  const int hi = node.node.port_max();
  const int span = hi - lo + 1;
  for (int i = 0; i < span; ++i) {
    const int port = lo + (node.next_port - lo + i + span) % span;
    if (!used.contains(port)) {
      node.next_port = port + 1;
      used.insert(port);
      return port;
    }
  }
  TC_LOG_WARN("node {}: every MASTER_PORT in {}-{} is in use; reusing {}", node.node.name(),
              lo, hi, lo);
  return lo;
}

}  // namespace trainctl::coord
