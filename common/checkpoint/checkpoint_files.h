// Which checkpoint directories on shared_fs storage may be registered and deleted (where
// an experiment's checkpoints live is config::CheckpointDirectory, from its typed config). Shared by the trial harness (where to write),
// the master (what a worker may report) and the agent's checkpoint-GC process (what it
// may delete).
#ifndef DET_COMMON_CHECKPOINT_CHECKPOINT_FILES_H_
#define DET_COMMON_CHECKPOINT_CHECKPOINT_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/types.pb.h"

namespace det {

// OK when a reported checkpoint is a directory of its own, named by its uuid, directly in
// `directory` (config::CheckpointDirectory of its experiment): storage_path is
// "<directory>/<uuid>" and the uuid is a plain name. InvalidArgument naming the field
// otherwise, so that a worker cannot register (and later have deleted) any other path.
absl::Status CheckReportedCheckpoint(const v1::Checkpoint& checkpoint, const std::string& directory);

// OK when `checkpoint`'s storage_path may be deleted: absolute, ending in "/<uuid>" (a
// non-empty uuid), with no "/../" in it. InvalidArgument naming the checkpoint and the
// path otherwise.
absl::Status CheckCheckpointPath(const v1::Checkpoint& checkpoint);

// Removes the checkpoint's directory tree after CheckCheckpointPath (its error when the
// path is refused: nothing is deleted). A directory that is already gone is success.
// PermissionDenied naming the checkpoint, path and reason when removal fails.
absl::Status DeleteCheckpointFiles(const v1::Checkpoint& checkpoint);

}  // namespace det

#endif  // DET_COMMON_CHECKPOINT_CHECKPOINT_FILES_H_
