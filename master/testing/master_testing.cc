#include "master/testing/master_testing.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace det::master::testing {

std::string FreshTestDir(const std::string& prefix) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/", prefix,
                                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
  EXPECT_EQ(std::system(absl::StrCat("rm -rf '", dir, "'").c_str()), 0) << dir;
  return dir;
}

config::MasterConfig LoopbackMasterConfig(const std::string& dir) {
  config::MasterConfig config;
  config.grpc_listen = "127.0.0.1:0";
  config.data_dir = dir;
  config.db_path = dir + "/det.db";
  config.cluster_secret = "secret";
  config.resource_pools.push_back({"default", "", false, absl::Seconds(60)});
  return config;
}

std::string ExperimentYaml(const std::string& name, int slots, int max_restarts) {
  return absl::StrCat("name: ", nlohmann::json(name).dump(), R"(
entrypoint: det-fashion-mnist
hyperparameters:
  global_batch_size: 32
records_per_epoch: 1000
max_restarts: )", max_restarts, R"(
searcher:
  name: single
  metric: validation_loss
  max_length:
    batches: 100
resources:
  slots_per_trial: )", slots, R"(
checkpoint_storage:
  type: shared_fs
  host_path: /ckpt
)");
}

v1::RegisterRequest RegisterRequest(const std::string& id, int slots,
                                    const std::vector<std::string>& running) {
  v1::RegisterRequest req;
  for (const auto& alloc : running) req.add_running_allocations(alloc);
  req.set_agent_id(id);
  req.set_hostname("host-" + id);
  req.set_cluster_secret("secret");
  req.set_resource_pool("default");
  for (int i = 0; i < slots; ++i) {
    v1::Slot* s = req.add_slots();
    s->set_id(absl::StrCat(i));
    s->set_type("cpu");
    s->set_enabled(true);
  }
  return req;
}

}  // namespace det::master::testing
