#include "master/allocations/launch_command.h"

#include "common/config/trial_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::master {
namespace {

using ::testing::ElementsAre;

struct Case {
  std::string name;
  std::vector<AgentShare> agents;
  // Per agent, in order: its ranks, world size and agent rank.
  std::vector<std::vector<int>> ranks;
  int world_size;
};

LaunchInputs Inputs() {
  LaunchInputs in;
  in.experiment_id = 3;
  in.trial.set_id(7);
  in.trial.set_run_id(2);
  in.trial.set_seed(42);
  in.trial.set_hparams_json("{\"lr\":0.1}");
  in.trial.set_target_batches(100);
  in.trial.set_latest_checkpoint("/ckpt/c-1");
  in.trial.set_restarts(1);
  in.config_json = "{\"name\":\"x\"}";
  in.trial_spec.set_trial_id(7);
  in.trial_spec.set_checkpoint_dir("/ckpt");
  in.entrypoint = {"python3", "train.py"};
  in.environment = {{"USER_VAR", "u"}, {"DET_TRIAL_ID", "overridden?"}};
  in.max_restarts = 5;
  in.token = "tok";
  in.chief_address = "10.0.0.1";
  in.chief_port = 29501;
  return in;
}

TEST(LaunchCommandTest, EveryAgentGetsTheContractAndItsOwnRanks) {
  const std::vector<Case> cases = {
      {"one agent, two slots", {{"a", {"0", "1"}}}, {{0, 1}}, 2},
      {"one agent, no slots", {{"a", {}}}, {{0}}, 1},
      {"two agents", {{"a", {"0", "1"}}, {"b", {"3", "4"}}}, {{0, 1}, {2, 3}}, 4},
      {"three agents, one slot each", {{"a", {"0"}}, {"b", {"0"}}, {"c", {"0"}}},
       {{0}, {1}, {2}}, 3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::Allocation a;
    a.set_id("7.2");
    for (auto& r : PlaceRanks(c.agents)) *a.add_ranks() = r;
    LaunchInputs in = Inputs();
    auto cmds = BuildLaunchCommands(in, a, c.agents);
    ASSERT_EQ(cmds.size(), c.agents.size());
    for (size_t i = 0; i < cmds.size(); ++i) {
      const auto& [agent, l] = cmds[i];
      EXPECT_EQ(agent, c.agents[i].agent_id);
      EXPECT_EQ(l.allocation_id(), "7.2");
      EXPECT_EQ(l.trial_id(), 7);
      EXPECT_EQ(l.experiment_id(), 3);
      EXPECT_THAT(std::vector<std::string>(l.argv().begin(), l.argv().end()),
                  ElementsAre("python3", "train.py"));
      EXPECT_EQ(l.world_size(), c.world_size);
      EXPECT_EQ(l.num_agents(), static_cast<int>(c.agents.size()));
      EXPECT_EQ(l.agent_rank(), static_cast<int>(i));
      std::vector<int> ranks;
      for (const auto& r : l.ranks()) {
        ranks.push_back(r.rank());
        EXPECT_EQ(r.agent_id(), agent);
      }
      EXPECT_EQ(ranks, c.ranks[i]);
      // torchrun's contract: the same chief and run id on every agent.
      EXPECT_EQ(l.chief_address(), "10.0.0.1");
      EXPECT_EQ(l.chief_port(), 29501);
      EXPECT_EQ(l.restart_count(), 1);
      EXPECT_EQ(l.max_restarts(), 5);
      EXPECT_EQ(l.run_id(), "det-trial-7");
      EXPECT_EQ(l.env().at("DET_TRIAL_ID"), "7");  // DET_* win over user variables.
      EXPECT_EQ(l.env().at("USER_VAR"), "u");
      EXPECT_EQ(l.env().at("DET_TRIAL_RUN_ID"), "2");
      EXPECT_EQ(l.env().at("DET_ALLOCATION_TOKEN"), "tok");
      EXPECT_EQ(l.env().at("DET_LATEST_CHECKPOINT"), "/ckpt/c-1");
      EXPECT_EQ(l.env().at("DET_EXPERIMENT_CONFIG"), "{\"name\":\"x\"}");
      absl::StatusOr<v1::TrialSpec> spec = config::DecodeTrialSpec(l.env().at("DET_TRIAL_SPEC"));
      ASSERT_TRUE(spec.ok()) << spec.status();
      EXPECT_EQ(spec->trial_id(), 7);
      EXPECT_EQ(spec->checkpoint_dir(), "/ckpt");
    }
  }
}

TEST(LaunchCommandTest, RanksAreContiguousPerAgentWithSlots) {
  auto ranks = PlaceRanks({{"a", {"s1", "s2"}}, {"b", {}}});
  ASSERT_EQ(ranks.size(), 3u);
  EXPECT_EQ(ranks[0].agent_id(), "a");
  EXPECT_EQ(ranks[0].local_rank(), 0);
  EXPECT_THAT(std::vector<std::string>(ranks[1].slot_ids().begin(), ranks[1].slot_ids().end()),
              ElementsAre("s2"));
  EXPECT_EQ(ranks[2].agent_id(), "b");
  EXPECT_EQ(ranks[2].rank(), 2);
  EXPECT_EQ(ranks[2].local_rank(), 0);
  EXPECT_TRUE(ranks[2].slot_ids().empty());
}

// The owner's linked OS user reaches every agent of the allocation; without a link no
// agent gets one (each uses its default task user).
TEST(LaunchCommandTest, TheOwnersLinkedUserGoesToEveryAgent) {
  v1::AgentUserGroup linked;
  linked.set_agent_user("nobody");
  linked.set_agent_uid(65534);
  linked.set_agent_group("nogroup");
  linked.set_agent_gid(65533);
  const std::vector<std::pair<std::string, v1::AgentUserGroup>> cases = {
      {"linked", linked}, {"not linked", v1::AgentUserGroup()}};
  std::vector<AgentShare> agents = {{"a", {"0"}}, {"b", {"0", "1"}}};
  v1::Allocation a;
  a.set_id("7.2");
  for (auto& r : PlaceRanks(agents)) *a.add_ranks() = r;
  for (const auto& [name, link] : cases) {
    SCOPED_TRACE(name);
    LaunchInputs in = Inputs();
    in.task_user = link;
    auto cmds = BuildLaunchCommands(in, a, agents);
    ASSERT_EQ(cmds.size(), 2u);
    for (const auto& [agent, l] : cmds) {
      EXPECT_EQ(l.has_task_user(), !link.agent_user().empty()) << agent;
      EXPECT_EQ(l.task_user().agent_user(), link.agent_user()) << agent;
      EXPECT_EQ(l.task_user().agent_uid(), link.agent_uid()) << agent;
      EXPECT_EQ(l.task_user().agent_group(), link.agent_group()) << agent;
      EXPECT_EQ(l.task_user().agent_gid(), link.agent_gid()) << agent;
    }
  }
}

TEST(LaunchCommandTest, EveryAgentIsToldWhichContextToFetchNotTheContextItself) {
  LaunchInputs in = Inputs();
  in.context_sha256 = std::string(64, 'a');
  v1::Allocation a;
  a.set_id("7.2");
  std::vector<AgentShare> agents = {{"a", {"0"}}, {"b", {"0"}}};
  for (auto& r : PlaceRanks(agents)) *a.add_ranks() = r;
  for (const auto& [agent, l] : BuildLaunchCommands(in, a, agents)) {
    EXPECT_EQ(l.model_context().experiment_id(), in.experiment_id) << agent;
    EXPECT_EQ(l.model_context().sha256(), in.context_sha256) << agent;
  }
}

TEST(LaunchCommandTest, TheExperimentsInterpreterGoesToEveryAgent) {
  LaunchInputs in = Inputs();
  v1::Allocation a;
  a.set_id("7.2");
  std::vector<AgentShare> agents = {{"a", {"0"}}, {"b", {"0"}}};
  for (auto& r : PlaceRanks(agents)) *a.add_ranks() = r;
  for (const auto& [agent, l] : BuildLaunchCommands(in, a, agents)) {
    EXPECT_EQ(l.python(), "") << agent;  // none: each agent's worker_python
  }
  in.python = "/opt/venv/bin/python3";
  for (const auto& [agent, l] : BuildLaunchCommands(in, a, agents)) {
    EXPECT_EQ(l.python(), "/opt/venv/bin/python3") << agent;
  }
}

}  // namespace
}  // namespace det::master
