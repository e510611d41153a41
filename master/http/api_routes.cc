#include "master/http/api_routes.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "master/http/rest_call.h"

namespace det::master {
namespace {

using rest::HandlerRoute;
using rest::Register;
using rest::ToJson;

// Longest wait_ms of a followed log request.
constexpr int kMaxLogWaitMs = 30000;
constexpr int kDefaultFollowWaitMs = 20000;

// "follow=true" (and "wait_ms") of a logs request: a long poll of at most kMaxLogWaitMs.
absl::Status PrepareLogs(Params& params, v1::GetTrialLogsRequest& req) {
  bool follow = false;
  if (auto f = TakeParam(params, "follow"); f && !absl::SimpleAtob(*f, &follow)) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter 'follow': expected true or false, got \"", *f, "\""));
  }
  int wait_ms = follow ? kDefaultFollowWaitMs : 0;
  if (auto w = TakeParam(params, "wait_ms"); w && !absl::SimpleAtoi(*w, &wait_ms)) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter 'wait_ms': expected an integer, got \"", *w, "\""));
  }
  if (wait_ms < 0 || wait_ms > kMaxLogWaitMs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter 'wait_ms': expected 0 to ", kMaxLogWaitMs, " (milliseconds), got ", wait_ms));
  }
  req.set_wait_ms(wait_ms);
  return absl::OkStatus();
}

// {"slots": [...]}: every slot of every agent, with its agent's id.
absl::StatusOr<std::string> RenderSlots(const v1::ListAgentsResponse& resp) {
  std::vector<std::string> slots;
  for (const auto& a : resp.agents()) {
    for (v1::Slot slot : a.slots()) {
      slot.set_agent_id(a.id());
      ASSIGN_OR_RETURN(std::string json, ToJson(slot));
      slots.push_back(std::move(json));
    }
  }
  return absl::StrCat("{\"slots\":[", absl::StrJoin(slots, ","), "]}");
}

}  // namespace

