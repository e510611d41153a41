#include "master/experiments/experiment_manager.h"

#include <algorithm>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/limits.h"
#include "common/logging/logging.h"
#include "common/status/status_macros.h"
#include "master/loop/on_loop.h"
#include "master/scheduling/pools.h"
#include "master/views/views.h"

namespace det::master {
namespace {

// How many of each agent's latest host metric samples GetTrial shows.
constexpr int kTrialSystemMetricsSamples = 12;

using views::Terminal;

}  // namespace

ExperimentManager::ExperimentManager(const config::MasterConfig& config, Clock& clock, Turns& turns,
                                     Store& store, AgentManager& agents, Templates& templates,
                                     LogManager& logs, CheckpointManager& checkpoints,
                                     ExperimentRegistry& registry, TrialManager& trials,
                                     KillRun kill_run)
    : config_(config),
      clock_(clock),
      turns_(turns),
      loop_(turns.loop()),
      store_(store),
      agents_(agents),
      templates_(templates),
      logs_(logs),
      checkpoints_(checkpoints),
      registry_(registry),
      trial_manager_(trials),
      kill_run_(std::move(kill_run)),
      experiments_(registry.experiments),
      trials_(registry.trials),
      counters_(registry.counters) {
  // An experiment's deletion ends once the task deleting its checkpoints' files completed.
  checkpoints_.SetDeletionDone([this](int64_t experiment_id) {
    (void)FinishDelete(experiment_id);  // Logged; tried again at the next start.
  });
}

absl::Status ExperimentManager::Create(const std::string& owner,
                                       const v1::CreateExperimentRequest& req,
                                       v1::CreateExperimentResponse* resp) {
  DET_CHECK_ON_LOOP(loop_);
  std::string file = req.config_path().empty() ? "config" : req.config_path();
  std::random_device rd;
  config::ConfigInput input;
  input.config_yaml = req.config_yaml();
  input.config_path = file;
  input.template_name = req.template_();
  input.overrides.assign(req.config_overrides().begin(), req.config_overrides().end());
  const uint32_t seed = rd();
  ASSIGN_OR_RETURN(config::ParsedExperiment parsed,
                   config::ParseExperimentConfig(input, templates_.Lookup(), seed));
  if (!parsed.config.checkpoint_storage && default_checkpoint_storage_) {
    // The cluster's default, merged in as overrides so the effective config (what the
    // workers and a restarted master read) names it.
    const config::CheckpointStorageConfig& d = *default_checkpoint_storage_;
    const std::string cs = "checkpoint_storage.";
    input.overrides.push_back(absl::StrCat(cs, "type=", d.type));
    input.overrides.push_back(absl::StrCat(cs, "host_path=", d.host_path));
    if (!d.storage_path.empty()) {
      input.overrides.push_back(absl::StrCat(cs, "storage_path=", d.storage_path));
    }
    input.overrides.push_back(absl::StrCat(cs, "save_experiment_best=", d.save_experiment_best));
    input.overrides.push_back(absl::StrCat(cs, "save_trial_best=", d.save_trial_best));
    input.overrides.push_back(absl::StrCat(cs, "save_trial_latest=", d.save_trial_latest));
    ASSIGN_OR_RETURN(parsed, config::ParseExperimentConfig(input, templates_.Lookup(), seed));
  }
  const config::ExperimentConfig& c = parsed.config;
  RETURN_IF_ERROR(CheckStorageAndPool(file, c));
  if (std::string why = NeverFits(agents_.List(), c.resources.resource_pool, c.resources.slots_per_trial);
      !why.empty() && !req.force()) {
    return absl::FailedPreconditionError(absl::StrCat(
        file, ": resources.slots_per_trial: ", c.resources.slots_per_trial,
        " can never be scheduled: ", why, " (submit with --force to queue it anyway)"));
  }
  std::vector<config::ContextEntry> entries;
  entries.reserve(req.context_size());
  for (const auto& f : req.context()) {
    entries.push_back({f.path(), static_cast<int64_t>(f.content().size())});
  }
  RETURN_IF_ERROR(config::CheckContext(entries));  // Names the rule and the path.
  v1::ModelContext context;
  for (const auto& f : req.context()) *context.add_files() = f;

  v1::Experiment e;
  e.set_name(c.name);
  e.set_description(c.description);
  e.set_owner(owner);
  e.set_state(req.paused() ? v1::STATE_PAUSED : v1::STATE_ACTIVE);
  e.set_config_yaml(parsed.effective_yaml);
  e.set_start_time_ms(clock_.NowMs());
  e.set_searcher(c.searcher.name);
  e.set_experiment_seed(c.experiment_seed);
  ASSIGN_OR_RETURN(std::unique_ptr<searcher::Searcher> search, searcher::NewSearcher(c));
  e.set_num_trials(search->PlannedTrials());
  e.set_priority(c.resources.priority);
  e.set_resource_pool(c.resources.resource_pool);
  e.set_slots_per_trial(c.resources.slots_per_trial);
  for (const auto& w : parsed.warnings) e.add_warnings(w);
  // The searcher's first trials, stored with the experiment in one transaction.
  std::vector<v1::Trial> trials;
  for (const searcher::TrialRequest& r : search->NextTrials()) {
    v1::Trial& t = trials.emplace_back();
    t.set_state(req.paused() ? v1::STATE_PAUSED : v1::STATE_QUEUED);
    t.set_seed(r.seed);
    t.set_hparams_json(r.hparams_json);
    t.set_target_batches(r.target_batches);
    t.mutable_search()->set_bracket(r.bracket);
  }
  ASSIGN_OR_RETURN(int64_t id,
                   store_.InsertExperiment(e, context.SerializeAsString(), &trials));
  e.set_id(id);
  counters_.set_experiments_created_total(counters_.experiments_created_total() + 1);
  ExperimentState& es = experiments_[id];
  es.experiment = e;
  es.config = c;
  es.searcher = std::move(search);
  for (auto& t : trials) {
    es.trial_ids.push_back(t.id());
    trial_manager_.Add(std::move(t));
  }
  Logger("master")->info("experiment {} created: {} ({} searcher, {} trial(s), {} slot(s) each{})",
                         id, c.name, c.searcher.name, e.num_trials(), c.resources.slots_per_trial,
                         parsed.template_name.empty() ? "" : ", template " + parsed.template_name);
  for (const auto& w : parsed.warnings) TrialEvent(es.trial_ids[0], "warning: " + w);
  *resp->mutable_experiment() = e;
  for (const auto& w : parsed.warnings) resp->add_warnings(w);
  turns_.RequestSchedule();
  return absl::OkStatus();
}

absl::Status ExperimentManager::CheckStorageAndPool(const std::string& file,
                                                   const config::ExperimentConfig& c) const {
  // Its checkpoints, and what their GC deletes, stay under a root the cluster allows.
  if (absl::Status st = checkpoints_.StorageRoot(c).status(); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", st.message()));
  }
  if (!FindPool(config_, c.resources.resource_pool)) {
    std::vector<std::string> names;
    for (const auto& p : config_.resource_pools) names.push_back(p.name);
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": resources.resource_pool: unknown pool '", c.resources.resource_pool,
        "' (the master has ", absl::StrJoin(names, ", "), ")"));
  }
  return absl::OkStatus();
}

