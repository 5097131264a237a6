#ifndef TRAINCTL_COORDINATOR_TESTING_FAKE_AGENT_CONNECTION_H_
#define TRAINCTL_COORDINATOR_TESTING_FAKE_AGENT_CONNECTION_H_

// An agent stream for coordinator-core tests: records what the coordinator
// sends (in order) and the status it closed the stream with.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

#include "absl/status/status.h"
#include "coordinator/coordinator.h"

namespace trainctl::coord::testing {

class FakeAgentConnection : public AgentConnection {
 public:
  void Send(v1::CoordinatorMessage msg) override { sent.push_back(std::move(msg)); }
  void Close(const absl::Status& status) override { closed = status; }

  // The StartTask / StopTask messages sent so far, in order (copies).
  std::vector<v1::StartTask> Starts() const {
    std::vector<v1::StartTask> out;
    for (const auto& m : sent) {
      if (m.has_start_task()) out.push_back(m.start_task());
    }
    return out;
  }
  std::vector<v1::StopTask> Stops() const {
    std::vector<v1::StopTask> out;
    for (const auto& m : sent) {
      if (m.has_stop_task()) out.push_back(m.stop_task());
    }
    return out;
  }

  std::vector<v1::CoordinatorMessage> sent;
  absl::Status closed;
};

// A RegisterNode for node `name` with `gpus` GPUs (indexes 0.., UUIDs
// "GPU-<name>-<i>", `gpu_memory_bytes` each, model `gpu_name`), address
// "<name>.example", `cpu_count` CPUs and ports 29500-29509, from an agent
// that runs pre-flight probes as tasks of their own (probe_tasks).
inline v1::RegisterNode FakeNodeRegistration(const std::string& name, int gpus,
                                             int cpu_count = 32,
                                             int64_t gpu_memory_bytes = int64_t{80} << 30,
                                             const std::string& gpu_name = "") {
  v1::RegisterNode reg;
  reg.set_probe_tasks(true);
  v1::Node* n = reg.mutable_node();
  n->set_name(name);
  n->set_address(absl::StrCat(name, ".example"));
  n->set_cpu_count(cpu_count);
  n->set_port_min(29500);
  n->set_port_max(29509);
  for (int i = 0; i < gpus; ++i) {
    v1::Gpu* g = n->add_gpus();
    g->set_index(i);
    g->set_uuid(absl::StrCat("GPU-", name, "-", i));
    if (!gpu_name.empty()) g->set_name(gpu_name);
    g->set_memory_total_bytes(gpu_memory_bytes);
  }
  return reg;
}

}  // namespace trainctl::coord::testing

#endif  // TRAINCTL_COORDINATOR_TESTING_FAKE_AGENT_CONNECTION_H_
