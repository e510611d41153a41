// The agent with real worker processes (through the real det-agent shim) and a fake master
// (moved from agent/agent_test.cc: the agent's unit tests, //agent/..., start no process;
// they drive the same Agent with FakeProcessLauncher and FakeClock, agent_fake_test.cc).
#include "agent/agent.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "agent/testing/fake_master_client.h"
#include "common/rpc/context_sha256.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/agent_test_util.h"

namespace det::agent {
namespace {

using ::det::testing::FailingRankScript;
using ::det::testing::ProcessAlive;
using ::det::testing::WaitUntil;
using ::det::testing::WorkerPids;
using ::det::testing::WritePidLine;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// How long a test waits for the agent or a worker to do what it checks.
constexpr absl::Duration kWait = absl::Seconds(30);

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Waits until `master` has `n` exits reported (kWait unless `timeout`).
::testing::AssertionResult WaitForExits(FakeMasterClient& master, size_t n,
                                        absl::Duration timeout = kWait) {
  return WaitUntil(
      absl::StrCat("exits().size() == ", n), [&] { return master.exits().size() == n; },
      timeout);
}

// An agent running on its own thread.
class RunningAgent {
 public:
  RunningAgent(config::AgentConfig config, MasterClient& client, AgentOptions options,
               int slots = 2)
      : agent_(config, client, CpuSlotsForTest(slots), options),
        thread_([this] { result_ = agent_.Run(); }) {}
  ~RunningAgent() { Stop().IgnoreError(); }
  Agent& agent() { return agent_; }
  absl::Status Stop() {
    agent_.Stop();
    if (thread_.joinable()) thread_.join();
    return result_;
  }
  absl::Status Detach() {
    agent_.Detach();
    if (thread_.joinable()) thread_.join();
    return result_;
  }
  absl::Status Join() {
    if (thread_.joinable()) thread_.join();
    return result_;
  }

 private:
  static std::vector<v1::Slot> CpuSlotsForTest(int n) {
    std::vector<v1::Slot> slots(n);
    for (int i = 0; i < n; ++i) {
      slots[i].set_id(absl::StrCat(i));
      slots[i].set_type("cpu");
    }
    return slots;
  }
  Agent agent_;
  absl::Status result_;
  std::thread thread_;
};

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(tmp ? tmp : "/tmp", "/",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::string rm = absl::StrCat("rm -rf '", dir_, "'");
    ASSERT_EQ(std::system(rm.c_str()), 0);
    mkdir(dir_.c_str(), 0755);
    config_.master = "fake";
    config_.agent_id = "agent-a";
    config_.work_dir = dir_ + "/work";
    config_.kill_grace = absl::Seconds(2);
    config_.heartbeat_interval = absl::Milliseconds(100);
    const char* srcdir = std::getenv("TEST_SRCDIR");
    const char* ws = std::getenv("TEST_WORKSPACE");
    options_.shim_path =
        absl::StrCat(srcdir ? srcdir : ".", "/", ws ? ws : "det", "/agent/det-agent");
  }

  // A launch of allocation `id` with `ranks` ranks running ./train.sh with `script` (the
  // model context `master` serves for it).
  v1::AgentCommand Launch(FakeMasterClient& master, const std::string& id, int ranks,
                          const std::string& script) {
    v1::AgentCommand cmd;
    v1::LaunchCommand* l = cmd.mutable_launch();
    l->set_allocation_id(id);
    l->set_trial_id(1);
    l->add_argv("./train.sh");
    (*l->mutable_env())["TEST_DIR"] = dir_;
    for (int r = 0; r < ranks; ++r) {
      v1::RankPlacement* p = l->add_ranks();
      p->set_rank(r);
      p->set_local_rank(r);
      p->set_agent_id("agent-a");
      p->add_slot_ids(absl::StrCat(r));
    }
    l->set_world_size(ranks);
    l->set_num_agents(1);
    v1::ModelContext context;
    v1::ContextFile* f = context.add_files();
    f->set_path("train.sh");
    f->set_content("#!/bin/sh\n" + script);
    f->set_mode(0755);
    l->mutable_model_context()->set_experiment_id(1);
    l->mutable_model_context()->set_sha256(rpc::ContextSha256(context.SerializeAsString()));
    master.ServeContext(id, std::move(context));
    return cmd;
  }

