// The experiment configuration users write (Determined's schema, as far as det runs it):
// typed reading, validation, defaults, templates and --config overrides. The effective
// configuration (merged, defaulted, seed chosen) is what the master stores.
// docs/configuration.md describes every key.
#ifndef DET_COMMON_CONFIG_EXPERIMENT_CONFIG_H_
#define DET_COMMON_CONFIG_EXPERIMENT_CONFIG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/config/config_input.h"

namespace det::config {

// A training length: `{batches: N}`, `{epochs: N}` or `{records: N}`; searcher.max_length
// may also be a bare N (Determined 0.38's unitless length), which det counts in batches.
struct Length {
  enum class Unit { kBatches, kEpochs, kRecords };
  Unit unit = Unit::kBatches;
  int64_t value = 0;
  // In batches for a trial whose global batch size is `global_batch_size`: batches as they
  // are; epochs x (records_per_epoch / global_batch_size); records: ceil(value /
  // global_batch_size). 0 when an epoch or record length meets an unknown (0) size.
  int64_t Batches(int64_t global_batch_size, int64_t records_per_epoch) const;
};

// One hyperparameter, or (kObject) a nested group of them.
struct Hyperparameter {
  enum class Type { kConst, kInt, kDouble, kLog, kCategorical, kObject };
  std::string name;
  Type type = Type::kConst;
  // kConst: the value as JSON text.
  std::string value_json;
  // kCategorical: each value as JSON text.
  std::vector<std::string> vals_json;
  // kInt (whole numbers), kDouble, kLog (exponents of `base`).
  double minval = 0, maxval = 0, base = 10;
  // kInt, kDouble, kLog: points on the grid searcher's axis; 0 when not given.
  int count = 0;
  // kObject: the members, sorted by name.
  std::vector<Hyperparameter> fields;

  // kObject: the member named `name`, or nullptr.
  const Hyperparameter* Find(absl::string_view member) const;
};

struct SearcherConfig {
  // "single", "grid", "random" or "adaptive_asha".
  std::string name = "single";
  std::string metric;
  bool smaller_is_better = true;
  // Each trial's training length. Unset (single, grid, random without max_length, as in
  // Determined 0.38): the searcher sets none; each trial trains until its script stops
  // (its TrialSpec has target_batches 0 and an empty searcher.max_length_unit).
  // adaptive_asha always has one: max_length, or its 0.38 form max_time of time_metric.
  std::optional<Length> max_length;
  // adaptive_asha's 0.38 form: "batches" or "epochs" and the length in it; max_length then
  // holds the same length ({batches: max_time} or {epochs: max_time}). "" and 0 otherwise.
  std::string time_metric;
  int64_t max_time = 0;
  // random, adaptive_asha: trials in all.
  int max_trials = 1;
  // grid, random, adaptive_asha: trials running at once; 0: no limit. Default 16.
  int max_concurrent_trials = 16;
  // adaptive_asha.
  double divisor = 4;
  int max_rungs = 5;
  // "aggressive", "standard" or "conservative".
  std::string mode = "standard";
};

struct Device {
  std::string host_path;
  std::string container_path;
  std::string mode = "mrw";
};

struct ResourcesConfig {
  int slots_per_trial = 1;
  int priority = 42;
  std::string resource_pool;
  // 0: no limit.
  int max_slots = 0;
  std::vector<Device> devices;
};

struct BindMount {
  std::string host_path;
  std::string container_path;
  bool read_only = false;
  std::string propagation = "rprivate";
};

struct CheckpointStorageConfig {
  // Only "shared_fs".
  std::string type = "shared_fs";
  std::string host_path;
  // Under host_path; "" for host_path itself.
  std::string storage_path;
  int save_experiment_best = 0;
  int save_trial_best = 1;
  int save_trial_latest = 1;
};

struct OptimizationsConfig {
  // Gradients are all-reduced (and the optimizer steps) every k batches; [1, 1000000].
  int aggregation_frequency = 1;
  // Training metrics averaged over every rank; when false, the chief's own.
  bool average_training_metrics = true;
  // The size of one gradient bucket in MB; (0, 1048576].
  double tensor_fusion_threshold = 64;
};

struct ExperimentConfig {
  std::string name;
  std::string description;
  // The argv every worker runs (no shell). Determined's Trial form `entrypoint: MODULE:CLASS`
  // (e.g. model_def:MNistTrial) becomes {"python3", "-m", "det.pytorch.run", MODULE:CLASS};
  // the effective config keeps what the user wrote.
  std::vector<std::string> entrypoint;
  // The `hyperparameters` section: a kObject, members sorted by name.
  Hyperparameter hyperparameters{"", Hyperparameter::Type::kObject};
  SearcherConfig searcher;
  ResourcesConfig resources;
  Length min_validation_period;
  Length min_checkpoint_period;
  int max_restarts = 5;
  int64_t records_per_epoch = 0;
  int scheduling_unit = 100;
  int64_t experiment_seed = -1;  // -1 until chosen.
  // reproducibility.deterministic: bitwise-identical CPU training for any rank count
  // (docs/determinism.md).
  bool deterministic = false;
  std::map<std::string, std::string> environment_variables;
  // environment.python: the interpreter (an absolute path on the agents) that runs this
  // experiment's `python3`/`python` entrypoints instead of each agent's worker_python.
  // Empty: the agents'.
  std::string python;
  // stop_grace_period: how long a script that asks should_preempt() has, once told to stop,
  // to checkpoint and exit before SIGTERM. Unset: master.yaml's (default 5 minutes).
  std::optional<absl::Duration> stop_grace_period;
  std::vector<std::string> labels;
  std::vector<BindMount> bind_mounts;
  std::optional<CheckpointStorageConfig> checkpoint_storage;
  // When a worker checkpoints after a validation: "best" (the trial's best so far), "all"
  // or "none".
  std::string checkpoint_policy = "best";
  OptimizationsConfig optimizations;
  // The free-form `data` section as a JSON object, "{}" when absent (handed to workers).
  std::string data_json = "{}";

