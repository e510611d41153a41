// The example on GPUs, end to end: a det-agent with CUDA slots (found through NVML), the
// example worker on cuda:0 of each rank with cuBLAS, gradients and metrics all-reduced by
// NCCL. Skips on a machine without a usable CUDA device; DET_REQUIRE_GPU=1 makes that a
// failure (run on a GPU machine: DET_REQUIRE_GPU=1 bazel test --test_tag_filters=gpu //...).
#include <cstdlib>
#include <iostream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/worker/cpp/collective/cuda_devices.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

std::string Config(const std::string& name, int slots, const std::string& checkpoints) {
  ExampleExperiment exp;
  exp.name = name;
  exp.global_batch_size = 128;
  exp.hidden_size = 128;
  exp.batches = 400;
  exp.checkpoint_period = 200;
  exp.scheduling_unit = 100;
  exp.slots_per_trial = slots;
  exp.experiment_seed = 7;
  exp.checkpoint_host_path = checkpoints;
  return exp.Yaml();
}

TEST(Gpu, TheExampleTrainsOnCudaSlotsWithNccl) {
  collective::CudaDevices devices = collective::DiscoverCudaDevices();
  if (devices.count == 0) {
    const char* require = std::getenv("DET_REQUIRE_GPU");
    ASSERT_FALSE(require != nullptr && std::string(require) == "1") << devices.why_none;
    GTEST_SKIP() << "no CUDA device: " << devices.why_none;
  }
  TestCluster cluster("gpu");
  ASSERT_TRUE(cluster.StartMaster().ok()) << cluster.LogTail("master");
  std::string yaml = absl::StrReplaceAll(cluster.AgentYaml("gpu-agent", 1), {{"slot_type: cpu\nslots: 1\n", "slot_type: cuda\n"}});
  ASSERT_TRUE(cluster.StartAgentWithYaml("gpu-agent", yaml).ok()) << cluster.LogTail("gpu-agent");
  std::cout << cluster.Det({"slot", "list"}).out << std::endl;

  const std::string checkpoints = cluster.dir() + "/checkpoints";
  int64_t id = 0;
  std::vector<int> sizes = {1};
  if (devices.count >= 2) sizes.push_back(2);
  for (int slots : sizes) {
    ++id;
    std::string config = cluster.WriteFile(absl::StrCat("gpu", slots, ".yaml"),
                                           Config(absl::StrCat("gpu-", slots), slots, checkpoints));
    CommandResult create = cluster.Det({"experiment", "create", config, "-f"}, absl::Seconds(300));
    std::cout << create.out << create.err << std::endl;
    ASSERT_TRUE(create.exit.ok()) << create.out << create.err << cluster.LogTail("master")
                                  << cluster.LogTail("gpu-agent");
    EXPECT_THAT(create.out, HasSubstr("on cuda:0"));
    EXPECT_THAT(create.out, HasSubstr("nccl collective"));
    nlohmann::json d = cluster.DetJson({"experiment", "describe", absl::StrCat(id)});
    ASSERT_TRUE(d.is_object());
    const auto& t = d["trials"][0];
    EXPECT_EQ(t["state"], "STATE_COMPLETED");
    EXPECT_EQ(Int(t["total_batches"]), 400);
    double accuracy = t["validation_summary"]["accuracy"]["last"].get<double>();
    std::cout << slots << " GPU rank(s): validation accuracy " << accuracy << std::endl;
    EXPECT_GT(accuracy, 0.75);
    int64_t trial = Int(t["id"]);
    nlohmann::json td = cluster.DetJson({"trial", "describe", absl::StrCat(trial)});
    EXPECT_GT(td["trial"]["timings_summary"]["to_device_mean_ms"]["last"].get<double>(), 0);
    std::cout << cluster.Det({"trial", "describe", absl::StrCat(trial)}).out << std::endl;
  }
}

}  // namespace
}  // namespace det::testing
