// A real det cluster spread over VirtualNetwork hosts: a TestCluster whose det-master runs
// in host "m", each det-agent in a host of its own (the host's label is the agent's id),
// and the det CLI in the master's host (launched there with `ip netns exec`); all binaries
// from //deploy:bin. Agents get no advertise_address: they find the address of their
// interface towards the master themselves.
//
// Destruction terminates the agents, then the master, then SIGKILLs whatever still runs in
// the hosts (workers whose agent was cut off) and deletes the network, also when a test
// failed half-way.
#ifndef DET_TESTS_MULTIHOST_MULTIHOST_CLUSTER_H_
#define DET_TESTS_MULTIHOST_MULTIHOST_CLUSTER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_cluster.h"
#include "tests/multihost/virtual_network.h"

namespace det::testing {

class MultiHostCluster {
 public:
  // The master's host label.
  static constexpr char kMasterHost[] = "m";

  // A network with the master's host, and a fresh directory under TEST_TMPDIR named `name`
  // (shared by every host: it stands for a shared file system). Errors of
  // VirtualNetwork::Create() come back as they are (FailedPrecondition: cannot run here).
  static absl::StatusOr<std::unique_ptr<MultiHostCluster>> Create(const std::string& name);
  ~MultiHostCluster();

  // Starts det-master in host "m", listening on the host's address (port 0); `extra_yaml`
  // is appended to its master.yaml (agent_reconnect_wait defaults to 30s). Logs in as admin.
  absl::Status StartMaster(const std::string& extra_yaml = "") {
    return cluster_->StartMaster(extra_yaml);
  }
  // Starts det-agent `id` ([a-z0-9], 1..4 characters) with `slots` CPU slots in host `id`
  // (added on first use), `extra_yaml` appended to its agent.yaml; waits until the master
  // lists it connected with a registration newer than any earlier one.
  absl::Status StartAgent(const std::string& id, int slots, const std::string& extra_yaml = "");

  // Runs the det CLI in the master's host against the master, as admin.
  CommandResult Det(const std::vector<std::string>& args,
                    absl::Duration timeout = absl::Seconds(120)) {
    return cluster_->Det(args, timeout);
  }
  // Det() with --json appended, stdout parsed (null on failure).
  nlohmann::json DetJson(const std::vector<std::string>& args) { return cluster_->DetJson(args); }
  // Whether `det agent list` shows agent `id` connected.
  bool AgentConnected(const std::string& id) { return cluster_->AgentRegisteredMs(id) >= 0; }
  // `det trial describe --json` of trial `id`'s "trial" object (null on failure).
  nlohmann::json Trial(int64_t id);
  // `det trial logs` of trial `id`.
  std::string TrialLogs(int64_t id);
  // rank -> agent id of trial `id`'s current allocation.
  std::map<int, std::string> RankAgents(int64_t id);

  VirtualNetwork& net() { return *net_; }
  const std::string& dir() const { return cluster_->dir(); }
  // host:port of the master's gRPC server (on host "m"'s address).
  const std::string& master_address() const { return cluster_->address(); }
  // Writes `text` to dir()/name; returns the path.
  std::string WriteFile(const std::string& name, const std::string& text) {
    return cluster_->WriteFile(name, text);
  }
  // The tail of daemon `name`'s log ("master" or an agent id).
  std::string LogTail(const std::string& name) { return cluster_->LogTail(name); }
  // Every daemon's log tail, for failure messages.
  std::string Diagnostics();

 private:
  MultiHostCluster(std::unique_ptr<VirtualNetwork> net, const std::string& name);

  // Declared first: destroyed last, after the cluster's processes.
  std::unique_ptr<VirtualNetwork> net_;
  std::unique_ptr<TestCluster> cluster_;
};

}  // namespace det::testing

#endif  // DET_TESTS_MULTIHOST_MULTIHOST_CLUSTER_H_
