// StoreReads over a real SQLite file (WAL, read-only connections) and the in-memory store:
// reads run beside each other and beside writes; a read begun after a write was
// acknowledged sees it; a store that cannot open readers answers every read with why.
#include "master/reads/store_reads.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "master/store/in_memory_store.h"
#include "master/store/sqlite_store.h"

namespace det::master {
namespace {

using det::testing::WaitUntil;

constexpr absl::Duration kTimeout = absl::Seconds(15);

// One read's answer, set from the pool's thread.
struct Answer {
  absl::Notification done;
  absl::Status status;
  std::vector<v1::Metrics> rows;
};

// Held closed, every read that passes it waits there (holding its connection).
class Gate {
 public:
  void Open() {
    absl::MutexLock l(&mu_);
    open_ = true;
  }
  void Pass() {
    absl::MutexLock l(&mu_);
    ++waiting_;
    mu_.Await(absl::Condition(&open_));
    --waiting_;
  }
  int waiting() {
    absl::MutexLock l(&mu_);
    return waiting_;
  }

 private:
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

class StoreReadsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sqlite") {
      const char* dir = std::getenv("TEST_TMPDIR");
      static int n = 0;
      const std::string path =
          absl::StrCat(dir ? dir : "/tmp", "/store_reads_", getpid(), "_", ++n, ".db");
      std::remove(path.c_str());
      auto opened = SqliteStore::Open(path);
      ASSERT_TRUE(opened.ok()) << opened.status();
      store_ = *std::move(opened);
    } else {
      store_ = std::make_unique<InMemoryStore>();
    }
    v1::Experiment e;
    e.set_name("reads");
    std::vector<v1::Trial> trials(2);
    ASSERT_TRUE(store_->InsertExperiment(e, "", &trials).ok());
    a_ = trials[0];
    b_ = trials[1];
  }

  // Stores `n` training rows of `trial` (acknowledged once this returns OK).
  absl::Status Write(const v1::Trial& trial, int n) {
    std::vector<v1::Metrics> rows;
    for (int i = 0; i < n; ++i) {
      v1::Metrics& m = rows.emplace_back();
      m.set_trial_id(trial.id());
      m.set_group("training");
      m.set_total_batches(++batches_);
      (*m.mutable_values())["loss"] = 1.0 / batches_;
    }
    return store_->AddMetrics({trial}, rows);
  }

  // Submits a read of `trial`'s rows that first passes `gate` (if any) with its connection
  // taken and a first query made.
  std::shared_ptr<Answer> Start(StoreReads& reads, int64_t trial, Gate* gate = nullptr) {
    auto answer = std::make_shared<Answer>();
    reads.Run([answer](absl::Status st) {
                answer->status = st;
                answer->done.Notify();
              },
              [answer, trial, gate](MetricsReader& r) -> absl::Status {
                if (gate != nullptr) {
                  absl::Status first = r.GetTrialMetrics(trial, "", 0).status();
                  if (!first.ok()) return first;
                  gate->Pass();
                }
                absl::StatusOr<std::vector<v1::Metrics>> rows = r.GetTrialMetrics(trial, "", 0);
                if (!rows.ok()) return rows.status();
                answer->rows = *std::move(rows);
                return absl::OkStatus();
              });
    return answer;
  }

  std::unique_ptr<Store> store_;
  v1::Trial a_, b_;
  int64_t batches_ = 0;
};

