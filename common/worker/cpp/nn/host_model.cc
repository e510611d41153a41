#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/worker/cpp/nn/model.h"

namespace det::nn {
namespace {

class HostMlp : public Model {
 public:
  explicit HostMlp(Mlp mlp) : mlp_(std::move(mlp)) {}

  Memory memory() const override { return Memory::kHost; }
  std::string device_name() const override { return "cpu"; }
  absl::Span<float> params() override { return mlp_.params(); }
  absl::Span<float> grads() override { return mlp_.grads(); }
  absl::Span<float> velocity() override { return mlp_.velocity(); }

  absl::Status SetBatch(const float* x, const uint8_t* y, int count) override {
    if (absl::Status st = CheckLabels(y, count, mlp_.num_classes()); !st.ok()) return st;
    x_ = x;
    y_ = y;
    count_ = count;
    return absl::OkStatus();
  }

  absl::Status ForwardBackward(int first, int count,
                               const std::function<void(size_t, size_t)>& on_layer_grads) override {
    if (first < 0 || count < 1 || first + count > count_) {
      return absl::OutOfRangeError(absl::StrCat("examples [", first, ", ", first + count,
                                                ") are outside the batch of ", count_));
    }
    loss_ = mlp_.ForwardBackward(x_ + static_cast<size_t>(first) * mlp_.num_inputs(), y_ + first, count,
                                 on_layer_grads);
    return absl::OkStatus();
  }

  absl::StatusOr<float> Loss() override { return loss_; }

  absl::Status Step(float lr) override {
    mlp_.Step(lr);
    return absl::OkStatus();
  }

  absl::StatusOr<Evaluation> Evaluate(const float* x, const uint8_t* y, int64_t n) override {
    if (absl::Status st = CheckLabels(y, n, mlp_.num_classes()); !st.ok()) return st;
    return mlp_.Evaluate(x, y, n);
  }

  absl::Status GradsToHost(absl::Span<float> out) override {
    if (out.size() != mlp_.grads().size()) return SizeError(out.size());
    std::copy(mlp_.grads().begin(), mlp_.grads().end(), out.begin());
    return absl::OkStatus();
  }

  absl::Status GradsFromHost(absl::Span<const float> in) override {
    if (in.size() != mlp_.grads().size()) return SizeError(in.size());
    std::copy(in.begin(), in.end(), mlp_.grads().begin());
    return absl::OkStatus();
  }

  absl::StatusOr<Mlp> ToHost() override { return mlp_; }

 private:
  absl::Status SizeError(size_t n) const {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient copy of ", n, " floats; the model has ", mlp_.grads().size()));
  }

  Mlp mlp_;
  const float* x_ = nullptr;
  const uint8_t* y_ = nullptr;
  int count_ = 0;
  float loss_ = 0.0f;
};

}  // namespace

absl::Status CheckLabels(const uint8_t* y, int64_t n, int classes, int64_t first_index) {
  for (int64_t i = 0; i < n; ++i) {
    if (y[i] >= classes) {
      return absl::InvalidArgumentError(absl::StrCat("label ", y[i], " of example ", first_index + i,
                                                     " is out of range for ", classes, " classes"));
    }
  }
  return absl::OkStatus();
}

std::unique_ptr<Model> HostModel(Mlp mlp) { return std::make_unique<HostMlp>(std::move(mlp)); }

}  // namespace det::nn
