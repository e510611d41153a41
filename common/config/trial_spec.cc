#include "common/config/trial_spec.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace det::config {
namespace {

const char* UnitName(Length::Unit unit) {
  switch (unit) {
    case Length::Unit::kBatches:
      return "batches";
    case Length::Unit::kEpochs:
      return "epochs";
    case Length::Unit::kRecords:
      return "records";
  }
  return "batches";
}

}  // namespace

v1::TrialSpec BuildTrialSpec(const ExperimentConfig& config, int64_t experiment_id,
                             const v1::Trial& trial) {
  const std::string hparams = trial.hparams_json().empty() ? "{}" : trial.hparams_json();
  // The trial's own global batch size (a searched one differs between trials); every
  // length in epochs or records becomes batches with it.
  const int64_t batch = TrialGlobalBatchSize(config, hparams);
  const int64_t records = config.records_per_epoch;
  v1::TrialSpec s;
  s.set_experiment_id(experiment_id);
  s.set_trial_id(trial.id());
  s.set_run_id(trial.run_id());
  s.set_trial_seed(trial.seed());
  s.set_hparams_json(hparams);
  s.set_global_batch_size(batch);
  s.set_records_per_epoch(records);
  s.set_batches_per_epoch(batch > 0 ? records / batch : 0);
  s.set_scheduling_unit(config.scheduling_unit);
  s.set_validation_period(config.min_validation_period.Batches(batch, records));
  s.set_checkpoint_period(config.min_checkpoint_period.Batches(batch, records));
  v1::TrialSpec::Searcher& searcher = *s.mutable_searcher();
  searcher.set_metric(config.searcher.metric);
  searcher.set_smaller_is_better(config.searcher.smaller_is_better);
  // No max_length: value, unit and batches stay 0 and "" (the script decides the length).
  if (const std::optional<Length>& max = config.searcher.max_length) {
    searcher.set_max_length_value(max->value);
    searcher.set_max_length_unit(UnitName(max->unit));
    searcher.set_max_length_batches(max->Batches(batch, records));
  }
  s.set_checkpoint_dir(CheckpointDirectory(config));
  s.set_checkpoint_policy(config.checkpoint_policy);
  s.set_deterministic(config.deterministic);
  s.set_aggregation_frequency(config.optimizations.aggregation_frequency);
  s.set_average_training_metrics(config.optimizations.average_training_metrics);
  s.set_bucket_bytes(
      static_cast<int64_t>(config.optimizations.tensor_fusion_threshold * (1 << 20)));
  s.set_data_json(config.data_json);
  s.set_target_batches(trial.target_batches());
  s.set_latest_checkpoint(trial.latest_checkpoint());
  return s;
}

std::string EncodeTrialSpec(const v1::TrialSpec& spec) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string out;
  // Cannot fail: every field is a plain scalar or a message of them.
  (void)google::protobuf::util::MessageToJsonString(spec, &out, options);
  return out;
}

absl::StatusOr<v1::TrialSpec> DecodeTrialSpec(absl::string_view text) {
  if (text.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the trial spec (", kTrialSpecFileEnv,
        ") is empty (is this process running under a det agent?)"));
  }
  v1::TrialSpec spec;
  google::protobuf::util::Status st = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(text.data(), text.size()), &spec);
  if (!st.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the trial spec (", kTrialSpecFileEnv, ") is not a det.v1.TrialSpec: ",
                     st.message().as_string(),
                     " (is this process running under a det agent of this version?)"));
  }
  return spec;
}

}  // namespace det::config
