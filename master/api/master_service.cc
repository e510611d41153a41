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
#include "master/views/pages.h"
#include "master/views/views.h"

namespace det::master {
namespace {

constexpr absl::Duration kMaxPollWait = absl::Seconds(60);

// The read model's keys: a route's name, then what selects the piece.
constexpr char kExperimentsKey[] = "experiments";
constexpr char kTemplatesPrefix[] = "template";

// Answers `done` with answer(piece) where the piece of type Piece under `key` is filled by
// build(Piece*) on the loop (ReadModel::Read; `build` must not refer to the request).
template <typename Piece, typename BuildFn, typename AnswerFn>
void ReadPiece(ReadModel& reads, const std::string& key, BuildFn build, AnswerFn answer,
               Done done, bool stable = false) {
  reads.Read(
      key, Piece(),
      [build = std::move(build)](ReadModel::Message* out) { return build(static_cast<Piece*>(out)); },
      [answer = std::move(answer), done = std::move(done)](const ReadModel::Piece& p) {
        if (!p.status.ok()) return done(p.status);
        done(answer(static_cast<const Piece&>(*p.value)));
      },
      stable);
}

// ReadPiece whose answer is the piece itself, copied into `resp`.
template <typename Resp, typename BuildFn>
void ReadCopy(ReadModel& reads, const std::string& key, BuildFn build, Resp* resp, Done done,
              bool stable = false) {
  ReadPiece<Resp>(
      reads, key, std::move(build),
      [resp](const Resp& piece) {
        *resp = piece;
        return absl::OkStatus();
      },
      std::move(done), stable);
}

}  // namespace

MasterService::MasterService(const config::MasterConfig& config, Clock& clock, Turns& turns,
                             Managers managers)
    : config_(config),
      clock_(clock),
      turns_(turns),
      m_(managers),
      start_time_ms_(clock.NowMs()),
      reads_(turns.loop(), clock) {
  turns_.SetPublish([this] { reads_.Publish(); });
}

// ---------------------------------------------------------------------------------------
// User API.

// Reads of what never changes once serving (the config, the cluster id) or is thread-safe
// (the process's log ring) are answered on the caller's thread.
void MasterService::GetMasterInfo(const Caller&, const v1::GetMasterInfoRequest&,
                                  v1::GetMasterInfoResponse* resp, Done done) {
  resp->set_version(kVersion);
  resp->set_cluster_id(cluster_id_);
  resp->set_cluster_name(config_.cluster_name);
  resp->set_start_time_ms(start_time_ms_);
  resp->set_database(config_.db_path);
  resp->set_scheduler(config_.scheduler_fit);
  done(absl::OkStatus());
}

void MasterService::GetMasterStats(const Caller&, const v1::GetMasterStatsRequest&,
                                   v1::GetMasterStatsResponse* resp, Done done) {
  ReadPiece<v1::GetMasterStatsResponse>(
      reads_, "stats",
      [this](v1::GetMasterStatsResponse* stats) {
        *stats = m_.registry.counters;
        stats->set_log_lines_stored_total(m_.logs.lines_stored_total());
        stats->set_api_calls_authenticated_total(m_.users.authenticated());
        stats->set_api_calls_rejected_total(m_.users.rejected());
        views::CountCluster(m_.agents.List(), m_.registry.ExperimentRows(), stats);
        return absl::OkStatus();
      },
      [this, resp](const v1::GetMasterStatsResponse& stats) {
        *resp = stats;
        resp->set_uptime_ms(clock_.NowMs() - start_time_ms_);
        return absl::OkStatus();
      },
      std::move(done));
}

void MasterService::GetMasterConfig(const Caller& caller, const v1::GetMasterConfigRequest&,
                                    v1::GetMasterConfigResponse* resp, Done done) {
  done([&]() -> absl::Status {
    RETURN_IF_ERROR(MustBeAdmin(caller, "read the master's config"));
    resp->set_config_yaml(MasterConfigYaml(config_));
    return absl::OkStatus();
  }());
}

void MasterService::GetMasterLogs(const Caller& caller, const v1::GetMasterLogsRequest& req,
                                  v1::GetMasterLogsResponse* resp, Done done) {
  done([&]() -> absl::Status {
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
  }());
}

void MasterService::CreateExperiment(const Caller& caller, const v1::CreateExperimentRequest& req,
                                     v1::CreateExperimentResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &req, resp, owner = caller.user.username()] {
    return m_.experiments.Create(owner, req, resp);
  });
}

void MasterService::ReadExperiments(
    std::function<absl::Status(const v1::ListExperimentsResponse&)> answer, Done done) {
  // Every experiment, archived too, by id; filtered, sorted and paged by the reader.
  ReadPiece<v1::ListExperimentsResponse>(
      reads_, kExperimentsKey,
      [this](v1::ListExperimentsResponse* all) {
        v1::ListExperimentsRequest every;
        every.set_include_archived(true);
        return m_.experiments.List(every, all);
      },
      std::move(answer), std::move(done));
}

