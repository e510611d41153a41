// What one Slurm task of a det run is, from the variables srun gives it (SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, SLURM_NNODES, SLURM_JOB_ID,
// SLURM_LAUNCH_NODE_IPADDR, CUDA_VISIBLE_DEVICES), in the terms of the agent's launch
// contract (agent/launcher/launcher.h WorkerEnvironment): the launch as this node's agent
// would have received it, and this task's rank. Pure: tested in slurm_rank_test.cc.
#ifndef DET_AGENT_SLURM_LAUNCHER_SLURM_RANK_H_
#define DET_AGENT_SLURM_LAUNCHER_SLURM_RANK_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "proto/agent.pb.h"

namespace det::agent {

struct SlurmRank {
  // The launch with this node's share: ranks (those of its node, local ranks 0..),
  // world_size, num_agents (nodes), agent_rank (node index), chief_address (the node srun
  // was started from, where task 0 runs) and chief_port.
  v1::LaunchCommand launch;
  // This task's rank; its slot is its GPU (the SLURM_LOCALID-th of CUDA_VISIBLE_DEVICES)
  // when `cuda`.
  v1::RankPlacement rank;
};

// `launch`: the run's launch as the master built it for its one Slurm agent (every rank).
// `env`: the task's environment. `cuda`: slots are GPUs. `chief_first`..`chief_last`: the
// MASTER_PORT range (a port by job id, as the master computes it). InvalidArgument naming
// the variable when one is missing or malformed, or when Slurm's shape is not the launch's
// (SLURM_NTASKS != its ranks).
absl::StatusOr<SlurmRank> RankFromSlurm(const v1::LaunchCommand& launch,
                                        const std::map<std::string, std::string>& env, bool cuda,
                                        int chief_first, int chief_last);

}  // namespace det::agent

#endif  // DET_AGENT_SLURM_LAUNCHER_SLURM_RANK_H_
