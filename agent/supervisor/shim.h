// The worker shim: `det-agent --worker-shim EXIT_FILE [--run-as UID:GID] -- PROGRAM ARGS...`.
//
// The agent starts each worker through it. The shim stays in the worker's process group
// (the agent signals the group), forks and execs PROGRAM directly (no shell; PATH is searched
// when it has no '/'), waits for it, and writes how it ended to EXIT_FILE before exiting.
// It ignores SIGTERM, SIGINT and SIGHUP so that it outlives a graceful stop of the worker
// and records it. Because the shim, not the agent, waits for the worker, the agent process
// may die and a new one learn the worker's exit from EXIT_FILE: see docs/operations.md.
// With --run-as the shim keeps the agent's user (so that EXIT_FILE may lie in a directory
// the worker cannot write, and the worker cannot signal the shim) and only PROGRAM runs as
// UID:GID (RunAs in common/process/subprocess.h).
#ifndef DET_AGENT_SUPERVISOR_SHIM_H_
#define DET_AGENT_SUPERVISOR_SHIM_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/process/subprocess.h"

namespace det::agent {

inline constexpr char kWorkerShimFlag[] = "--worker-shim";

// Runs the shim; `args` are the arguments after kWorkerShimFlag. Returns the process exit
// code: the worker's exit code, 128 + signal when a signal killed it, 127 when PROGRAM
// could not be executed (with the reason on stderr), 2 for bad arguments.
int RunWorkerShim(const std::vector<std::string>& args);

// The argv that runs `argv` through the shim at `shim_path`, as `run_as` when set.
std::vector<std::string> ShimArgv(const std::string& shim_path, const std::string& exit_file,
                                  const std::vector<std::string>& argv,
                                  const std::optional<RunAs>& run_as = std::nullopt);

// Writes `status` to `path` (atomically: a temporary file renamed over it).
absl::Status WriteExitFile(const std::string& path, const ExitStatus& status);
// NotFound when the shim has not written `path`; DataLoss when it cannot be parsed.
absl::StatusOr<ExitStatus> ReadExitFile(const std::string& path);

}  // namespace det::agent

#endif  // DET_AGENT_SUPERVISOR_SHIM_H_
