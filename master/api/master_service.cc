#include "master/api/master_service.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging/log_ring.h"
#include "common/logging/logging.h"
#include "common/status/status_macros.h"
#include "master/api/master_config_view.h"
#include "master/api/permissions.h"
#include "master/checkpoints/checkpoint_reads.h"
#include "master/scheduling/pools.h"
#include "master/views/views.h"

namespace det::master {
namespace {

constexpr absl::Duration kMaxPollWait = absl::Seconds(60);

}  // namespace

MasterService::MasterService(const config::MasterConfig& config, Clock& clock, Turns& turns,
                             Managers managers)
    : config_(config), clock_(clock), turns_(turns), m_(managers), start_time_ms_(clock.NowMs()) {}

// ---------------------------------------------------------------------------------------
// User API.

void MasterService::GetMasterInfo(const Caller&, const v1::GetMasterInfoRequest&,
                                  v1::GetMasterInfoResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, resp] {
    resp->set_version(kVersion);
    resp->set_cluster_id(cluster_id_);
    resp->set_cluster_name(config_.cluster_name);
    resp->set_start_time_ms(start_time_ms_);
    resp->set_database(config_.db_path);
    resp->set_scheduler(config_.scheduler_fit);
    return absl::OkStatus();
  });
}

void MasterService::GetMasterStats(const Caller&, const v1::GetMasterStatsRequest&,
                                   v1::GetMasterStatsResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, resp] {
    *resp = m_.registry.counters;
    resp->set_log_lines_stored_total(m_.logs.lines_stored_total());
    resp->set_api_calls_authenticated_total(m_.users.authenticated());
    resp->set_api_calls_rejected_total(m_.users.rejected());
    resp->set_uptime_ms(clock_.NowMs() - start_time_ms_);
    views::CountCluster(m_.agents.List(), m_.registry.ExperimentRows(), resp);
    return absl::OkStatus();
  });
}

void MasterService::GetMasterConfig(const Caller& caller, const v1::GetMasterConfigRequest&,
                                    v1::GetMasterConfigResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, resp]() -> absl::Status {
    RETURN_IF_ERROR(MustBeAdmin(caller, "read the master's config"));
    resp->set_config_yaml(MasterConfigYaml(config_));
    return absl::OkStatus();
  });
}

void MasterService::GetMasterLogs(const Caller& caller, const v1::GetMasterLogsRequest& req,
                                  v1::GetMasterLogsResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [&caller, &req, resp]() -> absl::Status {
    RETURN_IF_ERROR(MustBeAdmin(caller, "read the master's logs"));
    if (req.tail() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("tail: expected >= 0, got ", req.tail()));
    }
    LogRing::Page page = ProcessLogRing()->Read(req.tail(), req.after_id());
    for (RingLine& l : page.lines) {
      v1::MasterLogLine* line = resp->add_lines();
      line->set_id(l.id);
      line->set_time_ms(l.time_ms);
      line->set_level(std::move(l.level));
      line->set_component(std::move(l.component));
      line->set_message(std::move(l.message));
    }
    resp->set_dropped(page.dropped);
    resp->set_capacity(static_cast<int64_t>(page.capacity));
    return absl::OkStatus();
  });
}

void MasterService::CreateExperiment(const Caller& caller, const v1::CreateExperimentRequest& req,
                                     v1::CreateExperimentResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &req, resp, owner = caller.user.username()] {
    return m_.experiments.Create(owner, req, resp);
  });
}

void MasterService::ListExperiments(const Caller&, const v1::ListExperimentsRequest& req,
                                    v1::ListExperimentsResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &req, resp] { return m_.experiments.List(req, resp); });
}

void MasterService::GetExperiment(const Caller&, const v1::GetExperimentRequest& req,
                                  v1::GetExperimentResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &req, resp] { return m_.experiments.Get(req, resp); });
}

absl::Status MasterService::MayChange(const Caller& caller, int64_t experiment_id,
                                      absl::string_view action) {
  auto it = m_.registry.experiments.find(experiment_id);
  if (it == m_.registry.experiments.end()) return absl::OkStatus();  // The manager: NotFound.
  return MayChangeExperiment(caller, it->second.experiment, action);
}

