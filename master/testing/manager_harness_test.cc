// The harness runs the master's own wiring (master/server/managers.h): master.yaml
// settings reach its managers from the MasterConfig alone, with no setter called by the
// test, as they reach a master's. A harness that wired its managers by hand and forgot
// one of them fails here.
#include "master/testing/manager_harness.h"

#include <optional>
#include <string>

#include "common/clock/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/in_memory_store.h"
#include "master/testing/master_testing.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;
using testing::ManagerHarness;

// ExperimentYaml without its checkpoint_storage section.
std::string NoStorageYaml(const std::string& name) {
  std::string yaml = testing::ExperimentYaml(name, 1);
  return yaml.substr(0, yaml.find("checkpoint_storage:"));
}

config::MasterConfig WithStorage() {
  config::MasterConfig config = testing::LoopbackMasterConfig("/unused");
  config::CheckpointStorageConfig storage;
  storage.host_path = "/srv/det/checkpoints";
  storage.save_trial_latest = 2;
  config.checkpoint_storage = storage;
  config.checkpoint_storage_allowed_roots = {"/ckpt/team"};
  return config;
}

// A harness started from WithStorage(), with no setter called after.
class ManagerHarnessTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(h.Start().ok()); }

  InMemoryStore store;
  FakeClock clock;
  ManagerHarness h{WithStorage(), store, clock};
};

TEST_F(ManagerHarnessTest, AnExperimentWithoutStorageGetsTheClusterDefaultFromTheConfig) {
  v1::CreateExperimentRequest req;
  req.set_config_yaml(NoStorageYaml("plain"));
  v1::CreateExperimentResponse resp;
  ASSERT_TRUE(h.Create(req, &resp).ok());
  EXPECT_THAT(resp.experiment().config_yaml(), HasSubstr("/srv/det/checkpoints"));
  std::optional<config::CheckpointStorageConfig> kept;
  h.Turn([&] { kept = h.registry.experiments.at(resp.experiment().id()).config.checkpoint_storage; });
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->host_path, "/srv/det/checkpoints");
  EXPECT_EQ(kept->save_trial_latest, 2);
}

// The allowed roots are the config's plus the default storage's directory.
TEST_F(ManagerHarnessTest, TheConfigsStorageRootsRefuseAPathOutsideThem) {
  v1::CreateExperimentRequest req;
  req.set_config_yaml(testing::ExperimentYaml("own", 1));  // host_path: /ckpt
  v1::CreateExperimentResponse resp;
  absl::Status st = h.Create(req, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("checkpoint_storage.host_path: '/ckpt' is not under a checkpoint "
                        "storage root this cluster allows (/ckpt/team, /srv/det/checkpoints"));
  req.add_config_overrides("checkpoint_storage.host_path=/ckpt/team/alice");
  EXPECT_TRUE(h.Create(req, &resp).ok());
  req.set_config_yaml(NoStorageYaml("default"));
  req.clear_config_overrides();
  EXPECT_TRUE(h.Create(req, &resp).ok());
}

}  // namespace
}  // namespace det::master
