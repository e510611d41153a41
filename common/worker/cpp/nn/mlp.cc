#include "common/worker/cpp/nn/mlp.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace det::nn {
namespace {

constexpr int kMaxSizes = 64;
constexpr int kMaxWidth = 1 << 20;
constexpr int kMaxClasses = 256;
constexpr size_t kMaxParams = size_t{1} << 30;
constexpr int kEvalBatch = 256;
// Rows of the right-hand matrix processed together so that they stay in L1 cache.
constexpr size_t kTileBytes = 16 << 10;

constexpr uint32_t kMagic = 0x504c4d44;  // "DMLP" little-endian.
constexpr uint32_t kVersion = 1;

// y[0, n) += a * x[0, n). Written in blocks of 8 so that gcc vectorizes it at -O2.
inline void Axpy(float a, const float* __restrict x, float* __restrict y, int n) {
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int t = 0; t < 8; ++t) y[j + t] += a * x[j + t];
  }
  for (; j < n; ++j) y[j] += a * x[j];
}

// C[m x n] += A[m x k] * B[k x n], where A's element (r, c) is a[r * a_row + c * a_col]
// and B, C are contiguous row-major. Zero entries of A are skipped (ReLU outputs and
// blank pixels are often zero).
void MatMulAccumulate(int m, int n, int k, const float* a, ptrdiff_t a_row, ptrdiff_t a_col,
                      const float* b, float* c) {
  const int tile = std::max<int>(1, kTileBytes / (sizeof(float) * n));
  for (int k0 = 0; k0 < k; k0 += tile) {
    const int k1 = std::min(k, k0 + tile);
    for (int r = 0; r < m; ++r) {
      const float* a_r = a + r * a_row;
      float* c_r = c + static_cast<ptrdiff_t>(r) * n;
      for (int kk = k0; kk < k1; ++kk) {
        const float av = a_r[kk * a_col];
        if (av != 0.0f) Axpy(av, b + static_cast<ptrdiff_t>(kk) * n, c_r, n);
      }
    }
  }
}

// Softmax cross-entropy of one example's logits. If `dlogits` is not null, writes
// (softmax - onehot(label)) * scale into it.
double SoftmaxCrossEntropy(const float* logits, int classes, int label, float scale,
                           float* dlogits) {
  if (label >= classes) {
    std::fprintf(stderr, "det::nn::Mlp: label %d out of range for %d classes\n", label, classes);
    std::abort();
  }
  float max = logits[0];
  for (int j = 1; j < classes; ++j) max = std::max(max, logits[j]);
  double sum = 0.0;
  for (int j = 0; j < classes; ++j) sum += std::exp(static_cast<double>(logits[j] - max));
  if (dlogits != nullptr) {
    const double inv = 1.0 / sum;
    for (int j = 0; j < classes; ++j) {
      const double p = std::exp(static_cast<double>(logits[j] - max)) * inv;
      dlogits[j] = static_cast<float>((p - (j == label ? 1.0 : 0.0)) * scale);
    }
  }
  return std::log(sum) - static_cast<double>(logits[label] - max);
}

absl::Status ValidateOptions(const MlpOptions& options) {
  const std::vector<int>& sizes = options.layer_sizes;
  if (sizes.size() < 2 || sizes.size() > kMaxSizes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("layer_sizes has %d entries; want 2 to %d (inputs, hidden..., classes)",
                        sizes.size(), kMaxSizes));
  }
  size_t params = 0;
  for (size_t l = 0; l < sizes.size(); ++l) {
    if (sizes[l] < 1 || sizes[l] > kMaxWidth) {
      return absl::InvalidArgumentError(
          absl::StrFormat("layer_sizes[%d] = %d; want 1 to %d", l, sizes[l], kMaxWidth));
    }
    if (l > 0) params += (static_cast<size_t>(sizes[l - 1]) + 1) * sizes[l];
  }
  if (sizes.back() < 2 || sizes.back() > kMaxClasses) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer_sizes ends with %d classes; want 2 to %d", sizes.back(), kMaxClasses));
  }
  if (params > kMaxParams) {
    return absl::InvalidArgumentError(
        absl::StrFormat("layer_sizes give %d parameters; at most %d", params, kMaxParams));
  }
  if (!(options.momentum >= 0.0f && options.momentum < 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("momentum = %g; want 0 <= momentum < 1", options.momentum));
  }
  if (!(options.weight_decay >= 0.0f && std::isfinite(options.weight_decay))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("weight_decay = %g; want a finite value >= 0", options.weight_decay));
  }
  return absl::OkStatus();
}

