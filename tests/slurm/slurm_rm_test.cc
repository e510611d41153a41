// det on a real Slurm: a master with `resource_manager: {type: slurm}` and no agents, a
// private Slurm of two slurmds on this machine (slurm_cluster.h), and the example model.
// Trials become batch jobs, their ranks det-slurm-launcher tasks under srun.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"
#include "tests/slurm/slurm_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

class SlurmResourceManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "slurmd must run as root to start jobs; this test runs as uid " << geteuid();
    }
    absl::Status slurm = slurm_.Start({.nodes = {"n1", "n2"}, .cpus_per_node = 2});
    ASSERT_TRUE(slurm.ok()) << slurm;
    ASSERT_TRUE(master_.StartMaster(MasterYaml()).ok()) << master_.LogTail("master");
  }

  // A node gives a trial at most `slots_per_node` slots (one CPU each).
  std::string MasterYaml(int slots_per_node = 2) const {
    return absl::StrCat("resource_manager:\n  type: slurm\n  partition: ", SlurmCluster::kPartition,
                        "\n  work_dir: ", slurm_.dir(), "/work\n  worker_path: [",
                        TestCluster::BinDir(), "]\n  worker_python: /usr/bin/python3\n",
                        "  poll_interval: 200ms\n  kill_grace: 5s\n  slots_per_node: ",
                        slots_per_node, "\n  chief_port_range: ", chief_port_, "-", chief_port_,
                        "\n");
  }

  // The workspace's root in the test's runfiles, ending in '/'.
  static std::string Runfiles() { return TestCluster::BinDir() + "/../../"; }

  // A model context directory `name` holding `files` of the runfiles directory `from`.
  std::string CopyContext(const std::string& name, const std::string& from,
                          const std::vector<std::string>& files) {
    EXPECT_EQ(mkdir((master_.dir() + "/" + name).c_str(), 0755), 0) << name;
    std::string path;
    for (const std::string& f : files) {
      std::string text = Slurp(Runfiles() + from + "/" + f);
      EXPECT_FALSE(text.empty()) << from << "/" << f;
      path = master_.WriteFile(name + "/" + f, text);
    }
    return path.substr(0, path.rfind('/'));
  }

  // The job id of the first job squeue lists in `state`, or "".
  std::string JobIn(const std::string& state) {
    auto out = slurm_.Run({"squeue", "-h", "--states=all", "-o", "%i %T"});
    if (!out.ok()) return "";
    for (absl::string_view line : absl::StrSplit(*out, '\n', absl::SkipWhitespace())) {
      std::vector<std::string> f = absl::StrSplit(absl::StripAsciiWhitespace(line), ' ');
      if (f.size() == 2 && f[1] == state) return f[0];
    }
    return "";
  }

  // Experiment 1 (3000 batches, checkpointed every 100) running with a checkpoint; its
  // Slurm job in *job.
  void StartCheckpointedTrial(std::string* job) {
    ASSERT_EQ(Create(Example(3000, 100), "exp.yaml"), 1);
    ASSERT_TRUE(WaitUntil("a checkpoint", [&] { return Checkpoints(1) >= 1; }, absl::Seconds(60)))
        << Diagnostics();
    *job = JobIn("RUNNING");
    ASSERT_FALSE(job->empty()) << Diagnostics();
  }

  // The trial's checkpoints (det checkpoint list --json).
  size_t Checkpoints(int64_t trial) {
    nlohmann::json c = master_.DetJson({"checkpoint", "list", absl::StrCat(trial)});
    return c.is_object() && c.contains("checkpoints") ? c["checkpoints"].size() : 0;
  }

  // The example model, `batches` long, validated and checkpointed every `period` batches
  // into a directory of the test.
  ExampleExperiment Example(int64_t batches, int64_t period, int slots = 1) const {
    ExampleExperiment exp;
    exp.name = "slurm";
    exp.batches = batches;
    exp.validation_period = period;
    exp.checkpoint_period = period;
    exp.scheduling_unit = 25;
    exp.slots_per_trial = slots;
    exp.max_restarts = 2;
    exp.checkpoint_host_path = master_.dir() + "/checkpoints";
    return exp;
  }

  int64_t Create(const ExampleExperiment& exp, const std::string& file) {
    return CreateWith({"experiment", "create", master_.WriteFile(file, exp.Yaml())});
  }

  // `det ARGS` creating an experiment; its id, or -1.
  int64_t CreateWith(const std::vector<std::string>& args) {
    CommandResult create = master_.Det(args);
    EXPECT_TRUE(create.exit.ok()) << create.out << create.err;
    int64_t id = -1;
    absl::string_view out = create.out;
    if (absl::ConsumePrefix(&out, "Created experiment ")) {
      (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(out.substr(0, out.find('\n'))), &id);
    }
    return id;
  }

  nlohmann::json Describe(int64_t id) { return master_.DetJson({"experiment", "describe", absl::StrCat(id)}); }

  // Waits for experiment `id` to reach `state`; false at once when it ends in another.
  bool WaitState(int64_t id, const std::string& state, absl::Duration timeout) {
    std::string now;
    bool ended = false;
    (void)WaitUntil(absl::StrCat("experiment ", id, " ", state), [&] {
      nlohmann::json d = Describe(id);
      now = d.is_object() ? d["experiment"].value("state", "") : "";
      ended = now == "STATE_COMPLETED" || now == "STATE_ERROR" || now == "STATE_CANCELED";
      return now == state || ended;
    }, timeout, absl::Milliseconds(200));
    EXPECT_EQ(now, state);
    return now == state;
  }

  std::string Diagnostics() {
    return absl::StrCat(master_.LogTail("master"), "\n--- squeue:\n",
                        slurm_.Run({"squeue", "--states=all"}).value_or("?"));
  }

  SlurmCluster slurm_;
  // MASTER_PORT of every job (by job id in a range of one): a port free when the test
  // started, so that concurrent tests' jobs (whose ids start at 1 in each Slurm) differ.
  const int chief_port_ = FreeLoopbackPort();
  TestCluster master_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TEST_F(SlurmResourceManagerTest, CppExampleCompletesWithMetricsAndCheckpoints) {
  const int64_t id = Create(Example(100, 50), "exp.yaml");
  ASSERT_EQ(id, 1);
  ASSERT_TRUE(WaitState(id, "STATE_COMPLETED", absl::Seconds(90))) << Diagnostics();
  nlohmann::json d = Describe(id);
  ASSERT_EQ(d["trials"].size(), 1u);
  const auto& t = d["trials"][0];
  EXPECT_EQ(t["state"], "STATE_COMPLETED");
  EXPECT_EQ(Int(t["total_batches"]), 100);
  EXPECT_EQ(Int(t["training_summary"]["loss"]["count"]), 4);
  EXPECT_EQ(Int(t["validation_summary"]["accuracy"]["count"]), 2);
  EXPECT_EQ(Int(t["restarts"]), 0);
  nlohmann::json checkpoints = master_.DetJson({"checkpoint", "list", "1"});
  ASSERT_TRUE(checkpoints.is_object()) << "checkpoint list --json did not parse";
  ASSERT_GE(checkpoints["checkpoints"].size(), 1u);
  // Every checkpoint reported is on disk.
  for (const auto& c : checkpoints["checkpoints"]) {
    EXPECT_TRUE(Exists(c["storage_path"].get<std::string>())) << c.dump();
  }
  // The rank's output reached the trial's log through the launcher, beside Slurm's events.
  CommandResult logs = master_.Det({"trial", "logs", "1"});
  ASSERT_TRUE(logs.exit.ok()) << logs.err;
  EXPECT_THAT(logs.out, HasSubstr("batch 100/100"));
  EXPECT_THAT(logs.out, HasSubstr("submitted as Slurm job"));
  EXPECT_THAT(logs.out, HasSubstr("scheduled on slurm-trial-1"));
  // Slurm is done with the job.
  auto state = slurm_.Run({"squeue", "-h", "--states=all", "-o", "%T"});
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(std::string(absl::StripAsciiWhitespace(*state)), "COMPLETED");
}


