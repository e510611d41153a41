// Who may change what, through MasterService as the gRPC and REST adapters call it (the
// callers below are what UserHandler::Authenticate makes of their tokens): an
// experiment's owner or an admin may change it, agents are the admins', a template's
// owner or an admin may replace or remove it; with no users checked everything is allowed.
#include <memory>
#include <string>

#include "common/clock/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/server/master.h"
#include "master/store/in_memory_store.h"
#include "master/testing/master_testing.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;
using testing::Pending;
using testing::Sync;

Caller User(const std::string& name, bool admin = false) {
  Caller c;
  c.user.set_username(name);
  c.user.set_admin(admin);
  c.token = name + "-token";
  return c;
}

class OwnershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = testing::LoopbackMasterConfig(testing::FreshTestDir("ownership_"));
    auto m = Master::Create(config_, clock_, std::make_unique<InMemoryStore>());
    ASSERT_TRUE(m.ok()) << m.status();
    master_ = std::move(*m);
    v1::RegisterResponse reg;
    ASSERT_TRUE(Sync<AgentHandler>(&master_->service(), &AgentHandler::Register,
                                   testing::RegisterRequest("a1", 2), &reg)
                    .ok());
  }
  void TearDown() override {
    if (master_) master_->Shutdown();
  }

  template <typename Req, typename Resp>
  absl::Status Call(const Caller& caller,
                    void (ApiHandler::*method)(const Caller&, const Req&, Resp*, Done),
                    const Req& req, Resp* resp = nullptr) {
    Resp local;
    Pending p;
    (master_->service().*method)(caller, req, resp ? resp : &local, p.Callback());
    if (!p.Wait()) return absl::DeadlineExceededError("no answer");
    return p.status;
  }

  int64_t Create(const Caller& as) {
    v1::CreateExperimentRequest req;
    req.set_config_yaml(testing::ExperimentYaml("owned"));
    v1::CreateExperimentResponse resp;
    absl::Status st = Call(as, &ApiHandler::CreateExperiment, req, &resp);
    EXPECT_TRUE(st.ok()) << st;
    return resp.experiment().id();
  }
  v1::Experiment Get(int64_t id) {
    v1::GetExperimentRequest req;
    req.set_id(id);
    v1::GetExperimentResponse resp;
    EXPECT_TRUE(Call(User("admin", true), &ApiHandler::GetExperiment, req, &resp).ok());
    return resp.experiment();
  }
  template <typename Req>
  static Req WithId(int64_t id) {
    Req r;
    r.set_id(id);
    return r;
  }

  FakeClock clock_;
  config::MasterConfig config_;
  std::unique_ptr<Master> master_;
};

