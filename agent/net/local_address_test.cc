#include "agent/net/local_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

// The numeric addresses of this machine's interfaces.
std::set<std::string> InterfaceAddresses() {
  std::set<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {0};
    if (i->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof(text));
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, text,
                sizeof(text));
    } else {
      continue;
    }
    out.insert(text);
  }
  freeifaddrs(list);
  return out;
}

TEST(LocalAddressTowards, LoopbackIsReachedFromLoopback) {
  auto addr = LocalAddressTowards("127.0.0.1:8080");
  ASSERT_TRUE(addr.ok()) << addr.status();
  EXPECT_EQ(*addr, "127.0.0.1");
  // A name is resolved first.
  addr = LocalAddressTowards("localhost:8080");
  ASSERT_TRUE(addr.ok()) << addr.status();
  EXPECT_THAT(*addr, AnyOf("127.0.0.1", "::1"));
}

TEST(LocalAddressTowards, BracketedIpv6) {
  if (!InterfaceAddresses().count("::1")) GTEST_SKIP() << "no IPv6 loopback here";
  auto addr = LocalAddressTowards("[::1]:8080");
  ASSERT_TRUE(addr.ok()) << addr.status();
  EXPECT_EQ(*addr, "::1");
}

// Towards another machine, the answer is the address of one of this machine's own
// interfaces, never loopback (when a route exists at all).
TEST(LocalAddressTowards, ARemoteHostIsReachedFromAnInterfaceAddress) {
  auto addr = LocalAddressTowards("192.0.2.1:29500");  // TEST-NET-1: routed, never answers
  if (!addr.ok()) {
    EXPECT_EQ(addr.status().code(), absl::StatusCode::kUnavailable) << addr.status();
    EXPECT_THAT(addr.status().message(), HasSubstr("no local interface routes to '192.0.2.1:29500'"));
    GTEST_SKIP() << "no route off this machine: " << addr.status();
  }
  EXPECT_NE(*addr, "127.0.0.1");
  EXPECT_TRUE(InterfaceAddresses().count(*addr)) << *addr;
}

TEST(LocalAddressTowards, ErrorsNameTheAddress) {
  for (const char* bad : {"no-port", "host:", "host:0", "host:99999", ":80", "::1:80", "[::1]80",
                          "[::1"}) {
    SCOPED_TRACE(bad);
    auto addr = LocalAddressTowards(bad);
    ASSERT_FALSE(addr.ok());
    EXPECT_EQ(addr.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(addr.status().message(), HasSubstr(std::string("'") + bad + "' is not host:port"));
  }
  auto addr = LocalAddressTowards("no-such-host.invalid:80");
  ASSERT_FALSE(addr.ok());
  EXPECT_EQ(addr.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(addr.status().message(), HasSubstr("cannot resolve 'no-such-host.invalid'"));
}

TEST(InterfaceHolding, NamesTheInterfaceOfAnAddressOrName) {
  for (const char* address : {"127.0.0.1", "localhost"}) {
    absl::StatusOr<std::string> r = InterfaceHolding(address);
    ASSERT_TRUE(r.ok()) << address << ": " << r.status();
    EXPECT_EQ(*r, "lo") << address;
  }
}

TEST(InterfaceHolding, AnAddressNoInterfaceHoldsIsNotFoundNamingIt) {
  // 192.0.2.0/24 is TEST-NET-1: never assigned.
  absl::StatusOr<std::string> r = InterfaceHolding("192.0.2.77");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("192.0.2.77"));
  r = InterfaceHolding("no-such-host.invalid");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("no-such-host.invalid"));
}

}  // namespace
}  // namespace det::agent
