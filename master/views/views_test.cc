#include "master/views/views.h"

#include "gmock/gmock.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace det::master::views {
namespace {

v1::Trial Trial(int64_t id, v1::State state, const std::string& allocation = "", int slots = 0) {
  v1::Trial t;
  t.set_id(id);
  t.set_experiment_id(1);
  t.set_state(state);
  if (!allocation.empty()) {
    t.mutable_allocation()->set_id(allocation);
    t.mutable_allocation()->set_slots(slots);
    t.mutable_allocation()->set_state(v1::STATE_RUNNING);
    v1::RankPlacement* r = t.mutable_allocation()->add_ranks();
    r->set_agent_id("a1");
    r = t.mutable_allocation()->add_ranks();
    r->set_agent_id("a1");
  }
  return t;
}

v1::Experiment Experiment(int64_t id, int priority, v1::State state = v1::STATE_ACTIVE) {
  v1::Experiment e;
  e.set_id(id);
  e.set_name(absl::StrCat("e", id));
  e.set_priority(priority);
  e.set_state(state);
  e.set_resource_pool("default");
  return e;
}

TEST(ViewsTest, JobsAreOrderedByPriorityThenSubmissionWithStateAndReason) {
  v1::Experiment e1 = Experiment(1, 50), e2 = Experiment(2, 10), e3 = Experiment(3, 10);
  v1::Experiment done = Experiment(4, 1, v1::STATE_COMPLETED);
  v1::Trial running = Trial(1, v1::STATE_RUNNING, "1.0", 2);
  v1::Trial queued = Trial(2, v1::STATE_QUEUED);
  v1::Trial queued2 = Trial(3, v1::STATE_QUEUED);
  v1::Trial idle = Trial(4, v1::STATE_PAUSED);
  std::string why = "no agents in resource pool 'default'";
  std::vector<ExperimentRow> rows = {
      {&e1, {{&running, false, nullptr}, {&queued, false, &why}}},
      {&e2, {{&queued2, false, nullptr}}},
      {&e3, {{&idle, false, nullptr}}},  // Neither queued nor running: no job.
      {&done, {{&queued, false, nullptr}}},
  };
  std::vector<v1::Job> jobs = Jobs(rows, "");
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].experiment_id(), 2);
  EXPECT_EQ(jobs[0].state(), "QUEUED");
  EXPECT_EQ(jobs[1].experiment_id(), 1);
  EXPECT_EQ(jobs[1].state(), "SCHEDULED");
  EXPECT_EQ(jobs[1].reason(), why);
  EXPECT_EQ(jobs[1].slots_acquired(), 2);
  EXPECT_TRUE(Jobs(rows, "other").empty());
}

TEST(ViewsTest, TasksOfTrialsAndGcTasks) {
  v1::Trial running = Trial(1, v1::STATE_RUNNING, "1.0", 2);
  v1::Task t = TrialTask({&running, /*stopping=*/true, nullptr}, "default");
  EXPECT_EQ(t.allocation_id(), "1.0");
  EXPECT_EQ(t.state(), v1::STATE_STOPPING);
  EXPECT_THAT(std::vector<std::string>(t.agents().begin(), t.agents().end()),
              ::testing::ElementsAre("a1"));  // Once per agent.

  v1::CheckpointGcTask gc;
  gc.set_id(7);
  gc.set_attempt(2);
  gc.set_state(v1::STATE_QUEUED);
  gc.add_checkpoints()->set_uuid("c-1");
  v1::Task g = GcTask(gc, "waiting");
  EXPECT_EQ(g.allocation_id(), "gc-7.2");
  EXPECT_EQ(g.type(), "CHECKPOINT_GC");
  EXPECT_EQ(g.pending_reason(), "waiting");
  EXPECT_TRUE(g.agents().empty());
  gc.set_state(v1::STATE_RUNNING);
  gc.set_agent_id("a1");
  g = GcTask(gc, "stale");
  EXPECT_EQ(g.pending_reason(), "");  // Only while queued.
  ASSERT_EQ(g.ranks_size(), 1);
  EXPECT_EQ(g.ranks(0).agent_id(), "a1");
}

TEST(ViewsTest, PoolsAndStatsCountAgentsSlotsAndTrials) {
  std::vector<v1::Agent> agents(2);
  agents[0].set_resource_pool("default");
  agents[0].set_connected(true);
  agents[0].set_enabled(true);
  agents[0].add_slots()->set_allocation_id("1.0");
  agents[0].add_slots()->set_enabled(true);
  agents[1].set_resource_pool("default");  // Disconnected.
  v1::Experiment e1 = Experiment(1, 50);
  v1::Trial running = Trial(1, v1::STATE_RUNNING, "1.0", 1);
  v1::Trial queued = Trial(2, v1::STATE_QUEUED);
  std::vector<ExperimentRow> rows = {{&e1, {{&running, false, nullptr}, {&queued, false, nullptr}}}};
  std::vector<config::ResourcePoolConfig> pools(1);
  pools[0].name = "default";
  auto listed = ResourcePools(pools, agents, rows);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].agents(), 2);
  EXPECT_EQ(listed[0].connected_agents(), 1);
  EXPECT_EQ(listed[0].slots(), 2);
  EXPECT_EQ(listed[0].slots_used(), 1);
  EXPECT_EQ(listed[0].queued_trials(), 1);

  v1::GetMasterStatsResponse stats;
  CountCluster(agents, rows, &stats);
  EXPECT_EQ(stats.agents(), 2);
  EXPECT_EQ(stats.agents_connected(), 1);
  EXPECT_EQ(stats.slots_free(), 1);
  EXPECT_EQ(stats.trials_running(), 1);
  EXPECT_EQ(stats.trials_queued(), 1);
  EXPECT_EQ(stats.jobs_queued(), 1);
  EXPECT_EQ(stats.experiments_active(), 1);
}

}  // namespace
}  // namespace det::master::views
