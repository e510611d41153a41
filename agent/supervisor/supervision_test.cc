// Supervision of fake workers on a fake clock: output shipped before the exit, the kill
// sequence, a failed rank stopping the others, detaching.
#include "agent/supervisor/supervision.h"

#include <signal.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "agent/supervisor/allocation_record.h"
#include "agent/testing/fake_master_client.h"
#include "agent/testing/fake_process_launcher.h"
#include "agent/testing/test_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using State = Supervision::State;

class SupervisionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    run_dir_ = FreshTestDir();
    options_.tick = absl::Milliseconds(1);
    options_.kill_grace = absl::Seconds(30);
  }

  std::unique_ptr<Allocation> Make(int ranks) {
    v1::LaunchCommand launch;
    launch.set_allocation_id("1.0");
    launch.set_trial_id(3);
    std::vector<Allocation::Worker> workers;
    for (int r = 0; r < ranks; ++r) {
      launch.add_ranks()->set_rank(r);
      Allocation::Worker& w = workers.emplace_back();
      w.rank = launch.ranks(r);
      w.process = *launcher_.Start(WorkerSpec{});
    }
    return std::make_unique<Allocation>(launch, run_dir_, run_dir_, std::move(workers),
                                        Allocation::Stopping{}, false);
  }

  void Append(int rank, int stream, const std::string& text) {
    std::ofstream(RankOutputPath(run_dir_, rank, stream), std::ios::app) << text;
  }

  // Steps until the state is no longer `from` (at most 1000 steps).
  State StepPast(Supervision& s, State from) {
    State now = from;
    for (int i = 0; i < 1000 && now == from; ++i) now = s.Step();
    return now;
  }

  // Ships everything queued.
  void Drain(Outbox& outbox) {
    while (outbox.SendNext("s").result == Outbox::Result::kDelivered) {
    }
  }

  std::string run_dir_;
  FakeClock clock_;
  FakeProcessLauncher launcher_;
  FakeMasterClient master_;
  SupervisionOptions options_;
};

TEST_F(SupervisionTest, OutputIsShippedAndTheExitReportedAfterItsLastLine) {
  std::unique_ptr<Allocation> a = Make(1);
  Outbox outbox("agent-a", master_, clock_);
  StopSignal stop(clock_);
  Supervision s(*a, 0, outbox, clock_, stop, options_);
  Append(0, 0, "one\n");
  EXPECT_EQ(s.Step(), State::kRunning);
  Append(0, 1, "oops\n");
  Append(0, 0, "two (no newline)");
  launcher_.workers()[0]->Exit(ExitStatus{0, 0});
  EXPECT_EQ(StepPast(s, State::kRunning), State::kDraining);
  EXPECT_EQ(s.Step(), State::kDone);
  EXPECT_TRUE(a->exited(0));
  Drain(outbox);
  EXPECT_THAT(master_.Lines(0, "stdout"), ElementsAre("one", "two (no newline)"));
  EXPECT_THAT(master_.Lines(0, "stderr"), ElementsAre("oops"));
  EXPECT_THAT(master_.Lines(0, "agent"), ElementsAre("worker exited: exit code 0"));
  ASSERT_EQ(master_.exits().size(), 1u);
  EXPECT_EQ(master_.exits()[0].exit_code(), 0);
  EXPECT_FALSE(a->stopping().killing);
}

TEST_F(SupervisionTest, AKilledWorkerGetsSigtermEverySecondThenSigkillAfterTheDeadline) {
  std::unique_ptr<Allocation> a = Make(1);
  Outbox outbox("agent-a", master_, clock_);
  StopSignal stop(clock_);
  Supervision s(*a, 0, outbox, clock_, stop, options_);
  std::shared_ptr<FakeWorker> w = launcher_.workers()[0];
  a->Kill("test", clock_.Now() + absl::Milliseconds(2500), /*agent_stopping=*/true);
  EXPECT_EQ(s.Step(), State::kRunning);
  EXPECT_THAT(w->signals(), ElementsAre(SIGTERM));
  clock_.Advance(absl::Milliseconds(999));
  EXPECT_EQ(s.Step(), State::kRunning);
  EXPECT_THAT(w->signals(), ElementsAre(SIGTERM));
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_EQ(s.Step(), State::kRunning);
  EXPECT_THAT(w->signals(), ElementsAre(SIGTERM, SIGTERM));
  clock_.Advance(absl::Seconds(1));
  s.Step();
  EXPECT_THAT(w->signals(), ElementsAre(SIGTERM, SIGTERM, SIGTERM));
  clock_.Advance(absl::Milliseconds(501));
  s.Step();
  EXPECT_THAT(w->signals(), ElementsAre(SIGTERM, SIGTERM, SIGTERM, SIGKILL));
  s.Run();
  Drain(outbox);
  ASSERT_EQ(master_.exits().size(), 1u);
  EXPECT_EQ(master_.exits()[0].signal(), SIGKILL);
  EXPECT_TRUE(master_.exits()[0].agent_stopping());
}

