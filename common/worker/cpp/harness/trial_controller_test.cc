// TrialController drives a scripted Trial against a real gRPC fake master on loopback:
// what it reports when, which batches it checkpoints (periods, policy, aggregation
// boundaries), resuming from its own checkpoint, and a stop the master asks for.
#include "common/worker/cpp/harness/trial_controller.h"

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock/clock.h"
#include "common/testing/wait_until.h"
#include "common/worker/cpp/collective/local_collective.h"
#include "common/worker/cpp/collective/testing/process_group.h"
#include "common/worker/cpp/harness/testing/fake_master.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::harness {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// A model whose validation metric follows a script; it records what it was asked.
class ScriptedTrial : public Trial {
 public:
  absl::Status TrainBatch(int64_t batch) override {
    trained.push_back(batch);
    if (on_batch) on_batch(batch);
    ++since_report;
    return absl::OkStatus();
  }
  absl::StatusOr<TrainingMetrics> TakeTrainingMetrics() override {
    TrainingMetrics m;
    m.per_rank["loss"] = 1.0 / static_cast<double>(trained.size());
    m.global["diag/batches"] = static_cast<double>(since_report);
    since_report = 0;
    return m;
  }
  absl::StatusOr<std::map<std::string, double>> Validate(int64_t done) override {
    auto it = validation_loss.find(done);
    return std::map<std::string, double>{{"validation_loss", it == validation_loss.end() ? 1.0 : it->second}};
  }
  absl::StatusOr<std::map<std::string, std::string>> Save(TrainingState& state) override {
    saved_at.push_back(state.total_batches);
    state.extra["model"] = "scripted";
    return std::map<std::string, std::string>{{"model.bin", absl::StrCat("weights@", state.total_batches)}};
  }

  std::vector<int64_t> trained;
  std::vector<int64_t> saved_at;
  std::map<int64_t, double> validation_loss;
  std::function<void(int64_t)> on_batch;
  int64_t since_report = 0;
};

class TrialControllerTest : public ::testing::Test {
 protected:
  // A context for rank 0 of 1 reporting to the fake master, with `change` applied to the spec.
  TrialContext Context(const std::function<void(v1::TrialSpec&)>& change) {
    TrialContext c;
    c.master = master_.address();
    c.allocation_id = "7.1";
    c.allocation_token = "tok";
    c.spec.set_trial_id(7);
    c.spec.set_trial_seed(42);
    c.spec.set_scheduling_unit(10);
    c.spec.set_target_batches(25);
    c.spec.set_checkpoint_dir(dir_);
    c.spec.set_checkpoint_policy("best");
    c.spec.mutable_searcher()->set_metric("validation_loss");
    c.spec.mutable_searcher()->set_smaller_is_better(true);
    c.spec.set_aggregation_frequency(1);
    c.spec.set_average_training_metrics(true);
    change(c.spec);
    return c;
  }

  std::vector<int64_t> Reported(const std::string& group) {
    std::vector<int64_t> out;
    for (const v1::Metrics& m : master_.service().rows(group)) out.push_back(m.total_batches());
    return out;
  }
  std::vector<int64_t> Checkpointed() {
    std::vector<int64_t> out;
    for (const auto& c : master_.service().checkpoints()) out.push_back(c.checkpoint().total_batches());
    return out;
  }

  testing::FakeMaster master_;
  std::string dir_ = det::testing::NewTempDir("controller");
  FakeClock clock_;
  collective::LocalCollective local_;
};

TEST_F(TrialControllerTest, ReportsValidatesAndCheckpointsOnTheSpecsPeriods) {
  TrialContext ctx = Context([](v1::TrialSpec& s) { s.set_validation_period(10); });
  ScriptedTrial trial;
  trial.validation_loss = {{10, 0.5}, {20, 0.7}, {25, 0.4}};  // best, worse, best
  TrialControllerOptions options;
  options.global_batch_size = 64;
  TrialController controller(ctx, clock_, std::move(options));
  trial.on_batch = [&](int64_t) { clock_.Advance(absl::Milliseconds(100)); };
  ASSERT_TRUE(controller.Run(trial, local_).ok());

  EXPECT_EQ(trial.trained.size(), 25u);
  EXPECT_THAT(Reported("training"), ElementsAre(10, 20, 25));
  EXPECT_THAT(Reported("timings"), ElementsAre(10, 20, 25));
  EXPECT_THAT(Reported("validation"), ElementsAre(10, 20, 25));
  // checkpoint_policy best: after the validations that improved (10, 25); 25 is also the end.
  EXPECT_THAT(Checkpointed(), ElementsAre(10, 25));
  const std::vector<v1::Metrics> training = master_.service().rows("training");
  EXPECT_THAT(training[0].values(), ::testing::UnorderedElementsAre(Pair("loss", 0.1), Pair("diag/batches", 10)));
  const std::vector<v1::Metrics> timings = master_.service().rows("timings");
  // 10 batches of 64 samples in 1 s of the fake clock.
  EXPECT_DOUBLE_EQ(timings[0].values().at("batches_per_second"), 10);
  EXPECT_DOUBLE_EQ(timings[0].values().at("samples_per_second"), 640);
  // The checkpoint at the end carries the validation of its batch.
  const auto checkpoints = master_.service().checkpoints();
  EXPECT_DOUBLE_EQ(checkpoints[1].checkpoint().metrics().at("validation_loss"), 0.4);
  EXPECT_EQ(checkpoints[1].auth().token(), "tok");
}

