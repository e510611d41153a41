// The agent's seam for worker processes: starting one, finding one a previous agent process
// started, signalling it and waiting for its end. The real launcher runs the worker shim
// (worker_process.h); tests use FakeProcessLauncher (agent/testing), which starts nothing.
#ifndef DET_AGENT_SUPERVISOR_PROCESS_LAUNCHER_H_
#define DET_AGENT_SUPERVISOR_PROCESS_LAUNCHER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"

namespace det::agent {

struct WorkerSpec {
  // The det-agent binary, run as the shim.
  std::string shim_path;
  // The entrypoint, exec'd directly. REQUIRES: non-empty.
  std::vector<std::string> argv;
  // The worker's complete environment, and its working directory.
  EnvironmentVariables env;
  std::string cwd;
  // Appended to; created if missing.
  std::string stdout_path;
  std::string stderr_path;
  // Where the shim records the exit status.
  std::string exit_path;
  // The user the entrypoint runs as (the shim keeps the agent's); unset: the agent's user.
  std::optional<RunAs> run_as;
};

// How a worker ended. `note` explains a status the agent had to infer.
struct WorkerExit {
  ExitStatus status;
  std::string note;
};

// One worker process. Thread-safe.
class Process {
 public:
  // Never kills the worker.
  virtual ~Process() = default;
  virtual pid_t pid() const = 0;
  // With pid(), identifies the process across pid reuse (see StartTicks).
  virtual uint64_t start_ticks() const = 0;
  // Sends `sig` to the worker's process group; OK when the group is already gone.
  virtual absl::Status SignalGroup(int sig) = 0;
  // Waits up to `timeout` (real time) for the worker to end; how it ended once it has (later
  // calls return the same).
  virtual std::optional<WorkerExit> Wait(absl::Duration timeout) = 0;
};

// Thread-safe.
class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts the worker of `spec`. Errors name what could not be started.
  virtual absl::StatusOr<std::unique_ptr<Process>> Start(const WorkerSpec& spec) = 0;
  // The worker `pid` that started at `start_ticks`, whose exit goes to `exit_path`. If it no
  // longer runs, the result has already exited.
  virtual std::unique_ptr<Process> Adopt(pid_t pid, uint64_t start_ticks,
                                         const std::string& exit_path) = 0;
};

}  // namespace det::agent

#endif  // DET_AGENT_SUPERVISOR_PROCESS_LAUNCHER_H_