void ExperimentManager::SetDefaultCheckpointStorage(
    std::optional<config::CheckpointStorageConfig> storage) {
  DET_CHECK_ON_LOOP(loop_);
  default_checkpoint_storage_ = std::move(storage);
}

absl::Status ExperimentManager::List(const v1::ListExperimentsRequest& req,
                                     v1::ListExperimentsResponse* resp) {
  DET_CHECK_ON_LOOP(loop_);
  const std::set<int> states(req.states().begin(), req.states().end());
  int matched = 0;
  for (const auto& [id, es] : experiments_) {
    const v1::Experiment& e = es.experiment;
    if (e.archived() && !req.include_archived()) continue;
    if (!states.empty() && !states.count(e.state())) continue;
    if (!req.name().empty() && e.name().find(req.name()) == std::string::npos) continue;
    if (!req.user().empty() && e.owner() != req.user()) continue;
    if (matched++ < req.offset()) continue;
    if (req.limit() > 0 && resp->experiments_size() >= req.limit()) continue;
    *resp->add_experiments() = e;
  }
  resp->set_total(matched);
  return absl::OkStatus();
}

absl::Status ExperimentManager::Get(const v1::GetExperimentRequest& req,
                                    v1::GetExperimentResponse* resp) {
  DET_CHECK_ON_LOOP(loop_);
  auto it = experiments_.find(req.id());
  if (it == experiments_.end()) {
    return absl::NotFoundError(absl::StrCat("experiment ", req.id(), " not found"));
  }
  *resp->mutable_experiment() = it->second.experiment;
  for (int64_t tid : it->second.trial_ids) *resp->add_trials() = registry_.TrialView(trials_.at(tid));
  return absl::OkStatus();
}

