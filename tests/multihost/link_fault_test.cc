// Network faults between hosts (network namespaces joined by a bridge; a host's port on the
// bridge taken down: its TCP connections stall, nothing is reset), with the C++ example
// (det-fashion-mnist) training across hosts over Gloo:
//   - an agent's link down for less than agent_reconnect_wait: its workers run on, the agent
//     reattaches, the trial finishes in its first run with 0 restarts;
//   - down for longer: the trial is rescheduled from its checkpoint on the other hosts, not
//     counted as a restart, and the cut-off workers are stopped once the link returns;
//   - the master's host unreachable for a while: the agents reattach and nothing the master
//     had acknowledged (logs, checkpoints) is lost;
//   - a peer host vanishing mid all-reduce: the rank left alone exits within seconds,
//     naming the lost rank and its address.
#include <signal.h>

#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"
#include "tests/multihost/multihost_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class LinkFault : public ::testing::Test {
 protected:
  // The master (`master_yaml` appended: agent_timeout 2s unless given) and one agent with
  // `slots` slots on each host of `agents`.
  void StartCluster(const std::string& master_yaml, const std::vector<std::string>& agents,
                    int slots = 1) {
    absl::StatusOr<std::unique_ptr<MultiHostCluster>> c = MultiHostCluster::Create(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    if (absl::IsFailedPrecondition(c.status())) GTEST_SKIP() << c.status().message();
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    ASSERT_TRUE(cluster_->StartMaster("agent_timeout: 2s\n" + master_yaml).ok())
        << cluster_->Diagnostics();
    for (const std::string& id : agents) {
      ASSERT_TRUE(cluster_->StartAgent(id, slots).ok()) << cluster_->Diagnostics();
    }
  }

  // Submits the example on `slots` ranks for `batches`, a checkpoint every 25 batches
  // (every one kept), no restarts allowed: a failure counted as one ends the trial;
  // experiment_yaml_ appended to its config.
  void Submit(int slots, int64_t batches) {
    ExampleExperiment exp;
    exp.name = "faults";
    exp.global_batch_size = 64;
    exp.batches = batches;
    exp.scheduling_unit = 25;
    exp.checkpoint_period = 25;
    exp.max_restarts = 0;
    exp.slots_per_trial = slots;
    exp.experiment_seed = 11;
    exp.checkpoint_host_path = cluster_->dir() + "/checkpoints";
    exp.save_trial_latest = 1000;
    exp.extra_yaml = experiment_yaml_;
    CommandResult create =
        cluster_->Det({"experiment", "create", cluster_->WriteFile("exp.yaml", exp.Yaml())});
    ASSERT_TRUE(create.exit.ok()) << create.out << create.err << cluster_->Diagnostics();
  }

  // Waits until trial 1's logs contain `text`; returns them.
  bool WaitForLog(const std::string& text, absl::Duration timeout = absl::Seconds(60)) {
    return WaitUntil([&] { return absl::StrContains(cluster_->TrialLogs(1), text); }, timeout);
  }

  // Waits until the first run's ranks (all `ranks` of them) print and a checkpoint exists;
  // rank -> pid.
  std::map<int, int> WaitTraining(int ranks) {
    std::map<int, int> pids;
    bool ok = WaitUntil(
        [&] {
          pids = RankPids(cluster_->TrialLogs(1));
          nlohmann::json c = cluster_->DetJson({"experiment", "list-checkpoints", "1"});
          return static_cast<int>(pids.size()) == ranks && c.is_object() &&
                 !c.value("checkpoints", nlohmann::json::array()).empty();
        },
        absl::Seconds(90));
    EXPECT_TRUE(ok) << cluster_->TrialLogs(1) << cluster_->Diagnostics();
    return pids;
  }

  bool WaitTrialState(const std::string& state, absl::Duration timeout = absl::Seconds(120)) {
    return WaitUntil([&] { return cluster_->Trial(1)["state"] == state; }, timeout);
  }

  std::string Why() { return cluster_->TrialLogs(1) + cluster_->Diagnostics(); }

  // Trial 1 completes all `batches` in run `run_id` with 0 restarts.
  void ExpectCompleted(int64_t batches, int run_id) {
    ASSERT_TRUE(WaitTrialState("STATE_COMPLETED")) << Why();
    nlohmann::json t = cluster_->Trial(1);
    EXPECT_EQ(Int(t["restarts"]), 0);
    EXPECT_EQ(Int(t["run_id"]), run_id);
    EXPECT_EQ(Int(t["total_batches"]), batches);
  }

  // StartCluster(master_yaml, agents), Submit(2, batches), and WaitTraining(2) into pids_,
  // agents_ the first run's rank -> agent. False when the test is skipped or failed.
  bool TrainOnTwoRanks(const std::string& master_yaml, const std::vector<std::string>& agents,
                       int64_t batches) {
    StartCluster(master_yaml, agents);
    if (IsSkipped() || HasFailure()) return false;
    Submit(2, batches);
    if (HasFailure()) return false;
    pids_ = WaitTraining(2);
    agents_ = cluster_->RankAgents(1);
    EXPECT_EQ(agents_.size(), 2u) << Why();
    return !HasFailure();
  }

  std::unique_ptr<MultiHostCluster> cluster_;
  // Whole lines appended to the experiment's config by Submit.
  std::string experiment_yaml_;
  std::map<int, int> pids_;
  std::map<int, std::string> agents_;
};

