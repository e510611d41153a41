// Reading what `det experiment create` uploads: the config file and the model context
// directory.
#ifndef DET_CLI_EXPERIMENT_FILES_H_
#define DET_CLI_EXPERIMENT_FILES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/types.pb.h"

namespace det::cli {

// Largest total size of a context directory's files: 64 MiB.
inline constexpr uint64_t kMaxContextBytes = uint64_t{64} << 20;

// The text of the config file at `path`. NotFound "config file 'PATH' does not exist";
// other failures name the file too.
absl::StatusOr<std::string> ReadConfigFile(const std::string& path);

// Every regular file under `dir` (recursively; symlinks to files are read, symlinked
// directories are not entered; any entry named ".git" is skipped), as paths relative to
// `dir` with '/' separators, permission bits and content, sorted by path. Fails with an
// error naming the directory, its size and the limit when the files add up to more than
// `max_bytes`, before reading any of them.
absl::StatusOr<std::vector<v1::ContextFile>> ReadContextDir(
    const std::string& dir, uint64_t max_bytes = kMaxContextBytes);

}  // namespace det::cli

#endif  // DET_CLI_EXPERIMENT_FILES_H_
