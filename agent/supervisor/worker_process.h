// One worker process as the agent supervises it: the worker shim (shim.h) running the
// entrypoint, leading its own process group, its output appended to files. Either started
// by this agent process or adopted from an earlier one after a restart, so nothing here
// relies on being the worker's parent.
#ifndef DET_AGENT_SUPERVISOR_WORKER_PROCESS_H_
#define DET_AGENT_SUPERVISOR_WORKER_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/supervisor/process_launcher.h"
#include "common/process/subprocess.h"

namespace det::agent {

// Thread-safe.
class WorkerProcess : public Process {
 public:
  // Starts the shim for `spec`. Errors name the shim (a missing entrypoint is not an error
  // here: the worker then exits 127 with the reason on its stderr).
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Start(const WorkerSpec& spec);
  // The shim `pid` that started at `start_ticks` (see StartTicks), whose exit goes to
  // `exit_path`. If that process no longer runs, the result has already exited.
  static std::unique_ptr<WorkerProcess> Adopt(pid_t pid, uint64_t start_ticks,
                                              const std::string& exit_path);

  // Never kills the worker: it is left running unless it has already been waited for.
  ~WorkerProcess() override;

  pid_t pid() const override { return pid_; }
  uint64_t start_ticks() const override { return start_ticks_; }

  // Sends `sig` to the worker's process group; OK when the group is already gone.
  absl::Status SignalGroup(int sig) override;

  // Waits up to `timeout` for the worker to end. Once it has, SIGKILLs whatever is left of
  // its process group (no orphans) and returns how it ended; later calls return the same.
  std::optional<WorkerExit> Wait(absl::Duration timeout) override;

 private:
  WorkerProcess(pid_t pid, uint64_t start_ticks, std::string exit_path,
                std::unique_ptr<Subprocess> child, int pidfd);
  WorkerExit Finish(std::optional<ExitStatus> child_status);

  const pid_t pid_;
  const uint64_t start_ticks_;
  const std::string exit_path_;
  // Set when this process started the shim (and must reap it).
  std::unique_ptr<Subprocess> child_;
  // For an adopted shim: a pidfd that becomes readable when it exits, or -1 (exited, or
  // pidfd_open unsupported: /proc is polled).
  int pidfd_ = -1;

  absl::Mutex mu_;
  std::optional<WorkerExit> exit_ ABSL_GUARDED_BY(mu_);
};

// The real launcher: each worker runs under the det-agent shim (WorkerProcess).
class ShimProcessLauncher : public ProcessLauncher {
 public:
  absl::StatusOr<std::unique_ptr<Process>> Start(const WorkerSpec& spec) override;
  std::unique_ptr<Process> Adopt(pid_t pid, uint64_t start_ticks,
                                 const std::string& exit_path) override;
};

// Start time of process `pid` in clock ticks after boot (/proc/PID/stat field 22), which
// with the pid identifies a process across pid reuse. NotFound when it does not exist.
absl::StatusOr<uint64_t> StartTicks(pid_t pid);

// True while process `pid` started at `start_ticks` exists and is not a zombie.
bool IsRunning(pid_t pid, uint64_t start_ticks);

}  // namespace det::agent

#endif  // DET_AGENT_SUPERVISOR_WORKER_PROCESS_H_
