// Gang scheduling with real agents: ranks and environment per worker, submit-time checks,
// priorities and the job queue, disabling agents, preemption.
#include <signal.h>

#include <map>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

// A config whose workers print their rank environment on one line, then sleep.
std::string EnvConfig(const std::string& name, int slots, double sleep_s, int priority = 42,
                      int max_restarts = 0) {
  return absl::StrCat("name: ", name, R"(
entrypoint:
  - /bin/sh
  - -c
  - >-
    echo "ENV RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOCAL_RANK=$LOCAL_RANK
    LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE CROSS_RANK=$CROSS_RANK CROSS_SIZE=$CROSS_SIZE
    SLOTS=$DET_SLOT_IDS AGENT=$DET_AGENT_ID SEED=$DET_TRIAL_SEED"; sleep )", sleep_s, R"(
searcher:
  name: single
  metric: loss
  max_length:
    batches: 1
max_restarts: )", max_restarts, R"(
resources:
  slots_per_trial: )", slots, R"(
  priority: )", priority, "\n");
}


std::string State(TestCluster& c, int64_t exp) {
  nlohmann::json d = c.DetJson({"experiment", "describe", absl::StrCat(exp)});
  return d.is_object() ? d["experiment"]["state"].get<std::string>() : "?";
}

bool WaitState(TestCluster& c, int64_t exp, const std::string& state, absl::Duration timeout) {
  return WaitUntil([&] { return State(c, exp) == state; }, timeout);
}

// rank -> {"RANK": "0", ...} from the ENV lines of trial `trial`'s logs.
std::map<int, std::map<std::string, std::string>> RankEnvironments(TestCluster& c, int64_t trial) {
  std::map<int, std::map<std::string, std::string>> out;
  CommandResult logs = c.Det({"trial", "logs", absl::StrCat(trial), "--json"});
  std::istringstream lines(logs.out);
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || j.value("stream", "") != "stdout") continue;
    std::string message = j.value("message", "");
    if (message.rfind("ENV ", 0) != 0) continue;
    std::map<std::string, std::string> env;
    for (absl::string_view kv : absl::StrSplit(message.substr(4), ' ', absl::SkipEmpty())) {
      std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
      env[p.first] = p.second;
    }
    out[std::stoi(env["RANK"])] = env;
  }
  return out;
}

