// Loader restore time at 1%, 50% and 99% of an epoch (60,000 samples, 4 canonical nodes),
// and the compute cost of deterministic mode (fixed micro-batches of 1 sample, int64
// fixed-point accumulation) against default mode (one batched forward/backward) for the
// per-rank share of a 32-sample global batch on 1, 2 and 4 ranks (784-16-10 MLP, the
// example's test shape; the all-reduce is not included: allreduce_bench measures it).
// Prints Markdown table rows (tests/bench/run.sh prints the header).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/worker/cpp/data/elastic_sampler.h"
#include "common/worker/cpp/nn/mlp.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

}  // namespace

int main() {
  using det::data::ElasticLoader;
  const int64_t n = 60000, batch = 32;
  for (double frac : {0.01, 0.5, 0.99}) {
    ElasticLoader fresh(n, 0x1234, 7, 4, batch);
    det::data::LoaderState s = fresh.state();
    s.samples_in_epoch = static_cast<int64_t>(frac * n) / batch * batch;
    const int reps = 20;
    auto t0 = Clock::now();
    int64_t sink = 0;
    for (int i = 0; i < reps; ++i) {
      auto l = ElasticLoader::Restore(s, n, 0x1234, batch);
      sink += l->Next().ids[0];  // includes building the epoch's order
    }
    auto t1 = Clock::now();
    std::printf("| loader restore at %.0f%% of an epoch | 60,000 samples, 4 canonical nodes | %.2f ms | "
                "restore + first window (checksum %lld) |\n",
                frac * 100, Seconds(t0, t1) / reps * 1e3, static_cast<long long>(sink % 1000));
  }

  det::nn::MlpOptions o;
  o.layer_sizes = {784, 16, 10};
  auto model = det::nn::Mlp::Create(o, 1);
  std::vector<float> x(batch * 784);
  std::vector<uint8_t> y(batch);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 255) / 255.0f;
  for (int i = 0; i < batch; ++i) y[i] = static_cast<uint8_t>(i % 10);
  std::vector<int64_t> fixed(model->grads().size());
  for (int ranks : {1, 2, 4}) {
    const int per = batch / ranks;
    const int steps = 2000;
    auto t0 = Clock::now();
    for (int s = 0; s < steps; ++s) model->ForwardBackward(x.data(), y.data(), per);
    auto t1 = Clock::now();
    for (int s = 0; s < steps; ++s) {
      std::fill(fixed.begin(), fixed.end(), 0);
      for (int m = 0; m < per; ++m) {
        model->ForwardBackward(&x[m * 784], &y[m], 1);
        auto g = model->grads();
        for (size_t j = 0; j < g.size(); ++j) fixed[j] += static_cast<int64_t>(std::nearbyint(g[j] * 4294967296.0));
      }
      auto g = model->grads();
      for (size_t j = 0; j < g.size(); ++j) g[j] = static_cast<float>(static_cast<double>(fixed[j]) / (4294967296.0 * batch));
    }
    auto t2 = Clock::now();
    double def = steps * per / Seconds(t0, t1), det = steps * per / Seconds(t1, t2);
    std::printf("| per-rank compute, %d rank(s) | global batch 32, 784-16-10 MLP, %d samples/rank | default %.0f "
                "samples/s, deterministic %.0f samples/s | deterministic costs %.2fx per rank |\n",
                ranks, per, def, det, def / det);
  }
  return 0;
}
