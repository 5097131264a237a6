#ifndef TRAINCTL_COORDINATOR_TESTING_FAKE_AGENT_CONNECTION_H_
#define TRAINCTL_COORDINATOR_TESTING_FAKE_AGENT_CONNECTION_H_

// An agent stream for coordinator-core tests: records what the coordinator
// sends (in order) and the status it closed the stream with.

#include <vector>

#include "absl/status/status.h"
#include "coordinator/coordinator.h"

namespace trainctl::coord::testing {

class FakeAgentConnection : public AgentConnection {
 public:
  void Send(const v1::CoordinatorMessage& msg) override { sent.push_back(msg); }
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

}  // namespace trainctl::coord::testing

#endif  // TRAINCTL_COORDINATOR_TESTING_FAKE_AGENT_CONNECTION_H_
