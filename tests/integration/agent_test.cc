// The agent daemon for real clusters, with real det-master, det-agent and worker processes
// on loopback: joining with the cluster secret, supervision (signals, failing ranks), agent
// restarts with running workers, lost agents, logs of several ranks, system metrics, slots,
// and model contexts with script entrypoints.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/rpc/rpc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/api.grpc.pb.h"
#include "tests/integration/agent_test_util.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class AgentDaemon : public ::testing::Test {
 protected:
  // A model context directory holding train.sh (executable) with `script`, and an
  // experiment config running it with `slots` slots; returns the config path and sets
  // `context` to the directory.
  std::string Experiment(const std::string& name, const std::string& script, int slots = 1,
                         const std::string& entrypoint = "[\"./train.sh\"]", int max_restarts = 0) {
    context_ = cluster_.dir() + "/ctx-" + name;
    mkdir(context_.c_str(), 0755);
    std::ofstream(context_ + "/train.sh") << "#!/bin/sh\n" << script;
    chmod((context_ + "/train.sh").c_str(), 0755);
    return cluster_.WriteFile(
        name + ".yaml",
        absl::StrCat("name: ", name, "\nentrypoint: ", entrypoint,
                     "\nsearcher:\n  name: single\n  metric: loss\n  max_length:\n    batches: 1\n"
                     "resources:\n  slots_per_trial: ",
                     slots, "\nmax_restarts: ", max_restarts,
                     "\nenvironment:\n  environment_variables:\n    - TEST_DIR=", cluster_.dir(),
                     "\n"));
  }

  void Create(const std::string& config) {
    CommandResult r = cluster_.Det({"experiment", "create", config, context_});
    ASSERT_TRUE(r.exit.ok()) << r.out << r.err;
  }

  // Waits for a pid the worker writes to TEST_DIR/name (WritePidLine); 0 (and a failure)
  // when none came within 60 s. The worker is killed at the end of the test if still alive.
  pid_t WaitForPid(const std::string& name) {
    return workers_.WaitForPidFile(cluster_.dir() + "/" + name, absl::Seconds(60));
  }

  nlohmann::json Trial(int64_t id = 1) {
    nlohmann::json t = cluster_.DetJson({"trial", "describe", absl::StrCat(id)});
    return t.is_object() ? t : nlohmann::json::object();
  }

  std::string TrialState(int64_t id = 1) {
    nlohmann::json t = Trial(id);
    return t.contains("trial") ? t["trial"].value("state", "") : "";
  }

  bool WaitForTrialState(const std::string& state, absl::Duration timeout = absl::Seconds(90)) {
    return WaitUntil([&] { return TrialState() == state; }, timeout);
  }

  std::string Logs(int64_t id = 1) { return cluster_.Det({"trial", "logs", absl::StrCat(id)}).out; }

  bool WaitForLog(const std::string& text, absl::Duration timeout = absl::Seconds(60)) {
    return WaitUntil([&] { return Logs().find(text) != std::string::npos; }, timeout);
  }

  bool AgentConnected(const std::string& id) {
    nlohmann::json agents = cluster_.DetJson({"agent", "list"});
    if (!agents.is_object() || !agents.contains("agents")) return false;
    for (const auto& a : agents["agents"]) {
      if (a.value("id", "") == id) return a.value("connected", false);
    }
    return false;
  }

  std::string Diagnostics() {
    return absl::StrCat("\n--- trial logs\n", Logs(), "\n--- master\n", cluster_.LogTail("master"),
                        "\n--- agent-a\n", cluster_.LogTail("agent-a"));
  }

  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
  std::string context_;
  // Declared after cluster_: no worker outlives a test, whatever happened to its agent.
  WorkerPids workers_;
};

TEST_F(AgentDaemon, AgentWithoutTheSecretIsRefusedAndSaysWhy) {
  ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
  std::string yaml = cluster_.AgentYaml("intruder");
  size_t at = yaml.find("cluster_secret: test-secret\n");
  ASSERT_NE(at, std::string::npos);
  yaml.erase(at, std::string("cluster_secret: test-secret\n").size());
  ASSERT_TRUE(cluster_.StartAgentWithYaml("intruder", yaml, {}, /*wait_joined=*/false).ok());
  std::optional<ExitStatus> exit = cluster_.WaitAgentExit("intruder", absl::Seconds(30));
  ASSERT_TRUE(exit.has_value()) << "a refused agent keeps running:\n"
                                << cluster_.LogTail("intruder");
  EXPECT_EQ(exit->exit_code, 3);
  std::string log = cluster_.LogTail("intruder");
  EXPECT_THAT(log, HasSubstr("refused"));
  EXPECT_THAT(log, HasSubstr("cluster secret missing or wrong"));
  nlohmann::json agents = cluster_.DetJson({"agent", "list"});
  ASSERT_TRUE(agents.is_object());
  EXPECT_EQ(agents.value("agents", nlohmann::json::array()).size(), 0u);

  // With the secret the same agent joins.
  ASSERT_TRUE(cluster_.StartAgent("intruder").ok()) << cluster_.LogTail("intruder");
}

