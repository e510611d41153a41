#include "master/experiments/registry.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace det::master {

absl::StatusOr<TrialState*> ExperimentRegistry::FindTrial(int64_t id) {
  auto it = trials.find(id);
  if (it == trials.end()) return absl::NotFoundError(absl::StrCat("trial ", id, " not found"));
  return &it->second;
}

v1::Trial ExperimentRegistry::TrialView(const TrialState& t) const {
  v1::Trial view = t.trial;
  if (view.allocation().id().empty() && !t.last_allocation.id().empty()) {
    *view.mutable_allocation() = t.last_allocation;
  }
  if (t.trial.state() == v1::STATE_QUEUED) view.set_pending_reason(t.waiting_reason());
  return view;
}

std::vector<views::ExperimentRow> ExperimentRegistry::ExperimentRows() const {
  std::vector<views::ExperimentRow> rows;
  rows.reserve(experiments.size());
  for (const auto& [id, es] : experiments) {
    views::ExperimentRow& row = rows.emplace_back();
    row.experiment = &es.experiment;
    for (int64_t tid : es.trial_ids) {
      const TrialState& t = trials.at(tid);
      const std::string* why = t.waiting_reason().empty() ? nullptr : &t.waiting_reason();
      row.trials.push_back({&t.trial, t.killing, why});
    }
  }
  return rows;
}

absl::StatusOr<TrialState*> ExperimentRegistry::AuthorizeWorker(const v1::WorkerAuth& auth) {
  auto at = allocation_trial.find(auth.allocation_id());
  if (at == allocation_trial.end()) {
    return absl::PermissionDeniedError(
        absl::StrCat("allocation ", auth.allocation_id(), " is not running"));
  }
  TrialState& t = trials.at(at->second);
  if (auth.token().size() != t.token.size() || auth.token() != t.token) {
    return absl::PermissionDeniedError("worker token does not match its allocation");
  }
  return &t;
}

int ExperimentRegistry::TrialIndex(const ExperimentState& es, int64_t trial_id) {
  auto it = std::find(es.trial_ids.begin(), es.trial_ids.end(), trial_id);
  return it == es.trial_ids.end() ? -1 : static_cast<int>(it - es.trial_ids.begin());
}

absl::Status PersistExperiment(Store& store, ExperimentState& es, v1::Experiment updated) {
  absl::Status written = store.UpdateExperiment(updated);
  std::string what = absl::StrCat("experiment ", updated.id());
  return WriteThenKeep(std::move(written), what, &es.experiment, std::move(updated));
}

absl::Status PersistTrial(Store& store, TrialState& t, v1::Trial updated) {
  absl::Status written = store.UpdateTrial(updated);
  std::string what = absl::StrCat("trial ", updated.id());
  return WriteThenKeep(std::move(written), what, &t.trial, std::move(updated));
}

void RecordTrial(Store& store, TrialState& t) { (void)PersistTrial(store, t, t.trial); }

bool AddTrialWarning(Store& store, TrialState& t, const std::string& warning) {
  for (const auto& w : t.trial.warnings()) {
    if (w == warning) return false;
  }
  t.trial.add_warnings(warning);
  RecordTrial(store, t);
  return true;
}

std::string WarnProgressLoss(Store& store, ExperimentState& es, TrialState& t) {
  if (es.config.checkpoint_storage) return "";
  if (t.trial.allocation().id().empty() && t.trial.total_batches() == 0) return "";
  std::string warning = absl::StrCat("trial ", t.trial.id(),
                                     " has no checkpoint storage: its progress will be lost");
  AddTrialWarning(store, t, warning);
  for (const auto& w : es.experiment.warnings()) {
    if (w == warning) return warning;
  }
  v1::Experiment updated = es.experiment;
  updated.add_warnings(warning);
  (void)PersistExperiment(store, es, std::move(updated));
  return warning;
}

std::string NoteRefusedReports(Store& store, TrialState& t, absl::string_view what, int64_t n,
                               const absl::Status& error) {
  const std::string prefix = absl::StrCat(what, " refused: ");
  int64_t total = n;
  int index = -1;
  for (int i = 0; i < t.trial.warnings_size() && index < 0; ++i) {
    absl::string_view w = t.trial.warnings(i);
    if (!absl::ConsumePrefix(&w, prefix)) continue;
    int64_t before = 0;
    if (absl::SimpleAtoi(w.substr(0, w.find(' ')), &before)) total += before;
    index = i;
  }
  std::string warning = absl::StrCat(prefix, total, " (the master could not store them: ",
                                     error.message().substr(0, 200), ")");
  if (index >= 0) {
    t.trial.set_warnings(index, warning);
  } else {
    t.trial.add_warnings(warning);
  }
  RecordTrial(store, t);
  return warning;
}

absl::Status PersistAllocation(Store& store, const v1::Allocation& allocation,
                               const std::string& token) {
  absl::Status st = store.UpsertAllocation(allocation, token);
  if (!st.ok()) {
    Logger("master")->error("allocation {}: cannot persist: {}", allocation.id(), st.ToString());
  }
  return st;
}

}  // namespace det::master
