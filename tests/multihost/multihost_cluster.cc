#include "tests/multihost/multihost_cluster.h"

#include "absl/strings/str_cat.h"

namespace det::testing {

absl::StatusOr<std::unique_ptr<MultiHostCluster>> MultiHostCluster::Create(
    const std::string& name) {
  absl::StatusOr<std::unique_ptr<VirtualNetwork>> net = VirtualNetwork::Create();
  if (!net.ok()) return net.status();
  if (absl::StatusOr<std::string> m = (*net)->AddHost(kMasterHost); !m.ok()) return m.status();
  return std::unique_ptr<MultiHostCluster>(new MultiHostCluster(std::move(*net), name));
}

MultiHostCluster::MultiHostCluster(std::unique_ptr<VirtualNetwork> net, const std::string& name)
    : net_(std::move(net)) {
  TestClusterHosts hosts;
  hosts.master_address = net_->Address(kMasterHost);
  hosts.launch_prefix = [net = net_.get()](const std::string& host) {
    return net->InHost(host == TestClusterHosts::kMaster ? kMasterHost : host, {});
  };
  cluster_ = std::make_unique<TestCluster>(name, std::move(hosts));
}

MultiHostCluster::~MultiHostCluster() {
  cluster_.reset();  // Agents, then the master.
  // net_ goes last: it kills what is left in the hosts and deletes them.
}

std::string MultiHostCluster::Diagnostics() {
  std::string out = absl::StrCat("\n--- master:\n", LogTail("master"));
  for (const std::string& id : cluster_->AgentIds()) {
    absl::StrAppend(&out, "\n--- agent ", id, ":\n", LogTail(id));
  }
  return out;
}

absl::Status MultiHostCluster::StartAgent(const std::string& id, int slots,
                                          const std::string& extra_yaml) {
  if (net_->Namespace(id).empty()) {
    if (absl::StatusOr<std::string> a = net_->AddHost(id); !a.ok()) return a.status();
  }
  return cluster_->StartAgent(id, slots, extra_yaml);
}

nlohmann::json MultiHostCluster::Trial(int64_t id) {
  nlohmann::json t = DetJson({"trial", "describe", absl::StrCat(id)});
  return t.is_object() && t.contains("trial") ? t["trial"] : nlohmann::json();
}

std::string MultiHostCluster::TrialLogs(int64_t id) {
  return Det({"trial", "logs", absl::StrCat(id)}).out;
}

std::map<int, std::string> MultiHostCluster::RankAgents(int64_t id) {
  std::map<int, std::string> out;
  nlohmann::json t = Trial(id);
  if (!t.is_object() || !t.contains("allocation")) return out;
  for (const auto& r : t["allocation"]["ranks"]) out[r.value("rank", 0)] = r.value("agent_id", "");
  return out;
}

}  // namespace det::testing
