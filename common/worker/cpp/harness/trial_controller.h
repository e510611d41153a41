// The platform half of a C++ training loop (Determined's trial controller): it trains a
// Trial from the batch its latest checkpoint reached to the searcher's target, reports
// training metrics and timings every scheduling_unit batches, validates every
// min_validation_period, checkpoints every min_checkpoint_period and after validations by
// checkpoint_policy (never inside an aggregation group), validates and checkpoints at the
// end, and stops cooperatively: every few batches the ranks agree (PreemptContext) whether
// the master or a signal asked them to stop, and if so checkpoint and return Cancelled.
// A model implements Trial (model code only) and calls Run; nothing else of the loop is
// its business. All values come from the trial spec (TrialContext::spec).
#ifndef DET_COMMON_WORKER_CPP_HARNESS_TRIAL_CONTROLLER_H_
#define DET_COMMON_WORKER_CPP_HARNESS_TRIAL_CONTROLLER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/clock/clock.h"
#include "common/worker/cpp/collective/collective.h"
#include "common/worker/cpp/harness/checkpoint.h"
#include "common/worker/cpp/harness/context.h"
#include "common/worker/cpp/harness/preempt.h"
#include "common/worker/cpp/harness/reporter_client.h"
#include "common/worker/cpp/harness/timings.h"

namespace det::harness {

// Training metrics of the batches since the last report.
struct TrainingMetrics {
  // This rank's values: averaged over the ranks when average_training_metrics is set,
  // else the chief's are reported.
  std::map<std::string, double> per_rank;
  // Values already the same on every rank (e.g. exact global sums), reported as they are.
  std::map<std::string, double> global;
};

// What the model does; TrialController calls it on every rank at the same points.
class Trial {
 public:
  virtual ~Trial() = default;
  // Trains global step `batch` (0-based): this rank's share, gradients all-reduced.
  virtual absl::Status TrainBatch(int64_t batch) = 0;
  // The training metrics since the last call; forgets them.
  virtual absl::StatusOr<TrainingMetrics> TakeTrainingMetrics() = 0;
  // Validation metrics after `total_batches`, the same on every rank (reduced by the model).
  virtual absl::StatusOr<std::map<std::string, double>> Validate(int64_t total_batches) = 0;
  // A checkpoint after `total_batches`: adds the model's part to `state` (data position,
  // RNG states, ...; total_batches, trial_seed, world_size and extra["best"] are filled)
  // and returns the files besides "state.json" (e.g. the weights). Only the chief's are
  // written; the other ranks may return none.
  virtual absl::StatusOr<std::map<std::string, std::string>> Save(TrainingState& state) = 0;
};

struct TrialControllerOptions {
  // Batches to train when the spec's target_batches is 0 (the searcher sets none).
  int64_t default_target = 0;
  // Samples per global step, for timings' samples_per_second (0: not reported).
  int64_t global_batch_size = 0;
  // How often (in batches, at least; rounded up to whole aggregation groups) the ranks
  // agree on whether to stop.
  int64_t stop_check_batches = 10;
  // The chief's line to the master's ShouldPreempt. Default: NewGrpcPreemptSource.
  std::unique_ptr<PreemptSource> preempt_source;
};

// Thread-compatible.
class TrialController {
 public:
  // Installs the SIGTERM/SIGINT handler (so construct it first: a stop asked during set-up
  // is then honoured at the first check). Reports go to context.master.
  TrialController(const TrialContext& context, Clock& clock, TrialControllerOptions options = {});
  ~TrialController();

  struct Restored {
    std::map<std::string, std::string> files;
    TrainingState state;
  };
  // The checkpoint this run starts from (spec.latest_checkpoint), nullopt on a first run:
  // its files and training state. Run resumes at its total_batches and keeps its best
  // validation. NotFound / DataLoss naming the checkpoint when it is unreadable.
  absl::StatusOr<std::optional<Restored>> Restore();

  // Batches to train in all: spec.target_batches, else options.default_target.
  int64_t target() const;
  void set_default_target(int64_t batches) { options_.default_target = batches; }
  void set_global_batch_size(int64_t samples) { options_.global_batch_size = samples; }
  // The batch Run starts at (0, or the restored checkpoint's).
  int64_t start_batch() const { return start_batch_; }
  // Where the model records its phases (dataloader_next, to_device, train_batch, ...),
  // summarized into every training report's "timings" group.
  Timings& timings() { return timings_; }

  // Trains `trial` to target(). `host_collective` carries metrics and the stop agreement
  // (every rank's, host memory). OK when the target is reached; Cancelled ("stopped at
  // batch N on request") after the stop checkpoint when asked to stop; the first error of
  // the model, the master or the collective otherwise.
  absl::Status Run(Trial& trial, collective::Collective& host_collective);

 private:
  absl::Status ReportTraining(Trial& trial, collective::Collective& host, int64_t done);
  absl::Status Validate(Trial& trial, int64_t done);
  absl::Status Checkpoint(Trial& trial, int64_t done);

  const TrialContext& context_;
  Clock& clock_;
  TrialControllerOptions options_;
  std::unique_ptr<Reporter> reporter_;
  std::unique_ptr<PreemptContext> preempt_;
  Timings timings_;
  int64_t start_batch_ = 0;
  int64_t group_batches_ = 0;
  absl::Time group_start_;
  int64_t validated_at_ = -1;
  std::map<std::string, double> validation_;
  std::optional<double> best_;
  bool checkpoint_pending_ = false;
  int64_t checkpointed_at_ = -1;
};

}  // namespace det::harness

#endif  // DET_COMMON_WORKER_CPP_HARNESS_TRIAL_CONTROLLER_H_
