// One allocation as the agent runs it: its launch, its workers (one per rank on this agent)
// and what the agent knows of them, kept in the allocation's record (RUN_DIR/state.json,
// supervisor/allocation_record.h) so that a restarted agent finds them again.
#ifndef DET_AGENT_ALLOCATIONS_ALLOCATION_H_
#define DET_AGENT_ALLOCATIONS_ALLOCATION_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/outbox/outbox.h"
#include "agent/supervisor/process_launcher.h"
#include "proto/agent.pb.h"

namespace det::agent {

// Thread-safe. Joins no thread: whoever forgets an allocation joins TakeSupervisors() first.
class Allocation {
 public:
  struct Worker {
    v1::RankPlacement rank;
    // Null when the rank never started.
    std::unique_ptr<Process> process;
    // The worker has exited (or never started).
    bool exited = false;
    // The master accepted its exit report.
    bool exit_reported = false;
    // Bytes of stdout (0) and stderr (1) the master accepted.
    std::array<int64_t, 2> shipped = {0, 0};
  };
  struct Stopping {
    bool killing = false;
    // SIGKILL after this.
    absl::Time kill_deadline = absl::InfiniteFuture();
    // Stopped because the agent stops (reported with each exit).
    bool agent_stopping = false;
  };

  // `work_dir`: the workers' working directory (model context); `run_dir`: their output,
  // exit files and the record.
  Allocation(v1::LaunchCommand launch, std::string work_dir, std::string run_dir,
             std::vector<Worker> workers, Stopping stopping, bool launched_reported);

  const v1::LaunchCommand& launch() const { return launch_; }
  const std::string& id() const { return launch_.allocation_id(); }
  const std::string& work_dir() const { return work_dir_; }
  const std::string& run_dir() const { return run_dir_; }
  // Workers, in the order of launch().ranks().
  int size() const { return static_cast<int>(workers_.size()); }
  int rank(int worker) const { return workers_[worker].rank.rank(); }
  // Null when the worker never started.
  Process* process(int worker) const { return workers_[worker].process.get(); }

  // Starts stopping the workers (SIGTERM to each running one; SIGKILL after `deadline`,
  // sent by their supervisors) and records it. Once stopping, only `agent_stopping` is
  // added. Returns whether it started stopping now.
  bool Kill(const std::string& reason, absl::Time deadline, bool agent_stopping);
  Stopping stopping();

  std::array<int64_t, 2> shipped(int worker);
  bool exited(int worker);
  void MarkExited(int worker);
  // Every worker has exited.
  bool AllExited();
  // Every worker has exited and the master accepted each exit (or not: `even_if_unreported`).
  bool Finished(bool even_if_unreported);

  // Notes what the master accepted of this allocation (`o`'s allocation_id is id()). Persist()
  // keeps it.
  void Delivered(const Outgoing& o);
  // Writes the record. Failures are logged.
  void Persist();

  void AddSupervisor(std::thread t);
  std::vector<std::thread> TakeSupervisors();

 private:
  void PersistLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const v1::LaunchCommand launch_;
  const std::string work_dir_;
  const std::string run_dir_;
  // rank and process only; their other fields live in states_.
  const std::vector<Worker> workers_;

  struct WorkerState {
    bool exited = false;
    bool exit_reported = false;
    std::array<int64_t, 2> shipped = {0, 0};
  };
  absl::Mutex mu_;
  std::vector<WorkerState> states_ ABSL_GUARDED_BY(mu_);
  Stopping stopping_ ABSL_GUARDED_BY(mu_);
  bool launched_reported_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> supervisors_ ABSL_GUARDED_BY(mu_);
};

// Removes `path` and all below it; failures are logged.
void RemoveTree(const std::string& path);

}  // namespace det::agent

#endif  // DET_AGENT_ALLOCATIONS_ALLOCATION_H_
