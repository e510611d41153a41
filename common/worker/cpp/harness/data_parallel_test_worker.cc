// One rank of data-parallel training for data_parallel_test: a small MLP on a fixed
// synthetic data set, parameters broadcast from rank 0 (every rank starts from a
// different initialization, so the broadcast matters), gradients averaged by a
// GradientReducer over Gloo with small buckets that fill while backward still runs.
// Prints "step S params HASH" after every batch and "final_loss L" at the end.
//
//   data_parallel_test_worker RANK SIZE DIR BATCHES GLOBAL_BATCH MODE AGGREGATION
//
// MODE: "reduce", or "no_reduce" (a negative control: gradients stay local).
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <random>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/worker/cpp/collective/file_rendezvous.h"
#include "common/worker/cpp/collective/gloo_collective.h"
#include "common/worker/cpp/harness/distributed.h"
#include "common/worker/cpp/harness/gradient_reducer.h"
#include "common/worker/cpp/nn/mlp.h"

namespace det::harness {
namespace {

constexpr int kExamples = 512;
constexpr int kFeatures = 20;
constexpr int kClasses = 4;

uint64_t Fnv1a(absl::Span<const float> v) {
  uint64_t h = 1469598103934665603ULL;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

int Fail(int rank, const absl::Status& st) {
  std::cerr << "rank " << rank << ": " << st << std::endl;
  return 3;
}

int Main(int argc, char** argv) {
  int rank, size, batches, global_batch, aggregation;
  if (argc != 8 || !absl::SimpleAtoi(argv[1], &rank) || !absl::SimpleAtoi(argv[2], &size) ||
      !absl::SimpleAtoi(argv[4], &batches) || !absl::SimpleAtoi(argv[5], &global_batch) ||
      !absl::SimpleAtoi(argv[7], &aggregation)) {
    std::cerr << "usage: data_parallel_test_worker RANK SIZE DIR BATCHES GLOBAL_BATCH MODE AGGREGATION\n";
    return 2;
  }
  const std::string dir = argv[3];
  const bool reduce = std::string(argv[6]) == "reduce";

  // The same data on every rank: a random linear teacher labels random inputs.
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(kExamples * kFeatures), teacher(kFeatures * kClasses);
  std::vector<uint8_t> y(kExamples);
  for (float& t : teacher) t = u(gen);
  for (int i = 0; i < kExamples; ++i) {
    float best = -1e30f;
    for (int f = 0; f < kFeatures; ++f) x[i * kFeatures + f] = u(gen);
    for (int c = 0; c < kClasses; ++c) {
      float s = 0;
      for (int f = 0; f < kFeatures; ++f) s += x[i * kFeatures + f] * teacher[f * kClasses + c];
      if (s > best) best = s, y[i] = static_cast<uint8_t>(c);
    }
  }

  collective::FileRendezvous rendezvous(dir, rank, size);
  auto c = collective::GlooCollective::Create(rank, size, rendezvous, "dp/gloo");
  if (!c.ok()) return Fail(rank, c.status());
  collective::Collective& coll = **c;

  nn::MlpOptions options;
  options.layer_sizes = {kFeatures, 32, 16, kClasses};
  auto model = nn::Mlp::Create(options, /*seed=*/100 + rank);  // Different on purpose.
  if (!model.ok()) return Fail(rank, model.status());
  if (auto st = coll.Broadcast(model->params(), 0); !st.ok()) return Fail(rank, st);

  GradientReducerOptions ro;
  ro.bucket_bytes = 512;  // 128 floats: several buckets per layer.
  ro.aggregation_frequency = aggregation;
  GradientReducer reducer(coll, model->grads(), ro);

  const int per_slot = global_batch / size;
  for (int b = 0; b < batches; ++b) {
    // Batch b is the window [b*G, (b+1)*G) of the data (wrapping); rank r takes its slice.
    std::vector<float> bx(per_slot * kFeatures);
    std::vector<uint8_t> by(per_slot);
    for (int i = 0; i < per_slot; ++i) {
      int idx = (b * per_slot * size + rank * per_slot + i) % kExamples;
      std::copy_n(&x[idx * kFeatures], kFeatures, &bx[i * kFeatures]);
      by[i] = y[idx];
    }
    model->ForwardBackward(bx.data(), by.data(), per_slot, [&](size_t begin, size_t end) {
      if (reduce) reducer.MarkReady(begin, end);
    });
    bool step = true;
    if (reduce) {
      auto sync = reducer.Finish();
      if (!sync.ok()) return Fail(rank, sync.status());
      step = *sync;
    }
    if (step) model->Step(0.1f);
    std::cout << absl::StrFormat("step %d params %016x", b, Fnv1a(model->params())) << "\n";
  }
  nn::Evaluation e = model->Evaluate(x.data(), y.data(), kExamples);
  std::cout << absl::StrFormat("final_loss %.9f", e.loss) << std::endl;
  return 0;
}

}  // namespace
}  // namespace det::harness

int main(int argc, char** argv) { return det::harness::Main(argc, argv); }
