// Which local address other machines reach this one at: the address of the interface the
// kernel routes towards a given host (what the agent advertises as MASTER_ADDR when
// agent.yaml sets no advertise_address).
#ifndef DET_AGENT_NET_LOCAL_ADDRESS_H_
#define DET_AGENT_NET_LOCAL_ADDRESS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace det::agent {

// The numeric address (e.g. "10.0.0.7", "fe80::1") of the local interface whose route
// reaches `host_port` ("host:port", "[v6]:port"; the host a name or a literal), found by
// connecting a UDP socket to it (no packet is sent) and reading the socket's own address.
// A name resolving to several addresses: the first one that has a route. Errors:
// InvalidArgument for a malformed `host_port`, NotFound for a name that does not resolve,
// Unavailable when no address of it has a route; each message names `host_port`.
absl::StatusOr<std::string> LocalAddressTowards(absl::string_view host_port);

// The name of the local network interface (e.g. "eth0") holding `address`: a numeric
// address, or a name resolved first (any of its addresses that an interface holds).
// Errors name `address`: NotFound when no interface holds it (an address behind NAT, or a
// name that does not resolve), Internal when the interfaces cannot be listed.
absl::StatusOr<std::string> InterfaceHolding(absl::string_view address);

}  // namespace det::agent

#endif  // DET_AGENT_NET_LOCAL_ADDRESS_H_
