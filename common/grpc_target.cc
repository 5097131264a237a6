#include "common/grpc_target.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace trainctl {
namespace {

struct HostPort {
  std::string host;
  std::string port;
};

absl::StatusOr<HostPort> SplitHostPort(absl::string_view entry) {
  const size_t colon = entry.rfind(':');
  if (colon == absl::string_view::npos || colon + 1 == entry.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "coordinator address \"", entry, "\": expected host:port"));
  }
  absl::string_view host = entry.substr(0, colon);
  absl::string_view port = entry.substr(colon + 1);
  int port_number = 0;
  if (!absl::SimpleAtoi(port, &port_number) || port_number <= 0 ||
      port_number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "coordinator address \"", entry, "\": port must be 1..65535"));
  }
  if (absl::ConsumePrefix(&host, "[")) {
    if (!absl::ConsumeSuffix(&host, "]")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "coordinator address \"", entry, "\": unbalanced [ in IPv6 address"));
    }
  }
  if (host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "coordinator address \"", entry, "\": empty host"));
  }
  return HostPort{std::string(host), std::string(port)};
}

}  // namespace

std::string FirstHost(absl::string_view addresses) {
  std::vector<absl::string_view> entries =
      absl::StrSplit(addresses, ',', absl::SkipWhitespace());
  if (entries.empty()) return "";
  absl::StatusOr<HostPort> hp = SplitHostPort(absl::StripAsciiWhitespace(entries[0]));
  return hp.ok() ? hp->host : "";
}

absl::StatusOr<std::string> GrpcTargetFor(absl::string_view addresses) {
  std::vector<absl::string_view> entries =
      absl::StrSplit(addresses, ',', absl::SkipWhitespace());
  if (entries.empty()) {
    return absl::InvalidArgumentError("coordinator address list is empty");
  }
  if (addresses.find(',') == absl::string_view::npos) {
    absl::StatusOr<HostPort> one = SplitHostPort(absl::StripAsciiWhitespace(addresses));
    if (!one.ok()) return one.status();
    return std::string(absl::StripAsciiWhitespace(addresses));
  }
  std::vector<std::string> v4, v6;
  for (absl::string_view raw : entries) {
    absl::string_view entry = absl::StripAsciiWhitespace(raw);
    absl::StatusOr<HostPort> hp = SplitHostPort(entry);
    if (!hp.ok()) return hp.status();
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = getaddrinfo(hp->host.c_str(), hp->port.c_str(), &hints, &found);
    if (rc != 0 || found == nullptr) {
      return absl::UnavailableError(absl::StrCat(
          "coordinator address \"", entry, "\": cannot resolve: ", gai_strerror(rc)));
    }
    std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(found, freeaddrinfo);
    char text[INET6_ADDRSTRLEN] = {};
    if (found->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr,
                text, sizeof(text));
      v4.push_back(absl::StrCat(text, ":", hp->port));
    } else {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(found->ai_addr)->sin6_addr,
                text, sizeof(text));
      v6.push_back(absl::StrCat("[", text, "]:", hp->port));
    }
  }
  if (!v4.empty() && !v6.empty()) {
    return absl::InvalidArgumentError(
        "coordinator addresses mix IPv4 and IPv6; give all of one family");
  }
  return v4.empty() ? absl::StrCat("ipv6:", absl::StrJoin(v6, ","))
                    : absl::StrCat("ipv4:", absl::StrJoin(v4, ","));
}

}  // namespace trainctl
