#include "master/cluster/agent_manager.h"

#include <sodium.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/fault_injecting_store.h"
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
  // Back (a restarted agent process, with its credential): a new session; the slot is
  // still the allocation's.
  v1::RegisterRequest back = Request("a", "s3cret");
  back.set_agent_credential(admitted->credential);
  auto again = agents_.Register(back);
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

  // Silent past agent_timeout, the id is still its own: no registration without the
  // credential is admitted (PERMISSION_DENIED naming the way back), and the real agent is.
  clock_.Advance(absl::Seconds(31));
  ASSERT_EQ(agents_.ExpireSilent(), std::vector<std::string>{"a"});
  for (const std::string& credential : std::vector<std::string>{"", std::string(64, '0')}) {
    v1::RegisterRequest rogue = Request("a", "s3cret", 8);
    rogue.set_agent_credential(credential);
    auto refused = agents_.Register(rogue, "ipv4:10.9.9.9:5555");
    EXPECT_TRUE(absl::IsPermissionDenied(refused.status())) << refused.status();
    EXPECT_THAT(refused.status().message(),
                HasSubstr("agent id 'a' is enrolled: registering under it needs the agent "
                          "credential"));
    EXPECT_THAT(refused.status().message(), HasSubstr("det agent reset-credential a"));
    EXPECT_FALSE(agents_.Find("a")->connected());
    EXPECT_EQ(agents_.Find("a")->slots_size(), 2);
  }
  auto real = agents_.Register(again);
  ASSERT_TRUE(real.ok()) << real.status();
  EXPECT_FALSE(real->enrolled);
  EXPECT_EQ(real->credential, first->credential);
}

// Sha256 hex of `text`, as the store keeps a credential.
std::string Sha256Hex(const std::string& text) {
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(digest, reinterpret_cast<const unsigned char*>(text.data()), text.size());
  char hex[2 * crypto_hash_sha256_BYTES + 1];
  sodium_bin2hex(hex, sizeof(hex), digest, sizeof(digest));
  return hex;
}

// A restarted master (a new AgentManager restored from the same store) knows every
// enrolled id's credential: only its hash was stored, and a registration without the
// credential is refused while the real agent has not come back yet.
TEST_F(AgentManagerTest, CredentialsAreStoredHashedAndCheckedAfterAMasterRestart) {
  auto first = agents_.Register(Request("a", "s3cret"));
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->enrolled);
  auto snap = store_->Load();
  ASSERT_TRUE(snap.ok());
  ASSERT_EQ(snap->agent_credential_hashes.count("a"), 1u);
  EXPECT_EQ(snap->agent_credential_hashes.at("a"), Sha256Hex(first->credential));
  EXPECT_NE(snap->agent_credential_hashes.at("a"), first->credential);

  EventLoop loop(clock_);
  AgentManager restarted(clock_, loop, *store_, {"s3cret", absl::Seconds(30), absl::Seconds(5)});
  restarted.Restore(snap->agents, snap->agent_credential_hashes);
  for (const std::string& credential : std::vector<std::string>{"", "nope", std::string(64, 'a')}) {
    v1::RegisterRequest rogue = Request("a", "s3cret");
    rogue.set_agent_credential(credential);
    rogue.add_running_allocations("3.0");
    auto refused = restarted.Register(rogue);
    EXPECT_TRUE(absl::IsPermissionDenied(refused.status())) << refused.status();
  }
  v1::RegisterRequest real = Request("a", "s3cret");
  real.set_agent_credential(first->credential);
  auto back = restarted.Register(real);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->enrolled);
  EXPECT_EQ(back->credential, first->credential);
  // Re-registering did not change what is stored.
  EXPECT_EQ(store_->Load()->agent_credential_hashes.at("a"), Sha256Hex(first->credential));
}