absl::Status ExperimentManager::Kill(const v1::KillExperimentRequest& req) {
  DET_CHECK_ON_LOOP(loop_);
  auto it = experiments_.find(req.id());
  if (it == experiments_.end()) {
    return absl::NotFoundError(absl::StrCat("experiment ", req.id(), " not found"));
  }
  ExperimentState& es = it->second;
  RETURN_IF_ERROR(RefuseEnded(es));
  v1::Experiment updated = es.experiment;
  updated.set_state(v1::STATE_STOPPING);
  RETURN_IF_ERROR(PersistExperiment(store_, es, updated));
  Logger("master")->info("experiment {}: kill requested", req.id());
  for (int64_t tid : es.trial_ids) {
    TrialState& t = trials_.at(tid);
    if (Terminal(t.trial.state())) continue;
    if (t.trial.allocation().id().empty()) {
      FinishTrial(t, v1::STATE_CANCELED, "");
    } else {
      kill_run_(t, "experiment killed", /*cooperative=*/false);
    }
  }
  UpdateExperiment(es);
  return absl::OkStatus();
}

absl::Status ExperimentManager::KillTrial(const v1::KillTrialRequest& req) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(TrialState * t, registry_.FindTrial(req.id()));
  if (Terminal(t->trial.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("trial ", req.id(), " is ", StateName(t->trial.state())));
  }
  if (!t->trial.search().stopped_early()) {
    // Stored first: a restarted master ends it instead of running it again.
    v1::Trial updated = t->trial;
    updated.mutable_search()->set_stopped_early(true);
    updated.mutable_search()->set_stop_reason(kKilledByUser);
    RETURN_IF_ERROR(PersistTrial(store_, *t, std::move(updated)));
  }
  Logger("master")->info("trial {}: kill requested", req.id());
  TrialEvent(req.id(), "kill requested by the user");
  if (t->trial.allocation().id().empty()) {
    FinishTrial(*t, v1::STATE_CANCELED, "");
  } else {
    kill_run_(*t, kKilledByUser, /*cooperative=*/false);
  }
  return absl::OkStatus();
}

absl::Status ExperimentManager::RefuseEnded(const ExperimentState& es) {
  if (!Terminal(es.experiment.state())) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("experiment ", es.experiment.id(), " is ",
                                                    StateName(es.experiment.state())));
}

void ExperimentManager::WarnProgressLoss(
    TrialState& t, google::protobuf::RepeatedPtrField<std::string>* warnings) {
  ExperimentState& es = experiments_.at(t.trial.experiment_id());
  std::string w = master::WarnProgressLoss(store_, es, t);
  if (w.empty()) return;
  TrialEvent(t.trial.id(), "warning: " + w);
  if (warnings) *warnings->Add() = w;
}

