// Checkpoint garbage collection: which checkpoints of an experiment to keep
// (checkpoint_storage.save_experiment_best, save_trial_best, save_trial_latest, as in
// Determined). Pure functions, no I/O.
//
// The master decides with these when a trial ends (with save_experiment_best > 0: when the
// experiment's last trial ends) and deletes the rest through a zero-slot CHECKPOINT_GC task
// on an agent of the experiment's resource pool, where the checkpoint storage is mounted
// (v1::CheckpointGcTask; the agent side is agent/checkpoint_gc). See
// docs/distributed-training.md.
#ifndef DET_MASTER_CHECKPOINTS_CHECKPOINT_GC_H_
#define DET_MASTER_CHECKPOINTS_CHECKPOINT_GC_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/config/experiment_config.h"
#include "proto/types.pb.h"

namespace det::master {

struct CheckpointGcPolicy {
  // The best N of the whole experiment, the best N of each trial (by `metric`), and
  // the latest N of each trial (by batches). Defaults as in Determined.
  int save_experiment_best = 0;
  int save_trial_best = 1;
  int save_trial_latest = 1;
  std::string metric;
  bool smaller_is_better = true;
};

// The policy of an experiment from its config: checkpoint_storage.save_* (the defaults
// above without checkpoint_storage) and searcher.metric / smaller_is_better.
CheckpointGcPolicy GcPolicyFromConfig(const config::ExperimentConfig& config);

// Uuids of the checkpoints to delete: those not yet deleted, belonging to a trial in
// `ended_trials`, that no rule keeps. `checkpoints` are every checkpoint of the
// experiment (the best-of-experiment rule looks at all of them, running trials
// included). A checkpoint without the metric is never "best". Pure function.
std::vector<std::string> CheckpointsToDelete(const std::vector<v1::Checkpoint>& checkpoints,
                                             const std::set<int64_t>& ended_trials,
                                             const CheckpointGcPolicy& policy);

// Of `uuids` (CheckpointsToDelete's result), in order, those that no task of `tasks` still
// QUEUED or RUNNING deletes already: a checkpoint is never in two live tasks. Pure function.
std::vector<std::string> NotYetCollected(const std::vector<std::string>& uuids,
                                         const std::vector<const v1::CheckpointGcTask*>& tasks);

}  // namespace det::master

#endif  // DET_MASTER_CHECKPOINTS_CHECKPOINT_GC_H_
