// ReadModel on a real EventLoop with Turns: a piece read once is answered on the reader's
// thread while a turn holds the loop, and shows every write acknowledged before the read
// began; missing pieces wait for one coalesced refresh; stable pieces change only when
// invalidated; pieces nobody reads are dropped.
#include "master/loop/read_model.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/clock/clock.h"
#include "common/event_loop/event_loop.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "master/loop/turns.h"
#include "proto/api.pb.h"

namespace det::master {
namespace {

constexpr absl::Duration kWait = absl::Seconds(20);

class ReadModelTest : public ::testing::Test {
 protected:
  ReadModelTest() : loop_(clock_), turns_(loop_), reads_(loop_, clock_, Options()) {
    turns_.SetPublish([this] { reads_.Publish(); });
    loop_.Start();
  }
  ~ReadModelTest() override {
    for (auto& gate : gates_) {
      if (!gate->HasBeenNotified()) gate->Notify();
    }
    loop_.Stop();
  }
  static ReadModel::Options Options() {
    ReadModel::Options o;
    o.ttl = absl::Seconds(10);
    o.max_pieces = 3;
    return o;
  }

  // A write of `value` (one turn), returned once acknowledged.
  void Write(int64_t value) {
    absl::Notification acked;
    turns_.OnLoop([&](absl::Status) { acked.Notify(); },
                  [this, value] {
                    state_ = value;
                    return absl::OkStatus();
                  });
    ASSERT_TRUE(acked.WaitForNotificationWithTimeout(kWait));
  }
  // Holds the loop in a turn until the fixture ends or Release().
  void Gate() {
    gates_.push_back(std::make_unique<absl::Notification>());
    absl::Notification held;
    turns_.Post([&held, gate = gates_.back().get()] {
      held.Notify();
      gate->WaitForNotification();
    });
    ASSERT_TRUE(held.WaitForNotificationWithTimeout(kWait));
  }
  void Release() { gates_.back()->Notify(); }

  // Reads piece `key` (the state, in a GetMasterStatsResponse's agents field); returns
  // what it holds and whether the answer came on this thread, before Read returned.
  struct Seen {
    int64_t value = -1;
    bool at_once = false;
  };
  Seen Read(const std::string& key, bool stable = false) {
    auto seen = std::make_shared<Seen>();
    auto answered = std::make_shared<absl::Notification>();
    bool returned = false;
    std::thread::id me = std::this_thread::get_id();
    reads_.Read(
        key, v1::GetMasterStatsResponse(),
        [this](ReadModel::Message* out) {
          ++builds_;
          static_cast<v1::GetMasterStatsResponse*>(out)->set_agents(state_);
          return absl::OkStatus();
        },
        [seen, answered, me, &returned](const ReadModel::Piece& p) {
          seen->value = static_cast<const v1::GetMasterStatsResponse&>(*p.value).agents();
          seen->at_once = std::this_thread::get_id() == me && !returned;
          answered->Notify();
        },
        stable);
    returned = true;
    EXPECT_TRUE(answered->WaitForNotificationWithTimeout(kWait)) << key;
    return *seen;
  }