void MasterService::KillExperiment(const Caller& caller, const v1::KillExperimentRequest& req,
                                   v1::KillExperimentResponse*, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req]() -> absl::Status {
    RETURN_IF_ERROR(MayChange(caller, req.id(), "kill"));
    return m_.experiments.Kill(req);
  });
}

void MasterService::PauseExperiment(const Caller& caller, const v1::PauseExperimentRequest& req,
                                    v1::PauseExperimentResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req, resp]() -> absl::Status {
    RETURN_IF_ERROR(MayChange(caller, req.id(), "pause"));
    return m_.experiments.Pause(req, resp);
  });
}

void MasterService::ActivateExperiment(const Caller& caller,
                                       const v1::ActivateExperimentRequest& req,
                                       v1::ActivateExperimentResponse*, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req]() -> absl::Status {
    RETURN_IF_ERROR(MayChange(caller, req.id(), "activate"));
    return m_.experiments.Activate(req);
  });
}

void MasterService::SetExperimentSlots(const Caller& caller,
                                       const v1::SetExperimentSlotsRequest& req,
                                       v1::SetExperimentSlotsResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req, resp]() -> absl::Status {
    RETURN_IF_ERROR(MayChange(caller, req.id(), "set the slots of"));
    return m_.experiments.SetSlots(req, resp);
  });
}

void MasterService::ArchiveExperiment(const Caller& caller,
                                      const v1::ArchiveExperimentRequest& req,
                                      v1::ArchiveExperimentResponse*, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req]() -> absl::Status {
    RETURN_IF_ERROR(MayChange(caller, req.id(), "archive"));
    return m_.experiments.SetArchived(req.id(), true);
  });
}

void MasterService::UnarchiveExperiment(const Caller& caller,
                                        const v1::UnarchiveExperimentRequest& req,
                                        v1::UnarchiveExperimentResponse*, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req]() -> absl::Status {
    RETURN_IF_ERROR(MayChange(caller, req.id(), "unarchive"));
    return m_.experiments.SetArchived(req.id(), false);
  });
}

void MasterService::PatchExperiment(const Caller& caller, const v1::PatchExperimentRequest& req,
                                    v1::PatchExperimentResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req, resp]() -> absl::Status {
    RETURN_IF_ERROR(MayChange(caller, req.id(), "change"));
    return m_.experiments.Patch(req, resp);
  });
}

void MasterService::DeleteExperiment(const Caller& caller, const v1::DeleteExperimentRequest& req,
                                     v1::DeleteExperimentResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req, resp]() -> absl::Status {
    RETURN_IF_ERROR(MayChange(caller, req.id(), "delete"));
    return m_.experiments.Delete(req, resp);
  });
}

void MasterService::KillTrial(const Caller& caller, const v1::KillTrialRequest& req,
                              v1::KillTrialResponse*, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req]() -> absl::Status {
    ASSIGN_OR_RETURN(TrialState * t, m_.registry.FindTrial(req.id()));
    RETURN_IF_ERROR(MayChange(caller, t->trial.experiment_id(), "kill trials of"));
    return m_.experiments.KillTrial(req);
  });
}

void MasterService::GetCheckpoint(const Caller&, const v1::GetCheckpointRequest& req,
                                  v1::GetCheckpointResponse* resp, Done done) {
  // On the read pool, not the loop (checkpoint_reads.h).
  m_.reads.Run(std::move(done), [&req, resp](MetricsReader& reader) {
    return det::master::GetCheckpoint(reader, req, resp);
  });
}

void MasterService::DeleteCheckpoints(const Caller& caller,
                                      const v1::DeleteCheckpointsRequest& req,
                                      v1::DeleteCheckpointsResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req, resp] {
    return m_.checkpoints.DeleteCheckpoints(req, resp, [&caller](const v1::Experiment& e) {
      return MayChangeExperiment(caller, e, "delete checkpoints of");
    });
  });
}

