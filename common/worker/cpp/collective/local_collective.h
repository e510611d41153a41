// A Collective for a world of one rank: every operation is a no-op on host memory.
#ifndef DET_COMMON_WORKER_CPP_COLLECTIVE_LOCAL_COLLECTIVE_H_
#define DET_COMMON_WORKER_CPP_COLLECTIVE_LOCAL_COLLECTIVE_H_

#include <string>

#include "common/worker/cpp/collective/collective.h"

namespace det::collective {

class LocalCollective : public Collective {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }
  Device device() const override { return Device::kHost; }
  absl::Status AllReduceSum(absl::Span<float>) override { return absl::OkStatus(); }
  absl::Status AllReduceSum(absl::Span<int64_t>) override { return absl::OkStatus(); }
  absl::Status BroadcastBytes(void*, size_t, int root) override {
    if (root != 0) return absl::InvalidArgumentError("broadcast root must be 0 in a world of one");
    return absl::OkStatus();
  }
  absl::Status Barrier() override { return absl::OkStatus(); }
};

}  // namespace det::collective

#endif  // DET_COMMON_WORKER_CPP_COLLECTIVE_LOCAL_COLLECTIVE_H_
