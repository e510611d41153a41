#include "master/api/master_config_view.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/config/json_text.h"

namespace det::master {

std::string MasterConfigYaml(const config::MasterConfig& c) {
  std::string out;
  // Strings as JSON literals (valid YAML, any text quoted safely).
  auto str = [&out](const char* key, const std::string& value) {
    absl::StrAppend(&out, key, ": ", config::JsonString(value), "\n");
  };
  auto duration = [&out](const char* key, absl::Duration d) {
    absl::StrAppend(&out, key, ": ", absl::FormatDuration(d), "\n");
  };
  str("grpc_listen", c.grpc_listen);
  str("http_listen", c.http_listen);
  str("data_dir", c.data_dir);
  str("db_path", c.db_path);
  absl::StrAppend(&out, "db_max_size_mb: ", c.db_max_size_mb, "\n");
  str("address_file", c.address_file);
  str("http_address_file", c.http_address_file);
  str("grpc_tls_cert_file", c.grpc_tls_cert_file);
  str("grpc_tls_key_file", c.grpc_tls_key_file);
  str("http_tls_cert_file", c.http_tls_cert_file);
  str("http_tls_key_file", c.http_tls_key_file);
  duration("session_ttl", c.session_ttl);
  str("cluster_name", c.cluster_name);
  str("cluster_secret", c.cluster_secret.empty() ? "" : "<redacted>");
  str("scheduler_fit", c.scheduler_fit);
  duration("agent_timeout", c.agent_timeout);
  duration("agent_reconnect_wait", c.agent_reconnect_wait);
  str("log_level", c.log_level);
  out += c.resource_pools.empty() ? "resource_pools: []\n" : "resource_pools:\n";
  for (const config::ResourcePoolConfig& p : c.resource_pools) {
    absl::StrAppend(&out, "  - name: ", config::JsonString(p.name), "\n",
                    "    description: ", config::JsonString(p.description), "\n",
                    "    preemption: ", p.preemption ? "true" : "false", "\n",
                    "    preemption_timeout: ", absl::FormatDuration(p.preemption_timeout), "\n");
  }
  return out;
}

}  // namespace det::master
