#include "master/api/master_config_view.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MasterConfigYaml, ShowsTheSettingsAndRedactsSecrets) {
  config::MasterConfig c;
  c.grpc_listen = "127.0.0.1:8080";
  c.cluster_secret = "s3cret-value";
  c.admin_password = "admin-pw";
  config::ResourcePoolConfig pool;
  pool.name = "gpu";
  pool.description = "the \"big\" ones";
  pool.preemption = true;
  c.resource_pools.push_back(pool);
  std::string yaml = MasterConfigYaml(c);
  EXPECT_THAT(yaml, HasSubstr("grpc_listen: \"127.0.0.1:8080\"\n"));
  EXPECT_THAT(yaml, HasSubstr("cluster_secret: \"<redacted>\"\n"));
  EXPECT_THAT(yaml, Not(HasSubstr("s3cret-value")));
  EXPECT_THAT(yaml, Not(HasSubstr("admin-pw")));
  EXPECT_THAT(yaml, HasSubstr("agent_timeout: 30s\n"));
  EXPECT_THAT(yaml, HasSubstr("  - name: \"gpu\"\n    description: \"the \\\"big\\\" ones\"\n"
                              "    preemption: true\n"));
  c.cluster_secret.clear();
  EXPECT_THAT(MasterConfigYaml(c), HasSubstr("cluster_secret: \"\"\n"));
}

}  // namespace
}  // namespace det::master
