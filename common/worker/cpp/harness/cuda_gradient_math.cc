#include "common/worker/cpp/harness/cuda_gradient_math.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "common/worker/cpp/nn/cuda_kernels.h"
#include "common/worker/cpp/nn/cuda_mlp.h"
#include "common/status/status_macros.h"

namespace det::harness {
namespace {

absl::Status Wait(cudaError_t launched, const char* what) {
  RETURN_IF_ERROR(nn::CudaStatus(launched, what));
  return nn::CudaStatus(cudaStreamSynchronize(cudaStreamPerThread), what);
}

}  // namespace

CudaGradientMath::~CudaGradientMath() {
  absl::MutexLock l(&mu_);
  for (void* p : buffers_) cudaFree(p);
}

absl::StatusOr<absl::Span<float>> CudaGradientMath::NewBuffer(size_t n) {
  RETURN_IF_ERROR(nn::CudaStatus(cudaSetDevice(device_), "selecting the CUDA device"));
  void* p = nullptr;
  RETURN_IF_ERROR(nn::CudaStatus(cudaMalloc(&p, std::max<size_t>(1, n) * sizeof(float)),
                                 absl::StrCat("allocating a gradient sum of ", n, " floats")));
  {
    absl::MutexLock l(&mu_);
    buffers_.push_back(p);
  }
  RETURN_IF_ERROR(Wait(cudaMemsetAsync(p, 0, n * sizeof(float), cudaStreamPerThread), "clearing the gradient sum"));
  return absl::MakeSpan(static_cast<float*>(p), n);
}

absl::Status CudaGradientMath::MoveAdd(absl::Span<float> dst, absl::Span<float> src) {
  RETURN_IF_ERROR(nn::CudaStatus(cudaSetDevice(device_), "selecting the CUDA device"));
  RETURN_IF_ERROR(nn::CudaStatus(nn::cuda::Add(dst.data(), src.data(), dst.size(), cudaStreamPerThread),
                                 "adding the gradient sum"));
  return Wait(cudaMemsetAsync(src.data(), 0, src.size() * sizeof(float), cudaStreamPerThread),
              "clearing the gradient sum");
}

absl::Status CudaGradientMath::Add(absl::Span<float> dst, absl::Span<const float> src) {
  RETURN_IF_ERROR(nn::CudaStatus(cudaSetDevice(device_), "selecting the CUDA device"));
  return Wait(nn::cuda::Add(dst.data(), src.data(), dst.size(), cudaStreamPerThread), "summing gradients");
}

absl::Status CudaGradientMath::Scale(absl::Span<float> data, float factor) {
  RETURN_IF_ERROR(nn::CudaStatus(cudaSetDevice(device_), "selecting the CUDA device"));
  return Wait(nn::cuda::Scale(data.data(), data.size(), factor, cudaStreamPerThread), "averaging gradients");
}

}  // namespace det::harness
