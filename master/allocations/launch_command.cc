#include "master/allocations/launch_command.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/config/trial_spec.h"

namespace det::master {

std::vector<v1::RankPlacement> PlaceRanks(const std::vector<AgentShare>& agents) {
  std::vector<v1::RankPlacement> out;
  int rank = 0;
  for (const AgentShare& share : agents) {
    int processes = std::max<int>(1, static_cast<int>(share.slots.size()));
    for (int local = 0; local < processes; ++local) {
      v1::RankPlacement& r = out.emplace_back();
      r.set_rank(rank++);
      r.set_agent_id(share.agent_id);
      r.set_local_rank(local);
      if (!share.slots.empty()) r.add_slot_ids(share.slots[local]);
    }
  }
  return out;
}

std::string TorchRunId(int64_t trial_id) { return absl::StrCat("det-trial-", trial_id); }

std::vector<std::pair<std::string, v1::LaunchCommand>> BuildLaunchCommands(
    const LaunchInputs& in, const v1::Allocation& allocation,
    const std::vector<AgentShare>& agents) {
  const v1::Trial& t = in.trial;
  std::map<std::string, std::string> env = {
      {"DET_EXPERIMENT_ID", absl::StrCat(in.experiment_id)},
      {"DET_TRIAL_ID", absl::StrCat(t.id())},
      {"DET_TRIAL_RUN_ID", absl::StrCat(t.run_id())},
      {"DET_TRIAL_SEED", absl::StrCat(t.seed())},
      {"DET_HPARAMS", t.hparams_json()},
      {"DET_EXPERIMENT_CONFIG", in.config_json},
      {config::kTrialSpecEnv, config::EncodeTrialSpec(in.trial_spec)},
      {"DET_TRIAL_TARGET_BATCHES", absl::StrCat(t.target_batches())},
      {"DET_LATEST_CHECKPOINT", t.latest_checkpoint()},
      {"DET_ALLOCATION_ID", allocation.id()},
      {"DET_ALLOCATION_TOKEN", in.token},
  };
  for (const auto& [k, v] : in.environment) env.emplace(k, v);
  std::vector<std::pair<std::string, v1::LaunchCommand>> out;
  int agent_rank = 0;
  for (const AgentShare& share : agents) {
    v1::LaunchCommand l;
    l.set_allocation_id(allocation.id());
    l.set_trial_id(t.id());
    l.set_experiment_id(in.experiment_id);
    for (const auto& arg : in.entrypoint) l.add_argv(arg);
    l.mutable_env()->insert(env.begin(), env.end());
    for (const auto& r : allocation.ranks()) {
      if (r.agent_id() == share.agent_id) *l.add_ranks() = r;
    }
    l.set_world_size(allocation.ranks_size());
    l.set_num_agents(static_cast<int32_t>(agents.size()));
    l.set_agent_rank(agent_rank++);
    l.mutable_model_context()->set_experiment_id(in.experiment_id);
    l.mutable_model_context()->set_sha256(in.context_sha256);
    l.set_chief_address(in.chief_address);
    l.set_chief_port(in.chief_port);
    l.set_restart_count(t.restarts());
    l.set_max_restarts(in.max_restarts);
    l.set_run_id(TorchRunId(t.id()));
    l.set_python(in.python);
    if (!in.task_user.agent_user().empty()) *l.mutable_task_user() = in.task_user;
    out.emplace_back(share.agent_id, std::move(l));
  }
  return out;
}

}  // namespace det::master