void MasterService::GetTrial(const Caller&, const v1::GetTrialRequest& req,
                             v1::GetTrialResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &req, resp] { return m_.experiments.GetTrial(req, resp); });
}

void MasterService::GetTrialMetrics(const Caller&, const v1::GetTrialMetricsRequest& req,
                                    v1::GetTrialMetricsResponse* resp, Done done) {
  // On the read pool, not the loop: the trial is checked and the series downsampled by the
  // store's query (`done` from the pool's thread).
  m_.reads.Run(std::move(done), [&req, resp](MetricsReader& reader) -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<v1::Metrics> rows,
                     reader.GetTrialMetrics(req.trial_id(), req.group(), req.max_points()));
    resp->mutable_metrics()->Reserve(static_cast<int>(rows.size()));
    for (v1::Metrics& m : rows) *resp->add_metrics() = std::move(m);
    return absl::OkStatus();
  });
}

void MasterService::ListCheckpoints(const Caller&, const v1::ListCheckpointsRequest& req,
                                    v1::ListCheckpointsResponse* resp, Done done) {
  // On the read pool, not the loop (checkpoint_reads.h).
  m_.reads.Run(std::move(done), [&req, resp](MetricsReader& reader) {
    return det::master::ListCheckpoints(reader, req, resp);
  });
}

void MasterService::GetTrialLogs(const Caller&, const v1::GetTrialLogsRequest& req,
                                 v1::GetTrialLogsResponse* resp, Done done) {
  turns_.Post([this, &req, resp, done = std::move(done)]() mutable {
    m_.logs.Read(req, resp, std::move(done), /*no_wait=*/m_.registry.shutting_down);
  });
}

void MasterService::ListAgents(const Caller&, const v1::ListAgentsRequest&,
                               v1::ListAgentsResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, resp] {
    for (auto& a : m_.agents.Listed()) *resp->add_agents() = std::move(a);
    return absl::OkStatus();
  });
}

void MasterService::EnableAgent(const Caller& caller, const v1::EnableAgentRequest& req,
                                v1::EnableAgentResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req, resp]() -> absl::Status {
    RETURN_IF_ERROR(MustBeAdmin(caller, "enable agents"));
    ASSIGN_OR_RETURN(*resp->mutable_agent(), m_.agents.SetEnabled(req.agent_id(), true));
    turns_.RequestSchedule();
    return absl::OkStatus();
  });
}

void MasterService::EnableSlot(const Caller& caller, const v1::EnableSlotRequest& req,
                               v1::EnableSlotResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req, resp]() -> absl::Status {
    RETURN_IF_ERROR(MustBeAdmin(caller, "enable slots"));
    ASSIGN_OR_RETURN(*resp->mutable_agent(),
                     m_.agents.SetSlotEnabled(req.agent_id(), req.slot_id(), true));
    turns_.RequestSchedule();
    return absl::OkStatus();
  });
}

void MasterService::DisableSlot(const Caller& caller, const v1::DisableSlotRequest& req,
                                v1::DisableSlotResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req, resp]() -> absl::Status {
    RETURN_IF_ERROR(MustBeAdmin(caller, "disable slots"));
    ASSIGN_OR_RETURN(*resp->mutable_agent(),
                     m_.agents.SetSlotEnabled(req.agent_id(), req.slot_id(), false));
    return absl::OkStatus();
  });
}

void MasterService::DisableAgent(const Caller& caller, const v1::DisableAgentRequest& req,
                                 v1::DisableAgentResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req, resp]() -> absl::Status {
    RETURN_IF_ERROR(MustBeAdmin(caller, "disable agents"));
    ASSIGN_OR_RETURN(*resp->mutable_agent(),
                     m_.agents.SetEnabled(req.agent_id(), false, req.drain()));
    // Not draining: its runs stop and are rescheduled elsewhere, not counted as restarts.
    if (!req.drain()) m_.allocations.StopRunsOn(req.agent_id());
    return absl::OkStatus();
  });
}

