// GradientMath on one CUDA device's memory, for GradientReducer over a model on a GPU.
// Each calling thread uses its own stream (cudaStreamPerThread) and waits for it.
#ifndef DET_COMMON_WORKER_CPP_HARNESS_CUDA_GRADIENT_MATH_H_
#define DET_COMMON_WORKER_CPP_HARNESS_CUDA_GRADIENT_MATH_H_

#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/worker/cpp/harness/gradient_reducer.h"

namespace det::harness {

class CudaGradientMath : public GradientMath {
 public:
  // `device`: the CUDA device ordinal the gradients live on.
  explicit CudaGradientMath(int device) : device_(device) {}
  ~CudaGradientMath() override;

  absl::StatusOr<absl::Span<float>> NewBuffer(size_t n) override;
  absl::Status MoveAdd(absl::Span<float> dst, absl::Span<float> src) override;
  absl::Status Add(absl::Span<float> dst, absl::Span<const float> src) override;
  absl::Status Scale(absl::Span<float> data, float factor) override;

 private:
  const int device_;
  absl::Mutex mu_;
  std::vector<void*> buffers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace det::harness

#endif  // DET_COMMON_WORKER_CPP_HARNESS_CUDA_GRADIENT_MATH_H_
