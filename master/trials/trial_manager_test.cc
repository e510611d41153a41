// TrialManager over an InMemoryStore (behind a FaultInjectingStore) and a FakeClock: a
// trial's life through its transitions as stored, moves the table refuses (memory and the
// store unchanged), a refused write, the user's kill, recovery's requeue, waiting reasons,
// progress (metric summaries) and the latest checkpoint stored first, refused reports
// counted in one warning per kind, an ended trial's revival (det experiment continue).
#include "master/trials/trial_manager.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock/clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/fault_injecting_store.h"
#include "master/store/in_memory_store.h"

namespace det::master {
namespace {

using ::det::testing::StatusIs;
using ::testing::Eq;

class TrialManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    v1::Experiment e;
    e.set_name("e");
    e.set_state(v1::STATE_ACTIVE);
    std::vector<v1::Trial> trials(1);
    trials[0].set_state(v1::STATE_QUEUED);
    ASSERT_TRUE(memory_.InsertExperiment(e, "", &trials).ok());
    id_ = trials[0].id();
    t_ = &manager_.Add(trials[0]);
  }

  // The trial as stored.
  v1::Trial Stored() {
    auto snap = memory_.Load();
    EXPECT_TRUE(snap.ok()) << snap.status();
    for (const auto& t : snap->trials) {
      if (t.id() == id_) return t;
    }
    ADD_FAILURE() << "trial " << id_ << " not stored";
    return {};
  }
  v1::Allocation Run(const std::string& id) {
    v1::Allocation a;
    a.set_id(id);
    a.set_trial_id(id_);
    a.set_state(v1::STATE_STARTING);
    return a;
  }
  RunOutcome Outcome(v1::State state, bool restart) {
    RunOutcome o;
    o.trial_state = state;
    o.restart_counted = restart;
    return o;
  }

  FakeClock clock_;
  InMemoryStore memory_;
  FaultInjectingStore store_{memory_};
  ExperimentRegistry registry_;
  TrialManager manager_{clock_, store_, registry_};
  int64_t id_ = 0;
  TrialState* t_ = nullptr;
};

TEST_F(TrialManagerTest, ATrialsLifeThroughItsTransitionsIsStoredAtEachStep) {
  EXPECT_EQ(&registry_.trials.at(id_), t_);
  EXPECT_TRUE(manager_.SetWaitingReason(id_, "waiting for slots"));
  EXPECT_FALSE(manager_.SetWaitingReason(id_, "waiting for slots"));
  EXPECT_EQ(t_->waiting_reason(), "waiting for slots");
  EXPECT_EQ(registry_.TrialView(*t_).pending_reason(), "waiting for slots");

  ASSERT_TRUE(manager_.MarkStarting(*t_, Run(absl::StrCat(id_, ".0"))).ok());
  EXPECT_EQ(t_->trial.state(), v1::STATE_STARTING);
  EXPECT_EQ(t_->trial.allocation().id(), absl::StrCat(id_, ".0"));
  EXPECT_EQ(t_->trial.start_time_ms(), clock_.NowMs());
  EXPECT_EQ(t_->waiting_reason(), "");
  EXPECT_EQ(Stored().state(), v1::STATE_STARTING);

  ASSERT_TRUE(manager_.MarkRunning(*t_).ok());
  EXPECT_EQ(t_->trial.state(), v1::STATE_RUNNING);
  EXPECT_EQ(t_->trial.allocation().state(), v1::STATE_RUNNING);
  EXPECT_EQ(Stored().state(), v1::STATE_RUNNING);

  // The run fails and is restarted: counted, the run number moves on, the run is kept.
  t_->trial.mutable_search()->set_invalid_hp(true);
  ASSERT_TRUE(manager_.EndRun(*t_, Outcome(v1::STATE_QUEUED, /*restart=*/true)).ok());
  EXPECT_EQ(t_->trial.state(), v1::STATE_QUEUED);
  EXPECT_EQ(t_->trial.restarts(), 1);
  EXPECT_EQ(t_->trial.run_id(), 1);
  EXPECT_FALSE(t_->trial.search().invalid_hp());
  EXPECT_TRUE(t_->trial.allocation().id().empty());
  EXPECT_EQ(t_->last_allocation.id(), absl::StrCat(id_, ".0"));
  EXPECT_EQ(registry_.TrialView(*t_).allocation().id(), absl::StrCat(id_, ".0"));
  EXPECT_EQ(Stored().restarts(), 1);
  EXPECT_EQ(Stored().state(), v1::STATE_QUEUED);

  ASSERT_TRUE(manager_.Pause(*t_).ok());
  EXPECT_EQ(Stored().state(), v1::STATE_PAUSED);
  ASSERT_TRUE(manager_.Requeue(*t_).ok());
  EXPECT_EQ(Stored().state(), v1::STATE_QUEUED);

  // The second run is paused, then the third completes.
  const int64_t first_start = t_->trial.start_time_ms();
  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(manager_.MarkStarting(*t_, Run(absl::StrCat(id_, ".1"))).ok());
  EXPECT_EQ(t_->trial.start_time_ms(), first_start);  // The trial's, not the run's.
  ASSERT_TRUE(manager_.EndRun(*t_, Outcome(v1::STATE_PAUSED, /*restart=*/false)).ok());
  EXPECT_EQ(t_->trial.state(), v1::STATE_PAUSED);
  EXPECT_EQ(t_->trial.restarts(), 1);
  EXPECT_EQ(t_->trial.run_id(), 2);
  ASSERT_TRUE(manager_.Requeue(*t_).ok());
  ASSERT_TRUE(manager_.MarkStarting(*t_, Run(absl::StrCat(id_, ".2"))).ok());
  ASSERT_TRUE(manager_.MarkRunning(*t_).ok());
  ASSERT_TRUE(manager_.EndRun(*t_, Outcome(v1::STATE_COMPLETED, false)).ok());
  EXPECT_EQ(t_->trial.state(), v1::STATE_RUNNING);  // The end is Finish's.
  EXPECT_EQ(t_->trial.run_id(), 2);
  EXPECT_TRUE(t_->trial.allocation().id().empty());
  EXPECT_EQ(t_->last_allocation.id(), absl::StrCat(id_, ".2"));
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(manager_.Finish(*t_, v1::STATE_COMPLETED, "").ok());
  EXPECT_EQ(t_->trial.state(), v1::STATE_COMPLETED);
  EXPECT_EQ(t_->trial.end_time_ms(), clock_.NowMs());
  EXPECT_EQ(Stored().state(), v1::STATE_COMPLETED);
  EXPECT_EQ(Stored().end_time_ms(), clock_.NowMs());
}