TEST_F(LinkFault, AgentLinkDownShorterThanTheWaitKeepsItsWorkers) {
  if (!TrainOnTwoRanks("agent_reconnect_wait: 60s\n", {"a", "b"}, 500)) return;
  const std::map<int, int> pids = pids_;
  const std::string cut = agents_[1];

  ASSERT_TRUE(cluster_->net().SetLink(cut, false).ok());
  // The master notices the silence and waits; the workers on both hosts run on.
  ASSERT_TRUE(WaitForLog(absl::StrCat("agent ", cut, " stopped answering"))) << Why();
  EXPECT_FALSE(cluster_->AgentConnected(cut));
  for (const auto& [rank, pid] : pids) EXPECT_TRUE(Running(pid)) << "rank " << rank;
  EXPECT_EQ(cluster_->Trial(1)["state"], "STATE_RUNNING");
  ASSERT_TRUE(cluster_->net().SetLink(cut, true).ok());

  ASSERT_TRUE(WaitForLog(absl::StrCat("agent ", cut, " reattached"))) << Why();
  ExpectCompleted(500, 0);
  // One run: the same two processes trained to the end.
  std::string logs = cluster_->TrialLogs(1);
  EXPECT_EQ(RankPids(logs), pids) << logs;
  EXPECT_THAT(logs, Not(HasSubstr("resuming from checkpoint")));
}

TEST_F(LinkFault, AgentLinkDownLongerThanTheWaitMovesTheTrialToTheOtherHosts) {
  if (!TrainOnTwoRanks("agent_reconnect_wait: 3s\n", {"a", "b", "c"}, 400)) return;
  const std::string cut = agents_[0];  // The chief's host: MASTER_ADDR must move too.
  const int cut_pid = pids_[0];

  ASSERT_TRUE(cluster_->net().SetLink(cut, false).ok());
  ASSERT_TRUE(WaitForLog(absl::StrCat("agent ", cut, " did not return within 3s"))) << Why();
  ASSERT_TRUE(WaitForLog("lost; rescheduling (not counted as a restart)")) << Why();
  // Run 1 on the two hosts left, from the latest checkpoint.
  ASSERT_TRUE(WaitForLog("resuming from checkpoint")) << Why();
  std::map<int, std::string> second = cluster_->RankAgents(1);
  ASSERT_EQ(second.size(), 2u) << Why();
  for (const auto& [rank, agent] : second) EXPECT_NE(agent, cut) << "rank " << rank;
  EXPECT_EQ(Int(cluster_->Trial(1)["run_id"]), 1);
  // Nobody can reach the cut-off worker yet.
  EXPECT_TRUE(Running(cut_pid));

  ASSERT_TRUE(cluster_->net().SetLink(cut, true).ok());
  // Its agent comes back, and the master has it stop the stale worker.
  EXPECT_TRUE(WaitUntil([&] { return !Running(cut_pid); }, absl::Seconds(30)))
      << "the cut-off rank 0 (pid " << cut_pid << ") still runs" << Why();
  ExpectCompleted(400, 1);
}

