// Starting an allocation's workers on this agent: its directories (model context, launch
// files, handed over to its task user), then one worker per rank through the
// ProcessLauncher.
#ifndef DET_AGENT_ALLOCATIONS_STARTER_H_
#define DET_AGENT_ALLOCATIONS_STARTER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "agent/allocations/allocation.h"
#include "agent/context_cache.h"
#include "agent/launcher/launcher.h"
#include "agent/master_client/master_client.h"
#include "agent/python/python_finder.h"
#include "agent/session/session.h"
#include "agent/stop_signal.h"
#include "agent/supervisor/process_launcher.h"

namespace det::agent {

struct StarterConfig {
  std::string agent_id;
  // The agent's work_dir: allocations get WORK_DIR/ID (working directory) and
  // WORK_DIR/run/ID (output, exit files, record).
  std::string work_dir;
  // The det-agent binary (the shim, and the checkpoint GC process).
  std::string shim_path;
  // See AgentOptions::python.
  std::optional<PythonChoice> python;
};

// Not thread-safe: one caller at a time (the poll thread). Everything passed must outlive it.
class AllocationStarter {
 public:
  AllocationStarter(StarterConfig config, ProcessLauncher& launcher, MasterClient& client,
                    Session& session, StopSignal& stop);

  struct Result {
    std::shared_ptr<Allocation> allocation;
    // The ranks whose workers started.
    std::vector<int> started;
    // Why the others did not (the first failure stops the launch).
    absl::Status status;
  };
  // Leftovers of an earlier allocation of the same id are removed first. The allocation
  // has a worker per rank; those that did not start have exited (and no process).
  Result Start(const v1::LaunchCommand& launch, LaunchContext context);

 private:
  // The model context of `launch` (ContextCache; GetModelContext, retried while the master
  // is unreachable, up to 3 tries).
  absl::StatusOr<v1::ModelContext> ModelContext(const v1::LaunchCommand& launch);
  // Everything but the workers: directories, files, the argv. Errors say why.
  absl::Status Prepare(const v1::LaunchCommand& launch, const std::string& work_dir,
                       const std::string& run_dir, LaunchContext& context,
                       std::vector<std::string>& argv);

  const StarterConfig config_;
  ProcessLauncher& launcher_;
  MasterClient& client_;
  Session& session_;
  StopSignal& stop_;
  ContextCache contexts_;
};

}  // namespace det::agent

#endif  // DET_AGENT_ALLOCATIONS_STARTER_H_
