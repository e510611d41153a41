// Agent identity (issue 15 point 2, issue 25 item 1), attacked by a hostile agent that
// holds the cluster secret and speaks the AgentService itself, against a real det-master
// (its SQLite database), a real det-agent and its worker: it may not end, claim or write
// into a run placed on another agent, may not write the master's lines, and may not take
// over an agent's id: not while the agent is connected, not while it is away, not after a
// master restart. An agent that lost its credential comes back only through an admin.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/rpc/rpc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/agent.grpc.pb.h"
#include "tests/security/security_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The secret every TestCluster agent.yaml carries.
constexpr char kClusterSecret[] = "test-secret";

class AgentIdentityTest : public SecurityCluster {
 protected:
  // Appended to master.yaml.
  virtual std::string MasterYaml() { return ""; }

  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster(MasterYaml()).ok()) << cluster_.LogTail("master");
    ASSERT_TRUE(cluster_.StartAgent("agent-a").ok()) << cluster_.LogTail("agent-a");
    stub_ = v1::AgentService::NewStub(rpc::MakeChannel(cluster_.address()));
    // The victim: a worker that runs until the test lets it finish.
    CreateScriptExperiment("victim", R"sh(
echo "victim started"
touch "$TEST_DIR/started"
while [ ! -e "$TEST_DIR/go" ]; do sleep 0.05; done
echo "victim finishing"
)sh");
    ASSERT_TRUE(WaitForFile("started")) << Diagnostics();
    ASSERT_TRUE(WaitForTrialState("STATE_RUNNING")) << Diagnostics();
    allocation_ = Trial()["allocation"].value("id", "");
    ASSERT_EQ(allocation_, "1.0") << Diagnostics();
  }

  grpc::Status Register(const std::string& id, const std::string& credential,
                        v1::RegisterResponse* resp,
                        const std::vector<std::string>& running = {}) {
    v1::RegisterRequest req;
    for (const auto& a : running) req.add_running_allocations(a);
    req.set_agent_id(id);
    req.set_hostname("rogue-host");
    req.set_cluster_secret(kClusterSecret);
    req.set_agent_credential(credential);
    v1::Slot* slot = req.add_slots();
    slot->set_id("0");
    slot->set_type("cpu");
    auto ctx = rpc::Context(absl::Seconds(30));
    return stub_->Register(ctx.get(), req, resp);
  }

  std::unique_ptr<v1::AgentService::Stub> stub_;
  std::string allocation_;
};

// Attack (a) and (c): an agent with the cluster secret reports the exit and the launch of
// a run on another agent and ships lines into its trial, one of them as the master's.
TEST_F(AgentIdentityTest, AForeignAgentCannotEndClaimOrWriteIntoAnotherAgentsRun) {
  v1::RegisterResponse rogue;
  grpc::Status st = Register("rogue", "", &rogue);
  ASSERT_TRUE(st.ok()) << st.error_message();

  v1::ReportExitRequest exit;
  exit.set_agent_id("rogue");
  exit.set_session_id(rogue.session_id());
  exit.set_allocation_id(allocation_);
  exit.set_rank(0);
  exit.set_exit_code(0);
  v1::ReportExitResponse exit_resp;
  auto ctx = rpc::Context(absl::Seconds(30));
  st = stub_->ReportExit(ctx.get(), exit, &exit_resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_THAT(st.error_message(),
              HasSubstr("agent rogue may report only for allocations placed on it: rank 0 of "
                        "allocation 1.0 runs on agent agent-a"));

  v1::ReportLaunchedRequest launched;
  launched.set_agent_id("rogue");
  launched.set_session_id(rogue.session_id());
  launched.set_allocation_id(allocation_);
  launched.add_ranks(0);
  v1::ReportLaunchedResponse launched_resp;
  ctx = rpc::Context(absl::Seconds(30));
  st = stub_->ReportLaunched(ctx.get(), launched, &launched_resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("runs on agent agent-a"));

  auto ship = [&](const std::string& stream, const std::string& message) {
    v1::ShipLogsRequest req;
    req.set_agent_id("rogue");
    req.set_session_id(rogue.session_id());
    v1::LogLine* line = req.add_lines();
    line->set_allocation_id(allocation_);
    line->set_trial_id(1);
    line->set_rank(stream == "master" ? -1 : 0);
    line->set_stream(stream);
    line->set_message(message);
    v1::ShipLogsResponse resp;
    auto c = rpc::Context(absl::Seconds(30));
    return stub_->ShipLogs(c.get(), req, &resp);
  };
  st = ship("stdout", "forged worker line");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  st = ship("master", "forged: trial 1 completed, all ranks exited normally");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("may not claim the master's stream 'master'"));

  // The victim is untouched: still running on agent-a, its slot still used.
  EXPECT_EQ(TrialState(), "STATE_RUNNING") << Diagnostics();
  nlohmann::json slots = cluster_.DetJson({"slot", "list"});
  EXPECT_THAT(slots.dump(), HasSubstr("1.0")) << slots.dump();
  Touch("go");
  ASSERT_TRUE(WaitForTrialState("STATE_COMPLETED")) << Diagnostics();
  const std::string logs = Logs();
  EXPECT_THAT(logs, HasSubstr("victim finishing"));
  EXPECT_THAT(logs, Not(HasSubstr("forged")));
  EXPECT_THAT(Trial()["allocation"].dump(), Not(HasSubstr("rogue")));
}

