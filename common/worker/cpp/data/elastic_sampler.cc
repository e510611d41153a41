#include "common/worker/cpp/data/elastic_sampler.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace det::data {

uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::vector<int64_t> ElasticEpochOrder(int64_t n, uint64_t seed, int64_t epoch, int64_t num_canonical_nodes) {
  const int64_t c = std::max<int64_t>(1, std::min(num_canonical_nodes, std::max<int64_t>(1, n)));
  std::vector<int64_t> order(n);
  // Shuffle each canonical partition in place within `scratch`.
  std::vector<int64_t> scratch(n);
  std::vector<int64_t> begin(c + 1);
  for (int64_t p = 0; p <= c; ++p) begin[p] = n * p / c;
  for (int64_t p = 0; p < c; ++p) {
    const int64_t lo = begin[p], size = begin[p + 1] - begin[p];
    for (int64_t i = 0; i < size; ++i) scratch[lo + i] = lo + i;
    std::mt19937_64 rng(Mix64(Mix64(seed) ^ Mix64(static_cast<uint64_t>(epoch) * 0x100000001b3ULL + 1) ^
                              static_cast<uint64_t>(p) * 0xd6e8feb86659fd93ULL));
    for (int64_t i = size - 1; i > 0; --i) {
      const auto j = static_cast<int64_t>(
          (static_cast<unsigned __int128>(rng()) * static_cast<uint64_t>(i + 1)) >> 64);
      std::swap(scratch[lo + i], scratch[lo + j]);
    }
  }
  // Interleave: round k takes element k of every partition that still has one.
  int64_t out = 0;
  const int64_t rounds = begin[1] - begin[0] + 1;
  for (int64_t k = 0; k < rounds && out < n; ++k) {
    for (int64_t p = 0; p < c; ++p) {
      if (begin[p] + k < begin[p + 1]) order[out++] = scratch[begin[p] + k];
    }
  }
  return order;
}

uint64_t SampleKey(uint64_t seed, int64_t epoch, int64_t position) {
  return Mix64(Mix64(seed ^ 0x5bd1e995ULL) ^ Mix64(static_cast<uint64_t>(epoch) << 32 ^ static_cast<uint64_t>(position)));
}

nlohmann::json LoaderState::ToJson() const {
  return {{"epoch", epoch},
          {"samples_in_epoch", samples_in_epoch},
          {"num_canonical_nodes", num_canonical_nodes},
          {"seed", seed},
          {"algorithm", algorithm},
          {"version", version},
          {"dataset_fingerprint", absl::StrFormat("%016x", dataset_fingerprint)},
          {"dataset_size", dataset_size}};
}

absl::StatusOr<LoaderState> LoaderState::FromJson(const nlohmann::json& j) {
  LoaderState s;
  if (!j.is_object()) return absl::DataLossError("loader state: not an object");
  try {
    s.epoch = j.at("epoch").get<int64_t>();
    s.samples_in_epoch = j.at("samples_in_epoch").get<int64_t>();
    s.num_canonical_nodes = j.at("num_canonical_nodes").get<int64_t>();
    s.seed = j.at("seed").get<uint64_t>();
    s.algorithm = j.at("algorithm").get<std::string>();
    s.version = j.at("version").get<int>();
    s.dataset_fingerprint = std::stoull(j.at("dataset_fingerprint").get<std::string>(), nullptr, 16);
    s.dataset_size = j.at("dataset_size").get<int64_t>();
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("loader state: ", e.what()));
  }
  if (s.num_canonical_nodes < 1 || s.epoch < 0 || s.samples_in_epoch < 0) {
    return absl::DataLossError("loader state: negative epoch or position, or num_canonical_nodes < 1");
  }
  return s;
}

ElasticLoader::ElasticLoader(int64_t dataset_size, uint64_t dataset_fingerprint, uint64_t seed,
                             int64_t num_canonical_nodes, int64_t global_batch)
    : global_batch_(global_batch) {
  state_.dataset_size = dataset_size;
  state_.dataset_fingerprint = dataset_fingerprint;
  state_.seed = seed;
  state_.num_canonical_nodes = num_canonical_nodes;
}

absl::StatusOr<ElasticLoader> ElasticLoader::Restore(const LoaderState& state, int64_t dataset_size,
                                                     uint64_t dataset_fingerprint, int64_t global_batch) {
  if (state.algorithm != kElasticOrderAlgorithm || state.version != kElasticOrderVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the checkpoint's sample order is %s version %d; this build has %s version %d: resuming would "
        "silently change the order",
        state.algorithm, state.version, kElasticOrderAlgorithm, kElasticOrderVersion));
  }
  if (state.dataset_fingerprint != dataset_fingerprint || state.dataset_size != dataset_size) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the checkpoint was written for a data set of %d examples with fingerprint %016x; this run's data "
        "set has %d examples with fingerprint %016x",
        state.dataset_size, state.dataset_fingerprint, dataset_size, dataset_fingerprint));
  }
  ElasticLoader loader(dataset_size, dataset_fingerprint, state.seed, state.num_canonical_nodes, global_batch);
  loader.state_ = state;
  return loader;
}

void ElasticLoader::BuildOrder() {
  order_ = ElasticEpochOrder(state_.dataset_size, state_.seed, state_.epoch, state_.num_canonical_nodes);
  order_epoch_ = state_.epoch;
}

Window ElasticLoader::Next() {
  if (state_.samples_in_epoch + global_batch_ > state_.dataset_size) {
    ++state_.epoch;
    state_.samples_in_epoch = 0;
  }
  if (order_epoch_ != state_.epoch) BuildOrder();
  Window w;
  w.epoch = state_.epoch;
  w.first_position = state_.samples_in_epoch;
  w.ids = absl::MakeConstSpan(order_).subspan(state_.samples_in_epoch, global_batch_);
  state_.samples_in_epoch += global_batch_;
  return w;
}

absl::Span<const int64_t> ElasticLoader::RankSlice(const Window& w, int rank, int world) {
  const int64_t per = static_cast<int64_t>(w.ids.size()) / world;
  return w.ids.subspan(rank * per, per);
}

}  // namespace det::data