TEST_F(TrialManagerTest, MovesTheTableRefusesChangeNothingAndSayWhy) {
  const v1::Trial before = t_->trial;
  EXPECT_THAT(manager_.MarkRunning(*t_),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       Eq(absl::StrCat("trial ", id_, " cannot go from QUEUED to RUNNING: only "
                                       "a STARTING trial's run comes to run"))));
  EXPECT_THAT(manager_.Requeue(*t_),
              StatusIs(absl::StatusCode::kFailedPrecondition, "QUEUED to QUEUED"));
  EXPECT_THAT(manager_.EndRun(*t_, Outcome(v1::STATE_QUEUED, true)),
              StatusIs(absl::StatusCode::kFailedPrecondition, "it is already there"));
  EXPECT_THAT(manager_.Finish(*t_, v1::STATE_RUNNING, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       Eq(absl::StrCat("trial ", id_, ": STATE_RUNNING is not an end "
                                       "(COMPLETED, CANCELED or ERROR)"))));
  EXPECT_EQ(t_->trial.SerializeAsString(), before.SerializeAsString());
  EXPECT_EQ(Stored().state(), v1::STATE_QUEUED);

  ASSERT_TRUE(manager_.Pause(*t_).ok());
  EXPECT_THAT(manager_.MarkStarting(*t_, Run("x")),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "from PAUSED to STARTING: only a QUEUED trial starts a run"));
  EXPECT_TRUE(t_->trial.allocation().id().empty());

  ASSERT_TRUE(manager_.Finish(*t_, v1::STATE_ERROR, "rank 0 exited with code 1").ok());
  EXPECT_EQ(Stored().error(), "rank 0 exited with code 1");
  for (v1::State to : {v1::STATE_COMPLETED, v1::STATE_CANCELED, v1::STATE_ERROR}) {
    EXPECT_THAT(manager_.Finish(*t_, to, ""),
                StatusIs(absl::StatusCode::kFailedPrecondition, "an ended trial does not change"));
  }
  EXPECT_THAT(manager_.Requeue(*t_),
              StatusIs(absl::StatusCode::kFailedPrecondition, "from ERROR to QUEUED"));
  EXPECT_EQ(t_->trial.state(), v1::STATE_ERROR);
  EXPECT_EQ(t_->trial.error(), "rank 0 exited with code 1");
}

