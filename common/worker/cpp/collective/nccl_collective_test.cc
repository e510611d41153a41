// The NCCL path without a GPU: the unique-id bootstrap through a rendezvous, and a
// machine without a usable CUDA device answered as such (no crash, no hang).
#include "common/worker/cpp/collective/nccl_collective.h"

#include <stdlib.h>

#include <thread>

#include "common/worker/cpp/collective/cuda_devices.h"
#include "common/worker/cpp/collective/file_rendezvous.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::collective {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  std::string t = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/nccl-XXXXXX";
  return mkdtemp(t.data());
}

// Runs ExchangeNcclUniqueId on `n` threads; rank r's local error is errors[r].
std::vector<absl::StatusOr<std::string>> Exchange(
    int n, std::vector<absl::Status> errors,
    std::function<absl::StatusOr<std::string>()> make_id) {
  std::string dir = TempDir();
  errors.resize(n);
  std::vector<absl::StatusOr<std::string>> out(n, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      FileRendezvous rdv(dir, r, n);
      out[r] = ExchangeNcclUniqueId(r, rdv, "alloc-1.0/nccl", absl::Seconds(30), errors[r], make_id);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(NcclBootstrap, EveryRankReceivesRankZerosUniqueId) {
  std::string id(kNcclUniqueIdBytes, '\0');
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(i * 7 + 1);
  int calls = 0;
  auto got = Exchange(4, {}, [&]() -> absl::StatusOr<std::string> {
    ++calls;
    return id;
  });
  EXPECT_EQ(calls, 1);  // Only rank 0 creates an id.
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(got[r].ok()) << got[r].status();
    EXPECT_EQ(*got[r], id) << "rank " << r;
  }
}

TEST(NcclBootstrap, ARankThatCannotJoinFailsEveryRankAtOnceNamingIt) {
  std::vector<absl::Status> errors(3);
  errors[2] = absl::FailedPreconditionError("nccl: rank 2 has no usable CUDA device: no driver");
  auto got = Exchange(3, errors, [] { return std::string(kNcclUniqueIdBytes, 'x'); });
  EXPECT_THAT(got[2].status().message(), HasSubstr("no usable CUDA device"));
  for (int r : {0, 1}) {
    EXPECT_EQ(got[r].status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(got[r].status().message(), HasSubstr("rank 2 cannot join the communicator"));
  }
}

TEST(NcclBootstrap, AMalformedIdIsAnError) {
  auto got = Exchange(2, {}, [] { return std::string(5, 'x'); });
  EXPECT_THAT(got[0].status().message(), HasSubstr("5 bytes"));
  EXPECT_THAT(got[1].status().message(), HasSubstr("rank 0 cannot join"));
}

TEST(NcclCollective, AMachineWithoutAUsableGpuIsAnsweredNotCrashed) {
  CudaDevices devices = DiscoverCudaDevices();
  if (devices.count > 0) GTEST_SKIP() << "this machine has a GPU; see nccl_collective_gpu_test";
  EXPECT_FALSE(devices.why_none.empty());
  FileRendezvous rdv(TempDir(), 0, 1);
  auto c = NcclCollective::Create(0, 1, rdv, "k");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("no usable CUDA device"));
  EXPECT_THAT(c.status().message(), HasSubstr(devices.why_none));
}

}  // namespace
}  // namespace det::collective