absl::StatusOr<ExperimentState*> ExperimentManager::MoveExperiment(int64_t id, v1::State from,
                                                                 v1::State to) {
  auto it = experiments_.find(id);
  if (it == experiments_.end()) {
    return absl::NotFoundError(absl::StrCat("experiment ", id, " not found"));
  }
  ExperimentState& es = it->second;
  if (es.experiment.state() == to) return nullptr;
  if (es.experiment.state() != from) {
    return absl::FailedPreconditionError(absl::StrCat(
        "experiment ", id, " is ", StateName(es.experiment.state()), ", not ", StateName(from)));
  }
  v1::Experiment updated = es.experiment;
  updated.set_state(to);
  RETURN_IF_ERROR(PersistExperiment(store_, es, std::move(updated)));
  Logger("master")->info("experiment {}: {}", id, StateName(to));
  return &es;
}

absl::Status ExperimentManager::Pause(const v1::PauseExperimentRequest& req,
                                      v1::PauseExperimentResponse* resp) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(ExperimentState * moved,
                   MoveExperiment(req.id(), v1::STATE_ACTIVE, v1::STATE_PAUSED));
  if (!moved) return absl::OkStatus();  // Already PAUSED.
  ExperimentState& es = *moved;
  for (int64_t tid : es.trial_ids) {
    TrialState& t = trials_.at(tid);
    if (t.trial.state() == v1::STATE_QUEUED) {
      RETURN_IF_ERROR(trial_manager_.Pause(t));
      TrialEvent(tid, "experiment paused");
    } else if (!t.trial.allocation().id().empty()) {
      WarnProgressLoss(t, resp->mutable_warnings());
      t.NoteStopCause(StopCause::kPause);
      kill_run_(t, "experiment paused", /*cooperative=*/true);
    }
  }
  UpdateExperiment(es);
  return absl::OkStatus();
}

absl::Status ExperimentManager::Activate(const v1::ActivateExperimentRequest& req) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(ExperimentState * moved,
                   MoveExperiment(req.id(), v1::STATE_PAUSED, v1::STATE_ACTIVE));
  if (!moved) return absl::OkStatus();  // Already ACTIVE.
  ExperimentState& es = *moved;
  for (int64_t tid : es.trial_ids) {
    TrialState& t = trials_.at(tid);
    if (t.trial.state() != v1::STATE_PAUSED) continue;
    // Stopped (by the searcher, or killed by the user) while the pause stopped it: it
    // ends here, as at a restart (RestoreSearchers); a killed one CANCELED.
    if (t.trial.search().stopped_early()) {
      FinishTrial(t, v1::STATE_COMPLETED, "");
      continue;
    }
    RETURN_IF_ERROR(trial_manager_.Requeue(t));
    TrialEvent(tid, absl::StrCat("experiment activated; queued on ",
                                 es.experiment.slots_per_trial(), " slot(s)"));
  }
  // Trials the searcher asked for while the experiment was paused.
  if (absl::Status st = CreateSearcherTrials(es); !st.ok()) {
    Logger("master")->error("experiment {}: {}", req.id(), st.ToString());
  }
  UpdateExperiment(es);
  turns_.RequestSchedule();
  return absl::OkStatus();
}