class Scheduling : public ::testing::Test {
 protected:
  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TEST_F(Scheduling, GangPlacementGivesEveryRankItsEnvironment) {
  ASSERT_TRUE(cluster_.StartMaster().ok());
  for (const char* id : {"a1", "a2", "a3"}) ASSERT_TRUE(cluster_.StartAgent(id, 4).ok()) << id;
  for (auto [name, slots] : std::vector<std::pair<std::string, int>>{{"one", 1}, {"four", 4}, {"eight", 8}}) {
    CommandResult r = cluster_.Det(
        {"experiment", "create", cluster_.WriteFile(name + ".yaml", EnvConfig(name, slots, 0.5))});
    ASSERT_TRUE(r.exit.ok()) << r.err;
  }
  for (int64_t exp : {1, 2, 3}) {
    ASSERT_TRUE(WaitState(cluster_, exp, "STATE_COMPLETED", absl::Seconds(90)))
        << exp << cluster_.LogTail("master");
  }
  std::map<int64_t, int> slots_of = {{1, 1}, {2, 4}, {3, 8}};
  for (auto [trial, n] : slots_of) {
    SCOPED_TRACE(absl::StrCat("trial ", trial));
    auto envs = RankEnvironments(cluster_, trial);
    ASSERT_EQ(static_cast<int>(envs.size()), n);
    std::map<std::string, std::set<std::string>> slots_by_agent;
    std::set<std::string> seeds;
    for (int rank = 0; rank < n; ++rank) {
      auto& env = envs[rank];
      EXPECT_EQ(env["WORLD_SIZE"], absl::StrCat(n));
      int per_agent = std::min(n, 4);
      EXPECT_EQ(env["LOCAL_WORLD_SIZE"], absl::StrCat(per_agent));
      // Contiguous per agent: ranks 0..3 on the first agent (cross rank 0), 4..7 next.
      EXPECT_EQ(env["LOCAL_RANK"], absl::StrCat(rank % per_agent));
      EXPECT_EQ(env["CROSS_RANK"], absl::StrCat(rank / per_agent));
      EXPECT_EQ(env["CROSS_SIZE"], absl::StrCat((n + 3) / 4));
      EXPECT_TRUE(slots_by_agent[env["AGENT"]].insert(env["SLOTS"]).second)
          << "slot " << env["SLOTS"] << " given twice on " << env["AGENT"];
      seeds.insert(env["SEED"]);
    }
    EXPECT_EQ(slots_by_agent.size(), static_cast<size_t>((n + 3) / 4));
    EXPECT_EQ(seeds.size(), 1u);  // Every rank of a trial has the trial's seed.
    // det trial describe shows the same placement.
    nlohmann::json t = cluster_.DetJson({"trial", "describe", absl::StrCat(trial)});
    ASSERT_EQ(t["trial"]["allocation"]["ranks"].size(), static_cast<size_t>(n));
    EXPECT_EQ(t["trial"]["allocation"]["ranks"][0]["agent_id"], envs[0]["AGENT"]);
  }
  // An 8-slot trial needs two whole idle agents: the agents it ran on were not shared.
  CommandResult tasks = cluster_.Det({"task", "list"});
  EXPECT_TRUE(tasks.exit.ok()) << tasks.err;
}

TEST_F(Scheduling, WhatCanNeverFitIsRefusedAtSubmitUnlessForced) {
  ASSERT_TRUE(cluster_.StartMaster().ok());
  ASSERT_TRUE(cluster_.StartAgent("a1", 4).ok());
  ASSERT_TRUE(cluster_.StartAgent("a2", 4).ok());
  std::string six = cluster_.WriteFile("six.yaml", EnvConfig("six", 6, 0));
  CommandResult r = cluster_.Det({"experiment", "create", six});
  EXPECT_FALSE(r.exit.ok());
  EXPECT_THAT(r.err, HasSubstr("resources.slots_per_trial: 6 can never be scheduled"));
  EXPECT_THAT(r.err, HasSubstr("multiple of one agent size"));
  std::string many = cluster_.WriteFile("many.yaml", EnvConfig("many", 16, 0));
  r = cluster_.Det({"experiment", "create", many});
  EXPECT_THAT(r.err, HasSubstr("has 8 slots in all"));
  std::string pool = cluster_.WriteFile("pool.yaml", EnvConfig("pool", 1, 0) + "  resource_pool: gpus\n");
  r = cluster_.Det({"experiment", "create", pool});
  EXPECT_THAT(r.err, HasSubstr("resources.resource_pool: unknown pool 'gpus'"));

  r = cluster_.Det({"experiment", "create", six, "--force"});
  ASSERT_TRUE(r.exit.ok()) << r.err;
  nlohmann::json jobs;
  ASSERT_TRUE(WaitUntil(
      [&] {
        jobs = cluster_.DetJson({"job", "list"});
        return jobs.is_object() && jobs["jobs"].size() == 1 && !jobs["jobs"][0]["reason"].get<std::string>().empty();
      },
      absl::Seconds(20)));
  EXPECT_THAT(jobs["jobs"][0]["reason"].get<std::string>(),
              HasSubstr("6 slots requested; agents in resource pool 'default' have 4 slots"));
  nlohmann::json d = cluster_.DetJson({"experiment", "describe", "1"});
  EXPECT_THAT(d["trials"][0]["pending_reason"].get<std::string>(), HasSubstr("multiple"));
}

TEST_F(Scheduling, PriorityOrdersTheQueueAndCanBeChanged) {
  ASSERT_TRUE(cluster_.StartMaster().ok());
  ASSERT_TRUE(cluster_.StartAgent("a1", 1).ok());
  ASSERT_TRUE(cluster_.Det({"experiment", "create", cluster_.WriteFile("run.yaml", EnvConfig("run", 1, 3, 50))}).exit.ok());
  ASSERT_TRUE(WaitState(cluster_, 1, "STATE_ACTIVE", absl::Seconds(10)));
  ASSERT_TRUE(WaitUntil([&] {
    nlohmann::json j = cluster_.DetJson({"job", "list"});
    return j.is_object() && j["jobs"].size() == 1 && j["jobs"][0]["state"] == "RUNNING";
  }, absl::Seconds(20)));
  ASSERT_TRUE(cluster_.Det({"experiment", "create", cluster_.WriteFile("b.yaml", EnvConfig("b", 1, 0, 42))}).exit.ok());
  ASSERT_TRUE(cluster_.Det({"experiment", "create", cluster_.WriteFile("c.yaml", EnvConfig("c", 1, 0, 42))}).exit.ok());
  nlohmann::json jobs = cluster_.DetJson({"job", "list"});
  ASSERT_EQ(jobs["jobs"].size(), 3u);
  EXPECT_EQ(Int(jobs["jobs"][0]["experiment_id"]), 2);  // Priority 42 before 50, FIFO within.
  EXPECT_EQ(Int(jobs["jobs"][1]["experiment_id"]), 3);
  EXPECT_EQ(Int(jobs["jobs"][2]["experiment_id"]), 1);
  ASSERT_TRUE(cluster_.Det({"job", "update", "3", "--priority", "10"}).exit.ok());
  EXPECT_FALSE(cluster_.Det({"job", "update", "3", "--priority", "100"}).exit.ok());
  jobs = cluster_.DetJson({"job", "list"});
  EXPECT_EQ(Int(jobs["jobs"][0]["experiment_id"]), 3);
  EXPECT_EQ(jobs["jobs"][0]["priority"], 10);
  // When the slot frees, job 3 runs before job 2.
  ASSERT_TRUE(WaitState(cluster_, 2, "STATE_COMPLETED", absl::Seconds(60)));
  nlohmann::json c = cluster_.DetJson({"experiment", "describe", "3"});
  nlohmann::json b = cluster_.DetJson({"experiment", "describe", "2"});
  EXPECT_LE(Int(c["trials"][0]["start_time_ms"]), Int(b["trials"][0]["start_time_ms"]));
}

TEST_F(Scheduling, DisabledAgentStopsOrDrainsItsWork) {
  ASSERT_TRUE(cluster_.StartMaster().ok());
  ASSERT_TRUE(cluster_.StartAgent("a1", 1).ok());
  ASSERT_TRUE(cluster_.Det({"experiment", "create", cluster_.WriteFile("long.yaml", EnvConfig("long", 1, 60))}).exit.ok());
  ASSERT_TRUE(WaitUntil([&] {
    nlohmann::json t = cluster_.DetJson({"trial", "describe", "1"});
    return t.is_object() && t["trial"]["state"] == "STATE_RUNNING";
  }, absl::Seconds(20)));
  ASSERT_TRUE(cluster_.StartAgent("a2", 1).ok());
  // Disabling a1 stops the trial and reschedules it on a2, not counted as a restart.
  CommandResult r = cluster_.Det({"agent", "disable", "a1"});
  ASSERT_TRUE(r.exit.ok()) << r.err;
  ASSERT_TRUE(WaitUntil([&] {
    nlohmann::json t = cluster_.DetJson({"trial", "describe", "1"});
    return t.is_object() && t["trial"]["state"] == "STATE_RUNNING" &&
           t["trial"]["allocation"]["ranks"][0]["agent_id"] == "a2";
  }, absl::Seconds(30))) << cluster_.LogTail("master");
  nlohmann::json t = cluster_.DetJson({"trial", "describe", "1"});
  EXPECT_EQ(t["trial"]["restarts"], 0);
  EXPECT_EQ(t["trial"]["run_id"], 1);
  nlohmann::json agents = cluster_.DetJson({"agent", "list"});
  for (const auto& a : agents["agents"]) EXPECT_EQ(a["enabled"], a["id"] != "a1") << a["id"];

  // Draining a2 lets its trial go on; nothing new lands on a disabled agent.
  ASSERT_TRUE(cluster_.Det({"agent", "disable", "a2", "--drain"}).exit.ok());
  ASSERT_TRUE(cluster_.Det({"experiment", "create", cluster_.WriteFile("new.yaml", EnvConfig("new", 1, 0))}).exit.ok());
  ASSERT_TRUE(WaitUntil([&] {
    nlohmann::json j = cluster_.DetJson({"experiment", "describe", "2"});
    return j.is_object() && j["trials"][0]["pending_reason"].get<std::string>().find("disabled") != std::string::npos;
  }, absl::Seconds(20)));
  t = cluster_.DetJson({"trial", "describe", "1"});
  EXPECT_EQ(t["trial"]["state"], "STATE_RUNNING");
  ASSERT_TRUE(cluster_.Det({"agent", "enable", "a1"}).exit.ok());
  EXPECT_TRUE(WaitState(cluster_, 2, "STATE_COMPLETED", absl::Seconds(30)));
  cluster_.Det({"experiment", "kill", "1"});
}

TEST_F(Scheduling, PreemptionStopsTheLessImportantTrialAndRequeuesIt) {
  ASSERT_TRUE(cluster_.StartMaster(R"(resource_pools:
  - pool_name: default
    preemption:
      enabled: true
      timeout: 5s
)").ok()) << cluster_.LogTail("master");
  ASSERT_TRUE(cluster_.StartAgent("a1", 2).ok());
  // The low-priority trial sleeps long the first time, briefly when rerun.
  std::string low = absl::StrCat(R"(name: low
entrypoint:
  - /bin/sh
  - -c
  - 'if [ "$DET_TRIAL_RUN_ID" = 0 ]; then sleep 60; fi; echo done'
searcher: {name: single, metric: loss, max_length: {batches: 1}}
max_restarts: 0
resources: {slots_per_trial: 2, priority: 80}
)");
  ASSERT_TRUE(cluster_.Det({"experiment", "create", cluster_.WriteFile("low.yaml", low)}).exit.ok());
  ASSERT_TRUE(WaitUntil([&] {
    nlohmann::json t = cluster_.DetJson({"trial", "describe", "1"});
    return t.is_object() && t["trial"]["state"] == "STATE_RUNNING";
  }, absl::Seconds(20)));
  ASSERT_TRUE(cluster_.Det({"experiment", "create", cluster_.WriteFile("high.yaml", EnvConfig("high", 2, 0, 5))}).exit.ok());
  ASSERT_TRUE(WaitState(cluster_, 2, "STATE_COMPLETED", absl::Seconds(30))) << cluster_.LogTail("master");
  ASSERT_TRUE(WaitState(cluster_, 1, "STATE_COMPLETED", absl::Seconds(30))) << cluster_.LogTail("master");
  nlohmann::json t = cluster_.DetJson({"trial", "describe", "1"});
  EXPECT_EQ(t["trial"]["restarts"], 0);  // Preemption is not the trial's fault.
  EXPECT_EQ(t["trial"]["run_id"], 1);
  CommandResult logs = cluster_.Det({"trial", "logs", "1"});
  EXPECT_THAT(logs.out, HasSubstr("preempted by trial 2"));
}

}  // namespace
}  // namespace det::testing
