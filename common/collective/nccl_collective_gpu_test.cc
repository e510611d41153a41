// NcclCollective on a real GPU: one rank per visible device (at least one), each the
// collective_test_worker "ops" scenario on device memory.
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "common/collective/testing/process_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::collective {
namespace {

using ::det::testing::NewTempDir;
using ::det::testing::ProcessGroup;
using ::det::testing::RunfilePath;

TEST(NcclCollectiveGpu, OpsOnEveryVisibleDevice) {
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess) << "this test needs a CUDA GPU";
  ASSERT_GE(n, 1);
  std::string dir = NewTempDir("nccl");
  auto group = ProcessGroup::Start(
      n,
      [&](int rank) {
        return std::vector<std::string>{RunfilePath("common/collective/collective_test_worker"),
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
