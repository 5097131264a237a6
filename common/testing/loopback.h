#ifndef TRAINCTL_COMMON_TESTING_LOOPBACK_H_
#define TRAINCTL_COMMON_TESTING_LOOPBACK_H_

// Loopback TCP helpers for tests that start servers of their own (etcd, a
// store helper): a port to give them, and whether something listens there.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace trainctl::testing {

// A 127.0.0.1 port that was free a moment ago: bound to port 0, read back,
// released (the kernel picks it). Another process may take it meanwhile.
inline int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// Whether a TCP connect to 127.0.0.1:`port` succeeds now.
inline bool LoopbackAccepts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

}  // namespace trainctl::testing

#endif  // TRAINCTL_COMMON_TESTING_LOOPBACK_H_