TEST_P(StoreReadsTest, AHeldReadHoldsUpNoOtherReadNorWrite) {
  ASSERT_TRUE(Write(a_, 3).ok());
  StoreReads reads(*store_, 4);
  EXPECT_EQ(reads.size(), 4);
  Gate gate;
  std::shared_ptr<Answer> held = Start(reads, a_.id(), &gate);
  ASSERT_TRUE(WaitUntil("the first read at the gate", [&] { return gate.waiting() == 1; },
                        kTimeout));

  // Reads of the same trial and of another complete while it is held.
  std::shared_ptr<Answer> same = Start(reads, a_.id());
  std::shared_ptr<Answer> other = Start(reads, b_.id());
  ASSERT_TRUE(same->done.WaitForNotificationWithTimeout(kTimeout));
  ASSERT_TRUE(other->done.WaitForNotificationWithTimeout(kTimeout));
  EXPECT_TRUE(same->status.ok()) << same->status;
  EXPECT_EQ(same->rows.size(), 3u);
  EXPECT_TRUE(other->status.ok()) << other->status;
  EXPECT_EQ(other->rows.size(), 0u);

  // Writes are acknowledged while it is held, and a read begun after the acknowledgement
  // sees every acknowledged row.
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(Write(a_, 2).ok());
    ASSERT_TRUE(Write(b_, 1).ok());
    std::shared_ptr<Answer> after = Start(reads, a_.id());
    std::shared_ptr<Answer> after_b = Start(reads, b_.id());
    ASSERT_TRUE(after->done.WaitForNotificationWithTimeout(kTimeout));
    ASSERT_TRUE(after_b->done.WaitForNotificationWithTimeout(kTimeout));
    EXPECT_EQ(after->rows.size(), 3u + 2u * (i + 1));
    EXPECT_EQ(after_b->rows.size(), 1u * (i + 1));
  }
  EXPECT_FALSE(held->done.HasBeenNotified());

  gate.Open();
  ASSERT_TRUE(held->done.WaitForNotificationWithTimeout(kTimeout));
  EXPECT_TRUE(held->status.ok()) << held->status;
  EXPECT_EQ(held->rows.size(), 13u);  // its second query began after every write
}

// The pool's size bounds the reads in progress: with both connections held a third read
// waits for one of them, and runs as soon as one is free.
TEST_P(StoreReadsTest, ReadsBeyondThePoolWaitForAFreeConnection) {
  ASSERT_TRUE(Write(a_, 1).ok());
  StoreReads reads(*store_, 2);
  Gate gate;
  std::shared_ptr<Answer> first = Start(reads, a_.id(), &gate);
  std::shared_ptr<Answer> second = Start(reads, b_.id(), &gate);
  ASSERT_TRUE(WaitUntil("two reads at the gate", [&] { return gate.waiting() == 2; }, kTimeout));
  std::shared_ptr<Answer> third = Start(reads, a_.id());
  EXPECT_FALSE(third->done.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  gate.Open();
  for (const auto& answer : {first, second, third}) {
    ASSERT_TRUE(answer->done.WaitForNotificationWithTimeout(kTimeout));
    EXPECT_TRUE(answer->status.ok()) << answer->status;
  }
}

TEST_P(StoreReadsTest, AnUnknownTrialIsNotFoundAndStopAnswersLaterReads) {
  StoreReads reads(*store_, 1);
  std::shared_ptr<Answer> unknown = Start(reads, b_.id() + 100);
  ASSERT_TRUE(unknown->done.WaitForNotificationWithTimeout(kTimeout));
  EXPECT_EQ(unknown->status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown->status.message(), absl::StrCat("trial ", b_.id() + 100, " not found"));
  reads.Stop();
  std::shared_ptr<Answer> late = Start(reads, a_.id());
  ASSERT_TRUE(late->done.HasBeenNotified());  // answered on the caller's thread
  EXPECT_EQ(late->status.code(), absl::StatusCode::kUnavailable);
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreReadsTest, ::testing::Values("sqlite", "memory"));

// A private SQLite database has no second connection: every read says so.
TEST(StoreReadsOpenTest, AStoreWithoutReadersAnswersEveryReadWithWhy) {
  auto store = SqliteStore::Open(":memory:");
  ASSERT_TRUE(store.ok()) << store.status();
  StoreReads reads(**store, 4);
  absl::Notification done;
  absl::Status status;
  reads.Run(
      [&](absl::Status st) {
        status = st;
        done.Notify();
      },
      [](MetricsReader&) { return absl::OkStatus(); });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kTimeout));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("no reader can open it"), std::string::npos) << status;
}

}  // namespace
}  // namespace det::master
