// Resource pools as the master's config defines them: lookup by name, and whether a
// request can ever fit the agents a pool has. Pure functions.
#ifndef DET_MASTER_SCHEDULING_POOLS_H_
#define DET_MASTER_SCHEDULING_POOLS_H_

#include <string>
#include <vector>

#include "common/config/daemon_config.h"
#include "proto/api.pb.h"

namespace det::master {

// The pool named `name` in `config`, or nullptr.
const config::ResourcePoolConfig* FindPool(const config::MasterConfig& config,
                                           const std::string& name);

// Why a request of `slots` can never be placed in `pool` as its `agents` are configured,
// or "" when it can (or when the pool has no agents yet).
std::string NeverFits(const std::vector<v1::Agent>& agents, const std::string& pool, int slots);

}  // namespace det::master

#endif  // DET_MASTER_SCHEDULING_POOLS_H_