// `det agent list` shows Slurm's nodes with sinfo's state (read-only), not the per-trial
// Slurm agents; a node running a trial's job is allocated or mixed.
TEST_F(SlurmResourceManagerTest, AgentListShowsSlurmNodesAndTheirState) {
  // Node id -> its state, as det agent list --json gives them; other agents under "?".
  auto nodes = [&] {
    std::map<std::string, std::string> out;
    nlohmann::json list = master_.DetJson({"agent", "list"});
    if (!list.is_object() || !list.contains("agents")) return out;
    for (const auto& a : list["agents"]) {
      out[a.value("id", "")] = a.value("external_state", "?");
    }
    return out;
  };
  std::map<std::string, std::string> seen;
  ASSERT_TRUE(WaitUntil("both nodes idle", [&] {
    seen = nodes();
    return seen == std::map<std::string, std::string>{{"n1", "idle"}, {"n2", "idle"}};
  }, absl::Seconds(30), absl::Milliseconds(200))) << ::testing::PrintToString(seen);
  nlohmann::json list = master_.DetJson({"agent", "list"});
  for (const auto& a : list["agents"]) {
    EXPECT_EQ(a.value("external_cpus", 0), 2) << a.dump();
    EXPECT_EQ(a.value("external_gpus", 0), 0) << a.dump();
    EXPECT_EQ(a.value("resource_pool", ""), SlurmCluster::kPartition) << a.dump();
    EXPECT_EQ(a["slots"].size(), 2u) << a.dump();
  }
  // The table shows the state column.
  CommandResult table = master_.Det({"agent", "list"});
  ASSERT_TRUE(table.exit.ok()) << table.err;
  EXPECT_THAT(table.out, HasSubstr("State"));
  EXPECT_THAT(table.out, ::testing::ContainsRegex("n1 +\\| idle"));
  // det slot list: the nodes' CPUs.
  nlohmann::json slots = master_.DetJson({"slot", "list"});
  ASSERT_TRUE(slots.is_object()) << "slot list --json did not parse";
  EXPECT_EQ(slots["slots"].size(), 4u) << slots.dump();

  std::string job;
  ASSERT_NO_FATAL_FAILURE(StartCheckpointedTrial(&job));
  ASSERT_TRUE(WaitUntil("a node allocated or mixed", [&] {
    seen = nodes();
    for (const auto& [id, state] : seen) {
      if (state == "allocated" || state == "mixed") return true;
    }
    return false;
  }, absl::Seconds(30), absl::Milliseconds(200))) << ::testing::PrintToString(seen);
  // Only the nodes: the trial's Slurm agent (slurm-trial-1) is not listed.
  EXPECT_EQ(seen.size(), 2u) << ::testing::PrintToString(seen);
  EXPECT_EQ(seen.count("slurm-trial-1"), 0u);
}

