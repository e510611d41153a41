// Running a short-lived tool to completion and capturing what it prints (Slurm's sbatch,
// squeue and scancel for the master's Slurm resource manager).
#ifndef DET_COMMON_PROCESS_RUN_CAPTURE_H_
#define DET_COMMON_PROCESS_RUN_CAPTURE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"

namespace det {

struct CapturedRun {
  ExitStatus exit;
  std::string out;
  std::string err;
};

// Runs `argv` (no shell) with environment `env` to completion, capturing both streams.
// Past `timeout` it is terminated and DeadlineExceeded names it; a program that cannot be
// started is Subprocess::Spawn's error. Blocks the calling thread.
absl::StatusOr<CapturedRun> RunAndCapture(const std::vector<std::string>& argv,
                                          const EnvironmentVariables& env,
                                          absl::Duration timeout);

}  // namespace det

#endif  // DET_COMMON_PROCESS_RUN_CAPTURE_H_
