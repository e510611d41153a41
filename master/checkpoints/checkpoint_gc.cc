#include "master/checkpoints/checkpoint_gc.h"

#include <algorithm>
#include <map>


namespace det::master {

CheckpointGcPolicy GcPolicyFromConfig(const config::ExperimentConfig& config) {
  CheckpointGcPolicy p;
  p.metric = config.searcher.metric;
  p.smaller_is_better = config.searcher.smaller_is_better;
  if (config.checkpoint_storage) {
    p.save_experiment_best = config.checkpoint_storage->save_experiment_best;
    p.save_trial_best = config.checkpoint_storage->save_trial_best;
    p.save_trial_latest = config.checkpoint_storage->save_trial_latest;
  }
  return p;
}

std::vector<std::string> CheckpointsToDelete(const std::vector<v1::Checkpoint>& checkpoints,
                                             const std::set<int64_t>& ended_trials,
                                             const CheckpointGcPolicy& policy) {
  std::vector<const v1::Checkpoint*> live;
  for (const auto& c : checkpoints) {
    if (c.state() != v1::STATE_DELETED) live.push_back(&c);
  }
  auto better = [&](const v1::Checkpoint* a, const v1::Checkpoint* b) {
    double x = a->metrics().at(policy.metric), y = b->metrics().at(policy.metric);
    if (x != y) return policy.smaller_is_better ? x < y : x > y;
    return a->total_batches() > b->total_batches();  // Ties: the later one.
  };
  auto later = [](const v1::Checkpoint* a, const v1::Checkpoint* b) {
    if (a->total_batches() != b->total_batches()) return a->total_batches() > b->total_batches();
    return a->report_time_ms() > b->report_time_ms();
  };
  auto keep_first = [](std::vector<const v1::Checkpoint*> v, int n, auto order, std::set<std::string>* keep) {
    std::stable_sort(v.begin(), v.end(), order);
    for (int i = 0; i < n && i < static_cast<int>(v.size()); ++i) keep->insert(v[i]->uuid());
  };

  std::set<std::string> keep;
  std::vector<const v1::Checkpoint*> with_metric;
  std::map<int64_t, std::vector<const v1::Checkpoint*>> by_trial, by_trial_with_metric;
  for (const auto* c : live) {
    by_trial[c->trial_id()].push_back(c);
    if (!policy.metric.empty() && c->metrics().count(policy.metric)) {
      with_metric.push_back(c);
      by_trial_with_metric[c->trial_id()].push_back(c);
    }
  }
  keep_first(with_metric, policy.save_experiment_best, better, &keep);
  for (const auto& [trial, cs] : by_trial_with_metric) keep_first(cs, policy.save_trial_best, better, &keep);
  for (const auto& [trial, cs] : by_trial) keep_first(cs, policy.save_trial_latest, later, &keep);

  std::vector<std::string> out;
  for (const auto* c : live) {
    if (ended_trials.count(c->trial_id()) && !keep.count(c->uuid())) out.push_back(c->uuid());
  }
  return out;
}

std::vector<std::string> NotYetCollected(const std::vector<std::string>& uuids,
                                         const std::vector<const v1::CheckpointGcTask*>& tasks) {
  std::set<std::string> covered;
  for (const v1::CheckpointGcTask* t : tasks) {
    if (t->state() != v1::STATE_QUEUED && t->state() != v1::STATE_RUNNING) continue;
    for (const auto& c : t->checkpoints()) covered.insert(c.uuid());
  }
  std::vector<std::string> out;
  for (const auto& uuid : uuids) {
    if (!covered.count(uuid)) out.push_back(uuid);
  }
  return out;
}

}  // namespace det::master
