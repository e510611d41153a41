// The one place the master's managers are built and wired to each other (issue 26): the
// master daemon (master/server/master.h) and the manager test harness
// (master/testing/manager_harness.h) both own a Managers, so what a test drives is what
// the daemon runs. What differs between them is an explicit ManagerOptions field.
#ifndef DET_MASTER_SERVER_MANAGERS_H_
#define DET_MASTER_SERVER_MANAGERS_H_

#include <memory>

#include "absl/status/status.h"
#include "common/clock/clock.h"
#include "common/config/daemon_config.h"
#include "common/event_loop/event_loop.h"
#include "master/allocations/allocation_manager.h"
#include "master/checkpoints/checkpoint_manager.h"
#include "master/cluster/agent_liveness.h"
#include "master/cluster/agent_manager.h"
#include "master/experiments/experiment_manager.h"
#include "master/experiments/registry.h"
#include "master/logs/log_manager.h"
#include "master/loop/turns.h"
#include "master/metrics/metrics_manager.h"
#include "master/models/model_registry.h"
#include "master/reads/store_reads.h"
#include "master/scheduling/scheduling_service.h"
#include "master/slurm/slurm_client.h"
#include "master/slurm/slurm_resource_manager.h"
#include "master/store/store.h"
#include "master/templates/templates.h"
#include "master/trials/trial_manager.h"

namespace det::master {

struct ManagerOptions {
  // With config.slurm: the Slurm client of the resource manager. Null: the one that runs
  // sbatch/squeue/scancel, spooling under <data_dir>/slurm (the daemon's).
  std::unique_ptr<slurm::SlurmClient> slurm_client;
};

// The managers in dependency order (each member uses only those declared before it),
// with every cross-manager hook set: the checkpoints' protection by the model registry,
// the trials' stop and kill by the allocations, the Slurm launcher when configured, the
// turn's scheduling pass and event flush.
class Managers {
 public:
  // `config`, `clock`, `store`, `loop` and `turns` must outlive this.
  Managers(const config::MasterConfig& config, Clock& clock, Store& store, EventLoop& loop,
           Turns& turns, ManagerOptions options = {});
  // Runs the reads already submitted to `reads` (their answers) before any manager goes.
  ~Managers();
  Managers(const Managers&) = delete;
  Managers& operator=(const Managers&) = delete;

  // On the loop: applies the cluster settings of `config` (default checkpoint storage,
  // checkpoint storage roots, stop grace period) and rebuilds every manager's state from
  // `snap`, as a master does on start. The caller then ends the first turn.
  absl::Status Restore(StoreSnapshot snap);
  // On the loop, once, as the master stops: answers every pending long poll and waiter
  // with `bye`; no new work is accepted.
  void FailWaiters(const absl::Status& bye);

  // The store's read connections and their threads (config db_read_connections): metric,
  // log and checkpoint reads of the API, off the loop.
  StoreReads reads;
  AgentManager agents;
  Templates templates;
  ExperimentRegistry registry;
  // The one writer of a trial's state (its transitions, restarts, waiting reason).
  TrialManager trials;
  // Trial logs and events, GetTrialLogs long polls.
  LogManager logs;
  CheckpointManager checkpoints;
  ExperimentManager experiments;
  AllocationManager allocations;
  SchedulingService scheduling;
  // resource_manager: slurm only.
  std::unique_ptr<SlurmResourceManager> slurm;
  MetricsManager metrics;
  AgentLiveness liveness;
  // The model registry; its versions' checkpoints are protected from deletion.
  ModelRegistry models;

 private:
  const config::MasterConfig& config_;
  EventLoop& loop_;
};

}  // namespace det::master

#endif  // DET_MASTER_SERVER_MANAGERS_H_