// An agent proposes the credential it kept before asking (32 bytes, lowercase hex): the
// master enrolls it with that one; anything else proposed gets a random one.
TEST_F(AgentManagerTest, EnrolmentTakesAWellFormedProposedCredential) {
  const std::string proposed(64, 'c');
  v1::RegisterRequest a = Request("a", "s3cret");
  a.set_agent_credential(proposed);
  auto enrolled = agents_.Register(a);
  ASSERT_TRUE(enrolled.ok());
  EXPECT_TRUE(enrolled->enrolled);
  EXPECT_EQ(enrolled->credential, proposed);
  // The answer lost on the way: the agent asks again with the same one and is admitted.
  auto again = agents_.Register(a);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->enrolled);

  for (const std::string& bad : {std::string(63, 'c'), std::string(64, 'C'), std::string(64, 'g'),
                                 std::string("short")}) {
    v1::RegisterRequest b = Request("b-" + std::to_string(bad.size()) + bad.substr(0, 1), "s3cret");
    b.set_agent_credential(bad);
    auto issued = agents_.Register(b);
    ASSERT_TRUE(issued.ok());
    EXPECT_NE(issued->credential, bad);
    EXPECT_EQ(issued->credential.size(), 64u);
  }
}

// Re-enrolment is an admin's ResetCredential of a disconnected agent: refused for an
// unknown id and while the agent is connected; afterwards the id's next registration is
// enrolled (and told so), and the credential it was given is the one checked from then on.
TEST_F(AgentManagerTest, ResetCredentialReEnrolsOnlyADisconnectedAgent) {
  EXPECT_TRUE(absl::IsNotFound(agents_.ResetCredential("ghost", "admin")));
  absl::Status empty = agents_.ResetCredential("", "admin");
  EXPECT_TRUE(absl::IsInvalidArgument(empty)) << empty;
  EXPECT_THAT(empty.message(), HasSubstr("agent_id: must not be empty"));
  auto first = agents_.Register(Request("a", "s3cret"));
  ASSERT_TRUE(first.ok());
  absl::Status live = agents_.ResetCredential("a", "admin");
  EXPECT_TRUE(absl::IsFailedPrecondition(live)) << live;
  EXPECT_THAT(live.message(), HasSubstr("agent a is connected"));

  clock_.Advance(absl::Seconds(31));
  ASSERT_EQ(agents_.ExpireSilent(), std::vector<std::string>{"a"});
  ASSERT_TRUE(agents_.ResetCredential("a", "admin").ok());
  EXPECT_EQ(store_->Load()->agent_credential_hashes.count("a"), 0u);

  // The agent that lost its credential (a fresh work_dir) proposes a new one.
  const std::string fresh(64, 'e');
  v1::RegisterRequest lost = Request("a", "s3cret");
  lost.set_agent_credential(fresh);
  auto back = agents_.Register(lost);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->enrolled);
  EXPECT_EQ(back->credential, fresh);
  EXPECT_TRUE(agents_.Find("a")->enabled());

  clock_.Advance(absl::Seconds(31));
  ASSERT_EQ(agents_.ExpireSilent(), std::vector<std::string>{"a"});
  v1::RegisterRequest old = Request("a", "s3cret");
  old.set_agent_credential(first->credential);
  EXPECT_TRUE(absl::IsPermissionDenied(agents_.Register(old).status()));
}

// Nothing is acknowledged before it is written: an enrolment whose credential the store
// refuses is refused, and the id stays unknown (not listed, not enrolled).
TEST_F(AgentManagerTest, AnEnrolmentTheStoreRefusesIsRefused) {
  FaultInjectingStore faulty(*store_);
  EventLoop loop(clock_);
  AgentManager agents(clock_, loop, faulty, {"s3cret", absl::Seconds(30), absl::Seconds(5)});
  faulty.FailWrites(true, "SetAgentCredential");
  auto refused = agents.Register(Request("a", "s3cret"));
  EXPECT_TRUE(absl::IsUnavailable(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(),
              HasSubstr("agent a: the master cannot store its credential: injected fault: "
                        "SetAgentCredential"));
  EXPECT_EQ(agents.Find("a"), nullptr);
  EXPECT_TRUE(agents.List().empty());
  faulty.FailWrites(false, "SetAgentCredential");
  auto admitted = agents.Register(Request("a", "s3cret"));
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_TRUE(admitted->enrolled);
}

}  // namespace
}  // namespace det::master
