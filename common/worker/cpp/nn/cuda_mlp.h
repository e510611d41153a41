// Mlp's model on a CUDA device: parameters, gradients and optimizer state in device
// memory, matrix products through cuBLAS (FP32, no TF32), the element-wise work in
// cuda_kernels.cu. The arithmetic matches Mlp's formulas; the order of sums inside a
// matrix product is cuBLAS's, so results match Mlp's to rounding, not bit for bit.
//
// Thread-compatible: one thread at a time. The on_layer_grads callback runs after the
// device has finished that layer's gradients, so another thread (a gradient
// all-reduce) may read them while backward goes on.
#ifndef DET_COMMON_WORKER_CPP_NN_CUDA_MLP_H_
#define DET_COMMON_WORKER_CPP_NN_CUDA_MLP_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/worker/cpp/nn/mlp.h"
#include "common/worker/cpp/nn/model.h"

namespace det::nn {

// A CUDA error as a status naming `what`: FailedPrecondition for "no device" errors
// (no GPU, driver too old), Internal otherwise. `error` is a cudaError_t.
absl::Status CudaStatus(int error, const std::string& what);

// A copy of `host` (parameters and optimizer state) on CUDA device `device` (an ordinal
// among those CUDA_VISIBLE_DEVICES leaves). FailedPrecondition naming the CUDA
// runtime's reason when this process has no such device.
absl::StatusOr<std::unique_ptr<Model>> CudaModel(const Mlp& host, int device);

}  // namespace det::nn

#endif  // DET_COMMON_WORKER_CPP_NN_CUDA_MLP_H_
