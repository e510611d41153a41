#include "common/worker/cpp/data/sampler.h"

#include <random>
#include <utility>

namespace det::data {

std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(seed * 1000003ULL + static_cast<uint64_t>(epoch));
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(
        (static_cast<unsigned __int128>(rng()) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace det::data
