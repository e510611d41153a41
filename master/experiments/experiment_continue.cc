// ExperimentManager::Continue: det experiment continue (Determined's ContinueExperiment).
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/logging/logging.h"
#include "common/status/status_macros.h"
#include "master/experiments/experiment_manager.h"
#include "master/loop/on_loop.h"
#include "master/trials/run_outcome.h"
#include "master/views/views.h"

namespace det::master {
namespace {

bool HasOverrides(const v1::ContinueExperimentRequest& req) {
  const absl::string_view yaml = absl::StripAsciiWhitespace(req.override_config());
  return (!yaml.empty() && yaml != "{}") || req.config_overrides_size() > 0;
}

}  // namespace

absl::Status ExperimentManager::Continue(const v1::ContinueExperimentRequest& req,
                                         v1::ContinueExperimentResponse* resp) {
  DET_CHECK_ON_LOOP(loop_);
  const int64_t id = req.id();
  ASSIGN_OR_RETURN(ExperimentState * es, Find(id));
  const v1::State state = es->experiment.state();
  if (!views::Terminal(state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("experiment ", id, " is ", StateName(state),
                     ": only an ended experiment (COMPLETED, CANCELED or ERROR) can be "
                     "continued"));
  }
  if (checkpoints_.LiveDeletion(id)) {
    return absl::FailedPreconditionError(
        absl::StrCat("experiment ", id, " is being deleted: it cannot be continued"));
  }
  const std::string searcher = es->config.searcher.name;
  const bool single = searcher == "single";
  if (!single && searcher != "grid" && searcher != "random") {
    return absl::InvalidArgumentError(absl::StrCat(
        "experiment ", id, " uses the ", searcher, " searcher: only an experiment of the "
        "single, grid or random searcher can be continued (det experiment fork ", id,
        " runs it again as a new experiment)"));
  }
  if (!single && HasOverrides(req)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "experiment ", id, " uses the ", searcher, " searcher (", es->trial_ids.size(),
        " trials): only a single-searcher experiment takes an override config when "
        "continued; continue it without --config and --config-file, or fork it to change its "
        "config (det experiment fork ", id, " --config KEY=VALUE)"));
  }

  // The config it continues with: its own, or the overrides merged over it.
  config::ParsedExperiment parsed;
  parsed.config = es->config;
  parsed.effective_yaml = es->experiment.config_yaml();
  if (HasOverrides(req)) {
    const std::string base = absl::StrCat("experiment ", id, "'s config");
    config::ConfigInput input;
    input.config_yaml = req.override_config().empty() ? "{}" : req.override_config();
    input.config_path = "override config";
    input.template_name = base;
    input.overrides.assign(req.config_overrides().begin(), req.config_overrides().end());
    // The experiment's config is merged under the override config as a template would be.
    auto stored = [&](const std::string& name) -> absl::StatusOr<std::string> {
      if (name != base) return absl::NotFoundError(absl::StrCat("template '", name, "'"));
      return es->experiment.config_yaml();
    };
    ASSIGN_OR_RETURN(parsed, config::ParseExperimentConfig(
                                 input, stored,
                                 static_cast<uint32_t>(es->experiment.experiment_seed())));
    if (parsed.config.searcher.name != "single") {
      return absl::InvalidArgumentError(absl::StrCat(
          "searcher.name: experiment ", id, " continues with the single searcher, got '",
          parsed.config.searcher.name, "' (det experiment fork ", id,
          " --config searcher.name=", parsed.config.searcher.name, " starts a search)"));
    }
    RETURN_IF_ERROR(CheckStorageAndPool(input.config_path, parsed.config));
  }

  // The trials it revives: a single-trial experiment's trial; a search's trials that did
  // not complete (an invalid one stays replaced).
  std::vector<int64_t> revive;
  for (int64_t tid : es->trial_ids) {
    const v1::Trial& t = trials_.at(tid).trial;
    if (single || (t.state() != v1::STATE_COMPLETED && !IsInvalidTrial(t))) revive.push_back(tid);
  }
  if (revive.empty() && state == v1::STATE_COMPLETED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "experiment ", id, " has been completed: each of its ", es->trial_ids.size(),
        " trials COMPLETED, so nothing is left to continue (det experiment fork ", id,
        " runs it again as a new experiment)"));
  }
  // A single trial's length and hyperparameters under the config it continues with: the
  // searcher's first trial (the experiment seed draws the same values from the same space).
  std::string hparams;
  int64_t target = 0;
  if (single) {
    ASSIGN_OR_RETURN(std::unique_ptr<searcher::Searcher> fresh, searcher::NewSearcher(parsed.config));
    std::vector<searcher::TrialRequest> first = fresh->NextTrials();
    if (first.empty()) return absl::InternalError("the single searcher asked for no trial");
    hparams = first[0].hparams_json;
    target = first[0].target_batches;
  }

  // Stored first: the experiment, then its trials. A master that restarts between the two
  // ends the experiment again (UpdateExperiment), as if it had not been continued.
  v1::Experiment updated = es->experiment;
  updated.set_state(v1::STATE_ACTIVE);
  updated.set_end_time_ms(0);
  updated.clear_error();
  updated.set_config_yaml(parsed.effective_yaml);
  updated.set_resource_pool(parsed.config.resources.resource_pool);
  updated.set_slots_per_trial(parsed.config.resources.slots_per_trial);
  RETURN_IF_ERROR(PersistExperiment(store_, *es, std::move(updated)));
  es->config = parsed.config;
  Logger("master")->info("experiment {} continued ({} trial(s) revived)", id, revive.size());
  for (int64_t tid : revive) {
    TrialState& t = trials_.at(tid);
    const int64_t batches = t.trial.total_batches();
    RETURN_IF_ERROR(trial_manager_.Revive(t, single ? target : t.trial.target_batches(),
                                          single ? hparams : t.trial.hparams_json()));
    const int64_t goal = t.trial.target_batches();
    const char* from = t.trial.latest_checkpoint().empty()
                           ? "from batch 0 (it has no checkpoint)"
                           : "from its latest checkpoint";
    TrialEvent(tid, absl::StrCat("experiment continued: trial queued again; it resumes ", from,
                                 goal > 0 ? absl::StrCat(" toward ", goal, " batches") : ""));
    if (goal > 0 && batches >= goal) {
      resp->add_warnings(absl::StrCat("trial ", tid, " already trained ", batches, " of its ", goal,
                                      " batches: it ends at once (raise searcher.max_length, "
                                      "e.g. --config searcher.max_length.batches=N, to train "
                                      "more)"));
    } else if (batches > 0 && t.trial.latest_checkpoint().empty()) {
      resp->add_warnings(absl::StrCat("trial ", tid, " has no checkpoint: it trains again from "
                                      "batch 0, not from batch ", batches));
    }
  }
  RETURN_IF_ERROR(RebuildSearcher(*es));
  if (absl::Status st = CreateSearcherTrials(*es); !st.ok()) {
    Logger("master")->error("experiment {}: {}", id, st.ToString());
  }
  UpdateExperiment(*es);
  turns_.RequestSchedule();
  *resp->mutable_experiment() = es->experiment;
  return absl::OkStatus();
}

}  // namespace det::master
