// Generated examples for the models' tests.
#ifndef DET_COMMON_WORKER_CPP_NN_TESTING_BATCHES_H_
#define DET_COMMON_WORKER_CPP_NN_TESTING_BATCHES_H_

#include <cstdint>
#include <random>
#include <vector>

namespace det::nn::testing {

struct Batch {
  std::vector<float> x;    // n * inputs, example-major
  std::vector<uint8_t> y;  // n labels
};

// Deterministic inputs in [-1, 1) and labels in [0, classes).
inline Batch RandomBatch(int n, int inputs, int classes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Batch b;
  for (int i = 0; i < n * inputs; ++i) b.x.push_back(static_cast<float>(rng() >> 40) * 0x1p-23f - 1.0f);
  for (int i = 0; i < n; ++i) b.y.push_back(static_cast<uint8_t>(rng() % classes));
  return b;
}

}  // namespace det::nn::testing

#endif  // DET_COMMON_WORKER_CPP_NN_TESTING_BATCHES_H_
