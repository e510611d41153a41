// A multi-layer perceptron classifier trained with SGD + momentum, on one CPU core.
//
// Fully connected layers with ReLU between them and softmax cross-entropy on the
// logits. All parameters live in one contiguous buffer, all gradients in a second one
// with the same layout, and the optimizer's velocity in a third, so that data-parallel
// training can all-reduce the gradients in a single call.
//
// Arithmetic is plain float with a fixed order of operations: the same build gives
// bit-identical results for the same seed, inputs and calls.
//
// Thread safety: none; use an Mlp from one thread at a time (const methods may run
// concurrently with each other).
#ifndef DET_COMMON_WORKER_CPP_NN_MLP_H_
#define DET_COMMON_WORKER_CPP_NN_MLP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace det::nn {

struct MlpOptions {
  // Input size, hidden layer sizes..., number of classes; e.g. {784, 128, 10}.
  // REQUIRES: 2 to 64 entries, each in [1, 2^20]; the last in [2, 256].
  std::vector<int> layer_sizes;
  // SGD with momentum and L2 weight decay on every parameter:
  //   v = momentum * v + (grad + weight_decay * p);  p -= lr * v.
  // REQUIRES: 0 <= momentum < 1, weight_decay >= 0.
  float momentum = 0.9f;
  float weight_decay = 0.0f;
};

// Mean loss and accuracy over a set of examples.
struct Evaluation {
  double loss = 0.0;      // Mean softmax cross-entropy.
  double accuracy = 0.0;  // Fraction whose highest logit (first on ties) is the label.
};

class Mlp {
 public:
  // Builds a model with He-uniform weights drawn from a std::mt19937_64 seeded with
  // `seed` (zero biases, zero velocity). Fails with kInvalidArgument on bad options.
  static absl::StatusOr<Mlp> Create(const MlpOptions& options, uint64_t seed);

  // Restores a model and its optimizer state from Serialize()'s output. Fails with
  // kInvalidArgument if `blob` is not a serialized Mlp (magic, version) and kDataLoss
  // if it is truncated or corrupt.
  static absl::StatusOr<Mlp> Deserialize(std::string_view blob);

  // Options, parameters and velocity in a versioned, checksummed little-endian format.
  // Gradients are not included.
  std::string Serialize() const;

  const MlpOptions& options() const { return options_; }
  int num_inputs() const { return options_.layer_sizes.front(); }
  int num_classes() const { return options_.layer_sizes.back(); }
  // Number of weight layers (layer_sizes.size() - 1).
  int num_layers() const { return static_cast<int>(options_.layer_sizes.size()) - 1; }

  // Layout of params(), grads() and velocity(): for each layer l in order, its weights
  // as an [in x out] row-major matrix (row i holds input i's outgoing weights), then
  // its `out` biases. REQUIRES: 0 <= layer < num_layers().
  size_t weights_offset(int layer) const { return offsets_[layer]; }
  size_t biases_offset(int layer) const;

  absl::Span<float> params() { return absl::MakeSpan(params_); }
  absl::Span<const float> params() const { return params_; }
  absl::Span<float> grads() { return absl::MakeSpan(grads_); }
  absl::Span<const float> grads() const { return grads_; }
  absl::Span<float> velocity() { return absl::MakeSpan(velocity_); }
  absl::Span<const float> velocity() const { return velocity_; }

  // Runs `batch` examples (x: batch * num_inputs() floats, example-major; y: labels)
  // forward and backward, overwrites grads() with the gradient of the mean loss, and
  // returns the mean loss. Data-parallel callers that sum grads() across workers must
  // divide by the number of workers before Step().
  // REQUIRES: batch >= 1; every y[i] < num_classes() (checked; aborts otherwise).
  float ForwardBackward(const float* x, const uint8_t* y, int batch);

  // As above, and calls `on_layer_grads(begin, end)` as soon as one layer's part of
  // grads() ([weights_offset(l), biases_offset(l) + its outputs)) is final, last layer
  // first, so that data-parallel training can reduce it while backward goes on with
  // earlier layers. The callback must not touch params() or the rest of grads().
  float ForwardBackward(const float* x, const uint8_t* y, int batch,
                        const std::function<void(size_t begin, size_t end)>& on_layer_grads);

  // Loss and accuracy over `n` examples, in internal batches; leaves grads() alone.
  // REQUIRES: n >= 0; every y[i] < num_classes() (checked; aborts otherwise).
  Evaluation Evaluate(const float* x, const uint8_t* y, int64_t n) const;

  // One SGD step with learning rate `lr` using the current grads().
  void Step(float lr);

 private:
  explicit Mlp(MlpOptions options);

  // Writes every layer's output for `batch` examples into (*acts)[l], resized as needed;
  // hidden outputs are post-ReLU, the last holds the logits.
  void Forward(const float* x, int batch, std::vector<std::vector<float>>* acts) const;

  MlpOptions options_;
  std::vector<size_t> offsets_;  // Start of each layer's weights, plus the total.
  std::vector<float> params_;
  std::vector<float> grads_;
  std::vector<float> velocity_;

  // Scratch reused across ForwardBackward calls.
  std::vector<std::vector<float>> acts_;
  std::vector<float> delta_;
  std::vector<float> delta_in_;
  std::vector<float> transposed_;
};

}  // namespace det::nn

#endif  // DET_COMMON_WORKER_CPP_NN_MLP_H_
