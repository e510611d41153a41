// The running master's configuration as YAML for det master config / GET
// /api/v1/master/config, secrets redacted: cluster_secret shows as "<redacted>" when set,
// the admin password (from the environment) never appears.
#ifndef DET_MASTER_API_MASTER_CONFIG_VIEW_H_
#define DET_MASTER_API_MASTER_CONFIG_VIEW_H_

#include <string>

#include "common/config/daemon_config.h"

namespace det::master {

std::string MasterConfigYaml(const config::MasterConfig& config);

}  // namespace det::master

#endif  // DET_MASTER_API_MASTER_CONFIG_VIEW_H_
