// Ports that agents lend to allocations whose chief (rank 0) they host: torchrun's
// MASTER_PORT. A port is held by one open allocation at a time on its agent, from the
// allocation's start until it ends (rebuilt from the open allocations after a restart).
#ifndef DET_MASTER_ALLOCATIONS_CHIEF_PORTS_H_
#define DET_MASTER_ALLOCATIONS_CHIEF_PORTS_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

namespace det::master {

// Not thread-safe (the master's loop owns it).
class ChiefPorts {
 public:
  // The lowest port of [first, last] on `agent_id` no open allocation holds; nullopt when
  // every one is held.
  std::optional<int> Lowest(const std::string& agent_id, int first, int last) const;
  // Records that `allocation_id` holds `port` on `agent_id`.
  void Hold(const std::string& agent_id, int port, const std::string& allocation_id);
  // Frees the port `allocation_id` holds, if any.
  void Release(const std::string& allocation_id);
  // How many ports of `agent_id` are held.
  int Held(const std::string& agent_id) const;

 private:
  std::map<std::string, std::set<int>> held_;                            // agent -> ports
  std::map<std::string, std::pair<std::string, int>> by_allocation_;  // -> (agent, port)
};

}  // namespace det::master

#endif  // DET_MASTER_ALLOCATIONS_CHIEF_PORTS_H_
