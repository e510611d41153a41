// A checkpoint's directory on shared_fs storage, as garbage collection deletes it. Used by
// the agent's checkpoint-GC process (agent/checkpoint_gc) and by anything else that must
// apply the same rule to a checkpoint's storage path.
#ifndef DET_COMMON_CHECKPOINT_CHECKPOINT_FILES_H_
#define DET_COMMON_CHECKPOINT_CHECKPOINT_FILES_H_

#include "absl/status/status.h"
#include "proto/types.pb.h"

namespace det {

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
