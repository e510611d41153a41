// Trains an Mlp on Fashion-MNIST and prints, per epoch, the mean training loss, test
// loss and accuracy and the seconds the epoch's training took. A manual check of the
// numerical core, not a test.
//
// Usage: fashion_mnist_check [--data_dir=DIR] [--hidden=128[,64...]] [--lr=0.05]
//          [--momentum=0.9] [--weight_decay=0] [--batch=64] [--epochs=2] [--seed=1]
//          [--linear_decay=true]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/data/idx.h"
#include "common/nn/mlp.h"

namespace {

struct Flags {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::vector<int> hidden = {128};
  float lr = 0.05f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  int batch = 64;
  int epochs = 2;
  uint64_t seed = 1;
  bool linear_decay = true;  // Learning rate falls linearly to 0 over all steps.
};

bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    const size_t eq = arg.find('=');
    if (arg.substr(0, 2) != "--" || eq == absl::string_view::npos) return false;
    const absl::string_view name = arg.substr(2, eq - 2);
    const absl::string_view value = arg.substr(eq + 1);
    bool ok = true;
    if (name == "data_dir") {
      flags->data_dir = std::string(value);
    } else if (name == "hidden") {
      flags->hidden.clear();
      for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        int size = 0;
        ok = ok && absl::SimpleAtoi(part, &size);
        flags->hidden.push_back(size);
      }
    } else if (name == "lr") {
      ok = absl::SimpleAtof(value, &flags->lr);
    } else if (name == "momentum") {
      ok = absl::SimpleAtof(value, &flags->momentum);
    } else if (name == "weight_decay") {
      ok = absl::SimpleAtof(value, &flags->weight_decay);
    } else if (name == "batch") {
      ok = absl::SimpleAtoi(value, &flags->batch) && flags->batch > 0;
    } else if (name == "epochs") {
      ok = absl::SimpleAtoi(value, &flags->epochs);
    } else if (name == "linear_decay") {
      ok = absl::SimpleAtob(value, &flags->linear_decay);
    } else if (name == "seed") {
      ok = absl::SimpleAtoi(value, &flags->seed);
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "bad flag: %s\n", argv[i]);
      return false;
    }
  }
  return true;
}

// Fisher-Yates shuffle of 0..n-1 with explicit index arithmetic, so the order does not
// depend on the standard library's distributions.
std::vector<int64_t> ShuffledOrder(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(
        (static_cast<unsigned __int128>(rng()) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) return 2;
  const std::string& dir = flags.data_dir;
  absl::StatusOr<det::data::Dataset> train = det::data::LoadIdxDataset(
      dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz");
  absl::StatusOr<det::data::Dataset> test = det::data::LoadIdxDataset(
      dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz");
  if (!train.ok() || !test.ok()) {
    std::fprintf(stderr, "%s\n", (train.ok() ? test.status() : train.status()).ToString().c_str());
    return 1;
  }
  for (const det::data::Dataset* d : {&*train, &*test}) {
    for (uint8_t label : d->labels) {
      if (label >= 10) {
        std::fprintf(stderr, "label %d out of range\n", label);
        return 1;
      }
    }
  }
  std::printf("train %lld examples (fingerprint %016llx), test %lld (fingerprint %016llx)\n",
              static_cast<long long>(train->num_examples),
              static_cast<unsigned long long>(train->Fingerprint()),
              static_cast<long long>(test->num_examples),
              static_cast<unsigned long long>(test->Fingerprint()));

  det::nn::MlpOptions options;
  options.layer_sizes.push_back(static_cast<int>(train->example_size()));
  options.layer_sizes.insert(options.layer_sizes.end(), flags.hidden.begin(), flags.hidden.end());
  options.layer_sizes.push_back(10);
  options.momentum = flags.momentum;
  options.weight_decay = flags.weight_decay;
  absl::StatusOr<det::nn::Mlp> mlp = det::nn::Mlp::Create(options, flags.seed);
  if (!mlp.ok()) {
    std::fprintf(stderr, "%s\n", mlp.status().ToString().c_str());
    return 1;
  }

  const int64_t size = train->example_size();
  const int batch = flags.batch;
  std::vector<float> x(static_cast<size_t>(batch) * size);
  std::vector<uint8_t> y(batch);
  const int64_t total_steps = flags.epochs * (train->num_examples / batch);
  int64_t step = 0;
  for (int epoch = 0; epoch < flags.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int64_t> order =
        ShuffledOrder(train->num_examples, flags.seed * 1000003 + epoch);
    double loss_sum = 0.0;
    int64_t steps = 0;
    // Drops the last partial batch.
    for (int64_t b = 0; b + batch <= train->num_examples; b += batch) {
      for (int r = 0; r < batch; ++r) {
        const int64_t e = order[b + r];
        std::memcpy(&x[r * size], &train->images[e * size], size * sizeof(float));
        y[r] = train->labels[e];
      }
      loss_sum += mlp->ForwardBackward(x.data(), y.data(), batch);
      const float lr = flags.linear_decay
                           ? flags.lr * (1.0f - static_cast<float>(step) / total_steps)
                           : flags.lr;
      mlp->Step(lr);
      ++steps;
      ++step;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const det::nn::Evaluation eval =
        mlp->Evaluate(test->images.data(), test->labels.data(), test->num_examples);
    std::printf("epoch %d: train loss %.4f  test loss %.4f  test accuracy %.4f  %.2f s\n",
                epoch + 1, loss_sum / steps, eval.loss, eval.accuracy, seconds);
    std::fflush(stdout);
  }
  return 0;
}
