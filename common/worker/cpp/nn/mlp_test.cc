#include "common/worker/cpp/nn/mlp.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/worker/cpp/nn/testing/batches.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::nn {
namespace {

using ::testing::HasSubstr;

using testing::Batch;
using testing::RandomBatch;

// Three Gaussian-ish blobs in 4 dimensions, one per class, well apart.
Batch SeparableProblem(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const float centers[3][4] = {{2, 0, 0, 1}, {0, 2, -1, 0}, {-2, -2, 1, -1}};
  Batch b;
  for (int i = 0; i < n; ++i) {
    const int c = i % 3;
    for (int d = 0; d < 4; ++d) {
      const float noise = static_cast<float>(rng() >> 40) * 0x1p-24f - 0.5f;
      b.x.push_back(centers[c][d] + noise);
    }
    b.y.push_back(static_cast<uint8_t>(c));
  }
  return b;
}

bool BitIdentical(absl::Span<const float> a, absl::Span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

Mlp MakeMlp(std::vector<int> sizes, uint64_t seed, float momentum = 0.9f,
            float weight_decay = 0.0f) {
  MlpOptions options;
  options.layer_sizes = std::move(sizes);
  options.momentum = momentum;
  options.weight_decay = weight_decay;
  absl::StatusOr<Mlp> mlp = Mlp::Create(options, seed);
  EXPECT_TRUE(mlp.ok()) << mlp.status();
  return *std::move(mlp);
}

TEST(MlpTest, LayoutIsContiguousWeightsThenBiases) {
  Mlp mlp = MakeMlp({784, 128, 10}, 1);
  EXPECT_EQ(mlp.num_layers(), 2);
  EXPECT_EQ(mlp.num_inputs(), 784);
  EXPECT_EQ(mlp.num_classes(), 10);
  EXPECT_EQ(mlp.params().size(), 784u * 128 + 128 + 128 * 10 + 10);
  EXPECT_EQ(mlp.grads().size(), mlp.params().size());
  EXPECT_EQ(mlp.velocity().size(), mlp.params().size());
  EXPECT_EQ(mlp.weights_offset(0), 0u);
  EXPECT_EQ(mlp.biases_offset(0), 784u * 128);
  EXPECT_EQ(mlp.weights_offset(1), 784u * 128 + 128);
  EXPECT_EQ(mlp.biases_offset(1), 784u * 128 + 128 + 1280);
}

TEST(MlpTest, InitIsHeUniformWithZeroBiases) {
  Mlp mlp = MakeMlp({50, 20, 3}, 7);
  const float hidden_bound = std::sqrt(6.0f / 50);
  const float logits_bound = std::sqrt(3.0f / 20);
  float max_hidden = 0, max_logits = 0;
  for (size_t j = mlp.weights_offset(0); j < mlp.biases_offset(0); ++j) {
    max_hidden = std::max(max_hidden, std::abs(mlp.params()[j]));
  }
  for (size_t j = mlp.weights_offset(1); j < mlp.biases_offset(1); ++j) {
    max_logits = std::max(max_logits, std::abs(mlp.params()[j]));
  }
  EXPECT_LE(max_hidden, hidden_bound);
  EXPECT_GT(max_hidden, 0.9f * hidden_bound);
  EXPECT_LE(max_logits, logits_bound);
  EXPECT_GT(max_logits, 0.9f * logits_bound);
  for (int l = 0; l < 2; ++l) {
    const int out = mlp.options().layer_sizes[l + 1];
    for (int o = 0; o < out; ++o) EXPECT_EQ(mlp.params()[mlp.biases_offset(l) + o], 0.0f);
  }
  for (float v : mlp.velocity()) EXPECT_EQ(v, 0.0f);
}

TEST(MlpTest, SameSeedGivesIdenticalParams) {
  Mlp a = MakeMlp({30, 16, 8, 4}, 42);
  Mlp b = MakeMlp({30, 16, 8, 4}, 42);
  Mlp c = MakeMlp({30, 16, 8, 4}, 43);
  EXPECT_TRUE(BitIdentical(a.params(), b.params()));
  EXPECT_FALSE(BitIdentical(a.params(), c.params()));

  // And identical training stays identical.
  Batch batch = RandomBatch(10, 30, 4, 3);
  for (int step = 0; step < 5; ++step) {
    EXPECT_EQ(a.ForwardBackward(batch.x.data(), batch.y.data(), 10),
              b.ForwardBackward(batch.x.data(), batch.y.data(), 10));
    a.Step(0.1f);
    b.Step(0.1f);
  }
  EXPECT_TRUE(BitIdentical(a.params(), b.params()));
}

TEST(MlpTest, GradientMatchesCentralDifferences) {
  // Two hidden layers, so the check covers backpropagation through ReLU twice.
  Mlp mlp = MakeMlp({9, 7, 6, 5}, 11);
  constexpr int kBatch = 6;
  Batch batch = RandomBatch(kBatch, 9, 5, 12);
  // Non-zero biases, so that bias gradients are exercised away from the init.
  for (int l = 0; l < mlp.num_layers(); ++l) {
    for (int o = 0; o < mlp.options().layer_sizes[l + 1]; ++o) {
      mlp.params()[mlp.biases_offset(l) + o] = 0.05f * ((o % 3) - 1);
    }
  }
  const float loss = mlp.ForwardBackward(batch.x.data(), batch.y.data(), kBatch);
  EXPECT_NEAR(loss, mlp.Evaluate(batch.x.data(), batch.y.data(), kBatch).loss, 1e-6);
  const std::vector<float> grads(mlp.grads().begin(), mlp.grads().end());

  constexpr float kEps = 1e-3f;
  for (int l = 0; l < mlp.num_layers(); ++l) {
    std::vector<size_t> indices;
    const size_t w0 = mlp.weights_offset(l), b0 = mlp.biases_offset(l);
    for (int k = 0; k < 6; ++k) indices.push_back(w0 + (b0 - w0) * k / 6 + k);
    indices.push_back(b0);
    indices.push_back(b0 + mlp.options().layer_sizes[l + 1] - 1);
    int nonzero = 0;
    for (size_t j : indices) {
      const float saved = mlp.params()[j];
      mlp.params()[j] = saved + kEps;
      const double plus = mlp.Evaluate(batch.x.data(), batch.y.data(), kBatch).loss;
      mlp.params()[j] = saved - kEps;
      const double minus = mlp.Evaluate(batch.x.data(), batch.y.data(), kBatch).loss;
      mlp.params()[j] = saved;
      const double numeric = (plus - minus) / (2.0 * kEps);
      EXPECT_NEAR(grads[j], numeric, 2e-4 + 1e-2 * std::abs(numeric))
          << "layer " << l << " param " << j;
      nonzero += std::abs(grads[j]) > 1e-4;
    }
    EXPECT_GE(nonzero, 3) << "layer " << l << ": too few live gradients to check";
  }
}

TEST(MlpTest, GradientIsTheBatchMean) {
  Mlp mlp = MakeMlp({5, 4, 3}, 5);
  Batch one = RandomBatch(1, 5, 3, 6);
  const float single = mlp.ForwardBackward(one.x.data(), one.y.data(), 1);
  const std::vector<float> single_grads(mlp.grads().begin(), mlp.grads().end());
  Batch twice = one;
  twice.x.insert(twice.x.end(), one.x.begin(), one.x.end());
  twice.y.push_back(one.y[0]);
  EXPECT_NEAR(mlp.ForwardBackward(twice.x.data(), twice.y.data(), 2), single, 1e-6);
  for (size_t j = 0; j < single_grads.size(); ++j) {
    EXPECT_NEAR(mlp.grads()[j], single_grads[j], 1e-6);
  }
}

TEST(MlpTest, StepIsSgdWithMomentumAndWeightDecay) {
  Mlp mlp = MakeMlp({2, 2}, 1, /*momentum=*/0.5f, /*weight_decay=*/0.1f);
  const std::vector<float> p0(mlp.params().begin(), mlp.params().end());
  std::fill(mlp.grads().begin(), mlp.grads().end(), 1.0f);
  mlp.Step(0.1f);
  mlp.Step(0.1f);
  for (size_t j = 0; j < p0.size(); ++j) {
    const float v1 = 1.0f + 0.1f * p0[j];
    const float p1 = p0[j] - 0.1f * v1;
    const float v2 = 0.5f * v1 + (1.0f + 0.1f * p1);
    EXPECT_FLOAT_EQ(mlp.velocity()[j], v2);
    EXPECT_FLOAT_EQ(mlp.params()[j], p1 - 0.1f * v2);
  }
}

TEST(MlpTest, LossDecreasesOnSeparableProblem) {
  Mlp mlp = MakeMlp({4, 16, 3}, 9);
  Batch data = SeparableProblem(300, 10);
  const Evaluation before = mlp.Evaluate(data.x.data(), data.y.data(), 300);
  float first_loss = 0, last_loss = 0;
  for (int step = 0; step < 60; ++step) {
    const int start = (step * 30) % 300;
    const float loss = mlp.ForwardBackward(data.x.data() + start * 4, data.y.data() + start, 30);
    if (step == 0) first_loss = loss;
    last_loss = loss;
    mlp.Step(0.05f);
  }
  const Evaluation after = mlp.Evaluate(data.x.data(), data.y.data(), 300);
  EXPECT_LT(last_loss, 0.25f * first_loss);
  EXPECT_LT(after.loss, 0.25 * before.loss);
  EXPECT_GE(after.accuracy, 0.99);
}

TEST(MlpTest, EvaluateBatchesInternally) {
  Mlp mlp = MakeMlp({6, 5, 4}, 2);
  Batch data = RandomBatch(700, 6, 4, 3);
  const Evaluation all = mlp.Evaluate(data.x.data(), data.y.data(), 700);
  const Evaluation head = mlp.Evaluate(data.x.data(), data.y.data(), 300);
  const Evaluation tail = mlp.Evaluate(data.x.data() + 300 * 6, data.y.data() + 300, 400);
  EXPECT_NEAR(all.loss, (300 * head.loss + 400 * tail.loss) / 700, 1e-9);
  EXPECT_NEAR(all.accuracy, (300 * head.accuracy + 400 * tail.accuracy) / 700, 1e-12);
  EXPECT_EQ(mlp.Evaluate(data.x.data(), data.y.data(), 0).loss, 0.0);
}

TEST(MlpTest, SerializeRoundTripContinuesIdentically) {
  Mlp a = MakeMlp({12, 8, 5}, 21, /*momentum=*/0.8f, /*weight_decay=*/1e-3f);
  Batch batch = RandomBatch(16, 12, 5, 22);
  for (int step = 0; step < 3; ++step) {
    a.ForwardBackward(batch.x.data(), batch.y.data(), 16);
    a.Step(0.05f);
  }
  const std::string blob = a.Serialize();
  absl::StatusOr<Mlp> b = Mlp::Deserialize(blob);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->options().layer_sizes, a.options().layer_sizes);
  EXPECT_EQ(b->options().momentum, 0.8f);
  EXPECT_EQ(b->options().weight_decay, 1e-3f);
  EXPECT_TRUE(BitIdentical(a.params(), b->params()));
  EXPECT_TRUE(BitIdentical(a.velocity(), b->velocity()));
  EXPECT_EQ(b->Serialize(), blob);

  for (int step = 0; step < 4; ++step) {
    const int start = step * 4;
    EXPECT_EQ(a.ForwardBackward(batch.x.data() + start * 12, batch.y.data() + start, 4),
              b->ForwardBackward(batch.x.data() + start * 12, batch.y.data() + start, 4));
    a.Step(0.05f);
    b->Step(0.05f);
  }
  EXPECT_TRUE(BitIdentical(a.params(), b->params()));
  EXPECT_TRUE(BitIdentical(a.velocity(), b->velocity()));
}

TEST(MlpTest, CorruptBlobsAreClearErrors) {
  const std::string blob = MakeMlp({6, 4, 3}, 1).Serialize();

  absl::StatusOr<Mlp> empty = Mlp::Deserialize("");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(empty.status().message(), HasSubstr("truncated"));

  absl::StatusOr<Mlp> cut = Mlp::Deserialize(blob.substr(0, blob.size() - 1));
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(cut.status().message(), HasSubstr("truncated"));

  absl::StatusOr<Mlp> cut_header = Mlp::Deserialize(blob.substr(0, 14));
  EXPECT_EQ(cut_header.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(cut_header.status().message(), HasSubstr("truncated"));

  absl::StatusOr<Mlp> longer = Mlp::Deserialize(blob + "x");
  EXPECT_EQ(longer.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(longer.status().message(), HasSubstr("trailing"));

  std::string flipped = blob;
  flipped[blob.size() / 2] ^= 0x10;
  absl::StatusOr<Mlp> bad_sum = Mlp::Deserialize(flipped);
  EXPECT_EQ(bad_sum.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(bad_sum.status().message(), HasSubstr("checksum mismatch"));

  std::string bad_size = blob;
  bad_size[12] = 0;  // First layer size.
  bad_size[13] = 0;
  absl::StatusOr<Mlp> zero_size = Mlp::Deserialize(bad_size);
  EXPECT_EQ(zero_size.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(zero_size.status().message(), HasSubstr("layer size 0"));

  std::string magic = blob;
  magic[0] = 'X';
  absl::StatusOr<Mlp> bad_magic = Mlp::Deserialize(magic);
  EXPECT_EQ(bad_magic.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_magic.status().message(), HasSubstr("not a serialized Mlp"));

  std::string version = blob;
  version[4] = 9;
  absl::StatusOr<Mlp> bad_version = Mlp::Deserialize(version);
  EXPECT_EQ(bad_version.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_version.status().message(), HasSubstr("unsupported Mlp blob version 9"));
}

TEST(MlpTest, CreateRejectsBadOptions) {
  MlpOptions options;
  options.layer_sizes = {784};
  EXPECT_THAT(Mlp::Create(options, 1).status().message(), HasSubstr("layer_sizes has 1"));
  options.layer_sizes = {784, 0, 10};
  EXPECT_THAT(Mlp::Create(options, 1).status().message(), HasSubstr("layer_sizes[1] = 0"));
  options.layer_sizes = {784, 300};
  EXPECT_THAT(Mlp::Create(options, 1).status().message(), HasSubstr("300 classes"));
  options.layer_sizes = {784, 10};
  options.momentum = 1.0f;
  absl::StatusOr<Mlp> bad_momentum = Mlp::Create(options, 1);
  EXPECT_EQ(bad_momentum.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_momentum.status().message(), HasSubstr("momentum"));
  options.momentum = 0.9f;
  options.weight_decay = -1.0f;
  EXPECT_THAT(Mlp::Create(options, 1).status().message(), HasSubstr("weight_decay"));
}

TEST(MlpDeathTest, LabelOutOfRangeAborts) {
  Mlp mlp = MakeMlp({3, 2}, 1);
  const float x[3] = {0.1f, 0.2f, 0.3f};
  const uint8_t y = 2;
  EXPECT_DEATH(mlp.ForwardBackward(x, &y, 1), "label 2 out of range for 2 classes");
}

}  // namespace
}  // namespace det::nn