TEST_F(TrialControllerTest, CheckpointsWaitForTheEndOfAnAggregationGroup) {
  TrialContext ctx = Context([](v1::TrialSpec& s) {
    s.set_target_batches(30);
    s.set_checkpoint_period(10);
    s.set_checkpoint_policy("none");
    s.set_aggregation_frequency(4);
  });
  ScriptedTrial trial;
  TrialController controller(ctx, clock_);
  ASSERT_TRUE(controller.Run(trial, local_).ok());
  // Due at 10 and 20: taken at 12 and 20 (multiples of 4), and at the end.
  EXPECT_THAT(Checkpointed(), ElementsAre(12, 20, 30));
  EXPECT_THAT(trial.saved_at, ElementsAre(12, 20, 30));
}

TEST_F(TrialControllerTest, NoCheckpointsWithoutStorage) {
  TrialContext ctx = Context([](v1::TrialSpec& s) { s.set_checkpoint_dir(""); });
  ScriptedTrial trial;
  TrialController controller(ctx, clock_);
  ASSERT_TRUE(controller.Run(trial, local_).ok());
  EXPECT_TRUE(Checkpointed().empty());
  EXPECT_TRUE(trial.saved_at.empty());
  EXPECT_THAT(Reported("validation"), ElementsAre(25));
}

TEST_F(TrialControllerTest, ARunResumesAtItsCheckpointAndKeepsItsBest) {
  ScriptedTrial first;
  first.validation_loss = {{10, 0.3}, {20, 0.5}};
  TrialContext ctx = Context([](v1::TrialSpec& s) {
    s.set_validation_period(10);
    s.set_target_batches(20);
  });
  {
    TrialController controller(ctx, clock_);
    ASSERT_TRUE(controller.Run(first, local_).ok());
  }
  ASSERT_THAT(Checkpointed(), ElementsAre(10, 20));
  const std::string latest = master_.service().checkpoints().back().checkpoint().storage_path();

  TrialContext again = Context([&](v1::TrialSpec& s) {
    s.set_validation_period(10);
    s.set_target_batches(40);
    s.set_latest_checkpoint(latest);
  });
  TrialController controller(again, clock_);
  absl::StatusOr<std::optional<TrialController::Restored>> restored = controller.Restore();
  ASSERT_TRUE(restored.ok()) << restored.status();
  ASSERT_TRUE(restored->has_value());
  EXPECT_EQ((*restored)->files.at("model.bin"), "weights@20");
  EXPECT_EQ((*restored)->state.extra["model"], "scripted");
  EXPECT_EQ(controller.start_batch(), 20);
  ScriptedTrial second;
  second.validation_loss = {{30, 0.4}, {40, 0.2}};  // 0.4 is not better than the best 0.3
  ASSERT_TRUE(controller.Run(second, local_).ok());
  EXPECT_EQ(second.trained.front(), 20);
  EXPECT_EQ(second.trained.size(), 20u);
  EXPECT_THAT(Checkpointed(), ElementsAre(10, 20, 40));
}

TEST_F(TrialControllerTest, AnUnreadableLatestCheckpointIsNamed) {
  TrialContext ctx = Context([&](v1::TrialSpec& s) { s.set_latest_checkpoint(dir_ + "/gone"); });
  TrialController controller(ctx, clock_);
  absl::StatusOr<std::optional<TrialController::Restored>> restored = controller.Restore();
  EXPECT_THAT(std::string(restored.status().message()), HasSubstr(dir_ + "/gone"));
}

TEST_F(TrialControllerTest, TheMastersStopIsCheckpointedAtTheNextCheck) {
  master_.service().SetPreempt(true, "experiment 3 paused");
  TrialContext ctx = Context([](v1::TrialSpec& s) {
    s.set_target_batches(1000000);
    s.set_scheduling_unit(1000000);
    s.set_checkpoint_policy("none");
  });
  ScriptedTrial trial;
  // The chief asks from the first check on; training goes on until the answer is in.
  trial.on_batch = [&](int64_t batch) {
    if (batch == 1) {
      ASSERT_TRUE(det::testing::WaitUntil("the master was asked",
                                          [&] { return !master_.service().preempt_requests().empty(); },
                                          absl::Seconds(30)));
    }
  };
  TrialController controller(ctx, clock_);
  absl::Status st = controller.Run(trial, local_);
  ASSERT_TRUE(absl::IsCancelled(st)) << st;
  const int64_t stopped = static_cast<int64_t>(trial.trained.size());
  EXPECT_EQ(stopped % 10, 0);
  EXPECT_LT(stopped, 1000000);
  EXPECT_EQ(st.message(), absl::StrCat("stopped at batch ", stopped, " on request"));
  EXPECT_THAT(Checkpointed(), ElementsAre(stopped));
  EXPECT_EQ(master_.service().preempt_requests()[0].auth().allocation_id(), "7.1");
}

}  // namespace
}  // namespace det::harness
