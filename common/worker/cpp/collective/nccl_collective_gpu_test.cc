// NcclCollective on a real GPU: one rank per visible device (at least one), each the
// collective_test_worker "ops" scenario on device memory. Skips without a CUDA device;
// DET_REQUIRE_GPU=1 makes that a failure.
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/worker/cpp/collective/cuda_devices.h"
#include "common/worker/cpp/collective/testing/process_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::collective {
namespace {

using ::det::testing::NewTempDir;
using ::det::testing::ProcessGroup;
using ::det::testing::RunfilePath;

TEST(NcclCollectiveGpu, OpsOnEveryVisibleDevice) {
  CudaDevices devices = DiscoverCudaDevices();
  if (devices.count == 0) {
    const char* require = std::getenv("DET_REQUIRE_GPU");
    ASSERT_FALSE(require != nullptr && std::string(require) == "1") << devices.why_none;
    GTEST_SKIP() << "no CUDA device: " << devices.why_none;
  }
  const int n = devices.count;
  std::string dir = NewTempDir("nccl");
  auto group = ProcessGroup::Start(
      n,
      [&](int rank) {
        return std::vector<std::string>{RunfilePath("common/worker/cpp/collective/collective_test_worker"),
                                        "nccl", absl::StrCat(rank), absl::StrCat(n), dir, "gpu", "ops"};
      },
      dir, [](int rank) { return EnvironmentVariables{{"CUDA_VISIBLE_DEVICES", absl::StrCat(rank)}}; });
  ASSERT_TRUE(group.ok()) << group.status();
  auto results = (*group)->Wait(absl::Seconds(120));
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(results[r].status.ok()) << "rank " << r << ": " << results[r].err << results[r].out;
  }
}

}  // namespace
}  // namespace det::collective