TEST_F(AgentDaemon, WorkerKilledBySigkillIsReportedWithItsSignal) {
  ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
  ASSERT_TRUE(cluster_.StartAgent("agent-a").ok()) << cluster_.LogTail("agent-a");
  Create(Experiment("sigkill",
                    absl::StrCat(WritePidLine("pid"), "\necho running\nexec sleep 1000\n")));
  pid_t pid = WaitForPid("pid");
  ASSERT_GT(pid, 0) << Diagnostics();
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_TRUE(WaitForTrialState("STATE_ERROR")) << Diagnostics();
  nlohmann::json t = Trial()["trial"];
  EXPECT_THAT(t.value("error", ""), HasSubstr("rank 0 killed by signal 9"));
  std::string logs = Logs();
  EXPECT_THAT(logs, HasSubstr("worker exited: killed by signal 9 (SIGKILL)"));
  EXPECT_THAT(logs, HasSubstr("rank 0 exited: killed by signal 9"));
}

TEST_F(AgentDaemon, FailingRankStopsTheOtherAndTheMasterKnowsWhichFailed) {
  ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
  ASSERT_TRUE(cluster_.StartAgent("agent-a", 2).ok()) << cluster_.LogTail("agent-a");
  Create(Experiment("ranks", FailingRankScript(), /*slots=*/2));
  pid_t rank0 = WaitForPid("rank0");
  ASSERT_GT(rank0, 0) << Diagnostics();
  ASSERT_TRUE(WaitForTrialState("STATE_ERROR")) << Diagnostics();
  nlohmann::json t = Trial()["trial"];
  EXPECT_THAT(t.value("error", ""), HasSubstr("rank 1 exit code 3"));
  std::string logs = Logs();
  EXPECT_THAT(logs, HasSubstr("rank 1 exited: exit code 3"));
  EXPECT_THAT(logs, HasSubstr("rank 0 exited: killed by signal 15"));
  EXPECT_THAT(logs, HasSubstr("[rank 1] [stderr] rank 1 fails"));
  EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(rank0); }, absl::Seconds(10)));
}