// Attack (b): a registration under the id of a connected agent, without its credential or
// with a made-up one, is refused; the agent keeps its session and its run.
TEST_F(AgentIdentityTest, ARogueRegistrationUnderAConnectedAgentsIdIsRefused) {
  const int64_t registered = cluster_.AgentRegisteredMs("agent-a");
  ASSERT_GT(registered, 0);
  for (const std::string& credential : {std::string(), std::string(64, 'f')}) {
    v1::RegisterResponse resp;
    grpc::Status st = Register("agent-a", credential, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::ALREADY_EXISTS) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("agent id 'agent-a' is connected"));
    EXPECT_TRUE(resp.session_id().empty());
  }
  // The real agent is still the one registered, and still heartbeating on its session.
  EXPECT_EQ(cluster_.AgentRegisteredMs("agent-a"), registered);
  nlohmann::json agents = cluster_.DetJson({"agent", "list"});
  EXPECT_THAT(agents.dump(), Not(HasSubstr("rogue-host")));
  EXPECT_THAT(cluster_.LogTail("agent-a"), Not(HasSubstr("registering again")));
  Touch("go");
  ASSERT_TRUE(WaitForTrialState("STATE_COMPLETED")) << Diagnostics();
  EXPECT_THAT(Logs(), HasSubstr("victim finishing"));
  EXPECT_EQ(cluster_.AgentRegisteredMs("agent-a"), registered);
}

// With a short agent_timeout, so that a killed agent is soon listed disconnected.
class AgentIdentityAcrossRestartsTest : public AgentIdentityTest {
 protected:
  std::string MasterYaml() override { return "agent_timeout: 4s\n"; }

  // Whether the master lists agent `id` connected; nullopt when it does not list it (or
  // cannot be asked).
  std::optional<bool> Connected(const std::string& id) {
    nlohmann::json agents = cluster_.DetJson({"agent", "list"});
    if (!agents.is_object() || !agents.contains("agents")) return std::nullopt;
    for (const auto& a : agents["agents"]) {
      if (a.value("id", "") == id) return a.value("connected", false);
    }
    return std::nullopt;
  }
  // Kills agent-a (its worker keeps running) and waits until the master lists it
  // disconnected.
  void KillAgentUntilDisconnected() {
    cluster_.StopAgent("agent-a", SIGKILL);
    ASSERT_TRUE(WaitUntil([&] { return Connected("agent-a") == false; }, absl::Seconds(60)))
        << Diagnostics();
  }
  // An impostor's registration as agent-a, claiming the victim's allocation, with no
  // credential and with two made-up ones: each refused as the id's, naming the way back.
  void ExpectImpostorRefused() {
    const std::string credentials[] = {"", std::string(64, 'f'), std::string(64, 'a')};
    for (const std::string& credential : credentials) {
      v1::RegisterResponse resp;
      grpc::Status st = Register("agent-a", credential, &resp, {allocation_});
      EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
      EXPECT_THAT(st.error_message(),
                  HasSubstr("agent id 'agent-a' is enrolled: registering under it needs the "
                            "agent credential"));
      EXPECT_THAT(st.error_message(), HasSubstr("det agent reset-credential agent-a"));
      EXPECT_TRUE(resp.session_id().empty());
      EXPECT_TRUE(resp.agent_credential().empty());
    }
  }
  std::string CredentialFile() { return cluster_.dir() + "/agent-a/run/agent_credential"; }
};

