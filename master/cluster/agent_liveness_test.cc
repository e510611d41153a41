// AgentLiveness with the managers a run's life involves (master/testing: manager_harness),
// on a FakeClock loop over an InMemoryStore: what a registration may take over.
#include "master/cluster/agent_liveness.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/in_memory_store.h"
#include "master/testing/manager_harness.h"
#include "master/testing/master_testing.h"

namespace det::master {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ManagerHarness;

class AgentLivenessTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(h_.Start().ok()); }

  // Registers as `id` with `credential`, claiming `running`; the status.
  absl::Status RegisterAs(const std::string& id, const std::string& credential,
                          const std::vector<std::string>& running, v1::RegisterResponse* resp) {
    v1::RegisterRequest req = testing::RegisterRequest(id, 1, running);
    req.set_agent_credential(credential);
    absl::Status st;
    h_.Turn([&] { st = h_.liveness.Register(req, resp, "ipv4:10.6.6.6:4242"); });
    return st;
  }

  FakeClock clock_;
  InMemoryStore store_;
  ManagerHarness h_{testing::LoopbackMasterConfig("/unused"), store_, clock_};
};

// While the agent is away, a registration under its id without its credential claims
// nothing: refused, and the run still waits for the real agent, which reattaches it.
TEST_F(AgentLivenessTest, ARunIsNeverReattachedToARegistrationWithoutTheIdsCredential) {
  const int64_t trial = h_.CreateExperiment("victim");
  h_.Register("a", 1);
  const std::string allocation = h_.Trial(trial).allocation().id();
  ASSERT_FALSE(allocation.empty());
  h_.Advance(h_.config.agent_timeout + absl::Seconds(1));

  v1::RegisterResponse rogue;
  absl::Status st = RegisterAs("a", "", {allocation}, &rogue);
  EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
  st = RegisterAs("a", std::string(64, '1'), {allocation}, &rogue);
  EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
  EXPECT_TRUE(rogue.session_id().empty());
  EXPECT_THAT(h_.Logs(trial), Not(HasSubstr("reattached")));

  v1::RegisterResponse real;
  h_.Register("a", 1, {allocation}, &real);
  EXPECT_EQ(real.kill_allocations_size(), 0);
  EXPECT_THAT(h_.Logs(trial), HasSubstr("agent a reattached"));
  EXPECT_EQ(h_.Trial(trial).allocation().id(), allocation);
}

// After an admin's reset, the id's next registration is enrolled but handed nothing the
// id ran: what it claims is killed and the run counts as lost (rescheduled, not a restart).
TEST_F(AgentLivenessTest, AnEnrollingRegistrationReattachesNothing) {
  const int64_t trial = h_.CreateExperiment("victim");
  h_.Register("a", 1);
  const std::string allocation = h_.Trial(trial).allocation().id();
  h_.Advance(h_.config.agent_timeout + absl::Seconds(1));
  absl::Status reset;
  h_.Turn([&] { reset = h_.agents.ResetCredential("a", "admin"); });
  ASSERT_TRUE(reset.ok()) << reset;

  v1::RegisterResponse resp;
  absl::Status st = RegisterAs("a", std::string(64, 'd'), {allocation}, &resp);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(resp.agent_credential(), std::string(64, 'd'));
  EXPECT_THAT(resp.kill_allocations(), ElementsAre(allocation));
  v1::Trial after = h_.Trial(trial);
  EXPECT_THAT(h_.Logs(trial), Not(HasSubstr("reattached")));
  EXPECT_EQ(after.restarts(), 0);
  EXPECT_NE(after.allocation().id(), allocation);
}

}  // namespace
}  // namespace det::master