TEST_F(SupervisionTest, AFailedRankStopsTheOthersOfItsAllocation) {
  std::unique_ptr<Allocation> a = Make(2);
  Outbox outbox("agent-a", master_, clock_);
  StopSignal stop(clock_);
  Supervision s(*a, 0, outbox, clock_, stop, options_);
  launcher_.workers()[0]->Exit(ExitStatus{3, 0}, "");
  s.Run();
  Allocation::Stopping stopping = a->stopping();
  EXPECT_TRUE(stopping.killing);
  EXPECT_EQ(stopping.kill_deadline, clock_.Now() + absl::Seconds(30));
  EXPECT_FALSE(stopping.agent_stopping);
  EXPECT_THAT(launcher_.workers()[1]->signals(), ElementsAre(SIGTERM));
  Drain(outbox);
  EXPECT_EQ(master_.exits()[0].exit_code(), 3);
  EXPECT_THAT(master_.AllLines(), HasSubstr("worker exited: exit code 3"));
}

TEST_F(SupervisionTest, OutputWaitsForRoomInTheOutbox) {
  std::unique_ptr<Allocation> a = Make(1);
  OutboxLimits limits;
  limits.read_pause_lines = 2;
  Outbox outbox("agent-a", master_, clock_, limits);
  StopSignal stop(clock_);
  options_.max_lines_per_read = 1;
  Supervision s(*a, 0, outbox, clock_, stop, options_);
  Append(0, 0, "a\nb\nc\nd\n");
  EXPECT_EQ(s.Step(), State::kRunning);
  EXPECT_EQ(outbox.lines(), 4);
  Append(0, 0, "e\n");
  launcher_.workers()[0]->Exit(ExitStatus{0, 0});
  EXPECT_EQ(StepPast(s, State::kRunning), State::kDraining);
  EXPECT_EQ(s.Step(), State::kDraining);
  EXPECT_EQ(s.Step(), State::kDraining);
  EXPECT_EQ(outbox.lines(), 4);
  EXPECT_TRUE(master_.exits().empty());
  Drain(outbox);
  EXPECT_EQ(StepPast(s, State::kDraining), State::kDone);
  Drain(outbox);
  EXPECT_THAT(master_.Lines(0, "stdout"), ElementsAre("a", "b", "c", "d", "e"));
  EXPECT_EQ(master_.exits().size(), 1u);
}

TEST_F(SupervisionTest, ResumesShippingWhereTheMasterLeftOff) {
  Append(0, 0, "old\nnew\n");
  v1::LaunchCommand launch;
  launch.set_allocation_id("1.0");
  launch.add_ranks()->set_rank(0);
  std::vector<Allocation::Worker> workers(1);
  workers[0].rank = launch.ranks(0);
  workers[0].process = *launcher_.Start(WorkerSpec{});
  workers[0].shipped = {4, 0};
  Allocation a(launch, run_dir_, run_dir_, std::move(workers), Allocation::Stopping{}, true);
  Outbox outbox("agent-a", master_, clock_);
  StopSignal stop(clock_);
  Supervision s(a, 0, outbox, clock_, stop, options_);
  s.Step();
  Drain(outbox);
  EXPECT_THAT(master_.Lines(0, "stdout"), ElementsAre("new"));
}

TEST_F(SupervisionTest, DetachingLeavesTheWorkerRunning) {
  std::unique_ptr<Allocation> a = Make(1);
  Outbox outbox("agent-a", master_, clock_);
  StopSignal stop(clock_);
  Supervision s(*a, 0, outbox, clock_, stop, options_);
  stop.Detach();
  EXPECT_EQ(s.Step(), State::kDetached);
  EXPECT_FALSE(launcher_.workers()[0]->exited());
  EXPECT_TRUE(launcher_.workers()[0]->signals().empty());
  EXPECT_FALSE(a->exited(0));
}

}  // namespace
}  // namespace det::agent
