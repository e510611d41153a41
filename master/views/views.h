// Read models of the master: jobs (the queue by experiment), tasks (trial allocations and
// checkpoint GC tasks), resource pools and the master's counters, as pure functions of
// what the master holds. No I/O, no clock, no loop: the master calls them on its loop
// with pointers into its state, valid for the call.
#ifndef DET_MASTER_VIEWS_VIEWS_H_
#define DET_MASTER_VIEWS_VIEWS_H_

#include <string>
#include <vector>

#include "common/config/daemon_config.h"
#include "proto/api.pb.h"
#include "proto/types.pb.h"

namespace det::master::views {

// One trial as the views see it.
struct TrialRow {
  const v1::Trial* trial = nullptr;
  // The master asked its current run to stop.
  bool stopping = false;
  // Why it waits while QUEUED; null when the scheduler has said nothing yet.
  const std::string* waiting_reason = nullptr;
};

// One experiment and its trials, in creation order.
struct ExperimentRow {
  const v1::Experiment* experiment = nullptr;
  std::vector<TrialRow> trials;
};

bool Terminal(v1::State s);

// The jobs (unfinished experiments with queued or running trials) of `pool` ("" = every
// pool), in the order the scheduler considers them: priority, then submission.
std::vector<v1::Job> Jobs(const std::vector<ExperimentRow>& experiments,
                          const std::string& pool);

// The task of a trial's open allocation (the trial has one).
v1::Task TrialTask(const TrialRow& t, const std::string& resource_pool);

// The task of a checkpoint GC task; `pending_reason` is shown while it is QUEUED.
v1::Task GcTask(const v1::CheckpointGcTask& t, const std::string& pending_reason);
// The allocation id of a GC task's current attempt: "gc-<task>.<attempt>".
std::string GcAllocationId(const v1::CheckpointGcTask& t);

// Every configured pool with its agents, slots and queued trials.
std::vector<v1::ResourcePool> ResourcePools(
    const std::vector<config::ResourcePoolConfig>& pools, const std::vector<v1::Agent>& agents,
    const std::vector<ExperimentRow>& experiments);

// Adds to `stats` the agent, slot, experiment, trial and job counts.
void CountCluster(const std::vector<v1::Agent>& agents,
                  const std::vector<ExperimentRow>& experiments,
                  v1::GetMasterStatsResponse* stats);

}  // namespace det::master::views

#endif  // DET_MASTER_VIEWS_VIEWS_H_