  FakeClock clock_;
  EventLoop loop_;
  Turns turns_;
  ReadModel reads_;
  int64_t state_ = 0;            // loop only
  std::atomic<int> builds_{0};
  std::vector<std::unique_ptr<absl::Notification>> gates_;
};

TEST_F(ReadModelTest, APieceReadOnceShowsEveryAcknowledgedWriteWhileATurnHoldsTheLoop) {
  Write(1);
  Seen first = Read("state");
  EXPECT_EQ(first.value, 1);
  for (int64_t v : {2, 3, 4}) {
    Write(v);
    Gate();
    Seen seen = Read("state");
    EXPECT_EQ(seen.value, v);
    EXPECT_TRUE(seen.at_once) << "answered without the loop";
    Release();
  }
}

TEST_F(ReadModelTest, MissingPiecesWaitForOneRefreshThatServesEveryWaitingReader) {
  Gate();
  const int64_t before = reads_.refreshes();
  std::vector<std::thread> readers;
  std::vector<Seen> seen(8);
  for (int i = 0; i < 8; ++i) {
    readers.emplace_back([&, i] {
      seen[i] = Read(i % 2 == 0 ? "a" : "b");
    });
  }
  // Every reader waits (the loop is held) before it is let go.
  ASSERT_TRUE(testing::WaitUntil("8 readers waiting", [&] { return reads_.waiting_readers() == 8; },
                                 kWait));
  Release();
  for (auto& t : readers) t.join();
  for (const Seen& s : seen) {
    EXPECT_EQ(s.value, 0);
    EXPECT_FALSE(s.at_once);
  }
  EXPECT_EQ(reads_.refreshes() - before, 1) << "one refresh for readers waiting together";
}

TEST_F(ReadModelTest, StablePiecesAreRebuiltOnlyWhenInvalidated) {
  EXPECT_EQ(Read("template/x", /*stable=*/true).value, 0);
  Write(5);
  EXPECT_EQ(Read("template/x", true).value, 0) << "a stable piece keeps its value";
  absl::Notification acked;
  turns_.OnLoop([&](absl::Status) { acked.Notify(); },
                [this] {
                  state_ = 6;
                  reads_.Invalidate("template");
                  return absl::OkStatus();
                });
  ASSERT_TRUE(acked.WaitForNotificationWithTimeout(kWait));
  EXPECT_EQ(Read("template/x", true).value, 6) << "rebuilt at the end of the turn that invalidated it";
  Write(7);
  EXPECT_EQ(Read("template/x", true).value, 6);
}

TEST_F(ReadModelTest, PiecesNobodyReadsAreDroppedAndBuiltAgainOnDemand) {
  Read("a");
  Write(1);
  const int built = builds_;
  Write(2);
  EXPECT_EQ(builds_, built + 1) << "rebuilt at the turn's end while read";
  clock_.Advance(absl::Seconds(11));
  Write(3);  // drops it (not read for the ttl)
  const int dropped = builds_;
  Write(4);
  EXPECT_EQ(builds_, dropped) << "no longer rebuilt";
  Seen again = Read("a");
  EXPECT_EQ(again.value, 4);
  EXPECT_FALSE(again.at_once);
}

TEST_F(ReadModelTest, AtMostMaxPiecesAreKept) {
  for (const char* key : {"a", "b", "c", "d"}) {
    Read(key);
    clock_.Advance(absl::Milliseconds(1));
  }
  Write(1);
  const int before = builds_;
  Write(2);
  EXPECT_EQ(builds_, before + 3);
}

// A reader that comes while a turn's end builds its pieces (here one whose build is held)
// is answered at once from the previous turn's, not sent to wait for the loop; once the
// turn's write is acknowledged, readers see it.
TEST_F(ReadModelTest, AReadDuringAPublicationIsAnsweredAtOnceFromThePreviousOne) {
  EXPECT_EQ(Read("state").value, 0);
  std::atomic<bool> hold{false};
  absl::Notification building, let_go;
  auto slow_answered = std::make_shared<absl::Notification>();
  reads_.Read(
      "slow", v1::GetMasterStatsResponse(),
      [&](ReadModel::Message*) {
        if (hold) {
          building.Notify();
          let_go.WaitForNotification();
        }
        return absl::OkStatus();
      },
      [slow_answered](const ReadModel::Piece&) { slow_answered->Notify(); });
  ASSERT_TRUE(slow_answered->WaitForNotificationWithTimeout(kWait));
  hold = true;
  absl::Notification acked;
  turns_.OnLoop([&](absl::Status) { acked.Notify(); },
                [this] {
                  state_ = 1;
                  return absl::OkStatus();
                });
  ASSERT_TRUE(building.WaitForNotificationWithTimeout(kWait));  // The turn's end is publishing.
  Seen during = Read("state");
  EXPECT_TRUE(during.at_once) << "answered on the reader's thread, not by the loop";
  EXPECT_EQ(during.value, 0) << "the write is not acknowledged yet";
  EXPECT_EQ(reads_.waiting_readers(), 0u);
  EXPECT_FALSE(acked.HasBeenNotified());
  hold = false;
  let_go.Notify();
  ASSERT_TRUE(acked.WaitForNotificationWithTimeout(kWait));
  Seen after = Read("state");
  EXPECT_TRUE(after.at_once);
  EXPECT_EQ(after.value, 1);
}

TEST_F(ReadModelTest, AnAcknowledgementInsideATurnWaitsForItsPublication) {
  Read("state");
  absl::Notification acked;
  Seen at_ack;
  turns_.Post([&] {
    state_ = 9;
    turns_.AckAfterTurn([&](absl::Status) {
      // Still on the loop, after the turn's end: a reader sees the write.
      at_ack.value = -2;
      acked.Notify();
    })(absl::OkStatus());
    EXPECT_FALSE(acked.HasBeenNotified()) << "deferred to the turn's end";
  });
  ASSERT_TRUE(acked.WaitForNotificationWithTimeout(kWait));
  Gate();
  Seen seen = Read("state");
  EXPECT_EQ(seen.value, 9);
  EXPECT_TRUE(seen.at_once);
}

}  // namespace
}  // namespace det::master
