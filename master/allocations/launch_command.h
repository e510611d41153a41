// The launch contract of a trial's allocation: what each agent of the allocation is told
// to run (master -> agent LaunchCommand), as a pure function of the trial, its experiment
// and the placement. No I/O, no clock: table-tested in launch_command_test.cc.
#ifndef DET_MASTER_ALLOCATIONS_LAUNCH_COMMAND_H_
#define DET_MASTER_ALLOCATIONS_LAUNCH_COMMAND_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "proto/agent.pb.h"
#include "proto/types.pb.h"
#include "proto/worker.pb.h"

namespace det::master {

// One agent's share of a placement: its id and the slots it lends (empty: one rank, no
// slot).
struct AgentShare {
  std::string agent_id;
  std::vector<std::string> slots;
};

// Everything a launch depends on besides the allocation itself.
struct LaunchInputs {
  int64_t experiment_id = 0;
  // The trial as it starts this run (id, run_id, seed, hparams, target, checkpoint,
  // restarts).
  v1::Trial trial;
  // The experiment's effective config (JSON) for DET_EXPERIMENT_CONFIG: the copy user code
  // reads (the agent gives it to workers as a file, DET_EXPERIMENT_CONFIG_FILE); det's
  // harnesses read `trial_spec` instead.
  std::string config_json;
  // What the workers need (config::BuildTrialSpec), for DET_TRIAL_SPEC (a file on the agent).
  v1::TrialSpec trial_spec;
  std::vector<std::string> entrypoint;
  // The config's environment_variables; DET_* variables take precedence.
  std::map<std::string, std::string> environment;
  // environment.python (LaunchCommand.python); empty: the agents' worker_python.
  std::string python;
  int max_restarts = 0;
  // The worker token of this run.
  std::string token;
  // ContextSha256 of the experiment's stored model context ("": unknown). Agents fetch the
  // context itself (GetModelContext) by LaunchCommand.model_context.
  std::string context_sha256;
  // MASTER_ADDR / MASTER_PORT: rank 0's agent and the port reserved for this allocation.
  std::string chief_address;
  int chief_port = 0;
  // The experiment owner's linked OS user (det user link-with-agent-user), given to every
  // agent as LaunchCommand.task_user; empty agent_user: none (the agents' default).
  v1::AgentUserGroup task_user;
};

// The ranks of an allocation over `agents`: contiguous per agent, the first agent hosts
// rank 0, one rank per slot (one rank without slots).
std::vector<v1::RankPlacement> PlaceRanks(const std::vector<AgentShare>& agents);

// The run id torchrun sees (TORCHELASTIC_RUN_ID): stable across the trial's runs.
std::string TorchRunId(int64_t trial_id);

// The launch command for each agent of `allocation` (in the order of `agents`), with
// allocation.ranks() as PlaceRanks(agents) gave them.
std::vector<std::pair<std::string, v1::LaunchCommand>> BuildLaunchCommands(
    const LaunchInputs& in, const v1::Allocation& allocation,
    const std::vector<AgentShare>& agents);

}  // namespace det::master

#endif  // DET_MASTER_ALLOCATIONS_LAUNCH_COMMAND_H_
