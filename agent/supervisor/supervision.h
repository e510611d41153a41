// Watching one worker of an allocation: shipping its output as it comes, stopping it when
// its allocation is killed (SIGTERM every second, SIGKILL after the deadline), and reporting
// its exit once all its output is queued.
#ifndef DET_AGENT_SUPERVISOR_SUPERVISION_H_
#define DET_AGENT_SUPERVISOR_SUPERVISION_H_

#include <array>
#include <memory>
#include <optional>

#include "absl/time/time.h"
#include "agent/allocations/allocation.h"
#include "agent/outbox/outbox.h"
#include "agent/stop_signal.h"
#include "agent/supervisor/file_tailer.h"
#include "common/clock/clock.h"

namespace det::agent {

struct SupervisionOptions {
  // How long one step waits (real time) for the worker's exit, or for room in the outbox.
  absl::Duration tick = absl::Milliseconds(100);
  // While its allocation is being killed, SIGTERM is sent again this often (one sent while
  // the shim was still starting its worker reached no worker).
  absl::Duration term_every = absl::Seconds(1);
  // Lines read from the worker's files at a time.
  int max_lines_per_read = 10000;
  // When the worker fails, the others of its allocation get this long after SIGTERM.
  absl::Duration kill_grace = absl::Seconds(30);
};

// Not thread-safe: one thread steps it. Everything passed must outlive it.
class Supervision {
 public:
  // Worker `worker` of `allocation`. REQUIRES: it has a process.
  Supervision(Allocation& allocation, int worker, Outbox& outbox, Clock& clock, StopSignal& stop,
              SupervisionOptions options);

  enum class State {
    kRunning,   // the worker runs
    kDraining,  // it has exited; its last output waits for room in the outbox
    kDone,      // its exit is queued
    kDetached,  // the agent detaches: the next agent process watches the worker
  };
  // One step: ships the output read so far (while the outbox has room), waits up to a tick
  // for the exit, signals as the allocation's stopping says.
  State Step();
  // Steps until kDone or kDetached.
  void Run();

 private:
  // Reads new output into the outbox while it has room; true once both files were read to
  // their end.
  bool Ship(bool final);
  void ReportExit();

  Allocation& allocation_;
  const int worker_;
  const int rank_;
  Outbox& outbox_;
  Clock& clock_;
  StopSignal& stop_;
  const SupervisionOptions options_;
  std::array<std::unique_ptr<FileTailer>, 2> tailers_;
  State state_ = State::kRunning;
  std::optional<WorkerExit> exit_;
  bool sigkilled_ = false;
  absl::Time next_term_ = absl::InfinitePast();
};

}  // namespace det::agent

#endif  // DET_AGENT_SUPERVISOR_SUPERVISION_H_
