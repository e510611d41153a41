// Every read route of MasterService against the read model (master/loop/read_model.h): with
// the loop held by a write turn that blocks (a gate), each route still answers, and each
// read begun after a write was acknowledged shows that write. One row per route; the
// managers are the master's own (ManagerHarness) on an in-memory store and a FakeClock.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/clock/clock.h"
#include "gtest/gtest.h"
#include "master/api/master_service.h"
#include "master/store/in_memory_store.h"
#include "master/testing/manager_harness.h"
#include "master/testing/master_testing.h"

namespace det::master {
namespace {

using testing::ExperimentYaml;
using testing::ManagerHarness;
using testing::Pending;

constexpr absl::Duration kWait = absl::Seconds(20);

// One read route: `call` reads (answering its Done), `write` makes an acknowledged change
// (it may look at what the first read answered), `shows` says whether the last read
// answered shows it.
struct Route {
  std::string name;
  std::function<void(Done)> call;
  std::function<void()> write;
  std::function<bool()> shows;
};

class ReadRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    h_ = std::make_unique<ManagerHarness>(testing::LoopbackMasterConfig("/unused"), store_, clock_);
    ASSERT_TRUE(h_->Start().ok());
    users_ = std::make_unique<UserService>(h_->loop, store_, clock_, UserServiceOptions());
    contexts_ = std::make_unique<ModelContexts>(clock_, store_);
    service_ = std::make_unique<MasterService>(
        h_->config, clock_, h_->turns,
        MasterService::Managers{h_->agents, h_->liveness, h_->templates, *users_, h_->logs,
                                h_->registry, h_->experiments, h_->allocations, h_->checkpoints,
                                h_->metrics, *contexts_, h_->models, h_->reads});
  }
  void TearDown() override {
    for (auto& gate : gates_) {
      if (!gate->HasBeenNotified()) gate->Notify();
    }
    h_->loop.RunSync([this] { h_->turns.SetPublish(nullptr); });
    service_.reset();
  }

  // Calls `method` and waits for its answer.
  template <typename Req, typename Resp>
  absl::Status Api(void (ApiHandler::*method)(const Caller&, const Req&, Resp*, Done),
                   const Req& req, Resp* resp) {
    Pending p;
    (service_.get()->*method)(Caller(), req, resp, p.Callback());
    if (!p.Wait(kWait)) return absl::DeadlineExceededError("no answer");
    return p.status;
  }
  // A route calling `method` with `req` (kept; `edit` may change it before each call).
  template <typename Req, typename Resp>
  Route Read(std::string name, void (ApiHandler::*method)(const Caller&, const Req&, Resp*, Done),
             Req req, std::function<void(const Resp& first, Req* req)> write,
             std::function<bool(const Resp&)> shows) {
    struct State {
      Req req;
      Resp resp;
      Resp first;
      bool called = false;
    };
    auto s = std::make_shared<State>();
    s->req = std::move(req);
    Route r;
    r.name = std::move(name);
    r.call = [this, method, s](Done done) {
      s->resp.Clear();
      (service_.get()->*method)(Caller(), s->req, &s->resp, [s, done](absl::Status st) {
        if (!s->called) s->first = s->resp;
        s->called = true;
        done(st);
      });
    };
    r.write = [s, write] { write(s->first, &s->req); };
    r.shows = [s, shows] { return shows(s->resp); };
    return r;
  }

  int64_t CreateExperiment(const std::string& name) {
    v1::CreateExperimentRequest req;
    req.set_config_yaml(ExperimentYaml(name));
    v1::CreateExperimentResponse resp;
    absl::Status st = Api(&ApiHandler::CreateExperiment, req, &resp);
    EXPECT_TRUE(st.ok()) << st;
    return resp.experiment().id();
  }
  int64_t FirstTrial(int64_t experiment) {
    v1::GetExperimentRequest req;
    req.set_id(experiment);
    v1::GetExperimentResponse resp;
    EXPECT_TRUE(Api(&ApiHandler::GetExperiment, req, &resp).ok());
    return resp.trials_size() > 0 ? resp.trials(0).id() : 0;
  }
  void Expect(absl::Status st) { EXPECT_TRUE(st.ok()) << st; }

