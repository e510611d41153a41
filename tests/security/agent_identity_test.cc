// Agent identity (issue 15 point 2), attacked by a hostile agent that holds the cluster
// secret and speaks the AgentService itself, against a real det-master, a real det-agent
// and its worker: it may not end, claim or write into a run placed on another agent, may
// not write the master's lines, and may not take over a connected agent's id.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
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
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
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
                        v1::RegisterResponse* resp) {
    v1::RegisterRequest req;
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

}  // namespace
}  // namespace det::testing