// Little-endian encoding of the serialized form.
class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}
  void U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_->push_back(static_cast<char>(v >> (8 * i)));
  }
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_->push_back(static_cast<char>(v >> (8 * i)));
  }
  void F32(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    U32(bits);
  }

 private:
  std::string* out_;
};

// Reads what Writer wrote. REQUIRES: the caller has checked the blob is long enough.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  uint32_t U32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(in_[pos_ + i])} << (8 * i);
    pos_ += 4;
    return v;
  }
  uint64_t U64() {
    const uint64_t lo = U32();
    return lo | uint64_t{U32()} << 32;
  }
  float F32() {
    const uint32_t bits = U32();
    float v;
    std::memcpy(&v, &bits, sizeof(v));
    return v;
  }
  size_t pos() const { return pos_; }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

uint32_t Checksum(std::string_view bytes) {
  return static_cast<uint32_t>(
      crc32_z(crc32_z(0, nullptr, 0), reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

}  // namespace

Mlp::Mlp(MlpOptions options) : options_(std::move(options)) {
  const std::vector<int>& sizes = options_.layer_sizes;
  size_t total = 0;
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    offsets_.push_back(total);
    total += (static_cast<size_t>(sizes[l]) + 1) * sizes[l + 1];
  }
  offsets_.push_back(total);
  params_.assign(total, 0.0f);
  grads_.assign(total, 0.0f);
  velocity_.assign(total, 0.0f);
  acts_.resize(sizes.size() - 1);
}

absl::StatusOr<Mlp> Mlp::Create(const MlpOptions& options, uint64_t seed) {
  if (absl::Status status = ValidateOptions(options); !status.ok()) return status;
  Mlp mlp(options);
  std::mt19937_64 rng(seed);
  for (int l = 0; l < mlp.num_layers(); ++l) {
    const int in = options.layer_sizes[l];
    // He-uniform for layers followed by ReLU (variance 2 / fan_in), LeCun-uniform for
    // the logits (variance 1 / fan_in).
    const bool last = l + 1 == mlp.num_layers();
    const float bound = static_cast<float>(std::sqrt((last ? 3.0 : 6.0) / in));
    const size_t begin = mlp.weights_offset(l);
    const size_t end = mlp.biases_offset(l);
    for (size_t j = begin; j < end; ++j) {
      // 24 random bits give a float uniform on [0, 1) exactly, independent of the
      // standard library's distributions.
      const float u = static_cast<float>(rng() >> 40) * 0x1p-24f;
      mlp.params_[j] = (2.0f * u - 1.0f) * bound;
    }
  }
  return mlp;
}

size_t Mlp::biases_offset(int layer) const {
  return offsets_[layer] +
         static_cast<size_t>(options_.layer_sizes[layer]) * options_.layer_sizes[layer + 1];
}

void Mlp::Forward(const float* x, int batch, std::vector<std::vector<float>>* acts) const {
  acts->resize(num_layers());
  const float* input = x;
  for (int l = 0; l < num_layers(); ++l) {
    const int in = options_.layer_sizes[l];
    const int out = options_.layer_sizes[l + 1];
    const float* w = params_.data() + weights_offset(l);
    const float* bias = params_.data() + biases_offset(l);
    std::vector<float>& z = (*acts)[l];
    z.resize(static_cast<size_t>(batch) * out);
    for (int r = 0; r < batch; ++r) {
      std::copy(bias, bias + out, z.data() + static_cast<size_t>(r) * out);
    }
    MatMulAccumulate(batch, out, in, input, in, 1, w, z.data());
    if (l + 1 < num_layers()) {
      for (float& v : z) v = std::max(v, 0.0f);
    }
    input = z.data();
  }
}

float Mlp::ForwardBackward(const float* x, const uint8_t* y, int batch) {
  return ForwardBackward(x, y, batch, nullptr);
}

float Mlp::ForwardBackward(const float* x, const uint8_t* y, int batch,
                           const std::function<void(size_t begin, size_t end)>& on_layer_grads) {
  Forward(x, batch, &acts_);
  const int classes = num_classes();
  delta_.resize(static_cast<size_t>(batch) * classes);
  const float scale = 1.0f / batch;
  double loss = 0.0;
  for (int r = 0; r < batch; ++r) {
    const size_t row = static_cast<size_t>(r) * classes;
    loss +=
        SoftmaxCrossEntropy(acts_.back().data() + row, classes, y[r], scale, delta_.data() + row);
  }

  // delta_ holds d(loss)/d(layer output) for the layer being processed.
  for (int l = num_layers() - 1; l >= 0; --l) {
    const int in = options_.layer_sizes[l];
    const int out = options_.layer_sizes[l + 1];
    const float* input = l == 0 ? x : acts_[l - 1].data();
    float* dw = grads_.data() + weights_offset(l);
    float* db = grads_.data() + biases_offset(l);
    std::fill(dw, db + out, 0.0f);
    // dW = input^T * delta; db = column sums of delta.
    MatMulAccumulate(in, out, batch, input, 1, in, delta_.data(), dw);
    for (int r = 0; r < batch; ++r) {
      Axpy(1.0f, delta_.data() + static_cast<size_t>(r) * out, db, out);
    }
    if (on_layer_grads) on_layer_grads(weights_offset(l), biases_offset(l) + out);
    if (l == 0) break;

    // d(input) = delta * W^T, through W transposed into [out x in] for contiguous rows;
    // then through the ReLU that produced `input`.
    const float* w = params_.data() + weights_offset(l);
    transposed_.resize(static_cast<size_t>(in) * out);
    for (int i = 0; i < in; ++i) {
      for (int o = 0; o < out; ++o) {
        transposed_[static_cast<size_t>(o) * in + i] = w[static_cast<size_t>(i) * out + o];
      }
    }
    delta_in_.assign(static_cast<size_t>(batch) * in, 0.0f);
    MatMulAccumulate(batch, in, out, delta_.data(), out, 1, transposed_.data(), delta_in_.data());
    for (size_t j = 0; j < delta_in_.size(); ++j) {
      if (input[j] <= 0.0f) delta_in_[j] = 0.0f;
    }
    std::swap(delta_, delta_in_);
  }
  return static_cast<float>(loss / batch);
}

Evaluation Mlp::Evaluate(const float* x, const uint8_t* y, int64_t n) const {
  Evaluation result;
  if (n <= 0) return result;
  std::vector<std::vector<float>> acts;
  const int classes = num_classes();
  double loss = 0.0;
  int64_t correct = 0;
  for (int64_t start = 0; start < n; start += kEvalBatch) {
    const int batch = static_cast<int>(std::min<int64_t>(kEvalBatch, n - start));
    Forward(x + start * num_inputs(), batch, &acts);
    for (int r = 0; r < batch; ++r) {
      const float* logits = acts.back().data() + static_cast<size_t>(r) * classes;
      const int label = y[start + r];
      loss += SoftmaxCrossEntropy(logits, classes, label, 0.0f, nullptr);
      correct += std::max_element(logits, logits + classes) - logits == label;
    }
  }
  result.loss = loss / n;
  result.accuracy = static_cast<double>(correct) / n;
  return result;
}

void Mlp::Step(float lr) {
  const float momentum = options_.momentum;
  const float decay = options_.weight_decay;
  for (size_t j = 0; j < params_.size(); ++j) {
    velocity_[j] = momentum * velocity_[j] + (grads_[j] + decay * params_[j]);
    params_[j] -= lr * velocity_[j];
  }
}

// Layout: magic, version, number of sizes, sizes, momentum, weight_decay, number of
// parameters, parameters, velocity, then a CRC-32 of everything before it.
std::string Mlp::Serialize() const {
  std::string out;
  out.reserve(40 + 4 * options_.layer_sizes.size() + 8 * params_.size());
  Writer w(&out);
  w.U32(kMagic);
  w.U32(kVersion);
  w.U32(static_cast<uint32_t>(options_.layer_sizes.size()));
  for (int size : options_.layer_sizes) w.U32(static_cast<uint32_t>(size));
  w.F32(options_.momentum);
  w.F32(options_.weight_decay);
  w.U64(params_.size());
  for (float v : params_) w.F32(v);
  for (float v : velocity_) w.F32(v);
  w.U32(Checksum(out));
  return out;
}

absl::StatusOr<Mlp> Mlp::Deserialize(std::string_view blob) {
  constexpr size_t kPrefix = 12;  // magic, version, number of sizes.
  if (blob.size() < kPrefix) {
    return absl::DataLossError(absl::StrFormat(
        "Mlp blob truncated: %d bytes, shorter than the %d-byte header", blob.size(), kPrefix));
  }
  Reader r(blob);
  if (const uint32_t magic = r.U32(); magic != kMagic) {
    return absl::InvalidArgumentError(
        absl::StrFormat("not a serialized Mlp: magic 0x%08x, expected 0x%08x", magic, kMagic));
  }
  if (const uint32_t version = r.U32(); version != kVersion) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unsupported Mlp blob version %d (this build reads version %d)", version, kVersion));
  }
  const uint32_t num_sizes = r.U32();
  if (num_sizes < 2 || num_sizes > kMaxSizes) {
    return absl::DataLossError(absl::StrFormat("corrupt Mlp blob: %d layer sizes", num_sizes));
  }
  if (blob.size() < kPrefix + 4 * num_sizes) {
    return absl::DataLossError(
        absl::StrFormat("Mlp blob truncated: %d bytes, header alone needs %d", blob.size(),
                        kPrefix + 4 * num_sizes));
  }
  MlpOptions options;
  uint64_t params = 0;
  for (uint32_t l = 0; l < num_sizes; ++l) {
    const uint32_t size = r.U32();
    if (size < 1 || size > kMaxWidth) {
      return absl::DataLossError(
          absl::StrFormat("corrupt Mlp blob: layer size %d at index %d", size, l));
    }
    if (l > 0) params += (static_cast<uint64_t>(options.layer_sizes.back()) + 1) * size;
    options.layer_sizes.push_back(static_cast<int>(size));
  }
  // Parameter count, momentum, weight decay, parameters, velocity, checksum.
  const uint64_t expected = r.pos() + 16 + 8 * params + 4;
  if (blob.size() != expected) {
    return absl::DataLossError(absl::StrFormat(
        "Mlp blob %s: layer sizes need %d bytes, blob has %d",
        blob.size() < expected ? "truncated" : "has trailing bytes", expected, blob.size()));
  }
  Reader tail(blob.substr(blob.size() - 4));
  if (const uint32_t stored = tail.U32(); stored != Checksum(blob.substr(0, blob.size() - 4))) {
    return absl::DataLossError("corrupt Mlp blob: checksum mismatch");
  }
  options.momentum = r.F32();
  options.weight_decay = r.F32();
  if (const uint64_t count = r.U64(); count != params) {
    return absl::DataLossError(
        absl::StrFormat("corrupt Mlp blob: %d parameters, layer sizes give %d", count, params));
  }
  if (absl::Status status = ValidateOptions(options); !status.ok()) {
    return absl::DataLossError(absl::StrCat("corrupt Mlp blob: ", status.message()));
  }
  Mlp mlp(std::move(options));
  for (float& v : mlp.params_) v = r.F32();
  for (float& v : mlp.velocity_) v = r.F32();
  return mlp;
}

}  // namespace det::nn