void MasterService::ResetAgentCredential(const Caller& caller,
                                         const v1::ResetAgentCredentialRequest& req,
                                         v1::ResetAgentCredentialResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req, resp]() -> absl::Status {
    RETURN_IF_ERROR(MustBeAdmin(caller, "reset agent credentials"));
    RETURN_IF_ERROR(m_.agents.ResetCredential(req.agent_id(), caller.user.username()));
    *resp->mutable_agent() = *m_.agents.Find(req.agent_id());
    return absl::OkStatus();
  });
}

void MasterService::ListJobs(const Caller&, const v1::ListJobsRequest& req,
                             v1::ListJobsResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    if (!req.resource_pool().empty() && !FindPool(config_, req.resource_pool())) {
      return absl::NotFoundError(absl::StrCat("resource pool '", req.resource_pool(), "' not found"));
    }
    for (auto& j : views::Jobs(m_.registry.ExperimentRows(), req.resource_pool())) {
      *resp->add_jobs() = std::move(j);
    }
    return absl::OkStatus();
  });
}

void MasterService::UpdateJobPriority(const Caller& caller,
                                      const v1::UpdateJobPriorityRequest& req,
                                      v1::UpdateJobPriorityResponse*, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req]() -> absl::Status {
    RETURN_IF_ERROR(MayChange(caller, req.experiment_id(), "change the priority of"));
    return m_.experiments.UpdateJobPriority(req);
  });
}

void MasterService::ListTasks(const Caller&, const v1::ListTasksRequest&,
                              v1::ListTasksResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, resp] {
    for (const views::ExperimentRow& row : m_.registry.ExperimentRows()) {
      for (const views::TrialRow& t : row.trials) {
        if (t.trial->allocation().id().empty()) continue;
        *resp->add_tasks() = views::TrialTask(t, row.experiment->resource_pool());
      }
    }
    // Tasks in trial-id order, as before the views were split out.
    std::stable_sort(resp->mutable_tasks()->begin(), resp->mutable_tasks()->end(),
                     [](const v1::Task& a, const v1::Task& b) { return a.trial_id() < b.trial_id(); });
    m_.checkpoints.AddTaskViews(resp);
    return absl::OkStatus();
  });
}

void MasterService::ListResourcePools(const Caller&, const v1::ListResourcePoolsRequest&,
                                      v1::ListResourcePoolsResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, resp] {
    for (auto& p : views::ResourcePools(config_.resource_pools, m_.agents.List(),
                                        m_.registry.ExperimentRows())) {
      *resp->add_pools() = std::move(p);
    }
    return absl::OkStatus();
  });
}

void MasterService::SetTemplate(const Caller& caller, const v1::SetTemplateRequest& req,
                                v1::SetTemplateResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req, resp]() -> absl::Status {
    if (absl::StatusOr<v1::Template> old = m_.templates.Get(req.name()); old.ok()) {
      if (req.create_only()) {
        return absl::AlreadyExistsError(absl::StrCat(
            "template '", req.name(), "' already exists; det template update-config ",
            req.name(), " FILE replaces its config"));
      }
      RETURN_IF_ERROR(MayChangeTemplate(caller, *old, "replace"));
    } else if (!absl::IsNotFound(old.status())) {
      return old.status();
    } else if (req.replace_only()) {
      return absl::NotFoundError(absl::StrCat("template '", req.name(),
                                              "' does not exist; det template create ",
                                              req.name(), " FILE makes it"));
    }
    bool created = false;
    ASSIGN_OR_RETURN(*resp->mutable_template_(),
                     m_.templates.Set(req.name(), req.config_yaml(), req.config_path(),
                                      caller.user.username(), &created));
    resp->set_created(created);
    Logger("master")->info("template {} {}", req.name(), created ? "created" : "replaced");
    return absl::OkStatus();
  });
}

void MasterService::ListTemplates(const Caller&, const v1::ListTemplatesRequest&,
                                  v1::ListTemplatesResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, resp]() -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<v1::Template> all, m_.templates.List());
    for (auto& t : all) *resp->add_templates() = std::move(t);
    return absl::OkStatus();
  });
}