// Attack (d), the review's N1: the real agent is away (killed; its worker runs on), then
// the master restarts. An impostor with the cluster secret registering under the id and
// claiming the victim's allocation is refused throughout, and the master's log names
// where it came from. The database holds the credential's SHA-256, not the credential. The
// real agent, restarted with its work_dir, is admitted and reattaches its run, which
// completes with none of the impostor's doing.
TEST_F(AgentIdentityAcrossRestartsTest, AnImpostorIsRefusedWhileTheAgentIsAwayAndAfterAMasterRestart) {
  const std::string credential(absl::StripAsciiWhitespace(Slurp(CredentialFile())));
  ASSERT_EQ(credential.size(), 64u);
  const std::string stored =
      Sql(cluster_.db_path(), "SELECT credential_hash FROM agents WHERE id = 'agent-a'");
  const std::string sha256 = RunCommand({"sh", "-c", absl::StrCat("printf %s ", credential,
                                                                    " | sha256sum | cut -c1-64")})
                                 .out.substr(0, 64);
  EXPECT_EQ(stored, sha256);
  EXPECT_EQ(Sql(cluster_.db_path(),
                absl::StrCat("SELECT count(*) FROM agents WHERE CAST(data AS TEXT) LIKE '%",
                             credential, "%' OR credential_hash = '", credential, "'")),
            "0");

  KillAgentUntilDisconnected();
  ExpectImpostorRefused();
  const std::string log = Slurp(cluster_.dir() + "/master.log");
  EXPECT_THAT(log, HasSubstr("registration as agent agent-a refused: the request has no agent "
                             "credential and the agent is disconnected; it came from ipv4:127.0.0.1:"));
  EXPECT_THAT(log, HasSubstr("(hostname 'rogue-host', claiming allocations 1.0)"));
  EXPECT_THAT(log, HasSubstr("the request has a wrong agent credential"));

  // The master restarts while the agent is still away: the impostor is refused at once.
  cluster_.StopMaster(SIGKILL);
  ASSERT_TRUE(cluster_.StartMaster(MasterYaml()).ok()) << cluster_.LogTail("master");
  stub_ = v1::AgentService::NewStub(rpc::MakeChannel(cluster_.address()));
  ExpectImpostorRefused();
  EXPECT_EQ(Connected("agent-a"), false);

  // The real agent comes back with its work_dir: admitted, its run reattached.
  ASSERT_TRUE(cluster_.StartAgent("agent-a").ok()) << cluster_.LogTail("agent-a");
  EXPECT_EQ(std::string(absl::StripAsciiWhitespace(Slurp(CredentialFile()))), credential);
  Touch("go");
  ASSERT_TRUE(WaitForTrialState("STATE_COMPLETED")) << Diagnostics();
  const std::string logs = Logs();
  EXPECT_THAT(logs, HasSubstr("victim finishing"));
  EXPECT_THAT(logs, HasSubstr("agent agent-a reattached"));
  EXPECT_THAT(logs, Not(HasSubstr("rogue")));
  EXPECT_EQ(Trial()["allocation"].value("id", ""), allocation_);
  EXPECT_THAT(cluster_.DetJson({"agent", "list"}).dump(), Not(HasSubstr("rogue-host")));
}

