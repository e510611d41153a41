#include "master/allocations/chief_ports.h"

namespace det::master {

std::optional<int> ChiefPorts::Lowest(const std::string& agent_id, int first, int last) const {
  auto it = held_.find(agent_id);
  for (int port = first; port <= last; ++port) {
    if (it == held_.end() || it->second.count(port) == 0) return port;
  }
  return std::nullopt;
}

void ChiefPorts::Hold(const std::string& agent_id, int port, const std::string& allocation_id) {
  Release(allocation_id);
  held_[agent_id].insert(port);
  by_allocation_[allocation_id] = {agent_id, port};
}

void ChiefPorts::Release(const std::string& allocation_id) {
  auto it = by_allocation_.find(allocation_id);
  if (it == by_allocation_.end()) return;
  auto& ports = held_[it->second.first];
  ports.erase(it->second.second);
  if (ports.empty()) held_.erase(it->second.first);
  by_allocation_.erase(it);
}

int ChiefPorts::Held(const std::string& agent_id) const {
  auto it = held_.find(agent_id);
  return it == held_.end() ? 0 : static_cast<int>(it->second.size());
}

}  // namespace det::master