void MasterService::GetTemplate(const Caller&, const v1::GetTemplateRequest& req,
                                v1::GetTemplateResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    ASSIGN_OR_RETURN(*resp->mutable_template_(), m_.templates.Get(req.name()));
    return absl::OkStatus();
  });
}

void MasterService::RemoveTemplate(const Caller& caller, const v1::RemoveTemplateRequest& req,
                                   v1::RemoveTemplateResponse*, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req]() -> absl::Status {
    ASSIGN_OR_RETURN(v1::Template old, m_.templates.Get(req.name()));  // NotFound as before.
    RETURN_IF_ERROR(MayChangeTemplate(caller, old, "remove"));
    RETURN_IF_ERROR(m_.templates.Remove(req.name()));
    Logger("master")->info("template {} removed", req.name());
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------------
// The model registry.

void MasterService::CreateModel(const Caller& caller, const v1::CreateModelRequest& req,
                                v1::CreateModelResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req, resp]() -> absl::Status {
    ASSIGN_OR_RETURN(*resp->mutable_model(), m_.models.Create(req, caller.user.username()));
    return absl::OkStatus();
  });
}

void MasterService::ListModels(const Caller&, const v1::ListModelsRequest& req,
                               v1::ListModelsResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    for (auto& m : m_.models.List(req)) *resp->add_models() = std::move(m);
    return absl::OkStatus();
  });
}

void MasterService::GetModel(const Caller&, const v1::GetModelRequest& req,
                             v1::GetModelResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    ASSIGN_OR_RETURN(*resp->mutable_model(), m_.models.Get(req.name()));
    return absl::OkStatus();
  });
}

void MasterService::PatchModel(const Caller& caller, const v1::PatchModelRequest& req,
                               v1::PatchModelResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req, resp]() -> absl::Status {
    ASSIGN_OR_RETURN(v1::Model old, m_.models.Get(req.name()));
    RETURN_IF_ERROR(MayChangeModel(caller, old, "change"));
    ASSIGN_OR_RETURN(*resp->mutable_model(), m_.models.Patch(req));
    return absl::OkStatus();
  });
}

void MasterService::DeleteModel(const Caller& caller, const v1::DeleteModelRequest& req,
                                v1::DeleteModelResponse*, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req]() -> absl::Status {
    ASSIGN_OR_RETURN(v1::Model old, m_.models.Get(req.name()));
    RETURN_IF_ERROR(MayChangeModel(caller, old, "delete"));
    return m_.models.Delete(req.name());
  });
}

void MasterService::RegisterModelVersion(const Caller& caller,
                                         const v1::RegisterModelVersionRequest& req,
                                         v1::RegisterModelVersionResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req, resp]() -> absl::Status {
    ASSIGN_OR_RETURN(v1::Model model, m_.models.Get(req.model_name()));
    RETURN_IF_ERROR(MayChangeModel(caller, model, "register versions of"));
    ASSIGN_OR_RETURN(*resp->mutable_model_version(),
                     m_.models.RegisterVersion(req, caller.user.username()));
    return absl::OkStatus();
  });
}

void MasterService::ListModelVersions(const Caller&, const v1::ListModelVersionsRequest& req,
                                      v1::ListModelVersionsResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    ASSIGN_OR_RETURN(*resp->mutable_model(), m_.models.Get(req.model_name()));
    ASSIGN_OR_RETURN(std::vector<v1::ModelVersion> versions, m_.models.Versions(req.model_name()));
    for (auto& v : versions) *resp->add_model_versions() = std::move(v);
    return absl::OkStatus();
  });
}

void MasterService::GetModelVersion(const Caller&, const v1::GetModelVersionRequest& req,
                                    v1::GetModelVersionResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    ASSIGN_OR_RETURN(*resp->mutable_model_version(),
                     m_.models.Version(req.model_name(), req.version()));
    return absl::OkStatus();
  });
}