// An agent that lost its credential (its work_dir's run/agent_credential deleted) is
// refused like anyone else until an admin resets the id: not a non-admin, and not while
// the agent is connected. Its next registration is then enrolled with a new credential,
// and the run it still had is not handed back to it: it is stopped and rescheduled.
TEST_F(AgentIdentityAcrossRestartsTest, OnlyAnAdminReEnrolsAnAgentThatLostItsCredential) {
  CommandResult create = RunCommand(
      {TestCluster::BinDir() + "/det", "-m", cluster_.address(), "user", "create", "bob"},
      absl::Seconds(60),
      {{"DET_USER_TOKEN", cluster_.token()}, {"DET_NEW_PASSWORD", "bobs-password"}});
  ASSERT_TRUE(create.exit.ok()) << create.err;
  const std::string home = cluster_.dir() + "/home-bob";
  mkdir(home.c_str(), 0700);
  auto as_bob = [&](const std::vector<std::string>& args,
                    std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {TestCluster::BinDir() + "/det", "-m", cluster_.address()};
    argv.insert(argv.end(), args.begin(), args.end());
    env["HOME"] = home;
    env.emplace("DET_USER_TOKEN", "");
    return RunCommand(argv, absl::Seconds(60), env);
  };
  ASSERT_TRUE(as_bob({"user", "login", "bob"}, {{"DET_PASSWORD", "bobs-password"}}).exit.ok());

  CommandResult live = cluster_.Det({"agent", "reset-credential", "agent-a"});
  EXPECT_EQ(live.exit.exit_code, 1);
  EXPECT_THAT(live.err, HasSubstr("agent agent-a is connected: its credential can be reset only "
                                  "while it is disconnected"));
  CommandResult unknown = cluster_.Det({"agent", "reset-credential", "agent-zz"});
  EXPECT_EQ(unknown.exit.exit_code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("agent agent-zz not found"));

  const std::string old_credential(absl::StripAsciiWhitespace(Slurp(CredentialFile())));
  KillAgentUntilDisconnected();
  ASSERT_EQ(unlink(CredentialFile().c_str()), 0);
  ASSERT_TRUE(cluster_
                  .StartAgentWithYaml("agent-a", cluster_.AgentYaml("agent-a"), {},
                                      /*wait_joined=*/false)
                  .ok());
  ASSERT_TRUE(WaitUntil(
      [&] {
        return cluster_.LogTail("agent-a").find("det agent reset-credential agent-a") !=
               std::string::npos;
      },
      absl::Seconds(60)))
      << Diagnostics();
  EXPECT_THAT(cluster_.LogTail("agent-a"), HasSubstr("refused agent agent-a"));
  EXPECT_EQ(Connected("agent-a"), false);

  CommandResult by_bob = as_bob({"agent", "reset-credential", "agent-a"});
  EXPECT_EQ(by_bob.exit.exit_code, 1);
  EXPECT_THAT(by_bob.err,
              HasSubstr("only an admin may reset agent credentials; user 'bob' is not one"));
  EXPECT_EQ(Connected("agent-a"), false);

  CommandResult reset = cluster_.Det({"agent", "reset-credential", "agent-a"});
  ASSERT_TRUE(reset.exit.ok()) << reset.err;
  EXPECT_THAT(reset.out, HasSubstr("Reset the credential of agent agent-a"));
  // The waiting agent's next try enrolls it, with the credential it made for itself.
  ASSERT_TRUE(WaitUntil([&] { return Connected("agent-a") == true; }, absl::Seconds(60)))
      << Diagnostics();
  const std::string new_credential(absl::StripAsciiWhitespace(Slurp(CredentialFile())));
  EXPECT_EQ(new_credential.size(), 64u);
  EXPECT_NE(new_credential, old_credential);
  const std::string log = Slurp(cluster_.dir() + "/master.log");
  EXPECT_THAT(log, HasSubstr("agent agent-a: credential reset by 'admin'"));
  EXPECT_THAT(log, HasSubstr("agent agent-a enrolled anew from ipv4:127.0.0.1:"));

  // The run it had is not reattached to the re-enrolled id: stopped, then run again
  // (not counted as a restart), this time to completion.
  ASSERT_TRUE(WaitUntil([&] { return Trial()["allocation"].value("id", "") == "1.1"; },
                        absl::Seconds(90)))
      << Diagnostics();
  Touch("go");
  ASSERT_TRUE(WaitForTrialState("STATE_COMPLETED")) << Diagnostics();
  EXPECT_THAT(Logs(), Not(HasSubstr("agent agent-a reattached")));
  EXPECT_EQ(Trial().value("restarts", 0), 0) << Trial().dump();
}

}  // namespace
}  // namespace det::testing