// The agent is killed (SIGKILL) and started again within agent_reconnect_wait: the worker
// keeps running meanwhile, the new agent process finds it, the master reattaches it, and
// the trial finishes normally, its output complete.
TEST_F(AgentDaemon, AgentRestartedWithinTheWaitKeepsItsWorker) {
  ASSERT_TRUE(cluster_.StartMaster("agent_timeout: 2s\n").ok()) << cluster_.LogTail("master");
  ASSERT_TRUE(cluster_.StartAgent("agent-a").ok()) << cluster_.LogTail("agent-a");
  Create(Experiment("restart", absl::StrCat("echo \"worker started\"\n", WritePidLine("pid"),
                                            R"sh(
while [ ! -e "$TEST_DIR/go" ]; do sleep 0.05; done
echo "worker finishing"
)sh")));
  pid_t pid = WaitForPid("pid");
  ASSERT_GT(pid, 0) << Diagnostics();
  ASSERT_TRUE(WaitForTrialState("STATE_RUNNING")) << Diagnostics();
  ASSERT_TRUE(WaitForLog("worker started")) << Diagnostics();

  ExitStatus agent_exit = cluster_.StopAgent("agent-a", SIGKILL);
  EXPECT_EQ(agent_exit.signal, SIGKILL);
  // The master notices the silence, and the worker runs on without its agent.
  ASSERT_TRUE(WaitUntil([&] { return !AgentConnected("agent-a"); }, absl::Seconds(30)))
      << Diagnostics();
  EXPECT_TRUE(ProcessAlive(pid));
  EXPECT_TRUE(WaitForLog("waiting up to 30s (agent_reconnect_wait)")) << Diagnostics();
  EXPECT_EQ(TrialState(), "STATE_RUNNING");

  ASSERT_TRUE(cluster_.StartAgent("agent-a").ok()) << cluster_.LogTail("agent-a");
  ASSERT_TRUE(WaitForLog("agent agent-a reattached")) << Diagnostics();
  EXPECT_TRUE(ProcessAlive(pid));
  std::ofstream(cluster_.dir() + "/go") << "";
  ASSERT_TRUE(WaitForTrialState("STATE_COMPLETED")) << Diagnostics();
  nlohmann::json t = Trial()["trial"];
  EXPECT_EQ(Int(t["restarts"]), 0);
  EXPECT_EQ(Int(t["run_id"]), 0);
  std::string logs = Logs();
  EXPECT_THAT(logs, HasSubstr("[rank 0] worker finishing"));
  EXPECT_THAT(logs, HasSubstr("watching the worker again"));
  EXPECT_THAT(logs, HasSubstr("worker exited: exit code 0"));
  // "worker started" was shipped once, by the first agent process.
  size_t first = logs.find("[rank 0] worker started");
  ASSERT_NE(first, std::string::npos);
  EXPECT_EQ(logs.find("[rank 0] worker started", first + 1), std::string::npos);
  EXPECT_FALSE(ProcessAlive(pid));
}

// The agent stays away longer than agent_reconnect_wait: the master gives the run up and
// requeues the trial (not counted as a restart). When the agent comes back, the master
// has it kill the stale worker, and the trial runs again there.
TEST_F(AgentDaemon, AgentGoneLongerThanTheWaitRequeuesTheTrial) {
  ASSERT_TRUE(cluster_.StartMaster("agent_timeout: 2s\nagent_reconnect_wait: 2s\n").ok())
      << cluster_.LogTail("master");
  ASSERT_TRUE(cluster_.StartAgent("agent-a").ok()) << cluster_.LogTail("agent-a");
  Create(Experiment("lost", absl::StrCat("if [ \"$DET_TRIAL_RUN_ID\" = 0 ]; then\n",
                                         WritePidLine("pid"), R"sh(
  exec sleep 1000
fi
echo "run $DET_TRIAL_RUN_ID done"
)sh")));
  pid_t stale = WaitForPid("pid");
  ASSERT_GT(stale, 0) << Diagnostics();
  ASSERT_TRUE(WaitForTrialState("STATE_RUNNING")) << Diagnostics();
  cluster_.StopAgent("agent-a", SIGKILL);

  ASSERT_TRUE(WaitForTrialState("STATE_QUEUED", absl::Seconds(60))) << Diagnostics();
  nlohmann::json t = Trial()["trial"];
  EXPECT_EQ(Int(t["restarts"]), 0);
  EXPECT_EQ(Int(t["run_id"]), 1);
  std::string logs = Logs();
  EXPECT_THAT(logs, HasSubstr("did not return within 2s (agent_reconnect_wait)"));
  EXPECT_THAT(logs, HasSubstr("lost; rescheduling (not counted as a restart)"));
  EXPECT_TRUE(ProcessAlive(stale));  // Nobody could stop it: its agent is gone.

  ASSERT_TRUE(cluster_.StartAgent("agent-a").ok()) << cluster_.LogTail("agent-a");
  ASSERT_TRUE(WaitForTrialState("STATE_COMPLETED")) << Diagnostics();
  t = Trial()["trial"];
  EXPECT_EQ(Int(t["restarts"]), 0);
  EXPECT_THAT(Logs(), HasSubstr("[rank 0] run 1 done"));
  EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(stale); }, absl::Seconds(10)));
}

// `det trial logs -f` follows a running 2-rank trial: every line of both ranks, in order
// per rank. While it runs, `det trial describe` shows its agent's system metrics.
TEST_F(AgentDaemon, FollowedLogsOfBothRanksAndSystemMetrics) {
  ASSERT_TRUE(cluster_.StartMaster("agent_timeout: 3s\n").ok()) << cluster_.LogTail("master");
  ASSERT_TRUE(cluster_
                  .StartAgentWithYaml("agent-a", cluster_.AgentYaml("agent-a", 2),
                                      {"--system-metrics-period", "500ms"})
                  .ok())
      << cluster_.LogTail("agent-a");
  Create(Experiment("follow", R"sh(
i=1; while [ $i -le 30 ]; do echo "rank $RANK line $i"; i=$((i+1)); done
while [ ! -e "$TEST_DIR/go" ]; do sleep 0.05; done
while [ $i -le 60 ]; do echo "rank $RANK line $i"; i=$((i+1)); done
)sh",
                    /*slots=*/2));
  ASSERT_TRUE(WaitForTrialState("STATE_RUNNING")) << Diagnostics();
  CommandResult followed;
  std::thread follower([&] {
    followed = cluster_.Det({"trial", "logs", "1", "-f"}, absl::Seconds(120));
  });

  // Host metrics of the trial's agent, plausible.
  nlohmann::json metrics;
  ASSERT_TRUE(WaitUntil(
      [&] {
        metrics = Trial().value("system_metrics", nlohmann::json::array());
        return metrics.size() >= 2;
      },
      absl::Seconds(30)))
      << Diagnostics();
  for (const auto& m : metrics) {
    EXPECT_EQ(m.value("agent_id", ""), "agent-a");
    double cpu = m.value("cpu_utilization_percent", -1.0);
    EXPECT_GE(cpu, 0);
    EXPECT_LE(cpu, 100);
    int64_t free = Int(m["memory_free_bytes"]);
    EXPECT_GT(free, 0);
    EXPECT_LE(free, Int(m["memory_total_bytes"]));
    EXPECT_GE(m.value("disk_read_iops", -1.0), 0);
    EXPECT_GE(m.value("network_sent_bytes_per_second", -1.0), 0);
    EXPECT_GE(m.value("network_received_bytes_per_second", -1.0), 0);
  }
  CommandResult describe = cluster_.Det({"trial", "describe", "1"});
  EXPECT_THAT(describe.out, HasSubstr("System metrics:"));
  EXPECT_THAT(describe.out, HasSubstr("agent-a"));

  // Slots, as `det slot list` shows them: both used by the trial's allocation.
  CommandResult slots = cluster_.Det({"slot", "list"});
  EXPECT_THAT(slots.out, HasSubstr("Allocation"));
  EXPECT_THAT(slots.out, HasSubstr("1.0"));
  nlohmann::json slots_json = cluster_.DetJson({"slot", "list"});
  ASSERT_TRUE(slots_json.is_object()) << slots.out;
  ASSERT_EQ(slots_json["slots"].size(), 2u);
  for (const auto& s : slots_json["slots"]) {
    EXPECT_EQ(s.value("agent_id", ""), "agent-a");
    EXPECT_EQ(s.value("type", ""), "cpu");
    EXPECT_EQ(s.value("allocation_id", ""), "1.0");
  }

  std::ofstream(cluster_.dir() + "/go") << "";
  follower.join();
  ASSERT_TRUE(followed.exit.ok()) << followed.err;
  std::map<int, std::vector<int>> seen;
  for (absl::string_view line : absl::StrSplit(followed.out, '\n')) {
    int rank = -1, n = -1;
    // "[rank R] rank R line N"
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() == 6 && f[0] == "[rank" && f[2] == "rank" && f[4] == "line" &&
        absl::SimpleAtoi(f[3], &rank) && absl::SimpleAtoi(f[5], &n)) {
      seen[rank].push_back(n);
    }
  }
  std::vector<int> expected;
  for (int i = 1; i <= 60; ++i) expected.push_back(i);
  EXPECT_EQ(seen[0], expected) << followed.out;
  EXPECT_EQ(seen[1], expected) << followed.out;
  EXPECT_EQ(TrialState(), "STATE_COMPLETED");

  // --rank filters.
  CommandResult one = cluster_.Det({"trial", "logs", "1", "--rank", "1"});
  EXPECT_THAT(one.out, HasSubstr("rank 1 line 60"));
  EXPECT_THAT(one.out, Not(HasSubstr("rank 0 line")));
}