void AddApiRoutes(httplib::Server& srv, rest::RouteTable& routes_, ApiHandler& api,
                  UserHandler* users) {
  const std::string id = "(\\d+)";
  const std::string name = "([^/]+)";
  const std::string v1 = "/api/v1";
  Register(srv, routes_, "GET", v1 + "/master", HandlerRoute(api, &ApiHandler::GetMasterInfo), users);
  Register(srv, routes_, "GET", v1 + "/master/stats", HandlerRoute(api, &ApiHandler::GetMasterStats), users);
  Register(srv, routes_, "GET", v1 + "/master/config", HandlerRoute(api, &ApiHandler::GetMasterConfig),
           users);
  Register(srv, routes_, "GET", v1 + "/master/logs", HandlerRoute(api, &ApiHandler::GetMasterLogs),
           users);

  if (users != nullptr) {
    rest::Route<v1::LoginRequest, v1::LoginResponse> login;
    login.call = [users](const Caller&, const v1::LoginRequest& q, v1::LoginResponse* p,
                         Done d) { users->Login(q, p, std::move(d)); };
    login.open = true;
    Register(srv, routes_, "POST", v1 + "/auth/login", login, users);
    Register(srv, routes_, "POST", v1 + "/auth/logout", HandlerRoute(*users, &UserHandler::Logout), users);
    Register(srv, routes_, "GET", v1 + "/me", HandlerRoute(*users, &UserHandler::WhoAmI), users);
    Register(srv, routes_, "GET", v1 + "/users", HandlerRoute(*users, &UserHandler::ListUsers), users);
    Register(srv, routes_, "POST", v1 + "/users", HandlerRoute(*users, &UserHandler::CreateUser), users);
    Register(srv, routes_, "POST", v1 + "/users/" + name + "/password",
             HandlerRoute(*users, &UserHandler::ChangePassword, {"username"}), users);
    Register(srv, routes_, "PUT", v1 + "/users/" + name + "/agent-user-group",
             HandlerRoute(*users, &UserHandler::LinkWithAgentUser, {"username"}), users);
    Register(srv, routes_, "PUT", v1 + "/users/" + name + "/active",
             HandlerRoute(*users, &UserHandler::SetUserActive, {"username"}), users);
    Register(srv, routes_, "PUT", v1 + "/users/" + name + "/username",
             HandlerRoute(*users, &UserHandler::RenameUser, {"username"}), users);
  }

  Register(srv, routes_, "GET", v1 + "/experiments", HandlerRoute(api, &ApiHandler::ListExperiments),
           users);
  {
    auto create = HandlerRoute(api, &ApiHandler::CreateExperiment);
    create.max_body = rest::kMaxBodyBytes;  // the config and the context (64 MiB, base64)
    Register(srv, routes_, "POST", v1 + "/experiments", create, users);
  }
  Register(srv, routes_, "GET", v1 + "/experiments/" + id,
           HandlerRoute(api, &ApiHandler::GetExperiment, {"id"}), users);
  Register(srv, routes_, "POST", v1 + "/experiments/" + id + "/kill",
           HandlerRoute(api, &ApiHandler::KillExperiment, {"id"}), users);
  Register(srv, routes_, "POST", v1 + "/experiments/" + id + "/pause",
           HandlerRoute(api, &ApiHandler::PauseExperiment, {"id"}), users);
  Register(srv, routes_, "POST", v1 + "/experiments/" + id + "/activate",
           HandlerRoute(api, &ApiHandler::ActivateExperiment, {"id"}), users);
  Register(srv, routes_, "POST", v1 + "/experiments/" + id + "/continue",
           HandlerRoute(api, &ApiHandler::ContinueExperiment, {"id"}), users);
  Register(srv, routes_, "POST", v1 + "/experiments/" + id + "/slots",
           HandlerRoute(api, &ApiHandler::SetExperimentSlots, {"id"}), users);

  Register(srv, routes_, "POST", v1 + "/experiments/" + id + "/archive",
           HandlerRoute(api, &ApiHandler::ArchiveExperiment, {"id"}), users);
  Register(srv, routes_, "POST", v1 + "/experiments/" + id + "/unarchive",
           HandlerRoute(api, &ApiHandler::UnarchiveExperiment, {"id"}), users);
  Register(srv, routes_, "PATCH", v1 + "/experiments/" + id,
           HandlerRoute(api, &ApiHandler::PatchExperiment, {"id"}), users);
  Register(srv, routes_, "DELETE", v1 + "/experiments/" + id,
           HandlerRoute(api, &ApiHandler::DeleteExperiment, {"id"}), users);
  Register(srv, routes_, "GET", v1 + "/experiments/" + id + "/model_def",
           HandlerRoute(api, &ApiHandler::GetModelDef, {"experiment_id"}), users);
  Register(srv, routes_, "GET", v1 + "/checkpoints/" + name,
           HandlerRoute(api, &ApiHandler::GetCheckpoint, {"uuid"}), users);
  Register(srv, routes_, "DELETE", v1 + "/checkpoints/" + name,
           HandlerRoute(api, &ApiHandler::DeleteCheckpoints, {"uuids"}), users);
  Register(srv, routes_, "GET", v1 + "/experiments/" + id + "/checkpoints",
           HandlerRoute(api, &ApiHandler::ListCheckpoints, {"experiment_id"}), users);

  Register(srv, routes_, "GET", v1 + "/trials/" + id, HandlerRoute(api, &ApiHandler::GetTrial, {"id"}),
           users);
  Register(srv, routes_, "POST", v1 + "/trials/" + id + "/kill",
           HandlerRoute(api, &ApiHandler::KillTrial, {"id"}), users);
  {
    auto metrics = HandlerRoute(api, &ApiHandler::GetTrialMetrics, {"trial_id"});
    metrics.prepare = [](Params& params, v1::GetTrialMetricsRequest&) {
      auto it = params.find("group");
      if (it == params.end()) return absl::OkStatus();
      for (const std::string& g : it->second) {
        if (g != "training" && g != "validation" && g != "timings") {
          return absl::InvalidArgumentError(absl::StrCat(
              "parameter 'group': expected training, validation or timings, got \"", g, "\""));
        }
      }
      return absl::OkStatus();
    };
    Register(srv, routes_, "GET", v1 + "/trials/" + id + "/metrics", metrics, users);
  }
  {
    auto timings = HandlerRoute(api, &ApiHandler::GetTrialMetrics, {"trial_id"});
    timings.prepare = [](Params& params, v1::GetTrialMetricsRequest& req) {
      if (params.count("group")) {
        return absl::InvalidArgumentError("parameter 'group': timings are the group \"timings\"");
      }
      req.set_group("timings");
      return absl::OkStatus();
    };
    Register(srv, routes_, "GET", v1 + "/trials/" + id + "/timings", timings, users);
  }
  {
    auto logs = HandlerRoute(api, &ApiHandler::GetTrialLogs, {"trial_id"});
    logs.prepare = PrepareLogs;
    Register(srv, routes_, "GET", v1 + "/trials/" + id + "/logs", logs, users);
  }

  Register(srv, routes_, "GET", v1 + "/agents", HandlerRoute(api, &ApiHandler::ListAgents), users);
  Register(srv, routes_, "POST", v1 + "/agents/" + name + "/enable",
           HandlerRoute(api, &ApiHandler::EnableAgent, {"agent_id"}), users);
  Register(srv, routes_, "POST", v1 + "/agents/" + name + "/disable",
           HandlerRoute(api, &ApiHandler::DisableAgent, {"agent_id"}), users);
  Register(srv, routes_, "POST", v1 + "/agents/" + name + "/slots/" + name + "/enable",
           HandlerRoute(api, &ApiHandler::EnableSlot, {"agent_id", "slot_id"}), users);
  Register(srv, routes_, "POST", v1 + "/agents/" + name + "/slots/" + name + "/disable",
           HandlerRoute(api, &ApiHandler::DisableSlot, {"agent_id", "slot_id"}), users);
  {
    auto slots = HandlerRoute(api, &ApiHandler::ListAgents);
    slots.render = RenderSlots;
    Register(srv, routes_, "GET", v1 + "/slots", slots, users);
  }

  Register(srv, routes_, "GET", v1 + "/jobs", HandlerRoute(api, &ApiHandler::ListJobs), users);
  Register(srv, routes_, "POST", v1 + "/jobs/" + id + "/priority",
           HandlerRoute(api, &ApiHandler::UpdateJobPriority, {"experiment_id"}), users);
  Register(srv, routes_, "GET", v1 + "/tasks", HandlerRoute(api, &ApiHandler::ListTasks), users);
  Register(srv, routes_, "GET", v1 + "/resource-pools", HandlerRoute(api, &ApiHandler::ListResourcePools),
           users);

  Register(srv, routes_, "GET", v1 + "/templates", HandlerRoute(api, &ApiHandler::ListTemplates), users);
  Register(srv, routes_, "GET", v1 + "/templates/" + name,
           HandlerRoute(api, &ApiHandler::GetTemplate, {"name"}), users);
  for (const char* method : {"PUT", "POST"}) {
    Register(srv, routes_, method, v1 + "/templates/" + name,
             HandlerRoute(api, &ApiHandler::SetTemplate, {"name"}), users);
  }
  Register(srv, routes_, "DELETE", v1 + "/templates/" + name,
           HandlerRoute(api, &ApiHandler::RemoveTemplate, {"name"}), users);

  // The model registry (det model ...).
  Register(srv, routes_, "GET", v1 + "/models", HandlerRoute(api, &ApiHandler::ListModels), users);
  Register(srv, routes_, "POST", v1 + "/models", HandlerRoute(api, &ApiHandler::CreateModel), users);
  Register(srv, routes_, "GET", v1 + "/models/" + name,
           HandlerRoute(api, &ApiHandler::GetModel, {"name"}), users);
  Register(srv, routes_, "PATCH", v1 + "/models/" + name,
           HandlerRoute(api, &ApiHandler::PatchModel, {"name"}), users);
  Register(srv, routes_, "DELETE", v1 + "/models/" + name,
           HandlerRoute(api, &ApiHandler::DeleteModel, {"name"}), users);
  Register(srv, routes_, "GET", v1 + "/models/" + name + "/versions",
           HandlerRoute(api, &ApiHandler::ListModelVersions, {"model_name"}), users);
  Register(srv, routes_, "POST", v1 + "/models/" + name + "/versions",
           HandlerRoute(api, &ApiHandler::RegisterModelVersion, {"model_name"}), users);
  Register(srv, routes_, "GET", v1 + "/models/" + name + "/versions/" + id,
           HandlerRoute(api, &ApiHandler::GetModelVersion, {"model_name", "version"}), users);
  Register(srv, routes_, "DELETE", v1 + "/models/" + name + "/versions/" + id,
           HandlerRoute(api, &ApiHandler::DeleteModelVersion, {"model_name", "version"}), users);
  Register(srv, routes_, "PATCH", v1 + "/models/" + name + "/versions/" + id,
           HandlerRoute(api, &ApiHandler::PatchModelVersion, {"model_name", "version"}), users);
}

}  // namespace det::master
