// The checkpoint reads of the API (ListCheckpoints, GetCheckpoint), answered from a store
// reader (MetricsReader, master/reads StoreReads' pool) off the master's loop: every
// checkpoint row, its state (DELETED once garbage collection completed) and the trials and
// experiments they belong to are in the store.
#ifndef DET_MASTER_CHECKPOINTS_CHECKPOINT_READS_H_
#define DET_MASTER_CHECKPOINTS_CHECKPOINT_READS_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/status/status_macros.h"
#include "master/store/store.h"
#include "proto/api.pb.h"

namespace det::master {

// A checkpoint reported without metrics gets the values of the validation reported at its
// total_batches (the last such row of `validations`, which are in report order); checkpoints
// that carry metrics, or have no validation at their batch, are left as they are.
void AttachValidationMetrics(const std::vector<v1::Metrics>& validations,
                             std::vector<v1::Checkpoint>* checkpoints);

// Trial `trial_id`'s checkpoints read from `from` (a Store on the loop or a MetricsReader
// anywhere: both have GetCheckpoints and GetMetrics), ordered by total_batches and report
// time; one reported without metrics (the Core API's store_path) carries the validation
// metrics the trial reported at its total_batches, whichever came first.
template <typename Reads>
absl::StatusOr<std::vector<v1::Checkpoint>> ReadTrialCheckpoints(Reads& from, int64_t trial_id) {
  ASSIGN_OR_RETURN(std::vector<v1::Checkpoint> checkpoints, from.GetCheckpoints(trial_id));
  bool bare = std::any_of(checkpoints.begin(), checkpoints.end(),
                          [](const v1::Checkpoint& c) { return c.metrics().empty(); });
  if (!bare) return checkpoints;
  ASSIGN_OR_RETURN(std::vector<v1::Metrics> validations, from.GetMetrics(trial_id, "validation"));
  AttachValidationMetrics(validations, &checkpoints);
  return checkpoints;
}

// ListCheckpoints: the checkpoints of experiment req.experiment_id (of trial req.trial_id
// only, unless 0) in report order, each with its experiment_id and a state (COMPLETED
// unless stored otherwise). NotFound "experiment N not found", or "trial T is not a trial
// of experiment N".
absl::Status ListCheckpoints(MetricsReader& reader, const v1::ListCheckpointsRequest& req,
                             v1::ListCheckpointsResponse* resp);
// GetCheckpoint: checkpoint req.uuid of any experiment, as ListCheckpoints shows it.
// InvalidArgument "uuid: must not be empty"; NotFound "checkpoint UUID not found".
absl::Status GetCheckpoint(MetricsReader& reader, const v1::GetCheckpointRequest& req,
                           v1::GetCheckpointResponse* resp);

}  // namespace det::master

#endif  // DET_MASTER_CHECKPOINTS_CHECKPOINT_READS_H_
