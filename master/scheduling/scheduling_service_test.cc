// SchedulingService over the master's own managers (master/testing/manager_harness: a
// FakeClock loop over an InMemoryStore): the waiting reasons users read.
#include "master/scheduling/scheduling_service.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/in_memory_store.h"
#include "master/testing/manager_harness.h"
#include "master/testing/master_testing.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;
using testing::ManagerHarness;

class SchedulingServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(h_.Start().ok()); }

  // An experiment of one trial of `slots` slots at `priority`; returns the trial.
  int64_t Create(const std::string& name, int slots, int priority) {
    v1::CreateExperimentRequest req;
    // ExperimentYaml ends with the checkpoint storage: the priority goes under resources.
    std::string yaml = testing::ExperimentYaml(name, slots);
    const std::string at = absl::StrCat("  slots_per_trial: ", slots, "\n");
    yaml.insert(yaml.find(at) + at.size(), absl::StrCat("  priority: ", priority, "\n"));
    req.set_config_yaml(yaml);
    v1::CreateExperimentResponse resp;
    absl::Status st;
    int64_t trial = 0;
    h_.Turn([&] {
      st = h_.experiments.Create("", req, &resp);
      if (st.ok()) trial = h_.registry.experiments.at(resp.experiment().id()).trial_ids.at(0);
    });
    EXPECT_TRUE(st.ok()) << st;
    return trial;
  }

  // Every one of `ranks` ranks of `allocation` on agent `agent` exits 0 (the harness's
  // ReportExit reports rank 0 only).
  void Exit(const std::string& agent, const std::string& session, const std::string& allocation,
            int ranks) {
    for (int rank = 0; rank < ranks; ++rank) {
      v1::ReportExitRequest req;
      req.set_agent_id(agent);
      req.set_session_id(session);
      req.set_allocation_id(allocation);
      req.set_rank(rank);
      req.set_exit_code(0);
      h_.Turn([&] {
        ASSERT_TRUE(h_.agents.Touch(agent, session).ok());
        h_.allocations.OnExit(req, "exit code 0", false);
      });
    }
  }

  FakeClock clock_;
  InMemoryStore store_;
  ManagerHarness h_{testing::LoopbackMasterConfig("/unused"), store_, clock_};
};

// A freed agent moves the blocker of many requests: every one of them then reads the new
// reason (they share their pool's text), and each trial's log said once why it waited.
TEST_F(SchedulingServiceTest, EveryRequestBehindAMovedBlockerReadsTheNewReason) {
  const std::string session = h_.Register("a", 4);
  const int64_t first = Create("first", 4, 10);
  const v1::LaunchCommand launch = h_.NextLaunch("a", session);
  ASSERT_EQ(launch.trial_id(), first);
  const int64_t second = Create("second", 4, 10);
  const int64_t third = Create("third", 4, 20);
  constexpr int kBehind = 40;
  std::vector<int64_t> behind{third};
  for (int i = 0; i < kBehind; ++i) behind.push_back(Create(absl::StrCat("low-", i), 1, 50));
  EXPECT_THAT(h_.Trial(second).pending_reason(), HasSubstr("needs 4 free slots on one agent"));
  const std::string old_reason = absl::StrCat("waiting behind trial ", second, " of experiment ",
                                              h_.Trial(second).experiment_id(), " (priority 10)");
  for (int64_t t : behind) ASSERT_EQ(h_.Trial(t).pending_reason(), old_reason) << t;

  // The first trial ends: the second takes agent a, and the third now holds back all the
  // low-priority ones.
  Exit("a", session, launch.allocation_id(), 4);
  EXPECT_EQ(h_.NextLaunch("a", session).trial_id(), second);
  EXPECT_EQ(h_.Trial(second).pending_reason(), "");
  EXPECT_THAT(h_.Trial(third).pending_reason(), HasSubstr("needs 4 free slots on one agent"));
  const std::string new_reason = absl::StrCat("waiting behind trial ", third, " of experiment ",
                                              h_.Trial(third).experiment_id(), " (priority 20)");
  for (size_t i = 1; i < behind.size(); ++i) {
    ASSERT_EQ(h_.Trial(behind[i]).pending_reason(), new_reason) << behind[i];
  }
  // The list views read the same.
  int shown = 0;
  h_.Turn([&] {
    for (const auto& row : h_.registry.ExperimentRows()) {
      for (const auto& t : row.trials) {
        if (t.trial->id() != behind.back()) continue;
        ASSERT_NE(t.waiting_reason, nullptr);
        EXPECT_EQ(*t.waiting_reason, new_reason);
        ++shown;
      }
    }
  });
  EXPECT_EQ(shown, 1);
  // A trial's log says why it waits when it starts waiting behind; the third's says its
  // own reason when it changed.
  EXPECT_THAT(h_.Logs(behind.back()), HasSubstr("waiting: " + old_reason));
  EXPECT_THAT(h_.Logs(third), HasSubstr("waiting: needs 4 free slots on one agent"));
}

}  // namespace
}  // namespace det::master
