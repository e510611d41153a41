// Host-memory collective operations through a CUDA-device collective (NCCL): each call
// copies the host buffer into device scratch memory, runs the operation there and
// copies the result back. For the small host-side exchanges of training on GPUs
// (metrics, stop requests, sample checksums, RNG states), so that one communicator
// serves both the gradients and the rest.
//
// Thread-compatible, and shares the device collective's contract: one thread at a time
// across both objects.
#ifndef DET_COMMON_WORKER_CPP_COLLECTIVE_HOST_STAGED_COLLECTIVE_H_
#define DET_COMMON_WORKER_CPP_COLLECTIVE_HOST_STAGED_COLLECTIVE_H_

#include "absl/status/statusor.h"
#include "common/worker/cpp/collective/collective.h"

namespace det::collective {

class HostStagedCollective : public Collective {
 public:
  // `device_collective` works on memory of CUDA device `cuda_device`; it must outlive this.
  HostStagedCollective(Collective& device_collective, int cuda_device);
  ~HostStagedCollective() override;
  HostStagedCollective(const HostStagedCollective&) = delete;
  HostStagedCollective& operator=(const HostStagedCollective&) = delete;

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string backend() const override { return inner_.backend(); }
  Device device() const override { return Device::kHost; }

  absl::Status AllReduceSum(absl::Span<float> data) override;
  absl::Status AllReduceSum(absl::Span<int64_t> data) override;
  absl::Status BroadcastBytes(void* data, size_t bytes, int root) override;
  absl::Status Barrier() override { return inner_.Barrier(); }

 private:
  // Device scratch of at least `bytes`, with `in` copied into it when not null.
  absl::StatusOr<void*> Stage(const void* in, size_t bytes);
  absl::Status Unstage(void* out, size_t bytes);

  Collective& inner_;
  const int cuda_device_;
  void* scratch_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace det::collective

#endif  // DET_COMMON_WORKER_CPP_COLLECTIVE_HOST_STAGED_COLLECTIVE_H_
