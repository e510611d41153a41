#include "common/worker/cpp/nn/cuda_kernels.h"

namespace det::nn::cuda {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__global__ void AddBiasKernel(float* y, const float* b, int rows, int cols, bool relu) {
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<size_t>(rows) * cols) return;
  float v = y[i] + b[i % cols];
  y[i] = relu && v < 0.0f ? 0.0f : v;
}

__global__ void SoftmaxCrossEntropyKernel(const float* logits, const uint8_t* labels, int rows,
                                          int classes, float scale, float* dlogits, double* loss,
                                          int* correct) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* l = logits + static_cast<size_t>(r) * classes;
  const int label = labels[r];
  if (label >= classes) {
    loss[r] = nan("");
    correct[r] = 0;
    return;
  }
  float max = l[0];
  int best = 0;
  for (int j = 1; j < classes; ++j) {
    if (l[j] > max) {
      max = l[j];
      best = j;
    }
  }
  double sum = 0.0;
  for (int j = 0; j < classes; ++j) sum += exp(static_cast<double>(l[j] - max));
  if (dlogits != nullptr) {
    const double inv = 1.0 / sum;
    float* d = dlogits + static_cast<size_t>(r) * classes;
    for (int j = 0; j < classes; ++j) {
      const double p = exp(static_cast<double>(l[j] - max)) * inv;
      d[j] = static_cast<float>((p - (j == label ? 1.0 : 0.0)) * scale);
    }
  }
  loss[r] = log(sum) - static_cast<double>(l[label] - max);
  correct[r] = best == label;
}

__global__ void ReluBackwardKernel(float* delta, const float* act, size_t n) {
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n && act[i] <= 0.0f) delta[i] = 0.0f;
}

__global__ void ColumnSumsKernel(const float* m, int rows, int cols, float* sums) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.0f;
  for (int r = 0; r < rows; ++r) s += m[static_cast<size_t>(r) * cols + c];
  sums[c] = s;
}

__global__ void SgdStepKernel(float* p, float* v, const float* g, size_t n, float lr,
                              float momentum, float decay) {
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float vi = momentum * v[i] + (g[i] + decay * p[i]);
  v[i] = vi;
  p[i] -= lr * vi;
}

__global__ void AddKernel(float* dst, const float* src, size_t n) {
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] += src[i];
}

__global__ void ScaleKernel(float* data, size_t n, float factor) {
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}

}  // namespace

cudaError_t AddBias(float* y, const float* b, int rows, int cols, bool relu, cudaStream_t stream) {
  size_t n = static_cast<size_t>(rows) * cols;
  if (n == 0) return cudaSuccess;
  AddBiasKernel<<<Blocks(n), kThreads, 0, stream>>>(y, b, rows, cols, relu);
  return cudaGetLastError();
}

cudaError_t SoftmaxCrossEntropy(const float* logits, const uint8_t* labels, int rows, int classes,
                                float scale, float* dlogits, double* loss, int* correct,
                                cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  SoftmaxCrossEntropyKernel<<<Blocks(rows), kThreads, 0, stream>>>(logits, labels, rows, classes, scale,
                                                                  dlogits, loss, correct);
  return cudaGetLastError();
}

cudaError_t ReluBackward(float* delta, const float* act, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ReluBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(delta, act, n);
  return cudaGetLastError();
}

cudaError_t ColumnSums(const float* m, int rows, int cols, float* sums, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  ColumnSumsKernel<<<Blocks(cols), kThreads, 0, stream>>>(m, rows, cols, sums);
  return cudaGetLastError();
}

cudaError_t SgdStep(float* p, float* v, const float* g, size_t n, float lr, float momentum,
                    float decay, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  SgdStepKernel<<<Blocks(n), kThreads, 0, stream>>>(p, v, g, n, lr, momentum, decay);
  return cudaGetLastError();
}

cudaError_t Add(float* dst, const float* src, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  AddKernel<<<Blocks(n), kThreads, 0, stream>>>(dst, src, n);
  return cudaGetLastError();
}

cudaError_t Scale(float* data, size_t n, float factor, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ScaleKernel<<<Blocks(n), kThreads, 0, stream>>>(data, n, factor);
  return cudaGetLastError();
}

}  // namespace det::nn::cuda
