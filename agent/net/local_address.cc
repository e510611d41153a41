#include "agent/net/local_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace det::agent {
namespace {

// Splits "host:port" / "[v6]:port"; false when malformed.
bool SplitHostPort(absl::string_view text, std::string* host, std::string* port) {
  size_t colon;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == absl::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return false;
    }
    *host = std::string(text.substr(1, close - 1));
    colon = close + 1;
  } else {
    colon = text.rfind(':');
    if (colon == absl::string_view::npos) return false;
    *host = std::string(text.substr(0, colon));
    if (host->find(':') != std::string::npos) return false;  // a bare IPv6 needs brackets
  }
  *port = std::string(text.substr(colon + 1));
  int number = 0;
  return !host->empty() && absl::SimpleAtoi(*port, &number) && number > 0 && number <= 65535;
}

}  // namespace

absl::StatusOr<std::string> LocalAddressTowards(absl::string_view host_port) {
  std::string host, port;
  if (!SplitHostPort(host_port, &host, &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", host_port, "' is not host:port (an IPv6 address as [addr]:port)"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* results = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &results);
  if (rc != 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot resolve '", host, "' (of '", host_port, "'): ", gai_strerror(rc)));
  }
  std::string last_error = "no address";
  std::string found;
  for (addrinfo* ai = results; ai != nullptr && found.empty(); ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = absl::StrCat("socket: ", strerror(errno));
      continue;
    }
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      last_error = absl::StrCat("connect: ", strerror(errno));
    } else if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
      last_error = absl::StrCat("getsockname: ", strerror(errno));
    } else {
      char text[INET6_ADDRSTRLEN] = {0};
      const void* addr = local.ss_family == AF_INET6
                             ? static_cast<const void*>(
                                   &reinterpret_cast<const sockaddr_in6*>(&local)->sin6_addr)
                             : static_cast<const void*>(
                                   &reinterpret_cast<const sockaddr_in*>(&local)->sin_addr);
      if (inet_ntop(local.ss_family, addr, text, sizeof(text)) != nullptr) {
        found = text;
      } else {
        last_error = absl::StrCat("inet_ntop: ", strerror(errno));
      }
    }
    close(fd);
  }
  freeaddrinfo(results);
  if (found.empty()) {
    return absl::UnavailableError(
        absl::StrCat("no local interface routes to '", host_port, "': ", last_error));
  }
  return found;
}

namespace {

// The numeric form of a socket address's IP ("" for other families).
std::string NumericHost(const sockaddr* sa) {
  if (sa == nullptr) return "";
  char text[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, text, sizeof(text));
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, text, sizeof(text));
  }
  return text;
}

}  // namespace

absl::StatusOr<std::string> InterfaceHolding(absl::string_view address) {
  std::string host(address);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* results = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &results);
  if (rc != 0) {
    return absl::NotFoundError(absl::StrCat("cannot resolve '", address, "': ", gai_strerror(rc)));
  }
  std::set<std::string> wanted;
  for (addrinfo* ai = results; ai != nullptr; ai = ai->ai_next) {
    wanted.insert(NumericHost(ai->ai_addr));
  }
  freeaddrinfo(results);
  wanted.erase("");
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) != 0) {
    return absl::InternalError(absl::StrCat("cannot list network interfaces: ", strerror(errno)));
  }
  std::string found;
  for (ifaddrs* i = interfaces; i != nullptr && found.empty(); i = i->ifa_next) {
    if (wanted.count(NumericHost(i->ifa_addr)) && i->ifa_name != nullptr) found = i->ifa_name;
  }
  freeifaddrs(interfaces);
  if (found.empty()) {
    return absl::NotFoundError(absl::StrCat("no local network interface holds '", address, "'"));
  }
  return found;
}

}  // namespace det::agent
