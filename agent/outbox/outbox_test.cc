// The outbox against a fake master, on a fake clock: batching, retry timing, report order,
// dropped lines.
#include "agent/outbox/outbox.h"

#include "agent/testing/fake_master_client.h"
#include "common/clock/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using Result = Outbox::Result;
using ::testing::ElementsAre;

Outgoing Line(const std::string& allocation, const std::string& text) {
  Outgoing o;
  o.line.emplace();
  o.line->set_allocation_id(allocation);
  o.line->set_message(text);
  return o;
}

Outgoing Exit(const std::string& allocation, int rank) {
  Outgoing o;
  o.exit.emplace();
  o.exit->set_allocation_id(allocation);
  o.exit->set_rank(rank);
  return o;
}

class OutboxTest : public ::testing::Test {
 protected:
  FakeMasterClient master_;
  FakeClock clock_;
};

TEST_F(OutboxTest, ConsecutiveLinesGoInOneBatchAndAReportAlone) {
  Outbox outbox("agent-a", master_, clock_);
  outbox.Enqueue(Line("1.0", "a"));
  outbox.Enqueue(Line("1.0", "b"));
  outbox.Enqueue(Exit("1.0", 0));
  outbox.Enqueue(Line("1.0", "c"));

  Outbox::SendResult first = outbox.SendNext("s");
  EXPECT_EQ(first.result, Result::kDelivered);
  EXPECT_EQ(first.delivered.size(), 2u);
  Outbox::SendResult second = outbox.SendNext("s");
  ASSERT_EQ(second.delivered.size(), 1u);
  EXPECT_TRUE(second.delivered[0].exit);
  EXPECT_EQ(outbox.SendNext("s").delivered.size(), 1u);
  EXPECT_EQ(outbox.SendNext("s").result, Result::kEmpty);

  ASSERT_EQ(master_.ships().size(), 2u);
  EXPECT_EQ(master_.ships()[0].lines_size(), 2);
  EXPECT_EQ(master_.ships()[0].agent_id(), "agent-a");
  EXPECT_EQ(master_.ships()[0].session_id(), "s");
  ASSERT_EQ(master_.exits().size(), 1u);
  EXPECT_EQ(master_.exits()[0].session_id(), "s");
  EXPECT_EQ(outbox.lines(), 0);
}

TEST_F(OutboxTest, BatchesStayWithinTheirLineAndByteLimits) {
  OutboxLimits limits;
  limits.max_lines_per_batch = 3;
  limits.max_batch_bytes = 250;
  Outbox outbox("agent-a", master_, clock_, limits);
  for (int i = 0; i < 4; ++i) outbox.Enqueue(Line("1.0", "x"));
  EXPECT_EQ(outbox.SendNext("s").delivered.size(), 3u);
  EXPECT_EQ(outbox.SendNext("s").delivered.size(), 1u);
  for (int i = 0; i < 3; ++i) outbox.Enqueue(Line("1.0", std::string(100, 'y')));
  EXPECT_EQ(outbox.SendNext("s").delivered.size(), 2u);
  EXPECT_EQ(outbox.SendNext("s").delivered.size(), 1u);
}

TEST_F(OutboxTest, AFailedSendIsRetriedAfterABackoffThatDoubles) {
  Outbox outbox("agent-a", master_, clock_);
  outbox.Enqueue(Line("1.0", "a"));
  master_.FailLogs(absl::UnavailableError("master down"));
  EXPECT_EQ(outbox.SendNext("s").result, Result::kRetrying);
  EXPECT_EQ(outbox.next_attempt(), clock_.Now() + absl::Milliseconds(100));
  EXPECT_EQ(outbox.SendNext("s").result, Result::kNotDue);
  clock_.Advance(absl::Milliseconds(100));
  EXPECT_EQ(outbox.SendNext("s").result, Result::kRetrying);
  clock_.Advance(absl::Milliseconds(150));
  EXPECT_EQ(outbox.SendNext("s").result, Result::kNotDue);
  clock_.Advance(absl::Milliseconds(50));
  master_.FailLogs(absl::OkStatus());
  EXPECT_EQ(outbox.SendNext("s").result, Result::kDelivered);
  EXPECT_EQ(master_.refused_reports(), 2);
  // Success resets the backoff.
  outbox.Enqueue(Line("1.0", "b"));
  master_.FailLogs(absl::UnavailableError("master down"));
  EXPECT_EQ(outbox.SendNext("s").result, Result::kRetrying);
  EXPECT_EQ(outbox.next_attempt(), clock_.Now() + absl::Milliseconds(100));
}

TEST_F(OutboxTest, TheBackoffStopsGrowingAtItsMaximum) {
  Outbox outbox("agent-a", master_, clock_);
  outbox.Enqueue(Exit("1.0", 0));
  master_.FailReports(absl::UnavailableError("master down"));
  std::vector<absl::Duration> waits;
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(outbox.SendNext("s").result, Result::kRetrying);
    waits.push_back(outbox.next_attempt() - clock_.Now());
    clock_.Advance(waits.back());
  }
  EXPECT_THAT(waits,
              ElementsAre(absl::Milliseconds(100), absl::Milliseconds(200), absl::Milliseconds(400),
                          absl::Milliseconds(800), absl::Milliseconds(1600),
                          absl::Milliseconds(3200), absl::Seconds(5), absl::Seconds(5)));
}

