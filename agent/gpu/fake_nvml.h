// An Nvml whose devices a test sets.
#ifndef DET_AGENT_GPU_FAKE_NVML_H_
#define DET_AGENT_GPU_FAKE_NVML_H_

#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "agent/gpu/nvml.h"

namespace det::agent {

class FakeNvml : public Nvml {
 public:
  struct Gpu {
    GpuDevice device;
    GpuUsage usage;
  };
  explicit FakeNvml(std::vector<Gpu> gpus = {}) : gpus_(std::move(gpus)) {}

  void SetUsage(int index, GpuUsage usage) {
    absl::MutexLock l(&mu_);
    gpus_.at(index).usage = usage;
  }
  // Makes every call fail with `status` (OK: stop failing).
  void FailWith(absl::Status status) {
    absl::MutexLock l(&mu_);
    fail_ = std::move(status);
  }

  absl::StatusOr<int> DeviceCount() override {
    absl::MutexLock l(&mu_);
    if (!fail_.ok()) return fail_;
    return static_cast<int>(gpus_.size());
  }
  absl::StatusOr<GpuDevice> Device(int index) override {
    absl::MutexLock l(&mu_);
    if (!fail_.ok()) return fail_;
    if (index < 0 || index >= static_cast<int>(gpus_.size())) return NoSuch(index);
    return gpus_[index].device;
  }
  absl::StatusOr<GpuUsage> Usage(int index) override {
    absl::MutexLock l(&mu_);
    if (!fail_.ok()) return fail_;
    if (index < 0 || index >= static_cast<int>(gpus_.size())) return NoSuch(index);
    return gpus_[index].usage;
  }

 private:
  static absl::Status NoSuch(int index) {
    return absl::InvalidArgumentError(absl::StrCat("no GPU with index ", index));
  }

  absl::Mutex mu_;
  std::vector<Gpu> gpus_ ABSL_GUARDED_BY(mu_);
  absl::Status fail_ ABSL_GUARDED_BY(mu_);
};

}  // namespace det::agent

#endif  // DET_AGENT_GPU_FAKE_NVML_H_