  // The pid a worker wrote to `name` in the test dir (WritePidLine); 0 (and a failure)
  // when none came within 15 s. The worker is killed at the end of the test if still alive.
  pid_t WaitForPidFile(const std::string& name) {
    return workers_.WaitForPidFile(dir_ + "/" + name, absl::Seconds(15));
  }

  std::string dir_;
  config::AgentConfig config_;
  AgentOptions options_;
  WorkerPids workers_;
};

TEST_F(AgentTest, FailedRankStopsTheOthersAndEveryExitIsReported) {
  FakeMasterClient master;
  RunningAgent agent(config_, master, options_);
  master.Send(Launch(master, "1.0", 2, FailingRankScript()));
  ASSERT_TRUE(WaitForExits(master, 2))
      << master.AllLines();
  std::map<int, v1::ReportExitRequest> by_rank;
  for (const auto& e : master.exits()) by_rank[e.rank()] = e;
  EXPECT_EQ(by_rank[1].exit_code(), 3);
  EXPECT_EQ(by_rank[1].signal(), 0);
  EXPECT_EQ(by_rank[0].signal(), SIGTERM);
  EXPECT_FALSE(by_rank[0].agent_stopping());
  ASSERT_EQ(master.launched().size(), 1u);
  EXPECT_THAT(master.launched()[0].ranks(), ElementsAre(0, 1));
  // rank 0's sleep is gone.
  pid_t rank0 = WaitForPidFile("rank0");
  ASSERT_GT(rank0, 0);
  EXPECT_TRUE(WaitUntil(
      "!ProcessAlive(rank0)", [&] { return !ProcessAlive(rank0); }, absl::Seconds(5)));
  // Output, line by line, per rank and stream, in the per-allocation directory.
  EXPECT_THAT(master.Lines(1, "stdout"),
              ElementsAre(absl::StrCat("rank 1 of 2 in ", dir_, "/work/1.0")));
  EXPECT_THAT(master.Lines(1, "stderr"), ElementsAre("rank 1 fails"));
  EXPECT_THAT(master.Lines(0, "stdout"),
              ElementsAre(absl::StrCat("rank 0 of 2 in ", dir_, "/work/1.0")));
  EXPECT_THAT(master.AllLines(), HasSubstr("worker exited: exit code 3"));
  // Once the master has the exits, the allocation's directories are deleted.
  EXPECT_TRUE(WaitUntil(
      "!Exists(dir_ + \"/work/run/1.0\") && !Exists(dir_ + \"/work/1.0\")",
      [&] { return !Exists(dir_ + "/work/run/1.0") && !Exists(dir_ + "/work/1.0"); },
      absl::Seconds(5)));
  EXPECT_TRUE(agent.Stop().ok());
}

TEST_F(AgentTest, WorkerIgnoringSigtermIsKilledAfterTheGrace) {
  FakeMasterClient master;
  RunningAgent agent(config_, master, options_);
  master.Send(Launch(master, 
      "2.0", 1, absl::StrCat("trap '' TERM\n", WritePidLine("pid"), "\nwhile true; do sleep 0.05; done\n")));
  ASSERT_GT(WaitForPidFile("pid"), 0);
  v1::AgentCommand kill;
  kill.mutable_kill()->set_allocation_id("2.0");
  kill.mutable_kill()->set_reason("test");
  kill.mutable_kill()->set_grace_ms(300);
  absl::Time sent = absl::Now();
  master.Send(kill);
  ASSERT_TRUE(WaitForExits(master, 1))
      << master.AllLines();
  EXPECT_EQ(master.exits()[0].signal(), SIGKILL);
  EXPECT_GE(absl::Now() - sent, absl::Milliseconds(300));
}

// The context is fetched by allocation (GetModelContext) and kept under its hash: later
// allocations of the experiment, also after the agent restarts, do not fetch it again.
TEST_F(AgentTest, TheModelContextIsFetchedOnceAndCachedByItsHashAcrossRestarts) {
  {
    FakeMasterClient master;
    RunningAgent agent(config_, master, options_);
    master.Send(Launch(master, "8.0", 1, "echo first\n"));
    ASSERT_TRUE(WaitForExits(master, 1))
        << master.AllLines();
    EXPECT_EQ(master.exits()[0].exit_code(), 0) << master.AllLines();
    master.Send(Launch(master, "8.1", 1, "echo first\n"));
    ASSERT_TRUE(WaitForExits(master, 2))
        << master.AllLines();
    EXPECT_EQ(master.exits()[1].exit_code(), 0) << master.AllLines();
    EXPECT_EQ(master.context_fetches(), 1);
    EXPECT_TRUE(agent.Stop().ok());
  }
  struct stat st;
  ASSERT_EQ(stat((dir_ + "/work/contexts").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700);
  FakeMasterClient master;
  RunningAgent agent(config_, master, options_);
  master.Send(Launch(master, "8.2", 1, "echo first\n"));
  ASSERT_TRUE(WaitForExits(master, 1))
      << master.AllLines();
  EXPECT_EQ(master.exits()[0].exit_code(), 0) << master.AllLines();
  EXPECT_THAT(master.Lines(0, "stdout"), ElementsAre("first"));
  EXPECT_EQ(master.context_fetches(), 0);
  // Another context (another hash) is fetched.
  master.Send(Launch(master, "9.0", 1, "echo second\n"));
  ASSERT_TRUE(WaitForExits(master, 2))
      << master.AllLines();
  EXPECT_EQ(master.context_fetches(), 1);
}

// A context the master refuses fails the launch with the reason in the trial's log.
TEST_F(AgentTest, AContextThatCannotBeFetchedFailsTheLaunchNamingWhy) {
  FakeMasterClient master;
  master.FailContexts(absl::PermissionDeniedError("allocation 4.0 has no rank on it"));
  RunningAgent agent(config_, master, options_);
  master.Send(Launch(master, "4.0", 2, "echo never\n"));
  ASSERT_TRUE(WaitForExits(master, 2))
      << master.AllLines();
  for (const auto& e : master.exits()) {
    EXPECT_EQ(e.exit_code(), 127);
    EXPECT_THAT(e.message(), HasSubstr("cannot fetch the model context of experiment 1: "
                                       "allocation 4.0 has no rank on it"));
  }
  EXPECT_THAT(master.AllLines(), HasSubstr("cannot start worker: cannot fetch the model context"));
  EXPECT_TRUE(master.launched().empty());
}

TEST_F(AgentTest, MissingEntrypointExits127WithTheReason) {
  FakeMasterClient master;
  RunningAgent agent(config_, master, options_);
  v1::AgentCommand cmd = Launch(master, "3.0", 1, "");
  cmd.mutable_launch()->set_argv(0, "no-such-entrypoint");
  master.Send(cmd);
  ASSERT_TRUE(WaitForExits(master, 1));
  EXPECT_EQ(master.exits()[0].exit_code(), 127);
  EXPECT_THAT(master.AllLines(), HasSubstr("cannot execute \"no-such-entrypoint\""));
}

// A checkpoint GC launch runs `det-agent --checkpoint-gc SPEC` (this binary, not argv) as
// rank 0 with no slots: its output and exit reach the master like a worker's.
TEST_F(AgentTest, CheckpointGcLaunchRunsTheAgentsOwnDeletionProcess) {
  std::string storage = dir_ + "/checkpoints";
  mkdir(storage.c_str(), 0755);
  for (const char* uuid : {"u-1", "u-2"}) {
    mkdir((storage + "/" + uuid).c_str(), 0755);
    std::ofstream(storage + "/" + uuid + "/model.bin") << "weights";
  }
  auto gc = [&](const std::string& id, const std::vector<std::pair<std::string, std::string>>& cs) {
    v1::AgentCommand cmd;
    v1::LaunchCommand* l = cmd.mutable_launch();
    l->set_allocation_id(id);
    l->set_trial_id(4);
    l->add_argv("must-not-run");  // Ignored for a GC task.
    v1::RankPlacement* p = l->add_ranks();
    p->set_agent_id("agent-a");
    l->set_world_size(1);
    l->set_num_agents(1);
    l->mutable_checkpoint_gc()->set_storage_root(storage);
    for (const auto& [uuid, path] : cs) {
      v1::Checkpoint* c = l->mutable_checkpoint_gc()->add_checkpoints();
      c->set_uuid(uuid);
      c->set_storage_path(path);
    }
    return cmd;
  };
  FakeMasterClient master;
  RunningAgent agent(config_, master, options_);
  master.Send(gc("gc-1.0", {{"u-1", storage + "/u-1"}, {"u-2", storage + "/u-2"}}));
  ASSERT_TRUE(WaitForExits(master, 1))
      << master.AllLines();
  EXPECT_EQ(master.exits()[0].allocation_id(), "gc-1.0");
  EXPECT_EQ(master.exits()[0].exit_code(), 0) << master.AllLines();
  EXPECT_FALSE(Exists(storage + "/u-1"));
  EXPECT_FALSE(Exists(storage + "/u-2"));
  EXPECT_TRUE(Exists(storage));
  EXPECT_THAT(master.Lines(0, "stdout"),
              ElementsAre(absl::StrCat("deleted checkpoint u-1 (", storage, "/u-1)"),
                          absl::StrCat("deleted checkpoint u-2 (", storage, "/u-2)"),
                          "checkpoint gc: 2 checkpoint(s) deleted"));
  ASSERT_EQ(master.launched().size(), 1u);
  EXPECT_EQ(master.launched()[0].allocation_id(), "gc-1.0");

  // A path that is not the checkpoint's own directory is refused: exit 1, naming it.
  master.Send(gc("gc-2.0", {{"u-3", storage}}));
  ASSERT_TRUE(WaitForExits(master, 2))
      << master.AllLines();
  EXPECT_EQ(master.exits()[1].allocation_id(), "gc-2.0");
  EXPECT_EQ(master.exits()[1].exit_code(), 1);
  EXPECT_TRUE(Exists(storage));
  EXPECT_THAT(master.Lines(0, "stderr"),
              ElementsAre(HasSubstr("checkpoint u-3: refusing to delete storage path"),
                          HasSubstr("checkpoint gc failed: checkpoint u-3: refusing")));
  EXPECT_THAT(master.AllLines(), Not(HasSubstr("must-not-run")));
  EXPECT_TRUE(agent.Stop().ok());
}

TEST_F(AgentTest, RefusedAgentWithoutWorkersStops) {
  FakeMasterClient master;
  master.FailRegister(absl::UnauthenticatedError("cluster secret missing or wrong"));
  RunningAgent agent(config_, master, options_);
  absl::Status st = agent.Join();
  EXPECT_TRUE(absl::IsUnauthenticated(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("cluster secret"));
}

TEST_F(AgentTest, StopKillsWorkersAndReportsThemAsStoppedByTheAgent) {
  FakeMasterClient master;
  RunningAgent agent(config_, master, options_);
  master.Send(Launch(master, "4.0", 1, absl::StrCat(WritePidLine("pid"), "\nexec sleep 1000\n")));
  pid_t pid = WaitForPidFile("pid");
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(agent.Stop().ok());
  ASSERT_EQ(master.exits().size(), 1u);
  EXPECT_EQ(master.exits()[0].signal(), SIGTERM);
  EXPECT_TRUE(master.exits()[0].agent_stopping());
  EXPECT_FALSE(ProcessAlive(pid));
}

// The agent process goes away (Detach, as on SIGUSR1, or a crash) while its worker runs; a
// new agent on the same work_dir adopts the worker, reports the allocation as running,
// ships only the output not yet shipped, and reports the exit.
TEST_F(AgentTest, NewAgentAdoptsTheWorkersOfThePreviousOne) {
  std::string script = absl::StrCat("echo \"before $$\"\n", WritePidLine("pid"), R"sh(
while [ ! -e "$TEST_DIR/go" ]; do sleep 0.05; done
echo "after"
exit 4
)sh");
  pid_t pid = 0;
  {
    FakeMasterClient first;
    RunningAgent agent(config_, first, options_);
    first.Send(Launch(first, "5.0", 1, script));
    pid = WaitForPidFile("pid");
    ASSERT_GT(pid, 0);
    ASSERT_TRUE(WaitUntil(
        "first.Lines(0, \"stdout\").size() == 1",
        [&] { return first.Lines(0, "stdout").size() == 1; }, kWait));
    ASSERT_TRUE(WaitUntil(
        "first.launched().size() == 1", [&] { return first.launched().size() == 1; }, kWait));
    EXPECT_TRUE(agent.Detach().ok());
    EXPECT_TRUE(first.exits().empty());
  }
  EXPECT_TRUE(ProcessAlive(pid)) << "the worker died with its agent";
  std::ofstream(dir_ + "/go") << "";

  FakeMasterClient second;
  RunningAgent agent(config_, second, options_);
  ASSERT_TRUE(WaitUntil(
      "!second.registers().empty()", [&] { return !second.registers().empty(); }, kWait));
  EXPECT_THAT(second.registers()[0].running_allocations(), ElementsAre("5.0"));
  ASSERT_TRUE(WaitForExits(second, 1))
      << second.AllLines();
  EXPECT_EQ(second.exits()[0].exit_code(), 4);
  EXPECT_EQ(second.exits()[0].message(), "");
  // "before" was shipped by the first agent; only "after" comes now.
  EXPECT_THAT(second.Lines(0, "stdout"), ElementsAre("after"));
  EXPECT_THAT(second.AllLines(), HasSubstr("watching the worker again"));
  EXPECT_TRUE(second.launched().empty());  // The first agent had reported the launch.
  EXPECT_TRUE(agent.Stop().ok());
}

TEST_F(AgentTest, AdoptedAllocationTheMasterNoLongerRunsIsKilled) {
  pid_t pid = 0;
  {
    FakeMasterClient first;
    RunningAgent agent(config_, first, options_);
    first.Send(Launch(first, "6.0", 1, absl::StrCat(WritePidLine("pid"), "\nexec sleep 1000\n")));
    pid = WaitForPidFile("pid");
    ASSERT_GT(pid, 0);
    EXPECT_TRUE(agent.Detach().ok());
  }
  FakeMasterClient second;
  second.KillOnRegister("6.0");
  RunningAgent agent(config_, second, options_);
  ASSERT_TRUE(WaitForExits(second, 1))
      << second.AllLines();
  EXPECT_EQ(second.exits()[0].signal(), SIGTERM);
  EXPECT_FALSE(ProcessAlive(pid));
  EXPECT_TRUE(WaitUntil(
      "!Exists(dir_ + \"/work/run/6.0\")", [&] { return !Exists(dir_ + "/work/run/6.0"); },
      absl::Seconds(5)));
}

// Long lines (cut at 64 KiB) go in batches of about 1 MiB at most, far below the 4 MiB the
// master receives in one message.
TEST_F(AgentTest, LongLinesAreShippedInBatchesOfAtMostAboutOneMebibyte) {
  FakeMasterClient master;
  RunningAgent agent(config_, master, options_);
  master.Send(Launch(master, "7.1", 1,
                     "i=0; while [ $i -lt 40 ]; do head -c 60000 /dev/zero | tr '\\0' x; "
                     "echo; i=$((i+1)); done\n"));
  ASSERT_TRUE(WaitForExits(master, 1))
      << master.AllLines();
  ASSERT_TRUE(WaitUntil(
      "master.Lines(0, \"stdout\").size() == 40",
      [&] { return master.Lines(0, "stdout").size() == 40; }, kWait));
  for (const std::string& line : master.Lines(0, "stdout")) EXPECT_EQ(line.size(), 60000u);
  EXPECT_LE(master.largest_ship(), (1u << 20) + (64u << 10));
  // Batched, not one line at a time: some request carried several lines. (How many depends
  // on how far the worker got before each ship: 1 in 20 loaded runs saw under 512 KiB.)
  EXPECT_GT(master.largest_ship(), 2 * 60000u);
}

TEST_F(AgentTest, LinesAreBufferedWhileTheMasterIsUnreachable) {
  FakeMasterClient master;
  master.FailReports(absl::UnavailableError("master down"));
  RunningAgent agent(config_, master, options_);
  master.Send(Launch(master, "7.0", 1, "for i in 1 2 3; do echo line $i; done\n"));
  // The agent tried to report (the launch first; lines and the exit wait behind it) and
  // was refused.
  ASSERT_TRUE(WaitUntil(
      "master.refused_reports() > 0", [&] { return master.refused_reports() > 0; }, kWait));
  EXPECT_TRUE(master.exits().empty());
  master.FailReports(absl::OkStatus());
  ASSERT_TRUE(WaitForExits(master, 1));
  EXPECT_THAT(master.Lines(0, "stdout"), ElementsAre("line 1", "line 2", "line 3"));
}

// More output than the agent buffers in memory: read from the worker's file as fast as the
// master takes it, nothing dropped.
TEST_F(AgentTest, ChattyWorkerLosesNoLine) {
  FakeMasterClient master;
  RunningAgent agent(config_, master, options_);
  master.Send(Launch(master, "8.0", 1, "seq 1 250000\n"));
  ASSERT_TRUE(WaitForExits(master, 1, absl::Seconds(60)));
  std::vector<std::string> lines = master.Lines(0, "stdout");
  ASSERT_EQ(lines.size(), 250000u);
  for (size_t i = 0; i < lines.size(); i += 9973) EXPECT_EQ(lines[i], absl::StrCat(i + 1));
  EXPECT_EQ(lines.back(), "250000");
  EXPECT_EQ(master.dropped(), 0);
}

// Before its first registration the agent makes a credential (32 random bytes, hex) and
// keeps it in work_dir/run (0600: no worker reads it), then proposes it; the one the master
// answers with is kept in its place and presented by the next agent process, so that only
// it may take the id back (the master refuses the id to anyone else, connected or not).
TEST_F(AgentTest, KeepsItsCredentialAndPresentsItWhenItRegistersAgain) {
  const std::string path = dir_ + "/work/run/agent_credential";
  std::string proposed;
  {
    FakeMasterClient first;
    first.IssueCredential("c0ffee");
    RunningAgent agent(config_, first, options_);
    ASSERT_TRUE(WaitUntil(
        "!first.registers().empty()", [&] { return !first.registers().empty(); }, kWait));
    proposed = first.registers()[0].agent_credential();
    EXPECT_TRUE(agent.Stop().ok());
  }
  EXPECT_EQ(proposed.size(), 64u);
  EXPECT_EQ(proposed.find_first_not_of("0123456789abcdef"), std::string::npos) << proposed;
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(Slurp(path), "c0ffee\n");

  FakeMasterClient second;
  RunningAgent agent(config_, second, options_);
  ASSERT_TRUE(WaitUntil(
      "!second.registers().empty()", [&] { return !second.registers().empty(); }, kWait));
  EXPECT_EQ(second.registers()[0].agent_credential(), "c0ffee");
  EXPECT_TRUE(agent.Stop().ok());

  // Another work_dir: another credential.
  FakeMasterClient third;
  config::AgentConfig other = config_;
  other.work_dir = dir_ + "/work-2";
  RunningAgent agent2(other, third, options_);
  ASSERT_TRUE(WaitUntil(
      "!third.registers().empty()", [&] { return !third.registers().empty(); }, kWait));
  EXPECT_EQ(third.registers()[0].agent_credential().size(), 64u);
  EXPECT_NE(third.registers()[0].agent_credential(), proposed);
  EXPECT_EQ(Slurp(other.work_dir + "/run/agent_credential"),
            third.registers()[0].agent_credential() + "\n");
  EXPECT_TRUE(agent2.Stop().ok());
}

// Registration tells the master where other agents reach this one and which ports it lends
// to the allocations whose chief runs here.
TEST_F(AgentTest, RegistersItsAdvertisedAddressAndChiefPorts) {
  {
    FakeMasterClient master;
    config_.master = "127.0.0.1:1";  // no advertise_address: the route towards the master
    config_.chief_port_first = 31000;
    config_.chief_port_last = 31009;
    RunningAgent agent(config_, master, options_);
    ASSERT_TRUE(WaitUntil(
        "!master.registers().empty()", [&] { return !master.registers().empty(); }, kWait));
    v1::RegisterRequest req = master.registers()[0];
    EXPECT_EQ(req.advertise_address(), "127.0.0.1");
    EXPECT_EQ(req.chief_port_first(), 31000);
    EXPECT_EQ(req.chief_port_last(), 31009);
  }
  FakeMasterClient master;
  config_.advertise_address = "node-7.example";  // sent as is, not resolved
  RunningAgent agent(config_, master, options_);
  ASSERT_TRUE(WaitUntil(
      "!master.registers().empty()", [&] { return !master.registers().empty(); }, kWait));
  EXPECT_EQ(master.registers()[0].advertise_address(), "node-7.example");
}

// `python3 SCRIPT` runs worker_python (here /bin/sh, to need no Python) with the contract's
// variables and PYTHONPATH starting at the allocation's directory.
TEST_F(AgentTest, PythonEntrypointRunsWorkerPythonWithTheLaunchContract) {
  FakeMasterClient master;
  config_.worker_python = "/bin/sh";
  config_.python_path = std::vector<std::string>{"/opt/det/python"};
  RunningAgent agent(config_, master, options_);
  v1::AgentCommand cmd = Launch(master, "5.0", 2, R"sh(
echo "rank=$RANK local=$LOCAL_RANK/$LOCAL_WORLD_SIZE group=$GROUP_RANK/$GROUP_WORLD_SIZE" \
     "master=$MASTER_ADDR:$MASTER_PORT run=$TORCHELASTIC_RUN_ID" \
     "restarts=$TORCHELASTIC_RESTART_COUNT/$TORCHELASTIC_MAX_RESTARTS omp=$OMP_NUM_THREADS"
echo "python=$DET_PYTHON pythonpath=$PYTHONPATH pwd=$PWD"
)sh");
  v1::LaunchCommand* l = cmd.mutable_launch();
  l->set_argv(0, "python3");
  l->add_argv("train.sh");
  l->set_chief_address("10.1.1.1");
  l->set_chief_port(29517);
  l->set_run_id("run-5");
  l->set_restart_count(1);
  l->set_max_restarts(3);
  (*l->mutable_env())["OMP_NUM_THREADS"] = "7";
  master.Send(cmd);
  ASSERT_TRUE(WaitForExits(master, 2))
      << master.AllLines();
  for (const auto& e : master.exits()) EXPECT_EQ(e.exit_code(), 0) << master.AllLines();
  std::string work = dir_ + "/work/5.0";
  for (int rank : {0, 1}) {
    EXPECT_THAT(
        master.Lines(rank, "stdout"),
        ElementsAre(absl::StrCat("rank=", rank, " local=", rank,
                                 "/2 group=0/1 master=10.1.1.1:29517 run=run-5 restarts=1/3 omp=7"),
                    absl::StrCat("python=/bin/sh pythonpath=", work,
                                 ":/opt/det/python pwd=", work)));
  }
}

// The agent registers the interpreter it chose (and torch's version there); an experiment's
// environment.python (LaunchCommand.python) wins over it for `python3` entrypoints.
TEST_F(AgentTest, RegistersItsPythonAndTheExperimentsInterpreterWins) {
  FakeMasterClient master;
  config_.worker_python = "/nonexistent/python3";
  PythonChoice chosen;
  chosen.path = "/nonexistent/python3";
  chosen.torch_version = "2.11.0";
  chosen.reason = "agent.yaml worker_python";
  options_.python = chosen;
  RunningAgent agent(config_, master, options_);
  ASSERT_TRUE(WaitUntil(
      "!master.registers().empty()", [&] { return !master.registers().empty(); }, kWait));
  EXPECT_EQ(master.registers()[0].worker_python(), "/nonexistent/python3");
  EXPECT_EQ(master.registers()[0].worker_torch_version(), "2.11.0");

  v1::AgentCommand cmd = Launch(master, "6.0", 1, "echo \"python=$DET_PYTHON\"\n");
  cmd.mutable_launch()->set_argv(0, "python3");
  cmd.mutable_launch()->add_argv("train.sh");
  cmd.mutable_launch()->set_python("/bin/sh");  // the experiment's environment.python
  master.Send(cmd);
  ASSERT_TRUE(WaitForExits(master, 1))
      << master.AllLines();
  EXPECT_EQ(master.exits()[0].exit_code(), 0) << master.AllLines();
  EXPECT_THAT(master.Lines(0, "stdout"), ElementsAre("python=/bin/sh"));
}

// An agent that found no interpreter with torch refuses det's torch launcher at once,
// saying what it tried and how to fix it; other Python entrypoints still run.
TEST_F(AgentTest, ATorchEntrypointIsRefusedWhenTheAgentFoundNoTorch) {
  FakeMasterClient master;
  PythonChoice chosen;
  chosen.path = "/bin/sh";
  chosen.reason = "found in PATH; no interpreter has torch";
  chosen.rejected = {"PATH /bin/sh: ModuleNotFoundError: No module named 'torch'"};
  options_.python = chosen;
  RunningAgent agent(config_, master, options_);
  v1::AgentCommand cmd = Launch(master, "7.0", 2, "echo never\n");
  cmd.mutable_launch()->set_argv(0, "python3");
  for (const char* a : {"-m", "det.launch.torch_distributed", "python3", "train.sh"}) {
    cmd.mutable_launch()->add_argv(a);
  }
  master.Send(cmd);
  ASSERT_TRUE(WaitForExits(master, 2))
      << master.AllLines();
  for (const auto& e : master.exits()) {
    EXPECT_EQ(e.exit_code(), 127);
    EXPECT_THAT(e.message(), HasSubstr("no Python interpreter that can import torch"));
    EXPECT_THAT(e.message(), HasSubstr("No module named 'torch'"));
    EXPECT_THAT(e.message(), HasSubstr("environment.python"));
  }
  EXPECT_TRUE(master.launched().empty());

  v1::AgentCommand plain = Launch(master, "8.0", 1, "echo ran\n");
  plain.mutable_launch()->set_argv(0, "python3");
  plain.mutable_launch()->add_argv("train.sh");
  master.Send(plain);
  ASSERT_TRUE(WaitForExits(master, 3))
      << master.AllLines();
  EXPECT_EQ(master.exits()[2].exit_code(), 0) << master.AllLines();
}

TEST_F(AgentTest, SystemMetricsGoWithHeartbeats) {
  FakeMasterClient master;
  SystemSampler sampler;
  options_.sampler = &sampler;
  options_.system_metrics_period = absl::Milliseconds(100);
  RunningAgent agent(config_, master, options_);
  ASSERT_TRUE(WaitUntil(
      "master.metrics().size() >= 2", [&] { return master.metrics().size() >= 2; }, kWait));
  for (const auto& m : master.metrics()) {
    EXPECT_EQ(m.agent_id(), "agent-a");
    EXPECT_GE(m.cpu_utilization_percent(), 0);
    EXPECT_LE(m.cpu_utilization_percent(), 100);
    EXPECT_GT(m.memory_free_bytes(), 0);
    EXPECT_LE(m.memory_free_bytes(), m.memory_total_bytes());
  }
  // Each sample is sent once.
  auto metrics = master.metrics();
  for (size_t i = 1; i < metrics.size(); ++i)
    EXPECT_GT(metrics[i].time_ms(), metrics[i - 1].time_ms());
}

}  // namespace
}  // namespace det::agent
