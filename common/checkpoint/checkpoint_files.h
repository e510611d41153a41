// Which checkpoint directories on shared_fs storage may be registered and deleted (where
// an experiment's checkpoints live is config::CheckpointDirectory, from its typed config). Shared by the trial harness (where to write),
// the master (what a worker may report) and the agent's checkpoint-GC process (what it
// may delete).
#ifndef DET_COMMON_CHECKPOINT_CHECKPOINT_FILES_H_
#define DET_COMMON_CHECKPOINT_CHECKPOINT_FILES_H_

#include <string>
#include <vector>

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

// The checkpoint storage root `directory` (an experiment's config::CheckpointDirectory)
// lies in: the first of `roots` (master.yaml's checkpoint_storage_allowed_roots and the
// cluster default's directory, config::CheckpointStorageRoots) that is `directory` or a
// parent of it, compared by path components ("//" and a trailing "/" ignored). With no
// roots (a cluster that restricts nothing) `directory` itself. InvalidArgument naming the
// directory and the roots when it lies in none, is not absolute, or has a "." or ".."
// component.
absl::StatusOr<std::string> CheckpointStorageRoot(const std::string& directory,
                                                  const std::vector<std::string>& roots);

// Removes the checkpoint's directory tree after CheckCheckpointPath, beneath `root` (the
// CheckpointStorageRoot of its experiment's directory) only: `root` is opened by its path,
// every component below it is opened without following symbolic links (O_NOFOLLOW,
// openat), and the tree is removed through directory descriptors, so that no link and no
// rename during the removal makes it delete anything outside `root`. A link met on the way
// to the checkpoint refuses the deletion; a link inside the checkpoint is removed, never
// followed. A directory that is already gone is success. InvalidArgument when the path is
// refused or lies outside `root`, FailedPrecondition for a link on the way, PermissionDenied
// naming the path and errno when removal fails; each names the checkpoint.
absl::Status DeleteCheckpointFiles(const v1::Checkpoint& checkpoint, const std::string& root);

}  // namespace det

#endif  // DET_COMMON_CHECKPOINT_CHECKPOINT_FILES_H_