void MasterService::ListExperiments(const Caller&, const v1::ListExperimentsRequest& req,
                                    v1::ListExperimentsResponse* resp, Done done) {
  // Bad values are refused before anything is read (PageExperiments checks them again).
  v1::ListExperimentsResponse none;
  absl::Status checked = views::PageExperiments({}, req, &none);
  if (!checked.ok()) return done(checked);
  ReadExperiments(
      [&req, resp](const v1::ListExperimentsResponse& all) {
        return views::PageExperiments(all.experiments(), req, resp);
      },
      std::move(done));
}

void MasterService::GetExperiment(const Caller&, const v1::GetExperimentRequest& req,
                                  v1::GetExperimentResponse* resp, Done done) {
  ReadCopy(
      reads_, absl::StrCat("experiment/", req.id()),
      [this, id = req.id()](v1::GetExperimentResponse* out) {
        v1::GetExperimentRequest get;
        get.set_id(id);
        return m_.experiments.Get(get, out);
      },
      resp, std::move(done));
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

void MasterService::ContinueExperiment(const Caller& caller,
                                       const v1::ContinueExperimentRequest& req,
                                       v1::ContinueExperimentResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req, resp]() -> absl::Status {
    RETURN_IF_ERROR(MayChange(caller, req.id(), "continue"));
    return m_.experiments.Continue(req, resp);
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
  ReadCopy(
      reads_, absl::StrCat("trial/", req.id()),
      [this, id = req.id()](v1::GetTrialResponse* out) {
        v1::GetTrialRequest get;
        get.set_id(id);
        return m_.experiments.GetTrial(get, out);
      },
      resp, std::move(done));
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
  ReadCopy(
      reads_, "agents",
      [this](v1::ListAgentsResponse* out) {
        for (auto& a : m_.agents.Listed()) *out->add_agents() = std::move(a);
        return absl::OkStatus();
      },
      resp, std::move(done));
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
  if (!req.resource_pool().empty() && !FindPool(config_, req.resource_pool())) {
    return done(
        absl::NotFoundError(absl::StrCat("resource pool '", req.resource_pool(), "' not found")));
  }
  v1::ListJobsResponse none;
  absl::Status checked = views::PageJobs({}, req, &none);
  if (!checked.ok()) return done(checked);
  ReadPiece<v1::ListJobsResponse>(
      reads_, absl::StrCat("jobs/", req.resource_pool()),
      [this, pool = req.resource_pool()](v1::ListJobsResponse* out) {
        for (auto& j : views::Jobs(m_.registry.ExperimentRows(), pool)) {
          *out->add_jobs() = std::move(j);
        }
        return absl::OkStatus();
      },
      [&req, resp](const v1::ListJobsResponse& all) { return views::PageJobs(all.jobs(), req, resp); },
      std::move(done));
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
  ReadCopy(
      reads_, "tasks",
      [this](v1::ListTasksResponse* out) {
        for (const views::ExperimentRow& row : m_.registry.ExperimentRows()) {
          for (const views::TrialRow& t : row.trials) {
            if (t.trial->allocation().id().empty()) continue;
            *out->add_tasks() = views::TrialTask(t, row.experiment->resource_pool());
          }
        }
        // Tasks in trial-id order, as before the views were split out.
        std::stable_sort(out->mutable_tasks()->begin(), out->mutable_tasks()->end(),
                         [](const v1::Task& a, const v1::Task& b) { return a.trial_id() < b.trial_id(); });
        m_.checkpoints.AddTaskViews(out);
        return absl::OkStatus();
      },
      resp, std::move(done));
}

void MasterService::ListResourcePools(const Caller&, const v1::ListResourcePoolsRequest&,
                                      v1::ListResourcePoolsResponse* resp, Done done) {
  ReadCopy(
      reads_, "pools",
      [this](v1::ListResourcePoolsResponse* out) {
        for (auto& p : views::ResourcePools(config_.resource_pools, m_.agents.List(),
                                            m_.registry.ExperimentRows())) {
          *out->add_pools() = std::move(p);
        }
        return absl::OkStatus();
      },
      resp, std::move(done));
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
    reads_.Invalidate(kTemplatesPrefix);
    ASSIGN_OR_RETURN(*resp->mutable_template_(),
                     m_.templates.Set(req.name(), req.config_yaml(), req.config_path(),
                                      caller.user.username(), &created));
    resp->set_created(created);
    Logger("master")->info("template {} {}", req.name(), created ? "created" : "replaced");
    return absl::OkStatus();
  });
}

// Templates are read from the store: their pieces are rebuilt only after a change
// (Invalidate in SetTemplate and RemoveTemplate).
void MasterService::ListTemplates(const Caller&, const v1::ListTemplatesRequest&,
                                  v1::ListTemplatesResponse* resp, Done done) {
  ReadCopy(
      reads_, absl::StrCat(kTemplatesPrefix, "s"),
      [this](v1::ListTemplatesResponse* out) -> absl::Status {
        ASSIGN_OR_RETURN(std::vector<v1::Template> all, m_.templates.List());
        for (auto& t : all) *out->add_templates() = std::move(t);
        return absl::OkStatus();
      },
      resp, std::move(done), /*stable=*/true);
}