  // Holds the loop in a write turn until Release.
  void Gate() {
    gates_.push_back(std::make_unique<absl::Notification>());
    absl::Notification held;
    h_->turns.OnLoop([](absl::Status) {},
                     [&held, gate = gates_.back().get()] {
                       held.Notify();
                       gate->WaitForNotification();
                       return absl::OkStatus();
                     });
    ASSERT_TRUE(held.WaitForNotificationWithTimeout(kWait));
  }
  void Release() { gates_.back()->Notify(); }

  FakeClock clock_;
  InMemoryStore store_;
  std::unique_ptr<ManagerHarness> h_;
  std::unique_ptr<UserService> users_;
  std::unique_ptr<ModelContexts> contexts_;
  std::unique_ptr<MasterService> service_;
  std::vector<std::unique_ptr<absl::Notification>> gates_;
};

TEST_F(ReadRoutesTest, EveryReadAnswersWhileAWriteTurnHoldsTheLoopAndShowsEveryAcknowledgedWrite) {
  // A running trial with a checkpoint (agent a1's one slot), queued ones behind it.
  std::string session = h_->Register("a1", 1);
  const int64_t base = CreateExperiment("base");
  v1::LaunchCommand launch = h_->NextLaunch("a1", session);
  ASSERT_FALSE(launch.allocation_id().empty());
  ASSERT_TRUE(h_->ReportCheckpoint(launch, "ck-1", 10).ok());
  const int64_t paused = CreateExperiment("to-pause");
  const int64_t killed_trial = FirstTrial(CreateExperiment("to-kill"));
  const int64_t job = CreateExperiment("job");
  {
    v1::CreateModelRequest req;
    req.set_name("m");
    v1::CreateModelResponse resp;
    ASSERT_TRUE(Api(&ApiHandler::CreateModel, req, &resp).ok());
  }
  auto no_write = [](const auto&, auto*) {};

  std::vector<Route> routes;
  routes.push_back(Read<v1::GetMasterInfoRequest, v1::GetMasterInfoResponse>(
      "GetMasterInfo", &ApiHandler::GetMasterInfo, {}, no_write,
      [](const v1::GetMasterInfoResponse& r) { return !r.version().empty(); }));
  routes.push_back(Read<v1::GetMasterConfigRequest, v1::GetMasterConfigResponse>(
      "GetMasterConfig", &ApiHandler::GetMasterConfig, {}, no_write,
      [](const v1::GetMasterConfigResponse& r) { return !r.config_yaml().empty(); }));
  routes.push_back(Read<v1::GetMasterLogsRequest, v1::GetMasterLogsResponse>(
      "GetMasterLogs", &ApiHandler::GetMasterLogs, {}, no_write,
      [](const v1::GetMasterLogsResponse& r) { return r.capacity() > 0; }));
  routes.push_back(Read<v1::ListExperimentsRequest, v1::ListExperimentsResponse>(
      "ListExperiments", &ApiHandler::ListExperiments, {},
      [&](const auto&, auto*) { CreateExperiment("listed"); },
      [](const v1::ListExperimentsResponse& r) {
        for (const auto& e : r.experiments()) {
          if (e.name() == "listed") return r.total() == r.experiments_size();
        }
        return false;
      }));
  {
    v1::GetExperimentRequest req;
    req.set_id(paused);
    routes.push_back(Read<v1::GetExperimentRequest, v1::GetExperimentResponse>(
        "GetExperiment", &ApiHandler::GetExperiment, req,
        [&](const auto&, auto*) {
          v1::PauseExperimentRequest pause;
          pause.set_id(paused);
          v1::PauseExperimentResponse resp;
          Expect(Api(&ApiHandler::PauseExperiment, pause, &resp));
        },
        [](const v1::GetExperimentResponse& r) {
          return r.experiment().state() == v1::STATE_PAUSED;
        }));
  }
  {
    v1::GetTrialRequest req;
    req.set_id(killed_trial);
    routes.push_back(Read<v1::GetTrialRequest, v1::GetTrialResponse>(
        "GetTrial", &ApiHandler::GetTrial, req,
        [&](const auto&, auto*) {
          v1::KillTrialRequest kill;
          kill.set_id(killed_trial);
          v1::KillTrialResponse resp;
          Expect(Api(&ApiHandler::KillTrial, kill, &resp));
        },
        [](const v1::GetTrialResponse& r) { return r.trial().state() == v1::STATE_CANCELED; }));
  }
  routes.push_back(Read<v1::ListAgentsRequest, v1::ListAgentsResponse>(
      "ListAgents", &ApiHandler::ListAgents, {},
      [&](const auto&, auto*) {
        v1::DisableAgentRequest disable;
        disable.set_agent_id("a1");
        disable.set_drain(true);
        v1::DisableAgentResponse resp;
        Expect(Api(&ApiHandler::DisableAgent, disable, &resp));
      },
      [](const v1::ListAgentsResponse& r) {
        return r.agents_size() == 1 && !r.agents(0).enabled();
      }));
  routes.push_back(Read<v1::ListJobsRequest, v1::ListJobsResponse>(
      "ListJobs", &ApiHandler::ListJobs, {},
      [&](const auto&, auto*) {
        v1::UpdateJobPriorityRequest update;
        update.set_experiment_id(job);
        update.set_priority(42);
        v1::UpdateJobPriorityResponse resp;
        Expect(Api(&ApiHandler::UpdateJobPriority, update, &resp));
      },
      [job](const v1::ListJobsResponse& r) {
        for (const auto& j : r.jobs()) {
          if (j.experiment_id() == job) return j.priority() == 42 && r.pagination().total() == r.jobs_size();
        }
        return false;
      }));
  auto queued = std::make_shared<int>(0);
  routes.push_back(Read<v1::ListResourcePoolsRequest, v1::ListResourcePoolsResponse>(
      "ListResourcePools", &ApiHandler::ListResourcePools, {},
      [&, queued](const v1::ListResourcePoolsResponse& first, auto*) {
        *queued = first.pools(0).queued_trials();
        CreateExperiment("one-more-queued");
      },
      [queued](const v1::ListResourcePoolsResponse& r) {
        return r.pools(0).queued_trials() == *queued + 1;
      }));
  auto active = std::make_shared<int>(0);
  routes.push_back(Read<v1::GetMasterStatsRequest, v1::GetMasterStatsResponse>(
      "GetMasterStats", &ApiHandler::GetMasterStats, {},
      [&, active](const v1::GetMasterStatsResponse& first, auto*) {
        *active = first.experiments_active();
        CreateExperiment("counted");
      },
      [active](const v1::GetMasterStatsResponse& r) {
        return r.experiments_active() == *active + 1;
      }));
  routes.push_back(Read<v1::ListTemplatesRequest, v1::ListTemplatesResponse>(
      "ListTemplates", &ApiHandler::ListTemplates, {},
      [&](const auto&, auto*) {
        v1::SetTemplateRequest set;
        set.set_name("t1");
        set.set_config_yaml("description: from t1\n");
        v1::SetTemplateResponse resp;
        Expect(Api(&ApiHandler::SetTemplate, set, &resp));
      },
      [](const v1::ListTemplatesResponse& r) {
        return r.templates_size() == 1 && r.templates(0).name() == "t1";
      }));
  {
    v1::GetTemplateRequest req;
    req.set_name("t2");  // NotFound at first
    routes.push_back(Read<v1::GetTemplateRequest, v1::GetTemplateResponse>(
        "GetTemplate", &ApiHandler::GetTemplate, req,
        [&](const auto&, auto*) {
          v1::SetTemplateRequest set;
          set.set_name("t2");
          set.set_config_yaml("description: from t2\n");
          v1::SetTemplateResponse resp;
          Expect(Api(&ApiHandler::SetTemplate, set, &resp));
        },
        [](const v1::GetTemplateResponse& r) { return r.template_().name() == "t2"; }));
  }
  routes.push_back(Read<v1::ListModelsRequest, v1::ListModelsResponse>(
      "ListModels", &ApiHandler::ListModels, {},
      [&](const auto&, auto*) {
        v1::CreateModelRequest create;
        create.set_name("m2");
        v1::CreateModelResponse resp;
        Expect(Api(&ApiHandler::CreateModel, create, &resp));
      },
      [](const v1::ListModelsResponse& r) { return r.models_size() == 2; }));
  {
    v1::GetModelRequest req;
    req.set_name("m");
    routes.push_back(Read<v1::GetModelRequest, v1::GetModelResponse>(
        "GetModel", &ApiHandler::GetModel, req,
        [&](const auto&, auto*) {
          v1::PatchModelRequest patch;
          patch.set_name("m");
          patch.set_description("patched");
          v1::PatchModelResponse resp;
          Expect(Api(&ApiHandler::PatchModel, patch, &resp));
        },
        [](const v1::GetModelResponse& r) { return r.model().description() == "patched"; }));
  }
  auto register_version = [&] {
    v1::RegisterModelVersionRequest reg;
    reg.set_model_name("m");
    reg.set_checkpoint_uuid("ck-1");
    v1::RegisterModelVersionResponse resp;
    Expect(Api(&ApiHandler::RegisterModelVersion, reg, &resp));
  };
  {
    v1::ListModelVersionsRequest req;
    req.set_model_name("m");
    routes.push_back(Read<v1::ListModelVersionsRequest, v1::ListModelVersionsResponse>(
        "ListModelVersions", &ApiHandler::ListModelVersions, req,
        [&](const auto&, auto*) { register_version(); },
        [](const v1::ListModelVersionsResponse& r) { return r.model_versions_size() == 1; }));
  }
  {
    v1::GetModelVersionRequest req;
    req.set_model_name("m");  // the latest
    routes.push_back(Read<v1::GetModelVersionRequest, v1::GetModelVersionResponse>(
        "GetModelVersion", &ApiHandler::GetModelVersion, req,
        [&](const auto&, auto*) { register_version(); },
        [](const v1::GetModelVersionResponse& r) { return r.model_version().version() == 2; }));
  }
  {
    v1::GetModelDefRequest req;
    req.set_experiment_id(base);
    routes.push_back(Read<v1::GetModelDefRequest, v1::GetModelDefResponse>(
        "GetModelDef", &ApiHandler::GetModelDef, req,
        [&](const auto&, v1::GetModelDefRequest* next) {
          next->set_experiment_id(CreateExperiment("with-a-context"));
        },
        [](const v1::GetModelDefResponse& r) { return !r.sha256().empty(); }));
  }
  routes.push_back(Read<v1::ListTasksRequest, v1::ListTasksResponse>(
      "ListTasks", &ApiHandler::ListTasks, {},
      [&](const auto&, auto*) {
        v1::KillExperimentRequest kill;
        kill.set_id(base);
        v1::KillExperimentResponse resp;
        Expect(Api(&ApiHandler::KillExperiment, kill, &resp));
      },
      [&](const v1::ListTasksResponse& r) {
        for (const auto& t : r.tasks()) {
          if (t.allocation_id() == launch.allocation_id()) return t.state() == v1::STATE_STOPPING;
        }
        return false;
      }));
  {
    // The worker's read: the best validation of its experiment.
    auto resp = std::make_shared<v1::GetExperimentBestValidationResponse>();
    auto req = std::make_shared<v1::GetExperimentBestValidationRequest>();
    req->mutable_auth()->set_allocation_id(launch.allocation_id());
    req->mutable_auth()->set_token(launch.env().at("DET_ALLOCATION_TOKEN"));
    Route r;
    r.name = "GetExperimentBestValidation";
    r.call = [this, req, resp](Done done) {
      resp->Clear();
      service_->GetExperimentBestValidation(*req, resp.get(), std::move(done));
    };
    r.write = [&] {
      v1::Metrics validation;
      validation.set_group("validation");
      validation.set_total_batches(10);
      (*validation.mutable_values())["validation_loss"] = 0.25;
      Expect(h_->ReportMetrics(launch, {validation}));
    };
    r.shows = [resp] { return resp->found() && resp->value() == 0.25; };
    // Before ListTasks (it kills the run whose credentials it uses).
    routes.insert(routes.end() - 1, std::move(r));
  }

  for (Route& r : routes) {
    SCOPED_TRACE(r.name);
    Pending first;  // the route's piece is then read lately (published at every turn's end)
    r.call(first.Callback());
    ASSERT_TRUE(first.Wait(kWait));
    r.write();
    Gate();
    Pending read;
    r.call(read.Callback());
    const bool answered = read.Wait(kWait);
    Release();
    ASSERT_TRUE(answered) << "no answer while a write turn holds the loop";
    EXPECT_TRUE(read.status.ok()) << read.status;
    EXPECT_TRUE(r.shows()) << "the acknowledged write does not show";
  }
}

}  // namespace
}  // namespace det::master