// A trial waits while Slurm's nodes are busy, with squeue's reason as its waiting reason;
// paused mid-training it checkpoints and its job ends, activated it resumes from that
// checkpoint in a new job.
TEST_F(SlurmResourceManagerTest, WaitsWithSlurmsReasonAndResumesAfterPauseAndActivate) {
  // Every CPU of both nodes, held by someone else.
  const std::string script = master_.WriteFile("busy.sh", "#!/bin/sh\nexec srun sleep 300\n");
  auto blocker = slurm_.Run({"sbatch", "--parsable", "--job-name=busy", "--nodes=2",
                             "--ntasks-per-node=2", "--output=/dev/null", script});
  ASSERT_TRUE(blocker.ok()) << blocker.status();
  ASSERT_TRUE(WaitUntil("the blocker running", [&] { return !JobIn("RUNNING").empty(); },
                        absl::Seconds(30)));
  const int64_t id = Create(Example(3000, 100), "exp.yaml");
  ASSERT_EQ(id, 1);
  std::string reason;
  ASSERT_TRUE(WaitUntil("the trial waiting on Slurm", [&] {
    nlohmann::json d = Describe(id);
    if (!d.is_object() || d["trials"].empty()) return false;
    reason = d["trials"][0].value("pending_reason", "");
    return d["trials"][0]["state"] == "STATE_QUEUED" && absl::StrContains(reason, "(Resources)");
  }, absl::Seconds(30), absl::Milliseconds(200))) << reason << Diagnostics();
  EXPECT_THAT(reason, ::testing::MatchesRegex("Slurm job [0-9]+ is pending \\(Resources\\)"));
  // The CLI's table shows it too.
  EXPECT_THAT(master_.Det({"experiment", "describe", "1"}).out, HasSubstr("is pending (Resources)"));

  ASSERT_TRUE(slurm_.Run({"scancel", std::string(absl::StripAsciiWhitespace(*blocker))}).ok());
  ASSERT_TRUE(WaitUntil("a checkpoint", [&] { return Checkpoints(1) >= 1; }, absl::Seconds(60)))
      << Diagnostics();
  ASSERT_TRUE(master_.Det({"experiment", "pause", "1"}).exit.ok());
  ASSERT_TRUE(WaitState(id, "STATE_PAUSED", absl::Seconds(60))) << Diagnostics();
  nlohmann::json paused;
  ASSERT_TRUE(WaitUntil("the trial paused", [&] {
    paused = Describe(id);
    return paused.is_object() && paused["trials"][0]["state"] == "STATE_PAUSED";
  }, absl::Seconds(60), absl::Milliseconds(200))) << Diagnostics();
  const int64_t at_pause = Int(paused["trials"][0]["total_batches"]);
  EXPECT_GT(at_pause, 0);
  EXPECT_LT(at_pause, 3000);
  const size_t checkpoints_at_pause = Checkpoints(1);
  // Slurm's job of the first run is over; none is pending for the paused trial.
  ASSERT_TRUE(WaitUntil("no det job left in Slurm", [&] {
    return JobIn("RUNNING").empty() && JobIn("PENDING").empty();
  }, absl::Seconds(30))) << Diagnostics();

  ASSERT_TRUE(master_.Det({"experiment", "activate", "1"}).exit.ok());
  ASSERT_TRUE(WaitState(id, "STATE_COMPLETED", absl::Seconds(120))) << Diagnostics();
  nlohmann::json d = Describe(id);
  EXPECT_EQ(Int(d["trials"][0]["total_batches"]), 3000);
  EXPECT_EQ(Int(d["trials"][0]["restarts"]), 0);  // A pause is no failure.
  EXPECT_GT(Checkpoints(1), checkpoints_at_pause);
  const std::string logs = master_.Det({"trial", "logs", "1"}).out;
  EXPECT_THAT(logs, HasSubstr("scheduled on slurm-trial-1"));
  EXPECT_THAT(logs, HasSubstr("allocation 1.1 scheduled"));  // The second run.
  // One training row per reported step: the second run went on from the checkpoint.
  EXPECT_EQ(Int(d["trials"][0]["training_summary"]["loss"]["count"]), 3000 / 25);
}

