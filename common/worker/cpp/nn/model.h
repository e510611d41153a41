// What data-parallel training code needs from a classifier, wherever its buffers live:
// HostModel() runs an Mlp on the CPU, CudaMlp the same model on a CUDA device. Training
// code moves a batch in (SetBatch: "to_device"), runs forward and backward over it or
// over slices of it, reads the loss back (Loss: "from_device"), all-reduces grads() in
// place with a collective on the same memory, and steps the optimizer.
#ifndef DET_COMMON_WORKER_CPP_NN_MODEL_H_
#define DET_COMMON_WORKER_CPP_NN_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/worker/cpp/nn/mlp.h"

namespace det::nn {

enum class Memory { kHost, kCuda };

class Model {
 public:
  virtual ~Model() = default;

  // Where params(), grads() and velocity() live.
  virtual Memory memory() const = 0;
  // "cpu" or the CUDA device, e.g. "cuda:0 (NVIDIA H100 80GB HBM3)".
  virtual std::string device_name() const = 0;

  // The layout of Mlp's buffers, in memory().
  virtual absl::Span<float> params() = 0;
  virtual absl::Span<float> grads() = 0;
  virtual absl::Span<float> velocity() = 0;

  // Makes `count` examples (x: count * inputs floats; y: labels) the current batch.
  // InvalidArgument for a label >= the number of classes. The host arrays may be reused
  // once this returns.
  virtual absl::Status SetBatch(const float* x, const uint8_t* y, int count) = 0;

  // Forward and backward over examples [first, first + count) of the current batch:
  // grads() become the gradient of their mean loss. on_layer_grads as in
  // Mlp::ForwardBackward, called once that layer's gradients are final in memory().
  virtual absl::Status ForwardBackward(int first, int count,
                                       const std::function<void(size_t begin, size_t end)>& on_layer_grads) = 0;

  // The mean loss of the last ForwardBackward() (waits for the device).
  virtual absl::StatusOr<float> Loss() = 0;

  // One SGD step with learning rate `lr` using grads().
  virtual absl::Status Step(float lr) = 0;

  // Loss and accuracy over `n` host examples, in internal batches; leaves grads() alone.
  virtual absl::StatusOr<Evaluation> Evaluate(const float* x, const uint8_t* y, int64_t n) = 0;

  // Host copies: gradients out and in (deterministic mode sums them in fixed point),
  // and parameters plus optimizer state into a host Mlp of the same shape (checkpoints).
  virtual absl::Status GradsToHost(absl::Span<float> out) = 0;
  virtual absl::Status GradsFromHost(absl::Span<const float> in) = 0;
  virtual absl::StatusOr<Mlp> ToHost() = 0;
};

// InvalidArgument naming the first of `n` labels that is >= `classes` (its index counted
// from `first_index`), for Model::SetBatch and Evaluate.
absl::Status CheckLabels(const uint8_t* y, int64_t n, int classes, int64_t first_index = 0);

// `mlp` on the CPU. SetBatch keeps pointers, not copies: the arrays must stay unchanged
// until the batch's last ForwardBackward().
std::unique_ptr<Model> HostModel(Mlp mlp);

}  // namespace det::nn

#endif  // DET_COMMON_WORKER_CPP_NN_MODEL_H_