TEST_F(TrialManagerTest, AWriteTheStoreRefusesLeavesMemoryAsItWas) {
  ASSERT_TRUE(manager_.SetWaitingReason(id_, "waiting for slots"));
  store_.FailWrites(true);
  EXPECT_THAT(manager_.MarkStarting(*t_, Run("1.0")), StatusIs(absl::StatusCode::kUnavailable, ""));
  EXPECT_EQ(t_->trial.state(), v1::STATE_QUEUED);
  EXPECT_TRUE(t_->trial.allocation().id().empty());
  EXPECT_EQ(t_->waiting_reason(), "waiting for slots");
  EXPECT_THAT(manager_.Pause(*t_), StatusIs(absl::StatusCode::kUnavailable, ""));
  EXPECT_EQ(t_->trial.state(), v1::STATE_QUEUED);
  store_.FailWrites(false);
  EXPECT_EQ(Stored().state(), v1::STATE_QUEUED);
}

TEST_F(TrialManagerTest, ATrialItsUserKilledEndsCanceledWhateverItsExitSaid) {
  t_->trial.mutable_search()->set_stopped_early(true);
  t_->trial.mutable_search()->set_stop_reason(kKilledByUser);
  ASSERT_TRUE(manager_.Finish(*t_, v1::STATE_COMPLETED, "").ok());
  EXPECT_EQ(t_->trial.state(), v1::STATE_CANCELED);
  EXPECT_EQ(Stored().state(), v1::STATE_CANCELED);
}

TEST_F(TrialManagerTest, RecoveryQueuesLiveTrialsWithoutARunInMemoryOnly) {
  ASSERT_TRUE(manager_.Pause(*t_).ok());
  manager_.RequeueUnplaced(*t_);
  EXPECT_EQ(t_->trial.state(), v1::STATE_QUEUED);
  EXPECT_EQ(Stored().state(), v1::STATE_PAUSED);  // As before: not written.
  manager_.RequeueUnplaced(*t_);
  EXPECT_EQ(t_->trial.state(), v1::STATE_QUEUED);
  ASSERT_TRUE(manager_.MarkStarting(*t_, Run("1.0")).ok());
  manager_.RequeueUnplaced(*t_);
  EXPECT_EQ(t_->trial.state(), v1::STATE_STARTING);  // Its run is open.
}

TEST_F(TrialManagerTest, WaitingReasonsOfUnknownTrialsAreIgnoredAndForgottenTrialsLeave) {
  EXPECT_FALSE(manager_.SetWaitingReason(id_ + 100, "waiting"));
  EXPECT_EQ(registry_.trials.count(id_ + 100), 0u);
  ASSERT_TRUE(manager_.SetWaitingReason(id_, "waiting"));
  ASSERT_TRUE(manager_.Pause(*t_).ok());
  EXPECT_EQ(t_->waiting_reason(), "");
  manager_.Forget(id_);
  EXPECT_EQ(registry_.trials.count(id_), 0u);
}

// A trial's progress: the rows and its summaries in one transaction, then in memory; only
// the summaries and total_batches are taken from what the caller passes.
TEST_F(TrialManagerTest, ProgressIsStoredWithItsRowsThenKept) {
  v1::Trial progress = t_->trial;
  progress.set_total_batches(20);
  v1::MetricSummary& loss = (*progress.mutable_training_summary())["loss"];
  loss.set_count(2);
  loss.set_last(0.5);
  loss.set_min(0.5);
  loss.set_max(1.0);
  (*progress.mutable_validation_summary())["validation_loss"].set_last(0.7);
  (*progress.mutable_timings_summary())["train_batch_ms"].set_last(3.0);
  progress.set_error("not the trial manager's to take from here");
  std::vector<v1::Metrics> rows(2);
  for (int i = 0; i < 2; ++i) {
    rows[i].set_trial_id(id_);
    rows[i].set_group("training");
    rows[i].set_total_batches(10 * (i + 1));
    (*rows[i].mutable_values())["loss"] = i == 0 ? 1.0 : 0.5;
  }

  store_.FailWrites(true, "AddMetrics");
  EXPECT_THAT(manager_.AddProgress({progress}, rows),
              StatusIs(absl::StatusCode::kUnavailable, "injected fault: AddMetrics"));
  EXPECT_EQ(t_->trial.total_batches(), 0);
  EXPECT_TRUE(t_->trial.training_summary().empty());
  EXPECT_EQ(Stored().total_batches(), 0);
  auto stored_rows = memory_.GetMetrics(id_, "");
  ASSERT_TRUE(stored_rows.ok()) << stored_rows.status();
  EXPECT_TRUE(stored_rows->empty());

  store_.FailWrites(false);
  ASSERT_TRUE(manager_.AddProgress({progress}, rows).ok());
  EXPECT_EQ(t_->trial.total_batches(), 20);
  EXPECT_EQ(t_->trial.training_summary().at("loss").SerializeAsString(), loss.SerializeAsString());
  EXPECT_EQ(t_->trial.validation_summary().at("validation_loss").last(), 0.7);
  EXPECT_EQ(t_->trial.timings_summary().at("train_batch_ms").last(), 3.0);
  EXPECT_EQ(t_->trial.error(), "");
  EXPECT_EQ(Stored().total_batches(), 20);
  EXPECT_EQ(Stored().training_summary().at("loss").count(), 2);
  stored_rows = memory_.GetMetrics(id_, "training");
  ASSERT_TRUE(stored_rows.ok()) << stored_rows.status();
  EXPECT_EQ(stored_rows->size(), 2u);
}

