#include "master/server/managers.h"

#include <algorithm>
#include <utility>

#include "common/status/status_macros.h"
#include "master/loop/on_loop.h"
#include "master/views/views.h"

namespace det::master {

Managers::Managers(const config::MasterConfig& config, Clock& clock, Store& store,
                   EventLoop& loop, Turns& turns, ManagerOptions options)
    : reads(store, config.db_read_connections),
      agents(clock, loop, store,
             AgentManager::Options{config.cluster_secret, config.agent_timeout,
                                   std::min(absl::Seconds(5), config.agent_timeout / 3)}),
      templates(store, clock),
      trials(clock, store, registry),
      logs(clock, loop, store, reads,
           [this](int64_t id) -> absl::StatusOr<bool> {
             ASSIGN_OR_RETURN(TrialState * t, registry.FindTrial(id));
             return views::Terminal(t->trial.state());
           }),
      checkpoints(clock, turns, store, agents, logs, registry, trials),
      experiments(config, clock, turns, store, agents, templates, logs, checkpoints, registry,
                  trials, [this](TrialState& t, const std::string& reason, bool cooperative) {
                    if (cooperative) {
                      allocations.Stop(t, reason);
                    } else {
                      allocations.Kill(t, reason);
                    }
                  }),
      allocations(clock, turns, store, agents, logs, registry, trials, experiments),
      scheduling(config, turns, agents, logs, registry, trials, allocations, checkpoints),
      metrics(clock, turns, registry, trials, experiments),
      liveness(config, clock, turns, store, agents, registry, allocations, checkpoints),
      models(clock, loop, store, checkpoints),
      config_(config),
      loop_(loop) {
  checkpoints.SetProtection([this](const std::string& uuid) { return models.WhyProtected(uuid); });
  if (config.slurm) {
    std::unique_ptr<slurm::SlurmClient> client = std::move(options.slurm_client);
    if (client == nullptr) client = slurm::NewCommandSlurmClient(config.data_dir + "/slurm");
    slurm = std::make_unique<SlurmResourceManager>(config, clock, turns, agents, logs, registry,
                                                   trials, allocations, std::move(client));
    allocations.SetRunLauncher(slurm.get());
    scheduling.SetSlurm(slurm.get());
  }
  turns.SetSchedulePass([this] { scheduling.SchedulePass(); });
  turns.SetTurnEnd([this] {
    if (logs.HasPendingEvents()) logs.FlushEvents();
  });
}

Managers::~Managers() { reads.Stop(); }

absl::Status Managers::Restore(StoreSnapshot snap) {
  DET_CHECK_ON_LOOP(loop_);
  agents.Restore(snap.agents, snap.agent_credential_hashes);
  experiments.SetDefaultCheckpointStorage(config_.checkpoint_storage);
  checkpoints.SetStorageRoots(config::CheckpointStorageRoots(config_));
  allocations.SetStopGracePeriod(config_.stop_grace_period);
  RETURN_IF_ERROR(experiments.Restore(std::move(snap.experiments), std::move(snap.trials)));
  checkpoints.Restore(std::move(snap.checkpoint_gc_tasks));
  models.Restore(std::move(snap.models), std::move(snap.model_versions));
  allocations.Restore(std::move(snap.open_allocations));
  if (slurm) slurm->Restore(snap.cluster_id);
  // Runs whose agents do not come back in time are lost.
  liveness.AfterRestart();
  return experiments.RestoreSearchers();
}

void Managers::FailWaiters(const absl::Status& bye) {
  DET_CHECK_ON_LOOP(loop_);
  registry.shutting_down = true;
  agents.FailPolls(bye);
  logs.AnswerAll();
  allocations.FailWaiters(bye);
}

}  // namespace det::master
