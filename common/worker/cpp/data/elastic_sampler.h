// Elastic sample order and the stateful loader over it.
//
// The global sample sequence of an epoch is a pure function of (shuffle seed, epoch,
// num_canonical_nodes, data set size) and never of the number of workers, in the style of
// MosaicML Streaming: the data set is split into num_canonical_nodes contiguous canonical
// partitions, each shuffled on its own (Fisher-Yates over splitmix64-seeded
// std::mt19937_64, explicit index arithmetic), and the global order takes one sample of
// each partition in turn (round k: partition 0, 1, ..., C-1; partitions run out at most
// one round apart). Each global step takes the next contiguous window of
// global_batch_size positions; rank r of W takes positions [r*B/W, (r+1)*B/W) of it.
#ifndef DET_COMMON_WORKER_CPP_DATA_ELASTIC_SAMPLER_H_
#define DET_COMMON_WORKER_CPP_DATA_ELASTIC_SAMPLER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"

namespace det::data {

// The algorithm below; bump the version whenever the order it produces changes.
inline constexpr char kElasticOrderAlgorithm[] = "elastic_canonical";
inline constexpr int kElasticOrderVersion = 1;

// splitmix64: the mixing function used for seeds and per-sample keys.
uint64_t Mix64(uint64_t x);

// The global order of `epoch`: a permutation of 0..n-1.
// REQUIRES: n >= 0, num_canonical_nodes >= 1.
std::vector<int64_t> ElasticEpochOrder(int64_t n, uint64_t seed, int64_t epoch, int64_t num_canonical_nodes);

// The key of the sample at `position` of `epoch`: seeds that sample's randomness
// (augmentation, dropout), so it does not depend on which rank reads it.
uint64_t SampleKey(uint64_t seed, int64_t epoch, int64_t position);

// Where a loader stands; saved in every checkpoint.
struct LoaderState {
  int64_t epoch = 0;
  int64_t samples_in_epoch = 0;  // positions of the epoch already consumed
  int64_t num_canonical_nodes = 1;
  uint64_t seed = 0;
  std::string algorithm = kElasticOrderAlgorithm;
  int version = kElasticOrderVersion;
  uint64_t dataset_fingerprint = 0;
  int64_t dataset_size = 0;

  nlohmann::json ToJson() const;
  // DataLoss naming the field when `j` is not a LoaderState.
  static absl::StatusOr<LoaderState> FromJson(const nlohmann::json& j);
};

// One global step's window.
struct Window {
  int64_t epoch = 0;
  int64_t first_position = 0;     // position in the epoch of ids[0]
  absl::Span<const int64_t> ids;  // global_batch_size sample ids
};

class ElasticLoader {
 public:
  // A fresh loader at the start of epoch 0. REQUIRES: 0 < global_batch <= dataset_size.
  ElasticLoader(int64_t dataset_size, uint64_t dataset_fingerprint, uint64_t seed, int64_t num_canonical_nodes,
                int64_t global_batch);

  // The loader at `state`, in O(1) besides building that epoch's order (whatever the
  // position). FailedPrecondition naming both values when the state's algorithm,
  // version, data set fingerprint or size differ from this run's.
  static absl::StatusOr<ElasticLoader> Restore(const LoaderState& state, int64_t dataset_size,
                                               uint64_t dataset_fingerprint, int64_t global_batch);

  // The next global window (a new epoch starts when fewer than global_batch positions
  // are left: the remainder is dropped); advances the state.
  Window Next();

  // The part of `w` that rank `rank` of `world` trains. REQUIRES: world divides the batch.
  static absl::Span<const int64_t> RankSlice(const Window& w, int rank, int world);

  const LoaderState& state() const { return state_; }
  int64_t global_batch() const { return global_batch_; }

 private:
  void BuildOrder();

  LoaderState state_;
  int64_t global_batch_;
  std::vector<int64_t> order_;
  int64_t order_epoch_ = -1;
};

}  // namespace det::data

#endif  // DET_COMMON_WORKER_CPP_DATA_ELASTIC_SAMPLER_H_