absl::Status ExperimentManager::SetSlots(const v1::SetExperimentSlotsRequest& req,
                                         v1::SetExperimentSlotsResponse* resp) {
  DET_CHECK_ON_LOOP(loop_);
  auto it = experiments_.find(req.id());
  if (it == experiments_.end()) {
    return absl::NotFoundError(absl::StrCat("experiment ", req.id(), " not found"));
  }
  ExperimentState& es = it->second;
  RETURN_IF_ERROR(RefuseEnded(es));
  if (es.experiment.state() != v1::STATE_PAUSED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "experiment ", req.id(), " is ", StateName(es.experiment.state()),
        ": pause it first (det experiment pause ", req.id(), ")"));
  }
  int slots = req.slots_per_trial();
  if (slots < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("slots_per_trial: expected an integer >= 1, got ", slots));
  }
  // Each trial keeps its own global batch (a searched global_batch_size differs by trial):
  // the new slot count must divide every unfinished trial's.
  for (int64_t tid : es.trial_ids) {
    const TrialState& t = registry_.trials.at(tid);
    if (views::Terminal(t.trial.state())) continue;
    int64_t global = config::TrialGlobalBatchSize(es.config, t.trial.hparams_json());
    if (global > 0 && global % slots != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "slots_per_trial ", slots, " does not divide global_batch_size ", global,
          es.config.global_batch_size > 0 ? "" : absl::StrCat(" (trial ", tid, "'s)"),
          ": the same global batch could not be kept (use a divisor of ", global, ")"));
    }
  }
  if (std::string why = NeverFits(agents_.List(), es.experiment.resource_pool(), slots);
      !why.empty() && !req.force()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "slots_per_trial ", slots, " can never be scheduled: ", why, " (use --force)"));
  }
  ASSIGN_OR_RETURN(config::ParsedExperiment parsed,
                   Reparse(es, {absl::StrCat("resources.slots_per_trial=", slots)}));
  v1::Experiment updated = es.experiment;
  updated.set_config_yaml(parsed.effective_yaml);
  updated.set_slots_per_trial(slots);
  RETURN_IF_ERROR(PersistExperiment(store_, es, updated));
  es.config = parsed.config;
  for (int64_t tid : es.trial_ids) {
    TrialState& t = trials_.at(tid);
    if (Terminal(t.trial.state())) continue;
    // A run still stopping after the pause keeps its slots; the trial's next run (once
    // activated) gets the new size.
    std::string applies = t.trial.allocation().id().empty()
                              ? ""
                              : absl::StrCat(" (applies once trial ", tid, " has stopped)");
    TrialEvent(tid, absl::StrCat("slots_per_trial set to ", slots, applies));
    if (!applies.empty()) resp->add_warnings(absl::StrCat("slots_per_trial", applies));
    WarnProgressLoss(t, resp->mutable_warnings());
  }
  *resp->mutable_experiment() = es.experiment;
  return absl::OkStatus();
}

absl::Status ExperimentManager::UpdateJobPriority(const v1::UpdateJobPriorityRequest& req) {
  DET_CHECK_ON_LOOP(loop_);
  if (req.priority() < 1 || req.priority() > 99) {
    return absl::InvalidArgumentError(
        absl::StrCat("priority: expected an integer in [1, 99], got ", req.priority()));
  }
  auto it = experiments_.find(req.experiment_id());
  if (it == experiments_.end()) {
    return absl::NotFoundError(absl::StrCat("job ", req.experiment_id(), " not found"));
  }
  RETURN_IF_ERROR(RefuseEnded(it->second));
  v1::Experiment updated = it->second.experiment;
  updated.set_priority(req.priority());
  RETURN_IF_ERROR(PersistExperiment(store_, it->second, std::move(updated)));
  Logger("master")->info("experiment {}: priority set to {}", req.experiment_id(), req.priority());
  turns_.RequestSchedule();
  return absl::OkStatus();
}

absl::Status ExperimentManager::GetTrial(const v1::GetTrialRequest& req,
                                         v1::GetTrialResponse* resp) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(TrialState * t, registry_.FindTrial(req.id()));
  *resp->mutable_trial() = registry_.TrialView(*t);
  // The agents of its open run, else of its last run (an ended trial shows where it ran).
  std::set<std::string> agents;
  for (const auto& r : resp->trial().allocation().ranks()) agents.insert(r.agent_id());
  for (const auto& agent_id : agents) {
    ASSIGN_OR_RETURN(auto samples, store_.GetSystemMetrics(agent_id, kTrialSystemMetricsSamples));
    for (auto& m : samples) *resp->add_system_metrics() = std::move(m);
  }
  return absl::OkStatus();
}
}  // namespace det::master