void MasterService::DeleteModelVersion(const Caller& caller,
                                       const v1::DeleteModelVersionRequest& req,
                                       v1::DeleteModelVersionResponse*, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req]() -> absl::Status {
    ASSIGN_OR_RETURN(v1::Model model, m_.models.Get(req.model_name()));
    RETURN_IF_ERROR(MayChangeModel(caller, model, "delete versions of"));
    return m_.models.DeleteVersion(req.model_name(), req.version());
  });
}

// ---------------------------------------------------------------------------------------
// Agent channel.

void MasterService::Register(const v1::RegisterRequest& req, v1::RegisterResponse* resp,
                             Done done) {
  RegisterFrom("", req, resp, std::move(done));
}

void MasterService::RegisterFrom(const std::string& peer, const v1::RegisterRequest& req,
                                 v1::RegisterResponse* resp, Done done) {
  turns_.OnLoop(std::move(done),
                [this, peer, &req, resp] { return m_.liveness.Register(req, resp, peer); });
}

void MasterService::Heartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse*,
                              Done done) {
  turns_.OnLoopUrgent(std::move(done), [this, &req] { return m_.liveness.Heartbeat(req); });
}

void MasterService::PollCommands(const v1::PollCommandsRequest& req,
                                 v1::PollCommandsResponse* resp, Done done) {
  turns_.Post([this, &req, resp, done = std::move(done)]() mutable {
    if (m_.registry.shutting_down) {
      done(absl::UnavailableError("master is shutting down"));
      return;
    }
    auto wait = std::clamp(absl::Milliseconds(req.wait_ms()), absl::ZeroDuration(), kMaxPollWait);
    m_.agents.Poll(req.agent_id(), req.session_id(), wait,
                   [resp, done = std::move(done)](absl::Status st,
                                                  std::vector<v1::AgentCommand> cmds) {
                     for (auto& c : cmds) *resp->add_commands() = std::move(c);
                     done(st);
                   });
  });
}

void MasterService::ReportLaunched(const v1::ReportLaunchedRequest& req,
                                   v1::ReportLaunchedResponse*, Done done) {
  turns_.OnLoop(std::move(done), [this, &req] { return m_.allocations.ReportLaunched(req); });
}

void MasterService::ReportExit(const v1::ReportExitRequest& req, v1::ReportExitResponse*,
                               Done done) {
  turns_.OnLoop(std::move(done), [this, &req]() -> absl::Status {
    RETURN_IF_ERROR(m_.agents.Touch(req.agent_id(), req.session_id()));
    // Only for ranks placed on the calling agent (PERMISSION_DENIED naming the rule).
    RETURN_IF_ERROR(m_.allocations.CheckAgentReport(req.agent_id(), req.allocation_id(), req.rank()));
    std::string how = req.signal() != 0 ? absl::StrCat("killed by signal ", req.signal())
                                        : absl::StrCat("exit code ", req.exit_code());
    if (!req.message().empty()) absl::StrAppend(&how, " (", req.message(), ")");
    bool abnormal = req.signal() != 0 || req.exit_code() != 0;
    if (!m_.checkpoints.OnExit(req, how, abnormal)) m_.allocations.OnExit(req, how, abnormal);
    return absl::OkStatus();
  });
}

void MasterService::GetModelDef(const Caller&, const v1::GetModelDefRequest& req,
                                v1::GetModelDefResponse* resp, Done done) {
  // Checked on the loop; the context is read off it (`done` from the reader).
  turns_.Post([this, &req, resp, done = std::move(done)]() mutable {
    if (m_.registry.experiments.count(req.experiment_id()) == 0) {
      return done(absl::NotFoundError(
          absl::StrCat("experiment ", req.experiment_id(), " not found")));
    }
    auto read = std::make_shared<v1::GetModelContextResponse>();
    m_.contexts.Read(req.experiment_id(), read.get(),
                     [read, resp, done = std::move(done)](absl::Status st) {
                       if (st.ok()) {
                         resp->set_model_context(std::move(*read->mutable_model_context()));
                         resp->set_sha256(read->sha256());
                       }
                       done(st);
                     });
  });
}

