// Allocation, AllocationTable and RestoreAllocations with fake workers: kills, what the
// master accepted, records, and re-adoption by a new agent process.
#include "agent/allocations/allocation.h"

#include <signal.h>
#include <sys/stat.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "agent/allocations/allocation_table.h"
#include "agent/allocations/restore.h"
#include "agent/supervisor/allocation_record.h"
#include "agent/testing/fake_process_launcher.h"
#include "agent/testing/test_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class AllocationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    work_dir_ = FreshTestDir();
    mkdir((work_dir_ + "/run").c_str(), 0755);
  }

  // Allocation `id` with `ranks` ranks, each started through launcher_.
  std::shared_ptr<Allocation> Make(const std::string& id, int ranks) {
    v1::LaunchCommand launch;
    launch.set_allocation_id(id);
    std::vector<Allocation::Worker> workers;
    for (int r = 0; r < ranks; ++r) {
      launch.add_ranks()->set_rank(r);
      Allocation::Worker& w = workers.emplace_back();
      w.rank = launch.ranks(r);
      w.process = *launcher_.Start(WorkerSpec{});
    }
    std::string run_dir = absl::StrCat(work_dir_, "/run/", id);
    mkdir(run_dir.c_str(), 0700);
    return std::make_shared<Allocation>(launch, work_dir_ + "/" + id, run_dir, std::move(workers),
                                        Allocation::Stopping{}, false);
  }

  static Outgoing Exit(const std::string& id, int rank) {
    Outgoing o;
    o.exit.emplace();
    o.exit->set_allocation_id(id);
    o.exit->set_rank(rank);
    return o;
  }

  std::string work_dir_;
  FakeProcessLauncher launcher_;
};

TEST_F(AllocationTest, KillSignalsTheRunningWorkersOnceAndKeepsTheDeadline) {
  std::shared_ptr<Allocation> a = Make("1.0", 2);
  a->MarkExited(1);
  absl::Time deadline = absl::FromUnixSeconds(1700000030);
  EXPECT_TRUE(a->Kill("test", deadline, /*agent_stopping=*/false));
  EXPECT_FALSE(a->Kill("again", deadline + absl::Hours(1), /*agent_stopping=*/true));
  EXPECT_THAT(launcher_.workers()[0]->signals(), ElementsAre(SIGTERM));
  EXPECT_THAT(launcher_.workers()[1]->signals(), IsEmpty());
  Allocation::Stopping s = a->stopping();
  EXPECT_TRUE(s.killing);
  EXPECT_EQ(s.kill_deadline, deadline);
  EXPECT_TRUE(s.agent_stopping);

  absl::StatusOr<AllocationRecord> rec = ReadAllocationRecord(a->run_dir());
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_TRUE(rec->killing);
  EXPECT_EQ(rec->kill_deadline_ms, absl::ToUnixMillis(deadline));
  EXPECT_TRUE(rec->agent_stopping);
  ASSERT_EQ(rec->workers.size(), 2u);
  EXPECT_EQ(rec->workers[0].pid, launcher_.workers()[0]->pid());
}

TEST_F(AllocationTest, AnAllocationIsFinishedOnceEveryExitIsReportedAndItsLinesShipped) {
  AllocationTable table;
  table.Add(Make("1.0", 2));
  bool lines_queued = true;
  auto queued = [&](const std::string&) { return lines_queued; };
  std::shared_ptr<Allocation> a = table.Find("1.0");
  a->MarkExited(0);
  a->MarkExited(1);
  EXPECT_TRUE(table.AllExited());
  EXPECT_THAT(table.TakeFinished(false, queued), IsEmpty());
  table.Delivered({Exit("1.0", 0), Exit("1.0", 1)});
  EXPECT_TRUE(a->Finished(false));
  EXPECT_THAT(table.TakeFinished(false, queued), IsEmpty());
  lines_queued = false;
  EXPECT_EQ(table.TakeFinished(false, queued).size(), 1u);
  EXPECT_TRUE(table.empty());
}

TEST_F(AllocationTest, GivingUpForgetsExitedWorkersWhoseExitsWereNotReported) {
  AllocationTable table;
  table.Add(Make("1.0", 1));
  table.Add(Make("2.0", 1));
  table.Find("1.0")->MarkExited(0);
  auto queued = [](const std::string&) { return true; };
  std::vector<std::shared_ptr<Allocation>> done = table.TakeFinished(true, queued);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]->id(), "1.0");
  EXPECT_THAT(table.ids(), ElementsAre("2.0"));
}

TEST_F(AllocationTest, DeliveredLinesMoveTheShippedOffsetsForward) {
  AllocationTable table;
  table.Add(Make("1.0", 1));
  Outgoing line;
  line.line.emplace();
  line.line->set_allocation_id("1.0");
  line.line->set_rank(0);
  line.stream = 1;
  line.end_offset = 42;
  Outgoing older = line;
  older.end_offset = 10;
  table.Delivered({line, older});
  EXPECT_EQ(table.Find("1.0")->shipped(0)[1], 42);
  EXPECT_EQ(table.Find("1.0")->shipped(0)[0], 0);
  absl::StatusOr<AllocationRecord> rec = ReadAllocationRecord(table.Find("1.0")->run_dir());
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(rec->workers[0].shipped[1], 42);
}

TEST_F(AllocationTest, ANewAgentProcessFindsTheRecordedWorkers) {
  std::shared_ptr<Allocation> a = Make("1.0", 3);
  Outgoing launched;
  launched.launched.emplace();
  launched.launched->set_allocation_id("1.0");
  a->Delivered(launched);
  a->Delivered(Exit("1.0", 2));
  a->Kill("test", absl::FromUnixSeconds(1700000030), false);  // persists
  launcher_.workers()[1]->Exit(ExitStatus{3, 0});
  // Rank 2 exited and was reported; rank 0 runs; rank 1 exited unreported.
  std::string bad = work_dir_ + "/run/junk";
  mkdir(bad.c_str(), 0700);

  std::vector<RestoredAllocation> restored = RestoreAllocations(work_dir_, launcher_);
  ASSERT_EQ(restored.size(), 1u);
  const RestoredAllocation& r = restored[0];
  EXPECT_THAT(r.running, ElementsAre(0, 1));
  EXPECT_TRUE(r.launched_reported);
  ASSERT_EQ(r.adopted.size(), 2u);
  EXPECT_EQ(r.adopted[0],
            absl::StrCat("rank 0 (pid ", launcher_.workers()[0]->pid(), ", running)"));
  EXPECT_EQ(r.adopted[1], absl::StrCat("rank 1 (pid ", launcher_.workers()[1]->pid(), ", exited)"));
  Allocation& b = *r.allocation;
  EXPECT_EQ(b.work_dir(), work_dir_ + "/1.0");
  EXPECT_FALSE(b.exited(0));
  EXPECT_TRUE(b.exited(2));
  EXPECT_TRUE(b.stopping().killing);
  EXPECT_EQ(b.stopping().kill_deadline, absl::FromUnixSeconds(1700000030));
  EXPECT_EQ(b.process(0)->pid(), launcher_.workers()[0]->pid());
  // The unreadable run dir is gone.
  struct stat st;
  EXPECT_NE(stat(bad.c_str(), &st), 0);
}

}  // namespace
}  // namespace det::agent
