#include "master/cluster/agent_manager.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/sqlite_store.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;

class AgentManagerTest : public ::testing::Test {
 protected:
  AgentManagerTest()
      : loop_(clock_),
        store_(*SqliteStore::Open(":memory:")),
        agents_(clock_, loop_, *store_, {"s3cret", absl::Seconds(30), absl::Seconds(5)}) {}

  static v1::RegisterRequest Request(const std::string& id, const std::string& secret,
                                     int slots = 2) {
    v1::RegisterRequest r;
    r.set_agent_id(id);
    r.set_cluster_secret(secret);
    for (int i = 0; i < slots; ++i) {
      v1::Slot* s = r.add_slots();
      s->set_id(std::to_string(i));
      s->set_type("cuda");
      s->set_uuid("GPU-" + std::to_string(i));
    }
    return r;
  }

  FakeClock clock_;
  EventLoop loop_;
  std::unique_ptr<SqliteStore> store_;
  AgentManager agents_;
};

TEST_F(AgentManagerTest, AgentWithoutTheSecretIsRefusedAndNotListed) {
  for (const std::string secret : {"", "wrong"}) {
    auto session = agents_.Register(Request("a", secret));
    EXPECT_TRUE(absl::IsUnauthenticated(session.status()));
    EXPECT_THAT(session.status().message(), HasSubstr("cluster_secret in agent.yaml or DET_CLUSTER_SECRET"));
  }
  EXPECT_TRUE(agents_.List().empty());
  EXPECT_TRUE(store_->Load()->agents.empty());
}

TEST_F(AgentManagerTest, SlotsNameTheirAgent) {
  ASSERT_TRUE(agents_.Register(Request("gpu-1", "s3cret")).ok());
  const v1::Agent* a = agents_.Find("gpu-1");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->slots_size(), 2);
  EXPECT_EQ(a->slots(1).agent_id(), "gpu-1");
  EXPECT_EQ(a->slots(1).uuid(), "GPU-1");
  EXPECT_TRUE(a->connected());
}

TEST_F(AgentManagerTest, SilentAgentIsDisconnectedAndMustRegisterAgainKeepingItsSlotUse) {
  auto admitted = agents_.Register(Request("a", "s3cret"));
  ASSERT_TRUE(admitted.ok());
  const std::string* session = &admitted->session_id;
  agents_.SetSlotsUsed("a", {"1"}, "7.0");
  clock_.Advance(absl::Seconds(20));
  EXPECT_TRUE(agents_.Touch("a", *session).ok());
  EXPECT_TRUE(agents_.ExpireSilent().empty());
  clock_.Advance(absl::Seconds(31));
  EXPECT_EQ(agents_.ExpireSilent(), std::vector<std::string>{"a"});
  EXPECT_FALSE(agents_.Find("a")->connected());
  EXPECT_TRUE(absl::IsNotFound(agents_.Touch("a", *session)));
  EXPECT_TRUE(agents_.SchedulerView().empty());
  // Back (a restarted agent process): a new session; the slot is still the allocation's.
  auto again = agents_.Register(Request("a", "s3cret"));
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->session_id, *session);
  EXPECT_EQ(agents_.Find("a")->slots(1).allocation_id(), "7.0");
  EXPECT_EQ(agents_.SchedulerView().at(0).free_slots, std::vector<std::string>{"0"});
}

TEST_F(AgentManagerTest, AConnectedAgentsIdCannotBeTakenOverWithoutItsCredential) {
  auto first = agents_.Register(Request("a", "s3cret"));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->credential.size(), 64u);  // 32 random bytes, hex.
  for (const std::string& credential : std::vector<std::string>{"", "0123", std::string(64, '0')}) {
    v1::RegisterRequest rogue = Request("a", "s3cret", 8);
    rogue.set_agent_credential(credential);
    auto refused = agents_.Register(rogue);
    EXPECT_TRUE(absl::IsAlreadyExists(refused.status())) << refused.status();
    EXPECT_THAT(refused.status().message(), HasSubstr("agent id 'a' is connected"));
  }
  // The original keeps its session and its slots.
  EXPECT_TRUE(agents_.Touch("a", first->session_id).ok());
  EXPECT_EQ(agents_.Find("a")->slots_size(), 2);

  // The agent itself, with its credential (a restarted agent process): a new session, the
  // same credential.
  v1::RegisterRequest again = Request("a", "s3cret");
  again.set_agent_credential(first->credential);
  auto back = agents_.Register(again);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_NE(back->session_id, first->session_id);
  EXPECT_EQ(back->credential, first->credential);

  // Silent past agent_timeout: it may come back without it (a fresh work_dir) and gets a
  // new one; the old one no longer admits anyone while it is connected.
  clock_.Advance(absl::Seconds(31));
  ASSERT_EQ(agents_.ExpireSilent(), std::vector<std::string>{"a"});
  auto fresh = agents_.Register(Request("a", "s3cret"));
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_NE(fresh->credential, first->credential);
  EXPECT_TRUE(absl::IsAlreadyExists(agents_.Register(again).status()));
}

}  // namespace
}  // namespace det::master