TEST_F(OutboxTest, AReportQueuedBehindLinesTheMasterCannotTakeGoesFirst) {
  Outbox outbox("agent-a", master_, clock_);
  outbox.Enqueue(Line("1.0", "a"));
  outbox.Enqueue(Line("1.0", "b"));
  outbox.Enqueue(Exit("1.0", 0));
  outbox.Enqueue(Exit("1.0", 1));
  master_.FailLogs(absl::UnavailableError("database full"));
  EXPECT_EQ(outbox.SendNext("s").result, Result::kRetrying);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(outbox.SendNext("s").result, Result::kDelivered);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(outbox.SendNext("s").result, Result::kRetrying);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(outbox.SendNext("s").result, Result::kDelivered);
  ASSERT_EQ(master_.exits().size(), 2u);
  EXPECT_EQ(master_.exits()[0].rank(), 0);
  EXPECT_EQ(master_.exits()[1].rank(), 1);
  EXPECT_TRUE(master_.ships().empty());
  EXPECT_EQ(outbox.lines(), 2);
}

TEST_F(OutboxTest, LinesRefusedForGoodAreCountedAsDroppedAndToldToTheMaster) {
  Outbox outbox("agent-a", master_, clock_);
  outbox.Enqueue(Line("1.0", "a"));
  outbox.Enqueue(Line("1.0", "b"));
  master_.FailLogs(absl::InvalidArgumentError("bad line"));
  Outbox::SendResult refused = outbox.SendNext("s");
  EXPECT_EQ(refused.result, Result::kDelivered);
  EXPECT_EQ(outbox.dropped_lines(), 2);
  master_.FailLogs(absl::OkStatus());
  outbox.Enqueue(Line("1.0", "c"));
  EXPECT_EQ(outbox.SendNext("s").result, Result::kDelivered);
  ASSERT_EQ(master_.ships().size(), 1u);
  EXPECT_EQ(master_.ships()[0].dropped(), 2);
  EXPECT_EQ(outbox.dropped_lines(), 0);
}

TEST_F(OutboxTest, AFullOutboxDropsItsOldestLineButNoReport) {
  OutboxLimits limits;
  limits.max_buffered_lines = 2;
  limits.read_pause_lines = 2;
  Outbox outbox("agent-a", master_, clock_, limits);
  outbox.Enqueue(Exit("1.0", 0));
  outbox.Enqueue(Line("1.0", "a"));
  EXPECT_TRUE(outbox.HasRoom());
  outbox.Enqueue(Line("1.0", "b"));
  EXPECT_FALSE(outbox.HasRoom());
  outbox.Enqueue(Line("1.0", "c"));
  EXPECT_EQ(outbox.lines(), 2);
  EXPECT_EQ(outbox.dropped_lines(), 1);
  EXPECT_TRUE(outbox.SendNext("s").delivered[0].exit);
  Outbox::SendResult lines = outbox.SendNext("s");
  ASSERT_EQ(lines.delivered.size(), 2u);
  EXPECT_EQ(lines.delivered[0].line->message(), "b");
  EXPECT_EQ(master_.ships()[0].dropped(), 1);
  EXPECT_TRUE(outbox.HasRoom());
}

TEST_F(OutboxTest, AnUnknownSessionKeepsTheItems) {
  Outbox outbox("agent-a", master_, clock_);
  outbox.Enqueue(Exit("1.0", 0));
  master_.FailReports(absl::NotFoundError("no such session"));
  Outbox::SendResult lost = outbox.SendNext("old");
  EXPECT_EQ(lost.result, Result::kSessionLost);
  EXPECT_TRUE(lost.delivered.empty());
  master_.FailReports(absl::OkStatus());
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(outbox.SendNext("new").result, Result::kDelivered);
  EXPECT_EQ(master_.exits()[0].session_id(), "new");
}

TEST_F(OutboxTest, KnowsWhichAllocationsHaveLinesQueued) {
  Outbox outbox("agent-a", master_, clock_);
  outbox.Enqueue(Exit("2.0", 0));
  outbox.Enqueue(Line("1.0", "a"));
  EXPECT_TRUE(outbox.HasLinesOf("1.0"));
  EXPECT_FALSE(outbox.HasLinesOf("2.0"));
}

TEST_F(OutboxTest, AgentLinesCarryTheClocksTimeOnTheAgentStream) {
  Outbox outbox("agent-a", master_, clock_);
  v1::LaunchCommand launch;
  launch.set_allocation_id("1.0");
  launch.set_trial_id(7);
  outbox.AgentLine(launch, 2, "hello");
  outbox.SendNext("s");
  ASSERT_EQ(master_.Lines(2, "agent"), std::vector<std::string>{"hello"});
  const v1::LogLine line = master_.ships()[0].lines(0);
  EXPECT_EQ(line.trial_id(), 7);
  EXPECT_EQ(line.time_ms(), clock_.NowMs());
}

}  // namespace
}  // namespace det::agent
