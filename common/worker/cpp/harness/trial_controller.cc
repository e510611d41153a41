#include "common/worker/cpp/harness/trial_controller.h"

#include <algorithm>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status/status_macros.h"
#include "common/worker/cpp/harness/distributed.h"

namespace det::harness {

TrialController::TrialController(const TrialContext& context, Clock& clock,
                                 TrialControllerOptions options)
    : context_(context),
      clock_(clock),
      options_(std::move(options)),
      reporter_(NewGrpcReporter(context)) {
  InstallStopHandler();
}

TrialController::~TrialController() = default;

int64_t TrialController::target() const {
  return context_.spec.target_batches() > 0 ? context_.spec.target_batches() : options_.default_target;
}

absl::StatusOr<std::optional<TrialController::Restored>> TrialController::Restore() {
  const std::string& path = context_.spec.latest_checkpoint();
  if (path.empty()) return std::nullopt;
  Restored r;
  ASSIGN_OR_RETURN(r.files, ReadCheckpoint(path));
  auto state = r.files.find("state.json");
  if (state == r.files.end()) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, ": state.json is missing"));
  }
  ASSIGN_OR_RETURN(r.state, ParseTrainingState(state->second));
  start_batch_ = r.state.total_batches;
  checkpointed_at_ = start_batch_;
  if (r.state.extra.contains("best") && r.state.extra["best"].is_number()) {
    best_ = r.state.extra["best"].get<double>();
  }
  return r;
}

absl::Status TrialController::ReportTraining(Trial& trial, collective::Collective& host, int64_t done) {
  ASSIGN_OR_RETURN(TrainingMetrics m, trial.TakeTrainingMetrics());
  std::map<std::string, double> training = std::move(m.per_rank);
  {
    ScopedTiming t(timings_, "reduce_metrics", clock_);
    if (context_.spec.average_training_metrics() && context_.world_size > 1 && !training.empty()) {
      ASSIGN_OR_RETURN(training, ReduceMetrics(host, training, /*average=*/true));
    }
  }
  for (const auto& [name, value] : m.global) training[name] = value;
  const double seconds = std::max(1e-9, absl::ToDoubleSeconds(clock_.Now() - group_start_));
  std::map<std::string, double> timings = timings_.Summarize();
  if (options_.global_batch_size > 0) {
    timings["samples_per_second"] = static_cast<double>(group_batches_ * options_.global_batch_size) / seconds;
  }
  timings["batches_per_second"] = static_cast<double>(group_batches_) / seconds;
  if (context_.is_chief()) {
    RETURN_IF_ERROR(reporter_->ReportMetricsBatch(
        {MakeMetrics("training", done, training), MakeMetrics("timings", done, timings)}));
    std::string line = absl::StrFormat("batch %d/%d", done, target());
    for (const auto& [name, value] : training) {
      if (!absl::StartsWith(name, "diag/")) absl::StrAppendFormat(&line, "  %s %.4f", name, value);
    }
    absl::StrAppendFormat(&line, "  (%.0f batches/s", timings["batches_per_second"]);
    if (options_.global_batch_size > 0) {
      absl::StrAppendFormat(&line, ", %.0f samples/s", timings["samples_per_second"]);
    }
    std::cout << line << ")" << std::endl;
  }
  group_batches_ = 0;
  group_start_ = clock_.Now();
  return absl::OkStatus();
}

absl::Status TrialController::Validate(Trial& trial, int64_t done) {
  ASSIGN_OR_RETURN(validation_, trial.Validate(done));
  validated_at_ = done;
  if (context_.is_chief()) {
    RETURN_IF_ERROR(reporter_->ReportMetrics("validation", done, validation_));
    std::string line = absl::StrFormat("validation at batch %d:", done);
    for (const auto& [name, value] : validation_) {
      if (!absl::StartsWith(name, "diag/")) absl::StrAppendFormat(&line, "  %s %.4f", name, value);
    }
    std::cout << line << std::endl;
  }
  // Every rank holds the same values, so every rank decides the same.
  bool improved = false;
  auto metric = validation_.find(context_.spec.searcher().metric());
  if (metric != validation_.end()) {
    improved = !best_.has_value() || (context_.spec.searcher().smaller_is_better() ? metric->second < *best_
                                                                                   : metric->second > *best_);
    if (improved) best_ = metric->second;
  }
  const std::string& policy = context_.spec.checkpoint_policy();
  if (policy == "all" || (policy == "best" && improved)) checkpoint_pending_ = true;
  return absl::OkStatus();
}

