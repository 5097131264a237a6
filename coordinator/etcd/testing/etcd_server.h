#ifndef TRAINCTL_COORDINATOR_ETCD_TESTING_ETCD_SERVER_H_
#define TRAINCTL_COORDINATOR_ETCD_TESTING_ETCD_SERVER_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace trainctl::coord::testing {

// A real one-member etcd (Debian's etcd-server, /usr/bin/etcd) for tests,
// on free loopback ports with its data under `dir`; killed (SIGKILL) and
// reaped when destroyed.
class EtcdServer {
 public:
  // Starts etcd and returns once its client port accepts connections
  // (within 20 s). Errors: NOT_FOUND when no etcd binary is installed (tests
  // then skip); UNAVAILABLE when it did not come up (its log is named).
  static absl::StatusOr<std::unique_ptr<EtcdServer>> Start(const std::string& dir);
  ~EtcdServer();

  // "127.0.0.1:PORT" of the client API.
  const std::string& endpoint() const { return endpoint_; }

 private:
  EtcdServer(pid_t pid, std::string endpoint) : pid_(pid), endpoint_(std::move(endpoint)) {}
  pid_t pid_;
  std::string endpoint_;
};

}  // namespace trainctl::coord::testing

#endif  // TRAINCTL_COORDINATOR_ETCD_TESTING_ETCD_SERVER_H_