void MasterService::GetTemplate(const Caller&, const v1::GetTemplateRequest& req,
                                v1::GetTemplateResponse* resp, Done done) {
  ReadCopy(
      reads_, absl::StrCat(kTemplatesPrefix, "/", req.name()),
      [this, name = req.name()](v1::GetTemplateResponse* out) -> absl::Status {
        ASSIGN_OR_RETURN(*out->mutable_template_(), m_.templates.Get(name));
        return absl::OkStatus();
      },
      resp, std::move(done), /*stable=*/true);
}

void MasterService::RemoveTemplate(const Caller& caller, const v1::RemoveTemplateRequest& req,
                                   v1::RemoveTemplateResponse*, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req]() -> absl::Status {
    ASSIGN_OR_RETURN(v1::Template old, m_.templates.Get(req.name()));  // NotFound as before.
    RETURN_IF_ERROR(MayChangeTemplate(caller, old, "remove"));
    reads_.Invalidate(kTemplatesPrefix);
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
  ReadCopy(
      reads_, absl::StrCat("models/", req.SerializeAsString()),
      [this, req](v1::ListModelsResponse* out) {
        for (auto& m : m_.models.List(req)) *out->add_models() = std::move(m);
        return absl::OkStatus();
      },
      resp, std::move(done));
}

void MasterService::GetModel(const Caller&, const v1::GetModelRequest& req,
                             v1::GetModelResponse* resp, Done done) {
  ReadCopy(
      reads_, absl::StrCat("model/", req.name()),
      [this, name = req.name()](v1::GetModelResponse* out) -> absl::Status {
        ASSIGN_OR_RETURN(*out->mutable_model(), m_.models.Get(name));
        return absl::OkStatus();
      },
      resp, std::move(done));
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
  ReadCopy(
      reads_, absl::StrCat("model_versions/", req.model_name()),
      [this, name = req.model_name()](v1::ListModelVersionsResponse* out) -> absl::Status {
        ASSIGN_OR_RETURN(*out->mutable_model(), m_.models.Get(name));
        ASSIGN_OR_RETURN(std::vector<v1::ModelVersion> versions, m_.models.Versions(name));
        for (auto& v : versions) *out->add_model_versions() = std::move(v);
        return absl::OkStatus();
      },
      resp, std::move(done));
}

void MasterService::GetModelVersion(const Caller&, const v1::GetModelVersionRequest& req,
                                    v1::GetModelVersionResponse* resp, Done done) {
  ReadCopy(
      reads_, absl::StrCat("model_version/", req.version(), "/", req.model_name()),
      [this, name = req.model_name(), version = req.version()](
          v1::GetModelVersionResponse* out) -> absl::Status {
        ASSIGN_OR_RETURN(*out->mutable_model_version(), m_.models.Version(name, version));
        return absl::OkStatus();
      },
      resp, std::move(done));
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

void MasterService::PatchModelVersion(const Caller& caller,
                                      const v1::PatchModelVersionRequest& req,
                                      v1::PatchModelVersionResponse* resp, Done done) {
  turns_.OnLoop(std::move(done), [this, &caller, &req, resp]() -> absl::Status {
    ASSIGN_OR_RETURN(v1::Model model, m_.models.Get(req.model_name()));
    RETURN_IF_ERROR(MayChangeModel(caller, model, "change versions of"));
    ASSIGN_OR_RETURN(*resp->mutable_model_version(), m_.models.PatchVersion(req));
    return absl::OkStatus();
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
  // Checked in the read model (the experiment list); the context is read off the loop
  // (`done` from the reader).
  auto context = [this, &req, resp](Done done) {
    auto read = std::make_shared<v1::GetModelContextResponse>();
    m_.contexts.Read(req.experiment_id(), read.get(),
                     [read, resp, done = std::move(done)](absl::Status st) {
                       if (st.ok()) {
                         resp->set_model_context(std::move(*read->mutable_model_context()));
                         resp->set_sha256(read->sha256());
                       }
                       done(st);
                     });
  };
  auto found = std::make_shared<bool>(false);
  ReadExperiments(
      [found, id = req.experiment_id()](const v1::ListExperimentsResponse& all) {
        for (const v1::Experiment& e : all.experiments()) *found = *found || e.id() == id;
        if (*found) return absl::OkStatus();
        return absl::NotFoundError(absl::StrCat("experiment ", id, " not found"));
      },
      [found, context, done = std::move(done)](absl::Status st) mutable {
        if (!st.ok()) return done(st);
        context(std::move(done));
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
  // Checked and copied on this (gRPC's) thread; the loop only authorises and stores. The
  // acknowledgement, given inside the storing turn, waits for that turn's publication.
  m_.metrics.Report(req, turns_.AckAfterTurn(std::move(done)));
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
  // Keyed by the whole request: the worker's credentials are checked in the piece.
  ReadCopy(
      reads_, absl::StrCat("best_validation/", req.SerializeAsString()),
      [this, req](v1::GetExperimentBestValidationResponse* out) {
        return m_.allocations.GetExperimentBestValidation(req, out);
      },
      resp, std::move(done));
}

}  // namespace det::master
