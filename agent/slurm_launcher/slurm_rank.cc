#include "agent/slurm_launcher/slurm_rank.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "master/slurm/batch_job.h"

namespace det::agent {
namespace {

absl::StatusOr<int64_t> Number(const std::map<std::string, std::string>& env,
                               const std::string& name) {
  auto it = env.find(name);
  int64_t value = 0;
  if (it == env.end() || !absl::SimpleAtoi(it->second, &value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, it == env.end() ? " is not set" : " is not a number: \"" + it->second + "\"",
        " (det-slurm-launcher runs under srun)"));
  }
  return value;
}

}  // namespace

absl::StatusOr<SlurmRank> RankFromSlurm(const v1::LaunchCommand& launch,
                                        const std::map<std::string, std::string>& env, bool cuda,
                                        int chief_first, int chief_last) {
  int64_t values[7];
  const char* names[7] = {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID",
                          "SLURM_NNODES", "SLURM_JOB_ID", nullptr};
  for (int i = 0; names[i] != nullptr; ++i) {
    absl::StatusOr<int64_t> v = Number(env, names[i]);
    if (!v.ok()) return v.status();
    values[i] = *v;
  }
  const int64_t procid = values[0], ntasks = values[1], localid = values[2], nodeid = values[3],
                nnodes = values[4], job = values[5];
  if (ntasks != launch.ranks_size() || procid >= ntasks || nodeid >= nnodes || nnodes == 0 ||
      ntasks % nnodes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Slurm's job shape (SLURM_PROCID ", procid, " of SLURM_NTASKS ", ntasks, " on node ",
        nodeid, " of SLURM_NNODES ", nnodes, ") is not the run's: ", launch.ranks_size(),
        " ranks"));
  }
  const int64_t per_node = ntasks / nnodes;
  SlurmRank out;
  out.launch = launch;
  out.launch.clear_ranks();
  out.launch.set_world_size(static_cast<int32_t>(ntasks));
  out.launch.set_num_agents(static_cast<int32_t>(nnodes));
  out.launch.set_agent_rank(static_cast<int32_t>(nodeid));
  auto addr = env.find("SLURM_LAUNCH_NODE_IPADDR");
  if (addr == env.end() || addr->second.empty()) {
    return absl::InvalidArgumentError("SLURM_LAUNCH_NODE_IPADDR is not set (det-slurm-launcher runs under srun)");
  }
  out.launch.set_chief_address(addr->second);
  out.launch.set_chief_port(master::slurm::ChiefPort(job, chief_first, chief_last));
  std::vector<std::string> gpus;
  if (cuda) {
    auto visible = env.find("CUDA_VISIBLE_DEVICES");
    if (visible != env.end() && !visible->second.empty()) {
      gpus = absl::StrSplit(visible->second, ',');
    }
    if (static_cast<int64_t>(gpus.size()) < per_node) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CUDA_VISIBLE_DEVICES \"", visible == env.end() ? "" : visible->second,
          "\" names fewer GPUs than the ", per_node, " tasks of this node (--gres=gpu:N)"));
    }
  }
  for (int64_t local = 0; local < per_node; ++local) {
    v1::RankPlacement* r = out.launch.add_ranks();
    r->set_rank(static_cast<int32_t>(nodeid * per_node + local));
    r->set_local_rank(static_cast<int32_t>(local));
    r->set_agent_id(launch.ranks_size() > 0 ? launch.ranks(0).agent_id() : "");
    if (cuda) r->add_slot_ids(gpus[local]);
  }
  if (procid != nodeid * per_node + localid) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SLURM_PROCID ", procid, " is not task ", localid, " of node ", nodeid,
        " (det runs ranks in blocks of ", per_node, " per node)"));
  }
  out.rank = out.launch.ranks(static_cast<int>(localid));
  return out;
}

}  // namespace det::agent
