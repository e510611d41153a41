// What a worker process is started with: its environment (rank, world size, seed, ...) and
// its working directory holding the experiment's model context. Pure functions plus file
// writes; no processes are started here.
#ifndef DET_AGENT_LAUNCHER_LAUNCHER_H_
#define DET_AGENT_LAUNCHER_LAUNCHER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/process/subprocess.h"
#include "proto/agent.pb.h"

namespace det::agent {

struct LaunchContext {
  std::string agent_id;
  std::string master_address;
  // "cpu" or "cuda".
  std::string slot_type = "cpu";
  // Directories put before PATH to find entrypoints.
  std::vector<std::string> worker_path;
};

// The complete environment of the worker running `rank` of `launch`: `base` (the agent's own
// environment, less its secrets), the launch's variables, and RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, CROSS_RANK, CROSS_SIZE, DET_MASTER, DET_AGENT_ID, DET_SLOT_IDS and
// CUDA_VISIBLE_DEVICES.
EnvironmentVariables WorkerEnvironment(const v1::LaunchCommand& launch,
                                       const v1::RankPlacement& rank, const LaunchContext& ctx,
                                       const EnvironmentVariables& base);

// Writes the context files under `dir` (created). Paths must be relative and stay inside
// `dir`; anything else is InvalidArgument naming the path.
absl::Status WriteContext(const std::string& dir,
                          const google::protobuf::RepeatedPtrField<v1::ContextFile>& files);

// A directory name for an allocation id (only [A-Za-z0-9._-]).
std::string SafeName(const std::string& id);

}  // namespace det::agent

#endif  // DET_AGENT_LAUNCHER_LAUNCHER_H_