absl::Status TrialController::Checkpoint(Trial& trial, int64_t done) {
  checkpoint_pending_ = false;
  const std::string& dir = context_.spec.checkpoint_dir();
  if (dir.empty() || checkpointed_at_ == done) return absl::OkStatus();
  TrainingState state;
  state.total_batches = done;
  state.trial_seed = context_.spec.trial_seed();
  state.world_size = context_.world_size;
  if (best_.has_value()) state.extra["best"] = *best_;
  ASSIGN_OR_RETURN(auto files, trial.Save(state));
  checkpointed_at_ = done;
  if (!context_.is_chief()) return absl::OkStatus();
  files["state.json"] = SerializeTrainingState(state);
  const std::string uuid = NewCheckpointUuid();
  ASSIGN_OR_RETURN(v1::Checkpoint c, WriteCheckpoint(dir, uuid, files));
  c.set_total_batches(done);
  if (validated_at_ == done) c.mutable_metrics()->insert(validation_.begin(), validation_.end());
  RETURN_IF_ERROR(reporter_->ReportCheckpoint(c));
  std::cout << absl::StrFormat("checkpoint %s at batch %d", uuid, done) << std::endl;
  return absl::OkStatus();
}

absl::Status TrialController::Run(Trial& trial, collective::Collective& host_collective) {
  std::unique_ptr<PreemptSource> source;
  if (context_.is_chief()) {
    source = options_.preempt_source ? std::move(options_.preempt_source) : NewGrpcPreemptSource(context_);
  }
  preempt_ = std::make_unique<PreemptContext>(std::move(source),
                                              context_.world_size > 1 ? &host_collective : nullptr);
  const int64_t target = this->target();
  const int64_t unit = std::max<int64_t>(1, context_.spec.scheduling_unit());
  const int64_t validate_every = context_.spec.validation_period() > 0 ? context_.spec.validation_period() : target;
  const int64_t checkpoint_every = context_.spec.checkpoint_period();
  const int64_t k = std::max<int64_t>(1, context_.spec.aggregation_frequency());
  // Ranks agree on stopping every few batches, always between aggregation groups.
  const int64_t stop_every = k * ((std::max<int64_t>(1, options_.stop_check_batches) + k - 1) / k);
  ASSIGN_OR_RETURN(bool stop, preempt_->ShouldPreempt());
  if (stop) return absl::CancelledError("asked to stop before training began");
  group_start_ = clock_.Now();
  group_batches_ = 0;
  for (int64_t batch = start_batch_; batch < target; ++batch) {
    RETURN_IF_ERROR(trial.TrainBatch(batch));
    ++group_batches_;
    const int64_t done = batch + 1;
    const bool last = done == target;
    if (done % unit == 0 || last) RETURN_IF_ERROR(ReportTraining(trial, host_collective, done));
    if (done % validate_every == 0 || last) RETURN_IF_ERROR(Validate(trial, done));
    if ((checkpoint_every > 0 && done % checkpoint_every == 0) || last) checkpoint_pending_ = true;
    // Checkpoints only between aggregation groups: the group's partial gradient sum is
    // not part of a checkpoint.
    if (checkpoint_pending_ && (done % k == 0 || last)) RETURN_IF_ERROR(Checkpoint(trial, done));
    if (done % stop_every == 0 && !last) {
      absl::StatusOr<bool> agreed = preempt_->ShouldPreempt();
      if (!agreed.ok()) {
        // Say where, as the model's own all-reduces do ("... all-reduce at batch N").
        return absl::Status(agreed.status().code(), absl::StrCat("stop-flag all-reduce at batch ", done, ": ",
                                                                 agreed.status().message()));
      }
      stop = *agreed;
      if (!stop) continue;
      if (context_.is_chief()) {
        std::cout << absl::StrFormat("stop requested (%s): checkpointing at batch %d", preempt_->reason(), done)
                  << std::endl;
      }
      RETURN_IF_ERROR(Checkpoint(trial, done));
      return absl::CancelledError(absl::StrCat("stopped at batch ", done, " on request"));
    }
  }
  return absl::OkStatus();
}

}  // namespace det::harness