// scancel of a trial's job from outside det is a failed run: the trial restarts from its
// latest checkpoint (max_restarts) in a new job and completes.
TEST_F(SlurmResourceManagerTest, ScancelFromOutsideIsAFailedRunThatRestarts) {
  const int64_t id = 1;
  std::string job;
  ASSERT_NO_FATAL_FAILURE(StartCheckpointedTrial(&job));
  ASSERT_TRUE(slurm_.Run({"scancel", job}).ok());
  ASSERT_TRUE(WaitState(id, "STATE_COMPLETED", absl::Seconds(120))) << Diagnostics();
  nlohmann::json d = Describe(id);
  EXPECT_EQ(Int(d["trials"][0]["restarts"]), 1);
  EXPECT_EQ(Int(d["trials"][0]["total_batches"]), 3000);
  const std::string logs = master_.Det({"trial", "logs", "1"}).out;
  // The launcher's report (SIGTERM) or squeue's (CANCELLED), whichever came first.
  EXPECT_THAT(logs, ::testing::ContainsRegex("rank 0 exited: (killed by signal 15|Slurm job [0-9]+ ended: CANCELLED)"));
  EXPECT_THAT(logs, HasSubstr("restart 1 of 2"));
  EXPECT_THAT(logs, HasSubstr("allocation 1.1 scheduled"));
  EXPECT_EQ(Int(d["trials"][0]["training_summary"]["loss"]["count"]), 3000 / 25);
}

