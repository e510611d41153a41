// The experiment configuration users write (a subset of Determined's schema, growing), its
// validation and defaults, and hyperparameter sampling.
#ifndef DET_COMMON_CONFIG_EXPERIMENT_CONFIG_H_
#define DET_COMMON_CONFIG_EXPERIMENT_CONFIG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace det::config {

// A training length: `{batches: N}` or `{epochs: N}`.
struct Length {
  enum class Unit { kBatches, kEpochs };
  Unit unit = Unit::kBatches;
  int64_t value = 0;
  // In batches, given the batches of one epoch (0 when unknown).
  int64_t Batches(int64_t batches_per_epoch) const {
    return unit == Unit::kBatches ? value : value * batches_per_epoch;
  }
};

struct Hyperparameter {
  enum class Type { kConst, kInt, kDouble, kLog, kCategorical };
  Type type = Type::kConst;
  // kConst: the value as JSON text. kCategorical: each value as JSON text.
  std::string value_json;
  std::vector<std::string> vals_json;
  double minval = 0, maxval = 0, base = 10;
};

struct SearcherConfig {
  std::string name = "single";
  std::string metric;
  bool smaller_is_better = true;
  Length max_length;
  int max_trials = 1;
};

struct ResourcesConfig {
  int slots_per_trial = 1;
  int priority = 42;
  std::string resource_pool;
};

struct ExperimentConfig {
  std::string name;
  std::string description;
  std::vector<std::string> entrypoint;
  std::map<std::string, Hyperparameter> hyperparameters;
  SearcherConfig searcher;
  ResourcesConfig resources;
  Length min_validation_period;
  Length min_checkpoint_period;
  int max_restarts = 5;
  int64_t records_per_epoch = 0;
  int scheduling_unit = 100;
  int64_t experiment_seed = -1;  // -1 until chosen.
  std::map<std::string, std::string> environment_variables;
  std::vector<std::string> labels;

  // Global batch size from hyperparameters.global_batch_size (0 if absent).
  int64_t global_batch_size = 0;
  // records_per_epoch / global_batch_size, or 0 when either is unknown.
  int64_t BatchesPerEpoch() const {
    return global_batch_size > 0 ? records_per_epoch / global_batch_size : 0;
  }
};

struct ParsedExperiment {
  ExperimentConfig config;
  // The effective configuration with every default filled in and the seed chosen, as YAML;
  // what the master stores and `det experiment config` prints.
  std::string effective_yaml;
  // The same, as JSON, for workers.
  std::string effective_json;
  std::vector<std::string> warnings;
};

// Validates `text` (from `filename`, for messages) and fills defaults. `seed_if_unset` is
// the experiment seed to use when the config names none. Errors are InvalidArgument
// "FILE:LINE: field.path: what was expected".
absl::StatusOr<ParsedExperiment> ParseExperimentConfig(absl::string_view text,
                                                       absl::string_view filename,
                                                       uint32_t seed_if_unset);

// Draws one sample of every hyperparameter (sorted by name) from `seed`, as a JSON object.
std::string SampleHyperparameters(const std::map<std::string, Hyperparameter>& hps, uint64_t seed);

// Per-trial seed in [0, 2^31-1], derived from the experiment seed and the trial's index.
uint32_t TrialSeed(uint32_t experiment_seed, int64_t trial_index);

}  // namespace det::config

#endif  // DET_COMMON_CONFIG_EXPERIMENT_CONFIG_H_
