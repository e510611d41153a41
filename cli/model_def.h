// det experiment download-model-def: an experiment's model context as a .tgz file, as
// Determined writes it (experiment_ID_model_def.tgz).
#ifndef DET_CLI_MODEL_DEF_H_
#define DET_CLI_MODEL_DEF_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/types.pb.h"

namespace det::cli {

// Writes `files` (paths relative to the context directory, '/'-separated, with their
// permission bits) into a new gzip-compressed POSIX tar file at `path`, each under
// `top_dir`/ when `top_dir` is not empty. A path too long for a ustar header gets a GNU
// long-name entry. FailedPrecondition when `path` exists (nothing is overwritten); the I/O
// error naming `path` otherwise. After an error no file is left at `path`.
absl::Status WriteTarGz(const std::string& path, const std::vector<v1::ContextFile>& files,
                        const std::string& top_dir = "");

}  // namespace det::cli

#endif  // DET_CLI_MODEL_DEF_H_
