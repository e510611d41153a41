// Checkpoint garbage collection: which checkpoints of an experiment to keep
// (checkpoint_storage.save_experiment_best, save_trial_best, save_trial_latest, as in
// Determined) and the deletion of the others' directories on shared_fs storage.
//
// The master runs it directly (not as a zero-slot task on an agent) when a trial ends
// (with save_experiment_best > 0: when the experiment's last trial ends); it therefore
// needs the checkpoint storage mounted at the same path on the master's machine. See
// docs/distributed-training.md.
#ifndef DET_MASTER_CHECKPOINTS_CHECKPOINT_GC_H_
#define DET_MASTER_CHECKPOINTS_CHECKPOINT_GC_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
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

// The policy of an experiment from its effective configuration (JSON):
// checkpoint_storage.save_* and searcher.metric / smaller_is_better. InvalidArgument
// naming the field for a negative or non-integer count.
absl::StatusOr<CheckpointGcPolicy> GcPolicyFromConfig(const std::string& config_json);

// Uuids of the checkpoints to delete: those not yet deleted, belonging to a trial in
// `ended_trials`, that no rule keeps. `checkpoints` are every checkpoint of the
// experiment (the best-of-experiment rule looks at all of them, running trials
// included). A checkpoint without the metric is never "best". Pure function.
std::vector<std::string> CheckpointsToDelete(const std::vector<v1::Checkpoint>& checkpoints,
                                             const std::set<int64_t>& ended_trials,
                                             const CheckpointGcPolicy& policy);

// Removes a checkpoint's directory tree. Refuses (InvalidArgument) a storage_path that is
// not absolute or does not end in "/<uuid>", so a bad report cannot delete anything
// else. A directory that is already gone is success.
absl::Status DeleteCheckpointFiles(const v1::Checkpoint& checkpoint);

// Deletes checkpoints on its own thread, one after the other, so slow storage never
// blocks the caller; reports each outcome to `done` on that thread. Thread-safe.
class CheckpointDeleter {
 public:
  using Done = std::function<void(const v1::Checkpoint& checkpoint, absl::Status status)>;
  explicit CheckpointDeleter(Done done);
  // Stop()s.
  ~CheckpointDeleter();

  // Queues `checkpoint` unless it is already queued or being deleted.
  void Delete(const v1::Checkpoint& checkpoint);
  // Finishes the deletion in progress, drops the rest, joins the thread. Idempotent.
  void Stop();

 private:
  void Run();

  Done done_;
  absl::Mutex mu_;
  std::deque<v1::Checkpoint> queue_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> pending_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace det::master

#endif  // DET_MASTER_CHECKPOINTS_CHECKPOINT_GC_H_