// The latest checkpoint: stored with the checkpoint's row (both or neither), then kept.
TEST_F(TrialManagerTest, TheLatestCheckpointIsStoredWithItsRowThenKept) {
  v1::Checkpoint c;
  c.set_uuid("c1");
  c.set_trial_id(id_);
  c.set_experiment_id(t_->trial.experiment_id());
  c.set_storage_path("/ckpt/c1");
  c.set_total_batches(10);
  store_.FailWrites(true, "AddCheckpoint");
  EXPECT_THAT(manager_.AddCheckpoint(*t_, c),
              StatusIs(absl::StatusCode::kUnavailable, "injected fault: AddCheckpoint"));
  EXPECT_EQ(t_->trial.latest_checkpoint(), "");
  EXPECT_EQ(Stored().latest_checkpoint(), "");
  auto stored = memory_.GetCheckpoints(id_);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_TRUE(stored->empty());

  store_.FailWrites(false);
  ASSERT_TRUE(manager_.AddCheckpoint(*t_, c).ok());
  EXPECT_EQ(t_->trial.latest_checkpoint(), "/ckpt/c1");
  EXPECT_EQ(Stored().latest_checkpoint(), "/ckpt/c1");
  stored = memory_.GetCheckpoints(id_);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].uuid(), "c1");

  // A uuid registered before is the store's refusal; the latest stays the first's.
  v1::Checkpoint again = c;
  again.set_storage_path("/ckpt/c1-again");
  EXPECT_FALSE(manager_.AddCheckpoint(*t_, again).ok());
  EXPECT_EQ(t_->trial.latest_checkpoint(), "/ckpt/c1");
  EXPECT_EQ(Stored().latest_checkpoint(), "/ckpt/c1");
}

// Reports the store refused are counted in one warning per kind, in memory at once and
// stored with the trial's next write that succeeds.
TEST_F(TrialManagerTest, RefusedReportsAreCountedInOneWarningPerKind) {
  const absl::Status full = absl::ResourceExhaustedError("disk full");
  store_.FailWrites(true);
  EXPECT_EQ(manager_.NoteRefusedReports(*t_, "metric rows", 3, full),
            "metric rows refused: 3 (the master could not store them: disk full)");
  EXPECT_EQ(manager_.NoteRefusedReports(*t_, "metric rows", 2, full),
            "metric rows refused: 5 (the master could not store them: disk full)");
  EXPECT_EQ(manager_.NoteRefusedReports(*t_, "checkpoint reports", 1, full),
            "checkpoint reports refused: 1 (the master could not store them: disk full)");
  ASSERT_EQ(t_->trial.warnings_size(), 2);
  EXPECT_EQ(t_->trial.warnings(0),
            "metric rows refused: 5 (the master could not store them: disk full)");
  EXPECT_EQ(Stored().warnings_size(), 0);
  store_.FailWrites(false);
  EXPECT_EQ(manager_.NoteRefusedReports(*t_, "checkpoint reports", 1, full),
            "checkpoint reports refused: 2 (the master could not store them: disk full)");
  ASSERT_EQ(Stored().warnings_size(), 2);
  EXPECT_EQ(Stored().warnings(1),
            "checkpoint reports refused: 2 (the master could not store them: disk full)");
}

