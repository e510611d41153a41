#include "master/scheduling/pools.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace det::master {

const config::ResourcePoolConfig* FindPool(const config::MasterConfig& config,
                                           const std::string& name) {
  for (const auto& p : config.resource_pools) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::string NeverFits(const std::vector<v1::Agent>& agents, const std::string& pool, int slots) {
  if (slots == 0) return "";
  std::map<int, int> count_by_size;
  int total = 0;
  for (const auto& a : agents) {
    if (a.resource_pool() != pool || a.slots_size() == 0) continue;
    count_by_size[a.slots_size()]++;
    total += a.slots_size();
  }
  if (count_by_size.empty()) return "";  // No agents yet: it waits, and says why.
  int largest = count_by_size.rbegin()->first;
  if (slots <= largest) return "";
  std::string sizes;
  for (const auto& [size, count] : count_by_size) {
    if (slots % size == 0 && size * count >= slots) return "";
    absl::StrAppend(&sizes, sizes.empty() ? "" : ", ", count, " x ", size, "-slot");
  }
  if (slots > total) {
    return absl::StrCat("resource pool '", pool, "' has ", total, " slots in all (", sizes,
                        " agents)");
  }
  return absl::StrCat("agents in resource pool '", pool, "' are ", sizes,
                      "; a multi-agent trial must use a multiple of one agent size");
}

}  // namespace det::master
