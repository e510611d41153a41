// Separate "hosts" on one machine for multi-host tests: Linux network namespaces, each
// joined by one veth pair to a bridge that lives in a namespace of its own, with private
// IPv4 addresses (10.77.N.0/24). Nothing touches the machine's own interfaces, addresses or
// routes: every link, the bridge and every address live inside the run's namespaces.
//
// Names: every namespace of one run is "mh<tag>-<label>" (<= 15 characters), <tag> the
// creating process's pid in base 36. A run's namespaces are deleted by the destructor,
// also after a failed test; namespaces left by a run that died (its pid no longer runs, or
// it is this process's pid, reused) are removed, with any process still in them, when the
// next VirtualNetwork is created.
//
// Requires root and iproute2 (`ip`); Available() says why not. Not thread-safe: one thread
// drives a VirtualNetwork.
#ifndef DET_TESTS_MULTIHOST_VIRTUAL_NETWORK_H_
#define DET_TESTS_MULTIHOST_VIRTUAL_NETWORK_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace det::testing {

class VirtualNetwork {
 public:
  // OK when this process can create network namespaces; else FailedPrecondition saying why
  // (not root, no `ip`, or `ip netns add` refused), for GTEST_SKIP.
  static absl::Status Available();

  // Removes leftovers of dead runs, then creates this run's bridge namespace.
  static absl::StatusOr<std::unique_ptr<VirtualNetwork>> Create();
  VirtualNetwork(const VirtualNetwork&) = delete;
  VirtualNetwork& operator=(const VirtualNetwork&) = delete;
  // SIGKILLs every process still inside the run's namespaces and deletes them.
  ~VirtualNetwork();

  // Adds host `label` ([a-z0-9], 1..4 characters, unique): a namespace with loopback up and
  // "eth0" holding the next free address of the subnet, linked to the bridge, link up.
  // Returns the host's address. InvalidArgument for a bad or repeated label.
  absl::StatusOr<std::string> AddHost(const std::string& label);

  // The address of host `label` ("" for an unknown host).
  std::string Address(const std::string& label) const;
  // The namespace name of host `label` ("" for an unknown host).
  std::string Namespace(const std::string& label) const;
  // The argv that runs `argv` inside host `label`: `ip netns exec <ns> argv...`. `ip`
  // execs the program in place (no fork, no shell), so the pid of a process spawned with
  // it is the program's own. REQUIRES: `label` was added.
  std::vector<std::string> InHost(const std::string& label,
                                  const std::vector<std::string>& argv) const;

  // Takes host `label`'s port on the bridge down (up == false) or up: while it is down the
  // host keeps its address and routes but nothing it sends arrives and nothing reaches it
  // (a pulled cable or a dead switch port), so TCP connections stall rather than reset.
  absl::Status SetLink(const std::string& label, bool up);

  // The pids of the processes inside host `label`'s namespace (`ip netns pids`).
  std::vector<int> Pids(const std::string& label) const;

  // This run's tag and subnet prefix ("10.77.N").
  const std::string& tag() const { return tag_; }
  const std::string& subnet() const { return subnet_; }

  // The path of the `ip` program ("" when there is none).
  static std::string IpPath();
  // The tag of the run of process `pid` (its pid in base 36).
  static std::string TagOf(int64_t pid);

 private:
  VirtualNetwork(std::string tag, std::string subnet);
  std::string BridgeNamespace() const;
  // Runs `ip args...`; an error carries the command and its stderr.
  static absl::Status Ip(const std::vector<std::string>& args);

  const std::string tag_;
  const std::string subnet_;
  // label -> address, in the order hosts were added.
  std::map<std::string, std::string> hosts_;
  bool bridge_created_ = false;
};

}  // namespace det::testing

#endif  // DET_TESTS_MULTIHOST_VIRTUAL_NETWORK_H_
