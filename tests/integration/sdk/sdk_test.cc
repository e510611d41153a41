// det.experimental.client against a real cluster: det-master and det-agent processes on
// loopback (real SQLite), the admin logged in with the real `det user login`. A script that
// uses only the SDK (sdk_script.py) creates an experiment from a config and a context
// directory (sdk_train.py, a det.core worker writing two checkpoints per trial), waits for
// it, picks the top checkpoint by the searcher's metric, downloads it, registers it as a
// model version and downloads it through that version; this test then checks the
// downloaded files against the checkpoint the master registered, and the version with the
// real `det model list-versions`.
#include <sys/stat.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

std::string Runfile(const std::string& path) {
  return TestCluster::BinDir() + "/../../" + path;
}

TEST(Sdk, CreateWaitTopCheckpointDownload) {
  TestCluster cluster("sdk");
  ASSERT_TRUE(cluster.StartMaster().ok()) << cluster.LogTail("master");
  ASSERT_TRUE(cluster.StartAgent("agent-a", 2).ok()) << cluster.LogTail("agent-a");

  // The context: the worker, a file in a subdirectory, and one .detignore leaves out.
  const std::string train = Slurp(Runfile("tests/integration/sdk/sdk_train.py"));
  ASSERT_FALSE(train.empty());
  for (const char* d : {"context", "context/data", "context/junk", "out"}) {
    ASSERT_EQ(mkdir((cluster.dir() + "/" + d).c_str(), 0755), 0) << d;
  }
  cluster.WriteFile("context/sdk_train.py", train);
  cluster.WriteFile("context/data/notes.txt", "notes\n");
  cluster.WriteFile("context/junk/big.txt", "left out\n");
  cluster.WriteFile("context/.detignore", "junk/\n");
  const std::string storage = cluster.dir() + "/checkpoints";
  const std::string config = cluster.WriteFile("sdk.yaml", absl::StrCat(R"(name: sdk
entrypoint: python3 sdk_train.py
hyperparameters:
  q: {type: categorical, vals: [1, 2]}
searcher: {name: grid, metric: loss, smaller_is_better: true, max_length: {batches: 2}}
checkpoint_storage: {type: shared_fs, host_path: ')", storage, R"(', save_trial_latest: 5}
max_restarts: 0
)"));

  // No DET_USER_TOKEN: the SDK finds the session `det user login` kept in HOME.
  const std::string out = cluster.dir() + "/out";
  CommandResult run = RunCommand(
      {"/usr/bin/python3", Runfile("tests/integration/sdk/sdk_script.py"), config,
       cluster.dir() + "/context", out},
      absl::Minutes(8),
      {{"PYTHONPATH", Runfile("deploy/python")},
       {"HOME", cluster.dir() + "/home"},
       {"DET_MASTER", cluster.address()},
       {"DET_USER_TOKEN", ""},
       {"DET_TEST_PASSWORD", kTestAdminPassword},
       {"PYTHONDONTWRITEBYTECODE", "1"}});
  ASSERT_TRUE(run.exit.ok()) << run.out << run.err << cluster.Det({"trial", "logs", "1"}).out
                             << cluster.LogTail("master");
  ASSERT_THAT(run.out, HasSubstr("SDK OK")) << run.out << run.err;

  // The top checkpoint the script named is the one the master lists with the lowest loss,
  // and the files it downloaded are that checkpoint's.
  const std::string marker = "top checkpoint ";
  const size_t at = run.out.find(marker);
  ASSERT_NE(at, std::string::npos) << run.out;
  const std::string uuid = run.out.substr(at + marker.size(), 36);
  nlohmann::json listed = cluster.DetJson({"experiment", "lc", "1"});
  ASSERT_TRUE(listed.is_object()) << listed.dump();
  std::string best_uuid;
  double best_loss = 1e9;
  int count = 0;
  for (const auto& c : listed["checkpoints"]) {
    ++count;
    double loss = c["metrics"].value("loss", 1e9);
    if (loss < best_loss) {
      best_loss = loss;
      best_uuid = c.value("uuid", "");
    }
  }
  EXPECT_EQ(count, 4) << listed.dump();
  EXPECT_EQ(uuid, best_uuid) << listed.dump();
  EXPECT_DOUBLE_EQ(best_loss, 0.20);
  // The script registered it as version 1 of sdk-model: the real CLI sees that version, and
  // the files it downloaded through the model version are the checkpoint's.
  EXPECT_THAT(run.out, HasSubstr("model version sdk-model 1 " + uuid)) << run.out;
  nlohmann::json versions = cluster.DetJson({"model", "list-versions", "sdk-model"});
  ASSERT_TRUE(versions.is_object()) << versions.dump();
  ASSERT_EQ(versions["model_versions"].size(), 1u) << versions.dump();
  EXPECT_EQ(versions["model_versions"][0].value("version", 0), 1) << versions.dump();
  EXPECT_EQ(versions["model_versions"][0]["checkpoint"].value("uuid", ""), uuid);
  EXPECT_EQ(versions["model_versions"][0]["checkpoint"].value("state", ""), "STATE_COMPLETED");
  for (const std::string& dir : {out + "/top", out + "/checkpoints/" + uuid, out + "/model"}) {
    EXPECT_EQ(Slurp(dir + "/weights.txt"), "q=2 step=1\n") << dir;
    EXPECT_EQ(Slurp(dir + "/weights.txt"), Slurp(storage + "/" + uuid + "/weights.txt"));
    std::string extra = Slurp(dir + "/sub/extra.bin");
    ASSERT_EQ(extra.size(), 256u) << dir;
    for (int i = 0; i < 256; ++i) ASSERT_EQ(static_cast<unsigned char>(extra[i]), i) << dir;
    nlohmann::json md = nlohmann::json::parse(Slurp(dir + "/metadata.json"), nullptr, false);
    EXPECT_EQ(md.value("steps_completed", -1), 1) << md.dump();
    EXPECT_EQ(md.value("q", -1), 2) << md.dump();
  }
}

}  // namespace
}  // namespace det::testing
