// The session against a fake master: the credential kept in work_dir, registration,
// heartbeats carrying host metrics, and a session the master forgot.
#include "agent/session/session.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "agent/testing/fake_master_client.h"
#include "agent/testing/test_dir.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::det::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::SizeIs;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.work_dir = FreshTestDir();
    config_.agent_id = "agent-a";
    config_.master = "127.0.0.1:1";
    config_.advertise_address = "127.0.0.1";
    config_.cluster_secret = "secret";
    config_.heartbeat_interval = absl::Seconds(7);
    slot_.set_id("0");
    slot_.set_type("cpu");
  }

  config::AgentConfig config_;
  v1::Slot slot_;
  FakeMasterClient master_;
};

TEST_F(SessionTest, AFreshAgentKeepsACredentialBeforeItPresentsIt) {
  Session session(config_, master_, {slot_}, std::nullopt);
  session.LoadCredential();
  std::string kept(absl::StripAsciiWhitespace(Slurp(CredentialPath(config_.work_dir))));
  EXPECT_EQ(kept.size(), 64u);
  struct stat st;
  ASSERT_EQ(stat(CredentialPath(config_.work_dir).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  ASSERT_TRUE(session.Register({"1.0"}).ok());
  ASSERT_THAT(master_.registers(), SizeIs(1));
  const v1::RegisterRequest req = master_.registers()[0];
  EXPECT_EQ(req.agent_credential(), kept);
  EXPECT_EQ(req.cluster_secret(), "secret");
  EXPECT_EQ(req.advertise_address(), "127.0.0.1");
  EXPECT_THAT(req.running_allocations(), ElementsAre("1.0"));
  ASSERT_THAT(req.slots(), SizeIs(1));
  // A second agent process on the work_dir presents the same one.
  Session again(config_, master_, {slot_}, std::nullopt);
  again.LoadCredential();
  ASSERT_TRUE(again.Register({}).ok());
  EXPECT_EQ(master_.registers()[1].agent_credential(), kept);
}

TEST_F(SessionTest, ACredentialTheMasterIssuesReplacesTheKeptOne) {
  Session session(config_, master_, {slot_}, std::nullopt);
  session.LoadCredential();
  master_.IssueCredential("issued");
  ASSERT_TRUE(session.Register({}).ok());
  EXPECT_EQ(Slurp(CredentialPath(config_.work_dir)), "issued\n");
  session.Lost(session.id());
  ASSERT_TRUE(session.Register({}).ok());
  EXPECT_EQ(master_.registers()[1].agent_credential(), "issued");
}

TEST_F(SessionTest, RegistrationStartsASessionAndNamesTheAllocationsToKill) {
  Session session(config_, master_, {slot_}, std::nullopt);
  EXPECT_EQ(session.id(), "");
  EXPECT_EQ(session.heartbeat_interval(), absl::Seconds(7));
  master_.KillOnRegister("2.0");
  absl::StatusOr<std::vector<std::string>> kill = session.Register({"2.0"});
  ASSERT_TRUE(kill.ok()) << kill.status();
  EXPECT_THAT(*kill, ElementsAre("2.0"));
  EXPECT_EQ(session.id(), "session-1");
  EXPECT_EQ(session.heartbeat_interval(), absl::Milliseconds(100));
  EXPECT_EQ(session.address().advertise_address, "127.0.0.1");
}

TEST_F(SessionTest, ARefusalIsReturnedAndLeavesNoSession) {
  Session session(config_, master_, {slot_}, std::nullopt);
  master_.FailRegister(absl::UnauthenticatedError("wrong cluster secret"));
  EXPECT_THAT(session.Register({}).status(),
              StatusIs(absl::StatusCode::kUnauthenticated, "wrong cluster secret"));
  EXPECT_EQ(session.id(), "");
}

TEST_F(SessionTest, HeartbeatsCarryPendingMetricsUntilTheMasterTakesThem) {
  Session session(config_, master_, {slot_}, std::nullopt);
  ASSERT_TRUE(session.Register({}).ok());
  MetricsBuffer metrics;
  v1::SystemMetrics m;
  m.set_time_ms(5);
  metrics.Add(m);
  master_.FailHeartbeats(absl::UnavailableError("master down"));
  EXPECT_THAT(session.Heartbeat(session.id(), metrics),
              StatusIs(absl::StatusCode::kUnavailable, "master down"));
  EXPECT_THAT(metrics.Pending(), SizeIs(1));
  master_.FailHeartbeats(absl::OkStatus());
  EXPECT_TRUE(session.Heartbeat(session.id(), metrics).ok());
  EXPECT_THAT(metrics.Pending(), SizeIs(0));
  ASSERT_THAT(master_.metrics(), SizeIs(1));
  EXPECT_EQ(master_.heartbeats().back().session_id(), "session-1");
}

TEST_F(SessionTest, ASessionTheMasterDoesNotKnowIsDropped) {
  Session session(config_, master_, {slot_}, std::nullopt);
  ASSERT_TRUE(session.Register({}).ok());
  MetricsBuffer metrics;
  master_.FailHeartbeats(absl::NotFoundError("no session session-1"));
  EXPECT_THAT(session.Heartbeat("session-1", metrics),
              StatusIs(absl::StatusCode::kNotFound, "no session session-1"));
  EXPECT_EQ(session.id(), "");
  // A stale loss does not drop a newer session.
  ASSERT_TRUE(session.Register({}).ok());
  session.Lost("session-1");
  EXPECT_EQ(session.id(), "session-2");
}

}  // namespace
}  // namespace det::agent
