// Element-wise CUDA kernels of CudaMlp (cuda_kernels.cu, compiled by nvcc). Every
// function enqueues on `stream` and returns the launch's error; pointers are device
// memory. Each output element is computed by one thread in a fixed order, so results
// are the same from run to run on the same device.
#ifndef DET_COMMON_WORKER_CPP_NN_CUDA_KERNELS_H_
#define DET_COMMON_WORKER_CPP_NN_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace det::nn::cuda {

// y[r][o] += b[o] for a [rows x cols] row-major y; then max(0, .) when `relu`.
cudaError_t AddBias(float* y, const float* b, int rows, int cols, bool relu, cudaStream_t stream);

// Per row r of [rows x classes] logits: loss[r] = softmax cross-entropy against
// labels[r] (computed in double), correct[r] = 1 when the first highest logit is the
// label; when dlogits is not null, dlogits[r] = scale * (softmax - one_hot(label)).
// A label >= classes gives loss NaN (the caller checks labels on the host).
cudaError_t SoftmaxCrossEntropy(const float* logits, const uint8_t* labels, int rows, int classes,
                                float scale, float* dlogits, double* loss, int* correct,
                                cudaStream_t stream);

// delta[j] = 0 where act[j] <= 0 (the ReLU that produced act), for j < n.
cudaError_t ReluBackward(float* delta, const float* act, size_t n, cudaStream_t stream);

// sums[c] = sum over rows r (in order) of m[r][c], for a [rows x cols] row-major m.
cudaError_t ColumnSums(const float* m, int rows, int cols, float* sums, cudaStream_t stream);

// SGD with momentum and weight decay, as Mlp::Step:
//   v = momentum * v + (g + decay * p);  p -= lr * v.
cudaError_t SgdStep(float* p, float* v, const float* g, size_t n, float lr, float momentum,
                    float decay, cudaStream_t stream);

// dst[j] += src[j].
cudaError_t Add(float* dst, const float* src, size_t n, cudaStream_t stream);

// data[j] *= factor.
cudaError_t Scale(float* data, size_t n, float factor, cudaStream_t stream);

}  // namespace det::nn::cuda

#endif  // DET_COMMON_WORKER_CPP_NN_CUDA_KERNELS_H_
