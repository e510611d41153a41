#include "master/checkpoints/checkpoint_gc.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace det::master {

absl::StatusOr<CheckpointGcPolicy> GcPolicyFromConfig(const std::string& config_json) {
  CheckpointGcPolicy p;
  auto j = nlohmann::json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("experiment config is not a JSON object");
  if (j.contains("searcher") && j["searcher"].is_object()) {
    const auto& s = j["searcher"];
    if (s.contains("metric") && s["metric"].is_string()) p.metric = s["metric"].get<std::string>();
    if (s.contains("smaller_is_better") && s["smaller_is_better"].is_boolean()) {
      p.smaller_is_better = s["smaller_is_better"].get<bool>();
    }
  }
  if (j.contains("checkpoint_storage") && j["checkpoint_storage"].is_object()) {
    const auto& cs = j["checkpoint_storage"];
    for (auto [key, out] : {std::pair<const char*, int*>{"save_experiment_best", &p.save_experiment_best},
                            {"save_trial_best", &p.save_trial_best},
                            {"save_trial_latest", &p.save_trial_latest}}) {
      if (!cs.contains(key)) continue;
      if (!cs[key].is_number_integer() || cs[key].get<int64_t>() < 0 || cs[key].get<int64_t>() > 1000000) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint_storage.", key, ": expected a non-negative integer, got ", cs[key].dump()));
      }
      *out = cs[key].get<int>();
    }
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
