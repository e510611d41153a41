#include "master/checkpoints/checkpoint_reads.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace det::master {
namespace {

// As the API shows a checkpoint of `experiment_id`.
void Show(int64_t experiment_id, v1::Checkpoint* c) {
  c->set_experiment_id(experiment_id);
  if (c->state() == v1::STATE_UNSPECIFIED) c->set_state(v1::STATE_COMPLETED);
}

}  // namespace

void AttachValidationMetrics(const std::vector<v1::Metrics>& validations,
                             std::vector<v1::Checkpoint>* checkpoints) {
  // Rows come in report order: a later run's report at the same batch wins.
  std::map<int64_t, const v1::Metrics*> at_batch;
  for (const v1::Metrics& m : validations) at_batch[m.total_batches()] = &m;
  for (v1::Checkpoint& c : *checkpoints) {
    if (!c.metrics().empty()) continue;
    auto it = at_batch.find(c.total_batches());
    if (it == at_batch.end()) continue;
    c.mutable_metrics()->insert(it->second->values().begin(), it->second->values().end());
  }
}

absl::Status ListCheckpoints(MetricsReader& reader, const v1::ListCheckpointsRequest& req,
                             v1::ListCheckpointsResponse* resp) {
  ASSIGN_OR_RETURN(std::vector<int64_t> ids, reader.GetTrialIds(req.experiment_id()));
  if (req.trial_id() != 0 && std::find(ids.begin(), ids.end(), req.trial_id()) == ids.end()) {
    return absl::NotFoundError(absl::StrCat("trial ", req.trial_id(),
                                            " is not a trial of experiment ", req.experiment_id()));
  }
  std::vector<v1::Checkpoint> all;
  for (int64_t tid : ids) {
    if (req.trial_id() != 0 && tid != req.trial_id()) continue;
    ASSIGN_OR_RETURN(auto cs, ReadTrialCheckpoints(reader, tid));
    all.insert(all.end(), std::make_move_iterator(cs.begin()), std::make_move_iterator(cs.end()));
  }
  std::stable_sort(all.begin(), all.end(), [](const v1::Checkpoint& a, const v1::Checkpoint& b) {
    return a.report_time_ms() < b.report_time_ms();
  });
  for (auto& c : all) {
    Show(req.experiment_id(), &c);
    *resp->add_checkpoints() = std::move(c);
  }
  return absl::OkStatus();
}

absl::Status GetCheckpoint(MetricsReader& reader, const v1::GetCheckpointRequest& req,
                           v1::GetCheckpointResponse* resp) {
  if (req.uuid().empty()) return absl::InvalidArgumentError("uuid: must not be empty");
  ASSIGN_OR_RETURN(v1::Checkpoint c, reader.GetCheckpoint(req.uuid()));
  if (c.metrics().empty()) {
    std::vector<v1::Checkpoint> one = {std::move(c)};
    ASSIGN_OR_RETURN(std::vector<v1::Metrics> validations,
                     reader.GetMetrics(one[0].trial_id(), "validation"));
    AttachValidationMetrics(validations, &one);
    c = std::move(one[0]);
  }
  Show(c.experiment_id(), &c);
  *resp->mutable_checkpoint() = std::move(c);
  return absl::OkStatus();
}

}  // namespace det::master