  // hyperparameters.global_batch_size when it is a constant; 0 when it is absent or
  // searched (then each trial's is its own: TrialGlobalBatchSize).
  int64_t global_batch_size = 0;
  // records_per_epoch / global_batch_size, or 0 when either is unknown (or searched).
  int64_t BatchesPerEpoch() const {
    return global_batch_size > 0 ? records_per_epoch / global_batch_size : 0;
  }
  // hyperparameters.global_batch_size is an int or categorical hyperparameter.
  bool SearchesGlobalBatchSize() const;
};

// Field-by-field equality (a stored effective config parses back to the same config).
bool operator==(const Length& a, const Length& b);
bool operator==(const Hyperparameter& a, const Hyperparameter& b);
bool operator==(const SearcherConfig& a, const SearcherConfig& b);
bool operator==(const Device& a, const Device& b);
bool operator==(const ResourcesConfig& a, const ResourcesConfig& b);
bool operator==(const BindMount& a, const BindMount& b);
bool operator==(const CheckpointStorageConfig& a, const CheckpointStorageConfig& b);
bool operator==(const OptimizationsConfig& a, const OptimizationsConfig& b);
bool operator==(const ExperimentConfig& a, const ExperimentConfig& b);

struct ParsedExperiment {
  ExperimentConfig config;
  // The effective configuration with every default filled in and the seed chosen, as YAML;
  // what the master stores and `det experiment config` prints.
  std::string effective_yaml;
  // The template merged in, or "".
  std::string template_name;
  std::vector<std::string> warnings;
};

// The largest number of trials a grid may have.
inline constexpr int64_t kMaxGridTrials = 100000;
// The longest length (searcher.max_length, periods) in batches, also once epochs are
// converted: arithmetic on lengths can never overflow.
inline constexpr int64_t kMaxLengthBatches = 1000000000000;  // 10^12
inline constexpr int64_t kMaxRecordsPerEpoch = 1000000000000000;  // 10^15

// Assembles the config (input.config_yaml, merged over the template it names, then the
// overrides; see config_merge.h), validates it and fills defaults. `seed_if_unset` is the
// experiment seed to use when the config names none. Errors are InvalidArgument
// "WHERE: field.path: what was expected", WHERE being "FILE:LINE", "template NAME:LINE" or
// "--config KEY=VALUE"; a missing template is NotFound naming it.
absl::StatusOr<ParsedExperiment> ParseExperimentConfig(const ConfigInput& input,
                                                       const TemplateLookup& lookup,
                                                       uint32_t seed_if_unset);

// The same for a config without template or overrides (a stored effective config, tests).
absl::StatusOr<ParsedExperiment> ParseExperimentConfig(absl::string_view text,
                                                       absl::string_view filename,
                                                       uint32_t seed_if_unset);

// The global batch size of a trial whose hyperparameters (a JSON object, as the searcher
// drew them) are `hparams_json`: config.global_batch_size when it is a constant, else the
// trial's own `global_batch_size`; 0 when there is none (or it is not a positive integer).
int64_t TrialGlobalBatchSize(const ExperimentConfig& config, absl::string_view hparams_json);

// The smallest and largest global batch size a trial of `config` can get: the constant
// twice, the bounds of an int, the extremes of a categorical; {0, 0} without one.
// REQUIRES: `config` from ParseExperimentConfig.
std::pair<int64_t, int64_t> GlobalBatchSizeRange(const ExperimentConfig& config);

// The directory checkpoints go to: checkpoint_storage.host_path, or its storage_path
// (absolute, or relative to host_path); "" when the experiment has no checkpoint_storage.
std::string CheckpointDirectory(const ExperimentConfig& config);

// The effective configuration as JSON (in DET_EXPERIMENT_CONFIG_FILE's file, the copy user
// code reads), from the effective YAML ParseExperimentConfig produced. InvalidArgument naming `source`
// when `effective_yaml` is not YAML.
absl::StatusOr<std::string> EffectiveConfigJson(absl::string_view effective_yaml,
                                                absl::string_view source);

class ObjectReader;

// Reads a `checkpoint_storage` mapping (as in an experiment config, or master.yaml's cluster
// default) into `out`; errors go to `cs`, naming the key. `required`: type and host_path
// must be there (false for a partial config such as a template).
void ReadCheckpointStorageConfig(ObjectReader& cs, bool required, CheckpointStorageConfig* out);

// Checks a template before it is stored: a YAML mapping, naming no template, whose keys
// and values are those of an experiment config (required keys may be missing, since the
// config brings them). Errors read "SOURCE:LINE: field.path: ...", SOURCE being the file
// it came from, e.g. "tpl.yaml", or "template NAME".
absl::Status ValidateTemplate(absl::string_view yaml, const std::string& source);

}  // namespace det::config

#endif  // DET_COMMON_CONFIG_EXPERIMENT_CONFIG_H_
