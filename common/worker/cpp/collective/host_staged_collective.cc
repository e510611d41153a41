#include "common/worker/cpp/collective/host_staged_collective.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"

namespace det::collective {
namespace {

absl::Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("host-staged collective: ", what, ": ", cudaGetErrorString(e)));
}

}  // namespace

HostStagedCollective::HostStagedCollective(Collective& device_collective, int cuda_device)
    : inner_(device_collective), cuda_device_(cuda_device) {}

HostStagedCollective::~HostStagedCollective() {
  if (scratch_ != nullptr) cudaFree(scratch_);
}

absl::StatusOr<void*> HostStagedCollective::Stage(const void* in, size_t bytes) {
  if (absl::Status st = Check(cudaSetDevice(cuda_device_), "selecting the device"); !st.ok()) return st;
  if (bytes > capacity_) {
    if (scratch_ != nullptr) cudaFree(scratch_);
    scratch_ = nullptr;
    capacity_ = 0;
    if (absl::Status st = Check(cudaMalloc(&scratch_, bytes), "allocating scratch memory"); !st.ok()) return st;
    capacity_ = bytes;
  }
  if (in != nullptr && bytes > 0) {
    if (absl::Status st = Check(cudaMemcpy(scratch_, in, bytes, cudaMemcpyHostToDevice), "copying in"); !st.ok()) {
      return st;
    }
  }
  return scratch_;
}

absl::Status HostStagedCollective::Unstage(void* out, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  return Check(cudaMemcpy(out, scratch_, bytes, cudaMemcpyDeviceToHost), "copying out");
}

absl::Status HostStagedCollective::AllReduceSum(absl::Span<float> data) {
  absl::StatusOr<void*> d = Stage(data.data(), data.size() * sizeof(float));
  if (!d.ok()) return d.status();
  if (absl::Status st = inner_.AllReduceSum(absl::MakeSpan(static_cast<float*>(*d), data.size())); !st.ok()) {
    return st;
  }
  return Unstage(data.data(), data.size() * sizeof(float));
}

absl::Status HostStagedCollective::AllReduceSum(absl::Span<int64_t> data) {
  absl::StatusOr<void*> d = Stage(data.data(), data.size() * sizeof(int64_t));
  if (!d.ok()) return d.status();
  if (absl::Status st = inner_.AllReduceSum(absl::MakeSpan(static_cast<int64_t*>(*d), data.size())); !st.ok()) {
    return st;
  }
  return Unstage(data.data(), data.size() * sizeof(int64_t));
}

absl::Status HostStagedCollective::BroadcastBytes(void* data, size_t bytes, int root) {
  absl::StatusOr<void*> d = Stage(rank() == root ? data : nullptr, bytes);
  if (!d.ok()) return d.status();
  if (absl::Status st = inner_.BroadcastBytes(*d, bytes, root); !st.ok()) return st;
  return Unstage(data, bytes);
}

}  // namespace det::collective
