#include "common/worker/cpp/nn/cuda_mlp.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/worker/cpp/nn/cuda_kernels.h"
#include "common/status/status_macros.h"

namespace det::nn {

absl::Status CudaStatus(int error, const std::string& what) {
  auto e = static_cast<cudaError_t>(error);
  if (e == cudaSuccess) return absl::OkStatus();
  std::string message = absl::StrCat(what, ": ", cudaGetErrorString(e));
  cudaGetLastError();  // Clear a non-sticky error for later calls.
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInvalidDevice) {
    return absl::FailedPreconditionError(message);
  }
  return absl::InternalError(message);
}

namespace {

#define DET_CUDA(expr, what)                                         \
  do {                                                               \
    if (absl::Status _st = CudaStatus((expr), (what)); !_st.ok()) {  \
      return _st;                                                    \
    }                                                                \
  } while (0)

absl::Status BlasStatus(cublasStatus_t s, const std::string& what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuBLAS ", cublasGetStatusString(s)));
}

#define DET_CUBLAS(expr, what)                                       \
  do {                                                               \
    if (absl::Status _st = BlasStatus((expr), (what)); !_st.ok()) {  \
      return _st;                                                    \
    }                                                                \
  } while (0)

// Device memory for `n` elements of T, grown on demand (contents are not kept).
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(DeviceArray&& other) noexcept : data_(other.data_), size_(other.size_) {
    other.data_ = nullptr;
    other.size_ = 0;
  }
  DeviceArray& operator=(DeviceArray&&) = delete;
  ~DeviceArray() {
    if (data_ != nullptr) cudaFree(data_);
  }
  absl::Status Reserve(size_t n) {
    if (n <= size_) return absl::OkStatus();
    if (data_ != nullptr) cudaFree(data_);
    data_ = nullptr;
    size_ = 0;
    DET_CUDA(cudaMalloc(reinterpret_cast<void**>(&data_), std::max<size_t>(1, n) * sizeof(T)),
             absl::StrCat("allocating ", n * sizeof(T), " bytes of device memory"));
    size_ = n;
    return absl::OkStatus();
  }
  T* get() const { return data_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

constexpr int kEvalBatch = 2048;

class CudaMlp : public Model {
 public:
  ~CudaMlp() override {
    if (blas_ != nullptr) cublasDestroy(blas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  static absl::StatusOr<std::unique_ptr<Model>> Create(const Mlp& host, int device) {
    int count = 0;
    DET_CUDA(cudaGetDeviceCount(&count), "looking for CUDA devices");
    if (device < 0 || device >= count) {
      return absl::FailedPreconditionError(
          absl::StrCat("CUDA device ", device, " does not exist: this process sees ", count, " device(s)"));
    }
    std::unique_ptr<CudaMlp> m(new CudaMlp(host.options(), device));
    RETURN_IF_ERROR(m->Init(host));
    return std::unique_ptr<Model>(std::move(m));
  }

  Memory memory() const override { return Memory::kCuda; }
  std::string device_name() const override { return name_; }
  absl::Span<float> params() override { return {buffers_.get(), n_}; }
  absl::Span<float> grads() override { return {buffers_.get() + n_, n_}; }
  absl::Span<float> velocity() override { return {buffers_.get() + 2 * n_, n_}; }

  absl::Status SetBatch(const float* x, const uint8_t* y, int count) override {
    RETURN_IF_ERROR(CheckLabels(y, count, classes()));
    RETURN_IF_ERROR(Reserve(count));
    DET_CUDA(cudaSetDevice(device_), "selecting the CUDA device");
    // In stream order after the work on the previous batch; waited for, so the host
    // arrays are free once we return.
    DET_CUDA(cudaMemcpyAsync(x_.get(), x, static_cast<size_t>(count) * inputs() * sizeof(float),
                             cudaMemcpyHostToDevice, stream_),
             "copying the batch to the device");
    DET_CUDA(cudaMemcpyAsync(y_.get(), y, count, cudaMemcpyHostToDevice, stream_),
             "copying the labels to the device");
    DET_CUDA(cudaStreamSynchronize(stream_), "copying the batch to the device");
    count_ = count;
    return absl::OkStatus();
  }

  absl::Status ForwardBackward(int first, int count,
                               const std::function<void(size_t, size_t)>& on_layer_grads) override {
    if (first < 0 || count < 1 || first + count > count_) {
      return absl::OutOfRangeError(absl::StrCat("examples [", first, ", ", first + count,
                                                ") are outside the batch of ", count_));
    }
    DET_CUDA(cudaSetDevice(device_), "selecting the CUDA device");
    const float* x = x_.get() + static_cast<size_t>(first) * inputs();
    RETURN_IF_ERROR(Forward(x, count));
    const int layers = num_layers();
    float* delta = delta_.get();
    float* delta_in = delta_in_.get();
    DET_CUDA(cuda::SoftmaxCrossEntropy(acts_[layers - 1].get(), y_.get() + first, count, classes(), 1.0f / count,
                                       delta, loss_.get(), correct_.get(), stream_),
             "softmax cross-entropy");
    for (int l = layers - 1; l >= 0; --l) {
      const int in = sizes()[l];
      const int out = sizes()[l + 1];
      const float* input = l == 0 ? x : acts_[l - 1].get();
      float* dw = grads().data() + offsets_[l];
      float* db = dw + static_cast<size_t>(in) * out;
      // dW = input^T * delta (row-major [in x out], i.e. column-major [out x in]).
      DET_CUBLAS(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_T, out, in, count, &kOne, delta, out, input, in,
                             &kZero, dw, out),
                 absl::StrCat("weight gradient of layer ", l));
      DET_CUDA(cuda::ColumnSums(delta, count, out, db, stream_), absl::StrCat("bias gradient of layer ", l));
      if (on_layer_grads) {
        DET_CUDA(cudaStreamSynchronize(stream_), absl::StrCat("backward of layer ", l));
        on_layer_grads(offsets_[l], offsets_[l] + static_cast<size_t>(in) * out + out);
      }
      if (l == 0) break;
      // d(input) = delta * W^T: column-major [in x count] = W^T (in x out) * delta (out x count).
      const float* w = params().data() + offsets_[l];
      DET_CUBLAS(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, in, count, out, &kOne, w, out, delta, out, &kZero,
                             delta_in, in),
                 absl::StrCat("input gradient of layer ", l));
      DET_CUDA(cuda::ReluBackward(delta_in, input, static_cast<size_t>(count) * in, stream_),
               absl::StrCat("ReLU backward of layer ", l));
      std::swap(delta, delta_in);
    }
    last_count_ = count;
    return absl::OkStatus();
  }

  absl::StatusOr<float> Loss() override {
    DET_CUDA(cudaSetDevice(device_), "selecting the CUDA device");
    std::vector<double> losses(last_count_);
    DET_CUDA(cudaMemcpyAsync(losses.data(), loss_.get(), last_count_ * sizeof(double), cudaMemcpyDeviceToHost,
                             stream_),
             "copying the loss from the device");
    DET_CUDA(cudaStreamSynchronize(stream_), "waiting for the loss");
    double sum = 0.0;
    for (double v : losses) sum += v;
    return static_cast<float>(sum / std::max(1, last_count_));
  }

  absl::Status Step(float lr) override {
    DET_CUDA(cudaSetDevice(device_), "selecting the CUDA device");
    DET_CUDA(cuda::SgdStep(params().data(), velocity().data(), grads().data(), n_, lr, options_.momentum,
                           options_.weight_decay, stream_),
             "optimizer step");
    return absl::OkStatus();
  }

  absl::StatusOr<Evaluation> Evaluate(const float* x, const uint8_t* y, int64_t n) override {
    Evaluation result;
    if (n <= 0) return result;
    DET_CUDA(cudaSetDevice(device_), "selecting the CUDA device");
    RETURN_IF_ERROR(Reserve(kEvalBatch));
    std::vector<double> losses(kEvalBatch);
    std::vector<int> correct(kEvalBatch);
    double loss = 0.0;
    int64_t right = 0;
    for (int64_t start = 0; start < n; start += kEvalBatch) {
      const int batch = static_cast<int>(std::min<int64_t>(kEvalBatch, n - start));
      RETURN_IF_ERROR(CheckLabels(y + start, batch, classes(), start));
      DET_CUDA(cudaMemcpyAsync(eval_x_.get(), x + start * inputs(), static_cast<size_t>(batch) * inputs() * sizeof(float),
                               cudaMemcpyHostToDevice, stream_),
               "copying evaluation examples to the device");
      DET_CUDA(cudaMemcpyAsync(eval_y_.get(), y + start, batch, cudaMemcpyHostToDevice, stream_),
               "copying evaluation labels to the device");
      RETURN_IF_ERROR(Forward(eval_x_.get(), batch));
      DET_CUDA(cuda::SoftmaxCrossEntropy(acts_[num_layers() - 1].get(), eval_y_.get(), batch, classes(), 0.0f,
                                         nullptr, loss_.get(), correct_.get(), stream_),
               "evaluation loss");
      DET_CUDA(cudaMemcpyAsync(losses.data(), loss_.get(), batch * sizeof(double), cudaMemcpyDeviceToHost, stream_),
               "copying evaluation losses from the device");
      DET_CUDA(cudaMemcpyAsync(correct.data(), correct_.get(), batch * sizeof(int), cudaMemcpyDeviceToHost, stream_),
               "copying evaluation results from the device");
      DET_CUDA(cudaStreamSynchronize(stream_), "evaluation");
      for (int i = 0; i < batch; ++i) {
        loss += losses[i];
        right += correct[i];
      }
    }
    result.loss = loss / n;
    result.accuracy = static_cast<double>(right) / n;
    return result;
  }

  absl::Status GradsToHost(absl::Span<float> out) override {
    if (out.size() != n_) return SizeError(out.size());
    return Copy(out.data(), grads().data(), cudaMemcpyDeviceToHost, "copying gradients from the device");
  }

  absl::Status GradsFromHost(absl::Span<const float> in) override {
    if (in.size() != n_) return SizeError(in.size());
    return Copy(grads().data(), in.data(), cudaMemcpyHostToDevice, "copying gradients to the device");
  }

  absl::StatusOr<Mlp> ToHost() override {
    absl::StatusOr<Mlp> host = Mlp::Create(options_, 0);
    if (!host.ok()) return host.status();
    RETURN_IF_ERROR(Copy(host->params().data(), params().data(), cudaMemcpyDeviceToHost,
                          "copying parameters from the device"));
    RETURN_IF_ERROR(Copy(host->velocity().data(), velocity().data(), cudaMemcpyDeviceToHost,
                          "copying the optimizer state from the device"));
    return host;
  }

 private:
  static constexpr float kOne = 1.0f;
  static constexpr float kZero = 0.0f;

  CudaMlp(MlpOptions options, int device) : options_(std::move(options)), device_(device) {}

  const std::vector<int>& sizes() const { return options_.layer_sizes; }
  int inputs() const { return sizes().front(); }
  int classes() const { return sizes().back(); }
  int num_layers() const { return static_cast<int>(sizes().size()) - 1; }

  absl::Status Init(const Mlp& host) {
    DET_CUDA(cudaSetDevice(device_), absl::StrCat("selecting CUDA device ", device_));
    cudaDeviceProp prop;
    DET_CUDA(cudaGetDeviceProperties(&prop, device_), "reading the device's properties");
    name_ = absl::StrCat("cuda:", device_, " (", prop.name, ")");
    DET_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a CUDA stream");
    DET_CUBLAS(cublasCreate(&blas_), "creating the cuBLAS handle");
    DET_CUBLAS(cublasSetStream(blas_, stream_), "setting the cuBLAS stream");
    // Plain FP32 products: no TF32 or reduced-precision shortcuts.
    DET_CUBLAS(cublasSetMathMode(blas_, CUBLAS_PEDANTIC_MATH), "setting the cuBLAS math mode");
    for (int l = 0; l < num_layers(); ++l) {
      offsets_.push_back(host.weights_offset(l));
    }
    n_ = host.params().size();
    RETURN_IF_ERROR(buffers_.Reserve(3 * n_));
    DET_CUDA(cudaMemset(buffers_.get(), 0, 3 * n_ * sizeof(float)), "clearing device buffers");
    RETURN_IF_ERROR(Copy(params().data(), host.params().data(), cudaMemcpyHostToDevice,
                          "copying parameters to the device"));
    RETURN_IF_ERROR(Copy(velocity().data(), host.velocity().data(), cudaMemcpyHostToDevice,
                          "copying the optimizer state to the device"));
    acts_.resize(num_layers());
    return absl::OkStatus();
  }

  // Scratch for batches of up to `rows` examples.
  absl::Status Reserve(int rows) {
    if (rows <= rows_) return absl::OkStatus();
    int widest = 0;
    for (int s : sizes()) widest = std::max(widest, s);
    RETURN_IF_ERROR(x_.Reserve(static_cast<size_t>(rows) * inputs()));
    RETURN_IF_ERROR(y_.Reserve(rows));
    RETURN_IF_ERROR(eval_x_.Reserve(static_cast<size_t>(std::max(rows, kEvalBatch)) * inputs()));
    RETURN_IF_ERROR(eval_y_.Reserve(std::max(rows, kEvalBatch)));
    for (int l = 0; l < num_layers(); ++l) {
      RETURN_IF_ERROR(acts_[l].Reserve(static_cast<size_t>(rows) * sizes()[l + 1]));
    }
    RETURN_IF_ERROR(delta_.Reserve(static_cast<size_t>(rows) * widest));
    RETURN_IF_ERROR(delta_in_.Reserve(static_cast<size_t>(rows) * widest));
    RETURN_IF_ERROR(loss_.Reserve(rows));
    RETURN_IF_ERROR(correct_.Reserve(rows));
    rows_ = rows;
    return absl::OkStatus();
  }

  // acts_[l] = layer l's output for `rows` examples at device `x` (ReLU on hidden layers).
  absl::Status Forward(const float* x, int rows) {
    RETURN_IF_ERROR(Reserve(rows));
    const float* input = x;
    for (int l = 0; l < num_layers(); ++l) {
      const int in = sizes()[l];
      const int out = sizes()[l + 1];
      const float* w = params().data() + offsets_[l];
      const float* b = w + static_cast<size_t>(in) * out;
      // Y = X * W: column-major [out x rows] = W (out x in) * X (in x rows).
      DET_CUBLAS(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, out, rows, in, &kOne, w, out, input, in, &kZero,
                             acts_[l].get(), out),
                 absl::StrCat("forward of layer ", l));
      DET_CUDA(cuda::AddBias(acts_[l].get(), b, rows, out, l + 1 < num_layers(), stream_),
               absl::StrCat("bias of layer ", l));
      input = acts_[l].get();
    }
    return absl::OkStatus();
  }

  absl::Status Copy(void* dst, const void* src, cudaMemcpyKind kind, const std::string& what) {
    DET_CUDA(cudaSetDevice(device_), "selecting the CUDA device");
    DET_CUDA(cudaMemcpyAsync(dst, src, n_ * sizeof(float), kind, stream_), what);
    DET_CUDA(cudaStreamSynchronize(stream_), what);
    return absl::OkStatus();
  }

  absl::Status SizeError(size_t n) const {
    return absl::InvalidArgumentError(absl::StrCat("gradient copy of ", n, " floats; the model has ", n_));
  }

  MlpOptions options_;
  int device_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::vector<size_t> offsets_;
  size_t n_ = 0;
  DeviceArray<float> buffers_;  // params, grads, velocity
  DeviceArray<float> x_, eval_x_;
  DeviceArray<uint8_t> y_, eval_y_;
  std::vector<DeviceArray<float>> acts_;
  DeviceArray<float> delta_, delta_in_;
  DeviceArray<double> loss_;
  DeviceArray<int> correct_;
  int rows_ = 0;
  int count_ = 0;
  int last_count_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CudaModel(const Mlp& host, int device) {
  return CudaMlp::Create(host, device);
}

}  // namespace det::nn
