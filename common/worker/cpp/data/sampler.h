// Deterministic sample order: which example each position of an epoch reads.
#ifndef DET_COMMON_WORKER_CPP_DATA_SAMPLER_H_
#define DET_COMMON_WORKER_CPP_DATA_SAMPLER_H_

#include <cstdint>
#include <vector>

namespace det::data {

// A permutation of 0..n-1 that depends only on (n, seed, epoch): Fisher-Yates over a
// 64-bit Mersenne Twister with explicit index arithmetic, so no standard-library
// distribution (which may differ between implementations) is involved.
std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace det::data

#endif  // DET_COMMON_WORKER_CPP_DATA_SAMPLER_H_
