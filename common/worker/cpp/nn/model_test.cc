// The Model interface over both memories: HostModel everywhere, CudaModel against it on
// a CUDA GPU (skipped without one unless DET_REQUIRE_GPU=1), and CudaModel's answer on a
// machine without one.
#include "common/worker/cpp/nn/model.h"

#include <cmath>
#include <cstdlib>
#include <vector>

#include "common/worker/cpp/nn/cuda_mlp.h"
#include "common/worker/cpp/nn/testing/batches.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::nn {
namespace {

using ::testing::HasSubstr;

using testing::Batch;
using testing::RandomBatch;

Mlp NewMlp() {
  MlpOptions options;
  options.layer_sizes = {20, 16, 12, 5};
  options.momentum = 0.9f;
  options.weight_decay = 1e-3f;
  return *Mlp::Create(options, 7);
}

bool RequireGpu() {
  const char* v = std::getenv("DET_REQUIRE_GPU");
  return v != nullptr && std::string(v) == "1";
}

// Skips (or fails with DET_REQUIRE_GPU=1) when this machine has no usable CUDA device.
std::unique_ptr<Model> CudaOrSkip(const Mlp& host) {
  absl::StatusOr<std::unique_ptr<Model>> m = CudaModel(host, 0);
  if (!m.ok()) {
    EXPECT_FALSE(RequireGpu()) << m.status();
    return nullptr;
  }
  return std::move(*m);
}

TEST(HostModel, MatchesMlpAndChecksItsInputs) {
  Mlp reference = NewMlp();
  std::unique_ptr<Model> model = HostModel(reference);
  Batch b = RandomBatch(8, 20, 5, 1);
  ASSERT_TRUE(model->SetBatch(b.x.data(), b.y.data(), 8).ok());
  std::vector<std::pair<size_t, size_t>> ranges;
  ASSERT_TRUE(model->ForwardBackward(2, 4, [&](size_t lo, size_t hi) { ranges.push_back({lo, hi}); }).ok());
  float expected = reference.ForwardBackward(b.x.data() + 2 * 20, b.y.data() + 2, 4);
  EXPECT_EQ(*model->Loss(), expected);
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges.front().second, reference.params().size());
  EXPECT_EQ(ranges.back().first, 0u);
  std::vector<float> g(reference.grads().size());
  ASSERT_TRUE(model->GradsToHost(absl::MakeSpan(g)).ok());
  EXPECT_TRUE(std::equal(g.begin(), g.end(), reference.grads().begin()));

  EXPECT_THAT(model->ForwardBackward(6, 4, nullptr).message(), HasSubstr("outside the batch of 8"));
  b.y[3] = 5;
  EXPECT_THAT(model->SetBatch(b.x.data(), b.y.data(), 8).message(), HasSubstr("label 5 of example 3"));
  EXPECT_THAT(model->GradsFromHost(absl::MakeConstSpan(g.data(), 3)).message(), HasSubstr("gradient copy of 3"));
}

TEST(CudaModel, WithoutAGpuSaysWhy) {
  absl::StatusOr<std::unique_ptr<Model>> m = CudaModel(NewMlp(), 0);
  if (m.ok()) GTEST_SKIP() << "this machine has a CUDA device: " << (*m)->device_name();
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition) << m.status();
  EXPECT_FALSE(RequireGpu()) << m.status();
}

// The same training steps on the GPU and the CPU agree to rounding: losses, gradients,
// the per-layer callbacks, parameters after steps, evaluation, and the host copy.
TEST(CudaModel, MatchesTheHostModel) {
  Mlp reference = NewMlp();
  std::unique_ptr<Model> gpu = CudaOrSkip(reference);
  if (gpu == nullptr) GTEST_SKIP() << "no CUDA device";
  EXPECT_EQ(gpu->memory(), Memory::kCuda);
  std::unique_ptr<Model> cpu = HostModel(reference);
  const size_t n = reference.params().size();
  std::vector<float> gg(n), gc(n);
  for (int step = 0; step < 5; ++step) {
    Batch b = RandomBatch(32, 20, 5, 100 + step);
    std::vector<std::pair<size_t, size_t>> rg, rc;
    ASSERT_TRUE(gpu->SetBatch(b.x.data(), b.y.data(), 32).ok());
    ASSERT_TRUE(cpu->SetBatch(b.x.data(), b.y.data(), 32).ok());
    ASSERT_TRUE(gpu->ForwardBackward(0, 32, [&](size_t lo, size_t hi) { rg.push_back({lo, hi}); }).ok());
    ASSERT_TRUE(cpu->ForwardBackward(0, 32, [&](size_t lo, size_t hi) { rc.push_back({lo, hi}); }).ok());
    EXPECT_EQ(rg, rc);
    EXPECT_NEAR(*gpu->Loss(), *cpu->Loss(), 1e-5);
    ASSERT_TRUE(gpu->GradsToHost(absl::MakeSpan(gg)).ok());
    ASSERT_TRUE(cpu->GradsToHost(absl::MakeSpan(gc)).ok());
    for (size_t j = 0; j < n; ++j) ASSERT_NEAR(gg[j], gc[j], 1e-5 + 1e-4 * std::fabs(gc[j])) << "element " << j;
    ASSERT_TRUE(gpu->Step(0.1f).ok());
    ASSERT_TRUE(cpu->Step(0.1f).ok());
  }
  absl::StatusOr<Mlp> back = gpu->ToHost();
  ASSERT_TRUE(back.ok()) << back.status();
  absl::StatusOr<Mlp> host = cpu->ToHost();
  for (size_t j = 0; j < n; ++j) {
    ASSERT_NEAR(back->params()[j], host->params()[j], 1e-4) << "parameter " << j;
    ASSERT_NEAR(back->velocity()[j], host->velocity()[j], 1e-4) << "velocity " << j;
  }
  Batch test = RandomBatch(3000, 20, 5, 9);  // more than one evaluation chunk
  absl::StatusOr<Evaluation> eg = gpu->Evaluate(test.x.data(), test.y.data(), 3000);
  absl::StatusOr<Evaluation> ec = cpu->Evaluate(test.x.data(), test.y.data(), 3000);
  ASSERT_TRUE(eg.ok()) << eg.status();
  EXPECT_NEAR(eg->loss, ec->loss, 1e-4);
  EXPECT_NEAR(eg->accuracy, ec->accuracy, 2.0 / 3000);
  // Gradients written from the host come back unchanged.
  for (size_t j = 0; j < n; ++j) gc[j] = static_cast<float>(j) * 0.5f;
  ASSERT_TRUE(gpu->GradsFromHost(gc).ok());
  ASSERT_TRUE(gpu->GradsToHost(absl::MakeSpan(gg)).ok());
  EXPECT_EQ(gg, gc);
}

// Training on the GPU learns: the loss of a fixed batch falls.
TEST(CudaModel, Learns) {
  Mlp reference = NewMlp();
  std::unique_ptr<Model> gpu = CudaOrSkip(reference);
  if (gpu == nullptr) GTEST_SKIP() << "no CUDA device";
  Batch b = RandomBatch(64, 20, 5, 3);
  ASSERT_TRUE(gpu->SetBatch(b.x.data(), b.y.data(), 64).ok());
  ASSERT_TRUE(gpu->ForwardBackward(0, 64, nullptr).ok());
  float first = *gpu->Loss();
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(gpu->Step(0.05f).ok());
    ASSERT_TRUE(gpu->ForwardBackward(0, 64, nullptr).ok());
  }
  EXPECT_LT(*gpu->Loss(), first * 0.5f);
}

}  // namespace
}  // namespace det::nn