// The master killed with SIGKILL while the trial's job runs: restarted, it finds the job by
// its name, reattaches the run, and the trial completes in the same run.
TEST_F(SlurmResourceManagerTest, MasterKilledWhileAJobRunsAdoptsItAfterRestart) {
  const int64_t id = 1;
  std::string job;
  ASSERT_NO_FATAL_FAILURE(StartCheckpointedTrial(&job));
  master_.StopMaster(SIGKILL);
  ASSERT_TRUE(master_.StartMaster(MasterYaml()).ok()) << master_.LogTail("master");
  ASSERT_TRUE(WaitState(id, "STATE_COMPLETED", absl::Seconds(120))) << Diagnostics();
  nlohmann::json d = Describe(id);
  EXPECT_EQ(Int(d["trials"][0]["restarts"]), 0);
  EXPECT_EQ(Int(d["trials"][0]["total_batches"]), 3000);
  EXPECT_EQ(d["trials"][0]["allocation"]["id"], "1.0");  // The same run, adopted.
  // The job ran to its end under Slurm.
  auto state = slurm_.Run({"squeue", "-h", "--states=all", "-j", job, "-o", "%T"});
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(std::string(absl::StripAsciiWhitespace(*state)), "COMPLETED");
  const std::string logs = master_.Det({"trial", "logs", "1"}).out;
  EXPECT_THAT(logs, HasSubstr("agent slurm-trial-1 reattached"));
}

// A plain PyTorch DDP script (torchrun's contract only) on two ranks, one per Slurm node.
TEST_F(SlurmResourceManagerTest, PlainDdpScriptOnTwoNodes) {
  master_.StopMaster(SIGTERM);
  ASSERT_TRUE(master_.StartMaster(MasterYaml(/*slots_per_node=*/1)).ok()) << master_.LogTail("master");
  const std::string context =
      CopyContext("ddp", "common/worker/python/examples/torch_ddp", {"train.py"});
  ExampleExperiment exp = Example(0, 0, /*slots=*/2);
  exp.entrypoint = "python3 train.py --records 1024 --global-batch-size 64 --epochs 1";
  exp.validation_period.reset();
  exp.checkpoint_period.reset();
  exp.max_restarts = 0;
  exp.extra_yaml = "searcher: {name: single, metric: loss, max_length: {batches: 16}}\n";
  const int64_t id = CreateWith({"experiment", "create", master_.WriteFile("ddp.yaml", exp.Yaml()), context});
  ASSERT_EQ(id, 1);
  ASSERT_TRUE(WaitState(id, "STATE_COMPLETED", absl::Seconds(150))) << Diagnostics()
      << master_.Det({"trial", "logs", "1"}).out;
  const std::string logs = master_.Det({"trial", "logs", "1"}).out;
  // Each rank saw the world of two, on its own node (GROUP_RANK), meeting at one chief.
  EXPECT_THAT(logs, ::testing::ContainsRegex("rank 0: world_size=2 local_rank=0 local_world_size=1 group_rank=0 group_world_size=2"));
  EXPECT_THAT(logs, ::testing::ContainsRegex("rank 1: world_size=2 local_rank=0 local_world_size=1 group_rank=1 group_world_size=2"));
  EXPECT_THAT(logs, HasSubstr("rank 0: steps=16"));
  EXPECT_THAT(logs, HasSubstr("rank 1: steps=16"));
}

// The PyTorch example (det.pytorch Trial API, model_def:FashionTrial) to COMPLETED with
// its validations and checkpoints.
TEST_F(SlurmResourceManagerTest, PyTorchExampleCompletesWithMetricsAndCheckpoints) {
  const std::string context = CopyContext("trial", "common/worker/python/examples/fashion_mnist_trial",
                                          {"model_def.py", "data.py"});
  const int64_t id = CreateWith(
      {"experiment", "create", Runfiles() + "configs/examples/trial-const.yaml", context,
       "--config", "checkpoint_storage={type: shared_fs, host_path: '" + master_.dir() + "/checkpoints'}",
       "--config", "searcher.max_length={batches: 40}", "--config",
       "min_validation_period={batches: 20}"});
  ASSERT_EQ(id, 1);
  ASSERT_TRUE(WaitState(id, "STATE_COMPLETED", absl::Seconds(150))) << Diagnostics()
      << master_.Det({"trial", "logs", "1"}).out;
  nlohmann::json d = Describe(id);
  const auto& t = d["trials"][0];
  EXPECT_EQ(Int(t["total_batches"]), 40);
  EXPECT_EQ(Int(t["validation_summary"]["validation_loss"]["count"]), 2) << t.dump();
  EXPECT_TRUE(t["training_summary"].contains("loss")) << t.dump();
  EXPECT_GE(Checkpoints(1), 1u);
}

}  // namespace
}  // namespace det::testing