// The model context directory is unpacked into a per-allocation working directory, and
// the entrypoint (a script, with arguments) is exec'd there directly, not through a shell.
TEST_F(AgentDaemon, ContextDirectoryWithScriptEntrypoint) {
  ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
  ASSERT_TRUE(cluster_.StartAgent("agent-a").ok()) << cluster_.LogTail("agent-a");
  std::string config =
      Experiment("context", "echo \"cwd=$(pwd)\"\necho \"arg=$1\"\ncat data/values.txt\n", 1,
                 "[\"./train.sh\", \"a b; echo injected $HOME\"]");
  mkdir((context_ + "/data").c_str(), 0755);
  std::ofstream(context_ + "/data/values.txt") << "values from the context\n";
  Create(config);
  ASSERT_TRUE(WaitForTrialState("STATE_COMPLETED")) << Diagnostics();
  std::string logs = Logs();
  EXPECT_THAT(logs, HasSubstr(absl::StrCat("cwd=", cluster_.dir(), "/agent-a/1.0")));
  EXPECT_THAT(logs, HasSubstr("arg=a b; echo injected $HOME"));
  EXPECT_THAT(logs, Not(HasSubstr("\ninjected")));
  EXPECT_THAT(logs, HasSubstr("values from the context"));
  // Once the master has the exit, the agent cleans the allocation's directories up.
  EXPECT_TRUE(
      WaitUntil([&] { return access((cluster_.dir() + "/agent-a/1.0").c_str(), F_OK) != 0; },
                absl::Seconds(10)));
}

}  // namespace
}  // namespace det::testing