TEST_F(OwnershipTest, OnlyTheOwnerOrAnAdminChangesAnExperiment) {
  const Caller alice = User("alice"), bob = User("bob"), admin = User("admin", true);
  const int64_t id = Create(alice);
  ASSERT_GT(id, 0);
  EXPECT_EQ(Get(id).owner(), "alice");

  absl::Status kill = Call(bob, &ApiHandler::KillExperiment, WithId<v1::KillExperimentRequest>(id));
  EXPECT_EQ(kill.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(kill.message(),
              HasSubstr(absl::StrCat("only the experiment's owner (alice) or an admin may kill "
                                     "experiment ", id)));
  EXPECT_EQ(Call(bob, &ApiHandler::PauseExperiment, WithId<v1::PauseExperimentRequest>(id)).code(),
            absl::StatusCode::kPermissionDenied);
  v1::SetExperimentSlotsRequest slots = WithId<v1::SetExperimentSlotsRequest>(id);
  slots.set_slots_per_trial(2);
  absl::Status resize = Call(bob, &ApiHandler::SetExperimentSlots, slots);
  EXPECT_EQ(resize.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(resize.message(), HasSubstr("may set the slots of experiment"));
  v1::UpdateJobPriorityRequest prio;
  prio.set_experiment_id(id);
  prio.set_priority(10);
  absl::Status reprioritise = Call(bob, &ApiHandler::UpdateJobPriority, prio);
  EXPECT_EQ(reprioritise.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(reprioritise.message(), HasSubstr("may change the priority of experiment"));
  // Nothing bob asked for happened.
  v1::Experiment e = Get(id);
  EXPECT_EQ(e.state(), v1::STATE_ACTIVE);
  EXPECT_EQ(e.slots_per_trial(), 1);
  EXPECT_NE(e.priority(), 10);

  // The owner and an admin may.
  EXPECT_TRUE(Call(alice, &ApiHandler::UpdateJobPriority, prio).ok());
  EXPECT_EQ(Get(id).priority(), 10);
  EXPECT_TRUE(Call(admin, &ApiHandler::PauseExperiment, WithId<v1::PauseExperimentRequest>(id)).ok());
  EXPECT_EQ(Call(bob, &ApiHandler::ActivateExperiment, WithId<v1::ActivateExperimentRequest>(id)).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(Call(alice, &ApiHandler::ActivateExperiment, WithId<v1::ActivateExperimentRequest>(id)).ok());
  EXPECT_TRUE(Call(admin, &ApiHandler::KillExperiment, WithId<v1::KillExperimentRequest>(id)).ok());

  // An unknown experiment is still NOT_FOUND, whoever asks.
  EXPECT_EQ(Call(bob, &ApiHandler::KillExperiment, WithId<v1::KillExperimentRequest>(id + 100)).code(),
            absl::StatusCode::kNotFound);
}

// det t kill, det e set max-slots, det e delete are the owner's or an admin's; det master
// logs the admins' (as det master config).
TEST_F(OwnershipTest, KillTrialMaxSlotsDeleteAndMasterLogs) {
  const Caller alice = User("alice"), bob = User("bob"), admin = User("admin", true);
  const int64_t id = Create(alice);
  v1::GetExperimentRequest get = WithId<v1::GetExperimentRequest>(id);
  v1::GetExperimentResponse got;
  ASSERT_TRUE(Call(admin, &ApiHandler::GetExperiment, get, &got).ok());
  const int64_t trial = got.trials(0).id();

  absl::Status kill = Call(bob, &ApiHandler::KillTrial, WithId<v1::KillTrialRequest>(trial));
  EXPECT_EQ(kill.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(kill.message(),
              HasSubstr(absl::StrCat("only the experiment's owner (alice) or an admin may kill "
                                     "trials of experiment ", id)));
  v1::PatchExperimentRequest cap = WithId<v1::PatchExperimentRequest>(id);
  cap.set_max_slots(1);
  EXPECT_EQ(Call(bob, &ApiHandler::PatchExperiment, cap).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(Call(alice, &ApiHandler::PatchExperiment, cap).ok());
  EXPECT_EQ(Call(bob, &ApiHandler::KillTrial, WithId<v1::KillTrialRequest>(trial + 100)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(Call(alice, &ApiHandler::KillTrial, WithId<v1::KillTrialRequest>(trial)).ok());

  // Once it ended: bob may not delete it, alice may.
  EXPECT_TRUE(Call(admin, &ApiHandler::KillExperiment, WithId<v1::KillExperimentRequest>(id)).ok());
  absl::Status del = Call(bob, &ApiHandler::DeleteExperiment, WithId<v1::DeleteExperimentRequest>(id));
  EXPECT_EQ(del.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(del.message(), HasSubstr(absl::StrCat("may delete experiment ", id)));

  v1::GetMasterLogsResponse logs;
  absl::Status bob_logs = Call(bob, &ApiHandler::GetMasterLogs, v1::GetMasterLogsRequest(), &logs);
  EXPECT_EQ(bob_logs.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(bob_logs.message(), HasSubstr("only an admin may read the master's logs"));
  EXPECT_EQ(logs.lines_size(), 0);
  v1::GetMasterLogsRequest tail;
  tail.set_tail(5);
  ASSERT_TRUE(Call(admin, &ApiHandler::GetMasterLogs, tail, &logs).ok());
  EXPECT_EQ(logs.lines_size(), 5);
  EXPECT_EQ(logs.capacity(), 10000);
}

TEST_F(OwnershipTest, WithoutUsersEveryoneMayAndOwnerlessExperimentsAreTheAdmins) {
  const int64_t id = Create(Caller());  // The master checks no users: no owner.
  EXPECT_EQ(Get(id).owner(), "");
  absl::Status as_bob = Call(User("bob"), &ApiHandler::PauseExperiment,
                             WithId<v1::PauseExperimentRequest>(id));
  EXPECT_EQ(as_bob.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(as_bob.message(), HasSubstr("only an admin (the experiment has no owner)"));
  EXPECT_TRUE(Call(Caller(), &ApiHandler::KillExperiment, WithId<v1::KillExperimentRequest>(id)).ok());
}

TEST_F(OwnershipTest, AgentsAreTheAdmins) {
  v1::DisableAgentRequest disable;
  disable.set_agent_id("a1");
  absl::Status st = Call(User("bob"), &ApiHandler::DisableAgent, disable);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(st.message(), HasSubstr("only an admin may disable agents; user 'bob' is not one"));
  v1::EnableAgentRequest enable;
  enable.set_agent_id("a1");
  EXPECT_EQ(Call(User("bob"), &ApiHandler::EnableAgent, enable).code(),
            absl::StatusCode::kPermissionDenied);
  v1::DisableAgentResponse disabled;
  EXPECT_TRUE(Call(User("root", true), &ApiHandler::DisableAgent, disable, &disabled).ok());
  EXPECT_FALSE(disabled.agent().enabled());
  EXPECT_TRUE(Call(Caller(), &ApiHandler::EnableAgent, enable).ok());
}

TEST_F(OwnershipTest, ATemplateIsItsOwnersOrTheAdmins) {
  const Caller alice = User("alice"), bob = User("bob"), admin = User("admin", true);
  v1::SetTemplateRequest set;
  set.set_name("base");
  set.set_config_yaml("description: alice's\n");
  v1::SetTemplateResponse made;
  ASSERT_TRUE(Call(alice, &ApiHandler::SetTemplate, set, &made).ok());
  EXPECT_TRUE(made.created());
  EXPECT_EQ(made.template_().owner(), "alice");

  set.set_config_yaml("description: bob's\n");
  absl::Status replace = Call(bob, &ApiHandler::SetTemplate, set);
  EXPECT_EQ(replace.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(replace.message(),
              HasSubstr("only the template's owner (alice) or an admin may replace template 'base'"));
  v1::RemoveTemplateRequest remove;
  remove.set_name("base");
  absl::Status removal = Call(bob, &ApiHandler::RemoveTemplate, remove);
  EXPECT_EQ(removal.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(removal.message(), HasSubstr("may remove template 'base'"));
  v1::GetTemplateRequest get;
  get.set_name("base");
  v1::GetTemplateResponse got;
  ASSERT_TRUE(Call(bob, &ApiHandler::GetTemplate, get, &got).ok());  // Reading is open.
  EXPECT_EQ(got.template_().config_yaml(), "description: alice's\n");

  // An admin replaces it (alice stays its owner), then removes it.
  v1::SetTemplateResponse replaced;
  ASSERT_TRUE(Call(admin, &ApiHandler::SetTemplate, set, &replaced).ok());
  EXPECT_EQ(replaced.template_().owner(), "alice");
  EXPECT_TRUE(Call(admin, &ApiHandler::RemoveTemplate, remove).ok());
  EXPECT_EQ(Call(bob, &ApiHandler::RemoveTemplate, remove).code(), absl::StatusCode::kNotFound);
}

// A model is its creator's: others read it but may not change it, delete it or register
// its versions; an admin may do anything.
TEST_F(OwnershipTest, AModelIsItsCreatorsOrTheAdmins) {
  const Caller alice = User("alice"), bob = User("bob"), admin = User("admin", true);
  v1::CreateModelRequest create;
  create.set_name("mnist");
  v1::CreateModelResponse made;
  ASSERT_TRUE(Call(alice, &ApiHandler::CreateModel, create, &made).ok());
  EXPECT_EQ(made.model().username(), "alice");

  v1::PatchModelRequest patch;
  patch.set_name("mnist");
  patch.set_description("bob's");
  absl::Status st = Call(bob, &ApiHandler::PatchModel, patch);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(st.message(), HasSubstr("only the model's owner (alice) or an admin may change "
                                      "model 'mnist'; you are 'bob'"));
  v1::RegisterModelVersionRequest reg;
  reg.set_model_name("mnist");
  reg.set_checkpoint_uuid("c-1");
  st = Call(bob, &ApiHandler::RegisterModelVersion, reg);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(st.message(), HasSubstr("may register versions of model 'mnist'"));
  v1::DeleteModelVersionRequest del_version;
  del_version.set_model_name("mnist");
  del_version.set_version(1);
  st = Call(bob, &ApiHandler::DeleteModelVersion, del_version);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(st.message(), HasSubstr("may delete versions of model 'mnist'"));
  v1::DeleteModelRequest del;
  del.set_name("mnist");
  st = Call(bob, &ApiHandler::DeleteModel, del);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(st.message(), HasSubstr("may delete model 'mnist'"));
  // Reading is open.
  v1::GetModelRequest get;
  get.set_name("mnist");
  v1::GetModelResponse got;
  ASSERT_TRUE(Call(bob, &ApiHandler::GetModel, get, &got).ok());
  EXPECT_EQ(got.model().description(), "");
  v1::ListModelVersionsResponse versions;
  v1::ListModelVersionsRequest list;
  list.set_model_name("mnist");
  ASSERT_TRUE(Call(bob, &ApiHandler::ListModelVersions, list, &versions).ok());
  EXPECT_EQ(versions.model().name(), "mnist");

  // The admin changes it (alice stays its creator), then deletes it.
  v1::PatchModelResponse patched;
  ASSERT_TRUE(Call(admin, &ApiHandler::PatchModel, patch, &patched).ok());
  EXPECT_EQ(patched.model().description(), "bob's");
  EXPECT_EQ(patched.model().username(), "alice");
  EXPECT_TRUE(Call(admin, &ApiHandler::DeleteModel, del).ok());
  st = Call(bob, &ApiHandler::DeleteModel, del);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(st.message(), "model 'mnist' does not exist");
}

}  // namespace
}  // namespace det::master