void MasterService::GetModelContext(const v1::GetModelContextRequest& req,
                                    v1::GetModelContextResponse* resp, Done done) {
  // Authorized on the loop; the context is read off it (`done` from the reader).
  turns_.Post([this, &req, resp, done = std::move(done)]() mutable {
    absl::StatusOr<int64_t> experiment = [&]() -> absl::StatusOr<int64_t> {
      RETURN_IF_ERROR(m_.agents.Touch(req.agent_id(), req.session_id()));
      return m_.allocations.ContextExperiment(req.agent_id(), req.allocation_id());
    }();
    if (!experiment.ok()) return done(experiment.status());
    m_.contexts.Read(*experiment, resp, std::move(done));
  });
}

void MasterService::ShipLogs(const v1::ShipLogsRequest& req, v1::ShipLogsResponse*, Done done) {
  turns_.OnLoop(std::move(done), [this, &req]() -> absl::Status {
    RETURN_IF_ERROR(m_.agents.Touch(req.agent_id(), req.session_id()));
    std::vector<v1::LogLine> lines;
    std::set<int64_t> touched;
    const auto& allocation_trial = m_.registry.allocation_trial;
    for (const auto& l : req.lines()) {
      v1::LogLine line = l;
      line.set_agent_id(req.agent_id());
      auto at = allocation_trial.find(l.allocation_id());
      if (at != allocation_trial.end()) line.set_trial_id(at->second);
      // A checkpoint GC task's output goes to the log of the trial that started it.
      const bool gc = m_.checkpoints.RouteLogLine(&line);
      // An experiment deletion's task has no trial: its output went to the master's log.
      if (gc && line.trial_id() == 0) continue;
      // Lines of runs already ended are still stored against their trial.
      if (at == allocation_trial.end() && !gc && m_.registry.trials.count(l.trial_id()) == 0) {
        continue;
      }
      touched.insert(line.trial_id());
      lines.push_back(std::move(line));
    }
    if (req.dropped() > 0 && !lines.empty()) {
      v1::LogLine note = lines.front();
      note.set_stream("agent");
      note.set_message(absl::StrCat("[", req.dropped(),
                                    " log lines dropped while the master was unreachable]"));
      lines.insert(lines.begin(), note);
    }
    return m_.logs.AddLines(&lines, {touched.begin(), touched.end()});
  });
}

// ---------------------------------------------------------------------------------------
// Worker channel.

void MasterService::ReportMetrics(const v1::ReportMetricsRequest& req,
                                  v1::ReportMetricsResponse*, Done done) {
  // Checked and copied on this (gRPC's) thread; the loop only authorises and stores.
  m_.metrics.Report(req, std::move(done));
}

void MasterService::ReportCheckpoint(const v1::ReportCheckpointRequest& req,
                                     v1::ReportCheckpointResponse*, Done done) {
  turns_.OnLoop(std::move(done), [this, &req] { return m_.checkpoints.ReportCheckpoint(req); });
}

void MasterService::Rendezvous(const v1::RendezvousRequest& req, v1::RendezvousResponse* resp,
                               Done done) {
  turns_.Post([this, &req, resp, done = std::move(done)]() mutable {
    m_.allocations.Rendezvous(req, resp, std::move(done));
  });
}

void MasterService::ShouldPreempt(const v1::ShouldPreemptRequest& req,
                                  v1::ShouldPreemptResponse* resp, Done done) {
  turns_.Post([this, &req, resp, done = std::move(done)]() mutable {
    m_.allocations.ShouldPreempt(req, resp, std::move(done));
  });
}

void MasterService::ReportEarlyExit(const v1::ReportEarlyExitRequest& req,
                                    v1::ReportEarlyExitResponse*, Done done) {
  turns_.OnLoop(std::move(done), [this, &req] { return m_.allocations.ReportEarlyExit(req); });
}

void MasterService::GetExperimentBestValidation(const v1::GetExperimentBestValidationRequest& req,
                                                v1::GetExperimentBestValidationResponse* resp,
                                                Done done) {
  turns_.OnLoop(std::move(done), [this, &req, resp] {
    return m_.allocations.GetExperimentBestValidation(req, resp);
  });
}

}  // namespace det::master
