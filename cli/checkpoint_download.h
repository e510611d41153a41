// det checkpoint download: copying a checkpoint's directory from storage the CLI's machine
// can read (a shared_fs host_path mounted here) into a local directory.
#ifndef DET_CLI_CHECKPOINT_DOWNLOAD_H_
#define DET_CLI_CHECKPOINT_DOWNLOAD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace det::cli {

struct CopiedCheckpoint {
  int64_t files = 0;
  int64_t bytes = 0;
};

// Copies the tree under `source` (a checkpoint's storage_path) into `output`, created
// (with its parents) when missing. Every entry is opened without following links
// (O_NOFOLLOW, openat from its directory's descriptor) and copied from that descriptor, so
// a link swapped in while it runs reads nothing outside `source`. Regular files (with
// their permission bits) and directories are copied; a symbolic link is copied as the file
// or directory it names only when that lies below `source` (resolved the same way, no
// "..", an absolute target only inside `source`); other kinds of files are skipped.
// Errors name the path: FailedPrecondition when `source` cannot be read from this machine
// (with a hint about the checkpoint storage, or about whose private checkpoint it is), is
// itself a link, holds a link out of it or a hard link to another user's file, or `output`
// exists and is not empty; the I/O error of a file that cannot be copied. After an error
// nothing of the copy is left in `output`.
absl::StatusOr<CopiedCheckpoint> CopyCheckpointDirectory(const std::string& source,
                                                         const std::string& output);

}  // namespace det::cli

#endif  // DET_CLI_CHECKPOINT_DOWNLOAD_H_