// det experiment continue: an ended trial goes back to the queue as stored, its progress
// (batches, latest checkpoint) kept for its next run to resume from, its restarts, end and
// error cleared; a live trial is refused, and a refused write leaves memory as it was.
TEST_F(TrialManagerTest, AnEndedTrialIsRevivedAsStoredKeepingItsProgress) {
  const v1::Trial queued = t_->trial;
  EXPECT_THAT(manager_.Revive(*t_, 200, "{}"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       Eq(absl::StrCat("trial ", id_, " cannot be revived from QUEUED: only an "
                                       "ended trial (COMPLETED, CANCELED or ERROR) is revived"))));
  EXPECT_EQ(t_->trial.SerializeAsString(), queued.SerializeAsString());

  // A run that failed once (restarted), a second that checkpointed at 100 and failed.
  ASSERT_TRUE(manager_.MarkStarting(*t_, Run(absl::StrCat(id_, ".0"))).ok());
  ASSERT_TRUE(manager_.EndRun(*t_, Outcome(v1::STATE_QUEUED, true)).ok());
  ASSERT_TRUE(manager_.MarkStarting(*t_, Run(absl::StrCat(id_, ".1"))).ok());
  ASSERT_TRUE(manager_.MarkRunning(*t_).ok());
  v1::Checkpoint c;
  c.set_uuid("c100");
  c.set_trial_id(id_);
  c.set_experiment_id(t_->trial.experiment_id());
  c.set_storage_path("/ckpt/c100");
  c.set_total_batches(100);
  ASSERT_TRUE(manager_.AddCheckpoint(*t_, c).ok());
  v1::Trial progress = t_->trial;
  progress.set_total_batches(100);
  ASSERT_TRUE(manager_.AddProgress({progress}, {}).ok());
  ASSERT_TRUE(manager_.EndRun(*t_, Outcome(v1::STATE_ERROR, false)).ok());
  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(manager_.Finish(*t_, v1::STATE_ERROR, "rank 0 exited with code 1").ok());
  ASSERT_EQ(t_->trial.restarts(), 1);
  ASSERT_NE(t_->trial.end_time_ms(), 0);
  const int32_t run_id = t_->trial.run_id();

  // A refused write: memory and the store keep the ended trial.
  store_.FailWrites(true);
  EXPECT_THAT(manager_.Revive(*t_, 200, R"({"lr":0.1})"),
              StatusIs(absl::StatusCode::kUnavailable, ""));
  EXPECT_EQ(t_->trial.state(), v1::STATE_ERROR);
  EXPECT_EQ(t_->trial.target_batches(), queued.target_batches());
  store_.FailWrites(false);
  EXPECT_EQ(Stored().state(), v1::STATE_ERROR);

  ASSERT_TRUE(manager_.Revive(*t_, 200, R"({"lr":0.1})").ok());
  for (const v1::Trial& t : {t_->trial, Stored()}) {
    EXPECT_EQ(t.state(), v1::STATE_QUEUED);
    EXPECT_EQ(t.target_batches(), 200);
    EXPECT_EQ(t.hparams_json(), R"({"lr":0.1})");
    EXPECT_EQ(t.restarts(), 0);
    EXPECT_EQ(t.end_time_ms(), 0);
    EXPECT_EQ(t.error(), "");
    EXPECT_EQ(t.run_id(), run_id + 1);
    EXPECT_EQ(t.latest_checkpoint(), "/ckpt/c100");
    EXPECT_EQ(t.total_batches(), 100);
    EXPECT_TRUE(t.allocation().id().empty());
  }
  // It lives again: it starts a run, and may end again.
  ASSERT_TRUE(manager_.MarkStarting(*t_, Run(absl::StrCat(id_, ".2"))).ok());
  ASSERT_TRUE(manager_.EndRun(*t_, Outcome(v1::STATE_COMPLETED, false)).ok());
  ASSERT_TRUE(manager_.Finish(*t_, v1::STATE_COMPLETED, "").ok());

  // A trial its user killed (CANCELED) is revived without the kill: it runs, and ends
  // COMPLETED.
  v1::Trial killed = t_->trial;
  killed.set_state(v1::STATE_CANCELED);
  killed.mutable_search()->set_stopped_early(true);
  killed.mutable_search()->set_stop_reason(kKilledByUser);
  ASSERT_TRUE(PersistTrial(store_, *t_, killed).ok());
  ASSERT_TRUE(manager_.Revive(*t_, 200, "{}").ok());
  EXPECT_FALSE(Stored().search().stopped_early());
  EXPECT_EQ(Stored().search().stop_reason(), "");
  ASSERT_TRUE(manager_.Finish(*t_, v1::STATE_COMPLETED, "").ok());
  EXPECT_EQ(t_->trial.state(), v1::STATE_COMPLETED);
}

}  // namespace
}  // namespace det::master