TEST_F(LinkFault, MasterHostUnreachableForAWhileLosesNothingAcknowledged) {
  if (!TrainOnTwoRanks("agent_reconnect_wait: 60s\n", {"a", "b"}, 500)) return;
  const std::map<int, int> pids = pids_;
  // What the master has acknowledged before the outage.
  std::string logs_before = cluster_->TrialLogs(1);
  nlohmann::json checkpoints_before = cluster_->DetJson({"experiment", "list-checkpoints", "1"});
  ASSERT_TRUE(checkpoints_before.is_object());

  ASSERT_TRUE(cluster_->net().SetLink(MultiHostCluster::kMasterHost, false).ok());
  // The master (still answering on its own host) sees both agents fall silent.
  ASSERT_TRUE(WaitForLog("agent a stopped answering")) << Why();
  ASSERT_TRUE(WaitForLog("agent b stopped answering")) << Why();
  EXPECT_EQ(cluster_->Trial(1)["state"], "STATE_RUNNING");
  ASSERT_TRUE(cluster_->net().SetLink(MultiHostCluster::kMasterHost, true).ok());

  ASSERT_TRUE(WaitForLog("agent a reattached")) << Why();
  ASSERT_TRUE(WaitForLog("agent b reattached")) << Why();
  ExpectCompleted(500, 0);
  std::string logs = cluster_->TrialLogs(1);
  EXPECT_EQ(RankPids(logs), pids);
  // Every line logged before the outage is still there, in order.
  size_t at = 0;
  for (absl::string_view line : absl::StrSplit(logs_before, '\n', absl::SkipEmpty())) {
    size_t found = logs.find(std::string(line), at);
    ASSERT_NE(found, std::string::npos) << "lost log line: " << line;
    at = found + line.size();
  }
  // Every checkpoint registered before it too, and one per 25 batches in the end.
  nlohmann::json checkpoints = cluster_->DetJson({"experiment", "list-checkpoints", "1"});
  ASSERT_TRUE(checkpoints.is_object());
  std::set<std::string> after;
  for (const auto& c : checkpoints["checkpoints"]) {
    if (c["state"] == "STATE_COMPLETED") after.insert(c["uuid"].get<std::string>());
  }
  for (const auto& c : checkpoints_before["checkpoints"]) {
    EXPECT_TRUE(after.count(c["uuid"].get<std::string>())) << c.dump();
  }
  EXPECT_EQ(after.size(), 500u / 25) << checkpoints.dump(2);
}

// A rank whose peer's host vanishes (its link down: no FIN, no RST) mid all-reduce exits
// within seconds (the collective's peer timeout, 15s by default, 4s here through the
// experiment's environment_variables: the kernel answers its keepalives, so a loaded
// machine does not trip it), naming the peer. agent_reconnect_wait is long here so that
// the master does not end the run first.
TEST_F(LinkFault, RankWhosePeerHostVanishesExitsWithinSecondsNamingThePeer) {
  experiment_yaml_ = "environment:\n  environment_variables: [DET_COLLECTIVE_PEER_TIMEOUT=4s]\n";
  if (!TrainOnTwoRanks("agent_reconnect_wait: 600s\n", {"a", "b"}, 5000)) return;
  std::map<int, int> pids = pids_;
  const std::string peer = agents_[1];
  ASSERT_TRUE(cluster_->net().SetLink(peer, false).ok());
  absl::Time cut = absl::Now();
  bool exited = WaitUntil([&] { return !Running(pids[0]); }, absl::Seconds(30));
  EXPECT_TRUE(exited) << "rank 0 still runs " << absl::Now() - cut << " after rank 1's host "
                      << "vanished" << Why();
  // Its last words reach the master after its exit (the agent ships them).
  const std::string lost = absl::StrCat("lost rank 1 at ", cluster_->net().Address(peer), ":");
  EXPECT_TRUE(WaitForLog(lost, absl::Seconds(20))) << lost << Why();
  ASSERT_TRUE(cluster_->net().SetLink(peer, true).ok());
}

}  // namespace
}  // namespace det::testing
