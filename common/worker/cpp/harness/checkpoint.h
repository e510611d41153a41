// Checkpoints on shared_fs storage: one directory <checkpoint_dir>/<uuid> per checkpoint
// holding named files, written atomically (files into a hidden temporary directory,
// fsynced, then one rename), so a reader sees a whole checkpoint or none. The master
// learns of a checkpoint (ReportCheckpoint) only after the rename, and hands its path
// to the next run of the trial as the trial spec's latest_checkpoint.
#ifndef DET_COMMON_WORKER_CPP_HARNESS_CHECKPOINT_H_
#define DET_COMMON_WORKER_CPP_HARNESS_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "proto/types.pb.h"

namespace det::harness {

// A fresh random id "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx".
std::string NewCheckpointUuid();

// Writes `files` (name -> contents; names are plain file names) as checkpoint `uuid`
// under `dir` (created if needed), the directory 0700 and its files 0600 (readable by this
// OS user only). Returns the checkpoint's description with uuid,
// storage_path (the directory) and resources (file sizes) filled. Errors name the path
// and errno; a failed write leaves no checkpoint directory behind.
absl::StatusOr<v1::Checkpoint> WriteCheckpoint(const std::string& dir, const std::string& uuid,
                                               const std::map<std::string, std::string>& files);

// Every file of the checkpoint directory `path`. NotFound naming the path when it does
// not exist.
absl::StatusOr<std::map<std::string, std::string>> ReadCheckpoint(const std::string& path);

// What the harness itself saves besides the model: where training stands. Stored as
// "state.json" in the checkpoint.
struct TrainingState {
  // Data position: batches trained, and where in the epoch the next batch starts.
  int64_t total_batches = 0;
  int64_t epoch = 0;
  int64_t samples_in_epoch = 0;
  int64_t global_batch_size = 0;  // effective: per-slot batch x world size
  // The sample order: algorithm name and version, and the data set it was made for;
  // resuming with a different one is an error, not a silent change of order.
  std::string order_algorithm;
  uint64_t dataset_fingerprint = 0;
  int64_t dataset_size = 0;
  uint32_t trial_seed = 0;
  int world_size = 1;
  // Each rank's random generator state (std::mt19937_64 text form), indexed by rank.
  std::vector<std::string> rng_states;
  // Anything else training code keeps (best validation so far, ...).
  nlohmann::json extra = nlohmann::json::object();
};

std::string SerializeTrainingState(const TrainingState& state);
// DataLoss naming the field when `json` is not a TrainingState.
absl::StatusOr<TrainingState> ParseTrainingState(const std::string& json);

}  // namespace det::harness

#endif  // DET_COMMON_WORKER_CPP_HARNESS_CHECKPOINT_H_
