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
// (with its parents) when missing. Regular files and directories are copied; a symbolic
// link is copied as the file or directory it names only when that lies inside `source`
// (nothing outside the checkpoint is read); other kinds of files are skipped.
// Errors name the path: FailedPrecondition when `source` cannot be read from this machine
// (with a hint about the checkpoint storage), a link out of `source`, or `output` existing
// and not empty (nothing is copied then); the I/O error of a file that cannot be copied.
absl::StatusOr<CopiedCheckpoint> CopyCheckpointDirectory(const std::string& source,
                                                         const std::string& output);

}  // namespace det::cli

#endif  // DET_CLI_CHECKPOINT_DOWNLOAD_H_
