// CheckpointManager with the managers it works with (master/testing:manager_harness), on
// a FakeClock loop over an InMemoryStore: no sockets, no sleeps. A second harness on the
// same store is a restarted master.
#include "master/checkpoints/checkpoint_manager.h"
#include "master/checkpoints/checkpoint_reads.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/fault_injecting_store.h"
#include "master/store/in_memory_store.h"
#include "master/testing/manager_harness.h"
#include "master/testing/master_testing.h"

namespace det::master {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ManagerHarness;

class CheckpointManagerTest : public ::testing::Test {
 protected:
  void SetUp() override { StartMaster(); }

  void StartMaster() {
    h_ = std::make_unique<ManagerHarness>(testing::LoopbackMasterConfig("/unused"), faulty_, clock_);
    ASSERT_TRUE(h_->Start().ok());
  }
  void RestartMaster() {
    h_.reset();
    StartMaster();
  }

  // Trial `trial_` of experiment "gc" on agent a1 reports checkpoints at batches 10, 20,
  // 30 and ends; returns the GC task's launch (the latest checkpoint is kept).
  v1::LaunchCommand TrialWithThreeCheckpointsEnds(const std::string& session,
                                                 const std::string& owner = "") {
    if (owner.empty()) {
      trial_ = h_->CreateExperiment("gc");
    } else {
      v1::CreateExperimentRequest req;
      req.set_config_yaml(testing::ExperimentYaml("gc"));
      v1::CreateExperimentResponse resp;
      absl::Status st;
      h_->Turn([&] {
        st = h_->experiments.Create(owner, req, &resp);
        if (st.ok()) trial_ = h_->registry.experiments.at(resp.experiment().id()).trial_ids.at(0);
      });
      EXPECT_TRUE(st.ok()) << st;
    }
    v1::LaunchCommand launch = h_->NextLaunch("a1", session);
    for (int b : {10, 20, 30}) {
      EXPECT_TRUE(h_->ReportCheckpoint(launch, absl::StrCat("c-", b), b).ok());
    }
    EXPECT_TRUE(h_->GcTasks().empty());  // Nothing to collect while the trial runs.
    EXPECT_TRUE(h_->ReportExit("a1", session, launch.allocation_id(), 0).ok());
    return h_->NextLaunch("a1", session);
  }
  // A read connection of the store, as the master's read pool has (master/reads).
  MetricsReader& Reader() {
    if (reader_ == nullptr) reader_ = *store_.OpenReader();
    return *reader_;
  }
  std::map<std::string, v1::State> CheckpointStates() {
    std::map<std::string, v1::State> out;
    auto stored = store_.GetCheckpoints(trial_);
    EXPECT_TRUE(stored.ok()) << stored.status();
    if (stored.ok()) {
      for (const auto& c : *stored) out[c.uuid()] = c.state();
    }
    return out;
  }
  // A line the GC task `allocation` printed (the agent says it is `says_trial`'s): it is
  // routed to the trial that started the task.
  void RouteGcLine(const std::string& allocation, const std::string& stream,
                   const std::string& message, int64_t says_trial = 0) {
    h_->Turn([&] {
      v1::LogLine line;
      line.set_trial_id(says_trial);
      line.set_allocation_id(allocation);
      line.set_stream(stream);
      line.set_message(message);
      EXPECT_TRUE(h_->checkpoints.RouteLogLine(&line));
      EXPECT_EQ(line.trial_id(), trial_);
    });
  }
  // The one GC task, which must be queued as attempt `allocation`, saying why it waits.
  void ExpectRequeuedAs(const std::string& allocation) {
    std::vector<v1::Task> tasks = h_->GcTasks();
    ASSERT_EQ(tasks.size(), 1u);
    EXPECT_EQ(tasks[0].allocation_id(), allocation);
    EXPECT_EQ(tasks[0].state(), v1::STATE_QUEUED);
    EXPECT_EQ(tasks[0].agents_size(), 0);
    EXPECT_THAT(tasks[0].pending_reason(), HasSubstr("no agents in resource pool 'default'"));
  }

  FakeClock clock_;
  InMemoryStore store_;
  // What the harness writes through (every write passes unless a test injects a fault).
  FaultInjectingStore faulty_{store_};
  std::unique_ptr<MetricsReader> reader_;
  std::unique_ptr<ManagerHarness> h_;
  int64_t trial_ = 0;
};

// An agent that goes silent while its GC task runs, or does not come back after a master
// restart, loses the task: it is requeued (attempt + 1) as a trial would be, says why it
// waits, and runs again once an agent is there. (Moved from http_server_test, where it
// ran on real time and failed about 1 run in 6.)
TEST_F(CheckpointManagerTest, ACheckpointGcWhoseAgentIsLostIsRequeued) {
  std::string session = h_->Register("a1", 1);
  v1::LaunchCommand gc = TrialWithThreeCheckpointsEnds(session);
  ASSERT_EQ(gc.allocation_id(), "gc-1.0");

  // No heartbeats: silent after agent_timeout, lost after agent_reconnect_wait.
  const config::MasterConfig config = h_->config;  // A copy: RestartMaster replaces h_.
  h_->Advance(config.agent_timeout + absl::Seconds(1));
  EXPECT_EQ(h_->GcTasks().at(0).state(), v1::STATE_RUNNING);
  EXPECT_THAT(h_->Logs(trial_), HasSubstr("agent a1 stopped answering during checkpoint garbage "
                                          "collection gc-1.0"));
  h_->Advance(config.agent_reconnect_wait);
  ExpectRequeuedAs("gc-1.1");
  EXPECT_THAT(h_->Logs(trial_), HasSubstr("checkpoint garbage collection gc-1.0 lost: agent a1 did "
                                          "not return within 1m (agent_reconnect_wait); requeued"));
  session = h_->Register("a1", 1);
  EXPECT_EQ(h_->NextLaunch("a1", session).allocation_id(), "gc-1.1");

  // The master restarts while it runs and the agent does not come back in time.
  RestartMaster();
  EXPECT_EQ(h_->GcTasks().at(0).state(), v1::STATE_RUNNING);
  h_->Advance(config.agent_reconnect_wait + absl::Seconds(1));
  ExpectRequeuedAs("gc-1.2");
  EXPECT_THAT(h_->Logs(trial_),
              HasSubstr("gc-1.1 lost: agent a1 did not return after the master restarted"));
  session = h_->Register("a1", 1);
  EXPECT_EQ(h_->NextLaunch("a1", session).allocation_id(), "gc-1.2");
  ASSERT_TRUE(h_->ReportExit("a1", session, "gc-1.2", 0).ok());
  EXPECT_EQ(h_->GcTasks().at(0).state(), v1::STATE_COMPLETED);
  std::map<std::string, v1::State> states = CheckpointStates();
  EXPECT_EQ(states["c-10"], v1::STATE_DELETED);
  EXPECT_EQ(states["c-20"], v1::STATE_DELETED);
  EXPECT_EQ(states["c-30"], v1::STATE_COMPLETED);
}

TEST_F(CheckpointManagerTest, AnAgentBackInTimeKeepsItsGcTaskAndAnExitEndsIt) {
  std::string session = h_->Register("a1", 1);
  v1::LaunchCommand gc = TrialWithThreeCheckpointsEnds(session);
  ASSERT_EQ(gc.allocation_id(), "gc-1.0");
  h_->Advance(h_->config.agent_timeout + absl::Seconds(1));
  v1::RegisterResponse resp;
  session = h_->Register("a1", 1, {"gc-1.0"}, &resp);
  EXPECT_EQ(resp.kill_allocations_size(), 0);
  h_->Advance(h_->config.agent_reconnect_wait + absl::Seconds(1));
  EXPECT_EQ(h_->GcTasks().at(0).allocation_id(), "gc-1.0");
  EXPECT_EQ(h_->GcTasks().at(0).state(), v1::STATE_RUNNING);
  EXPECT_THAT(h_->Logs(trial_), HasSubstr("agent a1 reattached checkpoint garbage collection gc-1.0"));
  session = h_->Register("a1", 1, {"gc-1.0"});  // Silent again meanwhile (no heartbeats).

  // Its stderr names what failed; a failing exit records it as the task's error.
  RouteGcLine("gc-1.0", "stderr", "checkpoint c-20: cannot delete '/ckpt/c-20': Permission denied");
  ASSERT_TRUE(h_->ReportExit("a1", session, "gc-1.0", 1).ok());
  v1::Task task = h_->GcTasks().at(0);
  EXPECT_EQ(task.state(), v1::STATE_ERROR);
  EXPECT_EQ(task.error(),
            "exit code 1: checkpoint c-20: cannot delete '/ckpt/c-20': Permission denied");
  EXPECT_EQ(CheckpointStates()["c-10"], v1::STATE_COMPLETED);  // Not known to be gone.
  RestartMaster();  // Still listed, with its error.
  EXPECT_EQ(h_->GcTasks().at(0).state(), v1::STATE_ERROR);
  EXPECT_THAT(h_->GcTasks().at(0).error(), HasSubstr("c-20"));
}

// The checkpoint files belong to the OS user linked to the experiment's owner (their
// trials ran as it), so their GC task runs as that user too.
TEST_F(CheckpointManagerTest, AGcTaskRunsAsTheOwnersLinkedAgentUser) {
  UserRow bob;
  bob.username = "bob";
  bob.agent_user_group.set_agent_user("nobody");
  bob.agent_user_group.set_agent_uid(65534);
  bob.agent_user_group.set_agent_group("nogroup");
  bob.agent_user_group.set_agent_gid(65534);
  ASSERT_TRUE(store_.InsertUser(bob).ok());
  std::string session = h_->Register("a1", 1);
  v1::LaunchCommand gc = TrialWithThreeCheckpointsEnds(session, "bob");
  ASSERT_TRUE(gc.has_checkpoint_gc());
  EXPECT_EQ(gc.task_user().agent_user(), "nobody");
  EXPECT_EQ(gc.task_user().agent_uid(), 65534);
  EXPECT_EQ(gc.task_user().agent_gid(), 65534);
}

TEST_F(CheckpointManagerTest, AGcTaskOfAnUnlinkedOwnerRunsAsTheAgentsDefault) {
  UserRow carol;
  carol.username = "carol";
  ASSERT_TRUE(store_.InsertUser(carol).ok());
  std::string session = h_->Register("a1", 1);
  v1::LaunchCommand gc = TrialWithThreeCheckpointsEnds(session, "carol");
  ASSERT_TRUE(gc.has_checkpoint_gc());
  EXPECT_FALSE(gc.has_task_user());
}

// A GC task is a zero-slot launch on an agent (no argv, the checkpoints to delete with
// their paths), listed among the tasks while it holds no slot; requeued when its agent
// restarts without it, reattached when the agent comes back with it after a master
// restart; an exit of a lost attempt is ignored, and once the current attempt exits 0 its
// checkpoints are DELETED and its output is the trial's. (Moved from http_server_test's
// CheckpointGcIsAZeroSlotTaskOnAnAgent, which ran on real time.)
TEST_F(CheckpointManagerTest, AGcTaskIsAZeroSlotLaunchRequeuedOrReattachedUntilItExits) {
  std::string session = h_->Register("a1", 1);
  v1::LaunchCommand gc = TrialWithThreeCheckpointsEnds(session);
  EXPECT_EQ(gc.allocation_id(), "gc-1.0");
  EXPECT_EQ(gc.trial_id(), trial_);
  ASSERT_TRUE(gc.has_checkpoint_gc());
  ASSERT_EQ(gc.checkpoint_gc().checkpoints_size(), 2);
  EXPECT_EQ(gc.checkpoint_gc().checkpoints(0).uuid(), "c-10");
  EXPECT_EQ(gc.checkpoint_gc().checkpoints(0).storage_path(), "/ckpt/c-10");
  EXPECT_EQ(gc.checkpoint_gc().checkpoints(1).uuid(), "c-20");
  // No allowed roots configured: the experiment's own directory bounds what it deletes.
  EXPECT_EQ(gc.checkpoint_gc().storage_root(), "/ckpt");
  ASSERT_EQ(gc.ranks_size(), 1);
  EXPECT_EQ(gc.ranks(0).agent_id(), "a1");
  EXPECT_TRUE(gc.ranks(0).slot_ids().empty());
  EXPECT_TRUE(gc.argv().empty());

  std::vector<v1::Task> tasks = h_->GcTasks();
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].allocation_id(), "gc-1.0");
  EXPECT_EQ(tasks[0].state(), v1::STATE_RUNNING);
  EXPECT_EQ(tasks[0].slots(), 0);
  EXPECT_THAT(tasks[0].agents(), ElementsAre("a1"));
  EXPECT_THAT(tasks[0].checkpoint_uuids(), ElementsAre("c-10", "c-20"));
  EXPECT_EQ(tasks[0].resource_pool(), "default");
  // It holds no slot: the agent's slot is free for the next trial.
  h_->Turn([&] {
    const v1::Agent* a1 = h_->agents.Find("a1");
    ASSERT_NE(a1, nullptr);
    ASSERT_EQ(a1->slots_size(), 1);
    EXPECT_EQ(a1->slots(0).allocation_id(), "");
  });

  // The agent comes back without it (restarted with a fresh work_dir, so after a
  // silence): requeued, run again.
  h_->Advance(h_->config.agent_timeout + absl::Seconds(1));
  session = h_->Register("a1", 1);
  EXPECT_EQ(h_->NextLaunch("a1", session).allocation_id(), "gc-1.1");
  EXPECT_THAT(h_->Logs(trial_), HasSubstr("checkpoint garbage collection gc-1.0 lost: agent a1 "
                                          "restarted without it; requeued"));

  // The master restarts while it runs; the agent registers again with it: reattached.
  RestartMaster();
  session = h_->Register("a1", 1, {"gc-1.1"});
  tasks = h_->GcTasks();
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].allocation_id(), "gc-1.1");
  EXPECT_EQ(tasks[0].state(), v1::STATE_RUNNING);
  EXPECT_EQ(CheckpointStates()["c-10"], v1::STATE_COMPLETED);

  ASSERT_TRUE(h_->ReportExit("a1", session, "gc-1.0", 0).ok());  // The lost attempt: ignored.
  EXPECT_EQ(h_->GcTasks().at(0).state(), v1::STATE_RUNNING);
  RouteGcLine("gc-1.1", "stdout", "deleted checkpoint c-10 (/ckpt/c-10)", /*says_trial=*/99);
  ASSERT_TRUE(h_->ReportExit("a1", session, "gc-1.1", 0).ok());
  tasks = h_->GcTasks();
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].state(), v1::STATE_COMPLETED);
  EXPECT_GT(tasks[0].end_time_ms(), 0);
  std::map<std::string, v1::State> states = CheckpointStates();
  EXPECT_EQ(states["c-10"], v1::STATE_DELETED);
  EXPECT_EQ(states["c-20"], v1::STATE_DELETED);
  EXPECT_EQ(states["c-30"], v1::STATE_COMPLETED);
  const std::string logs = h_->Logs(trial_);
  EXPECT_THAT(logs, HasSubstr("checkpoint c-10 (batch 10) deleted by garbage collection"));
  EXPECT_THAT(logs, HasSubstr("checkpoint c-20 (batch 20) deleted by garbage collection"));
  EXPECT_THAT(logs, HasSubstr("checkpoint garbage collection gc-1.1 completed on a1"));
  for (const auto& c : h_->Commands("a1", session)) {
    EXPECT_FALSE(c.has_launch()) << "nothing else to run: " << c.DebugString();
  }
}

// A worker cannot register a checkpoint path outside its experiment's storage (garbage
// collection would delete it later). (Moved from http_server_test's Checkpoints.)
// A GC task deletes beneath the allowed root its experiment's storage lies under; an
// experiment whose storage lies under none (created before the admin set
// checkpoint_storage_allowed_roots) gets no deletion at all: the task fails saying why.
TEST_F(CheckpointManagerTest, AGcTaskDeletesOnlyBeneathAnAllowedRoot) {
  std::string session = h_->Register("a1", 1);
  h_->Turn([&] { h_->checkpoints.SetStorageRoots({"/srv/other", "/ckpt"}); });
  v1::LaunchCommand gc = TrialWithThreeCheckpointsEnds(session);
  ASSERT_TRUE(gc.has_checkpoint_gc());
  EXPECT_EQ(gc.checkpoint_gc().storage_root(), "/ckpt");
  ASSERT_TRUE(h_->ReportExit("a1", session, gc.allocation_id(), 0).ok());

  trial_ = h_->CreateExperiment("gc-2");
  h_->Turn([&] { h_->checkpoints.SetStorageRoots({"/srv/allowed"}); });
  v1::LaunchCommand launch = h_->NextLaunch("a1", session);
  EXPECT_TRUE(h_->ReportCheckpoint(launch, "c-40", 40).ok());
  EXPECT_TRUE(h_->ReportCheckpoint(launch, "c-50", 50).ok());
  ASSERT_TRUE(h_->ReportExit("a1", session, launch.allocation_id(), 0).ok());
  std::vector<v1::Task> tasks = h_->GcTasks();
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_EQ(tasks[1].state(), v1::STATE_ERROR);
  EXPECT_THAT(tasks[1].error(),
              HasSubstr("refusing to delete: checkpoint_storage.host_path: '/ckpt' is not under "
                        "a checkpoint storage root this cluster allows (/srv/allowed"));
  EXPECT_EQ(CheckpointStates()["c-40"], v1::STATE_COMPLETED);
}

TEST_F(CheckpointManagerTest, ACheckpointOutsideTheExperimentsStorageIsRefused) {
  std::string session = h_->Register("a1", 1);
  trial_ = h_->CreateExperiment("ckpt");
  v1::LaunchCommand launch = h_->NextLaunch("a1", session);
  ASSERT_TRUE(h_->ReportCheckpoint(launch, "c-1", 40).ok());
  v1::ReportCheckpointRequest req;
  req.mutable_auth()->set_allocation_id(launch.allocation_id());
  req.mutable_auth()->set_token(launch.env().at("DET_ALLOCATION_TOKEN"));
  req.mutable_checkpoint()->set_uuid("c-2");
  req.mutable_checkpoint()->set_total_batches(50);
  for (const std::string path : {"/etc/c-2", "/ckpt/../etc/c-2", "/ckpt"}) {
    req.mutable_checkpoint()->set_storage_path(path);
    absl::Status st;
    h_->Turn([&] { st = h_->checkpoints.ReportCheckpoint(req); });
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_THAT(st.message(), HasSubstr("checkpoint.storage_path")) << path;
  }
  std::map<std::string, v1::State> states = CheckpointStates();
  EXPECT_EQ(states.size(), 1u);
  EXPECT_EQ(states["c-1"], v1::STATE_COMPLETED);
}

// det checkpoint describe: one checkpoint by UUID, whichever experiment has it.
TEST_F(CheckpointManagerTest, ACheckpointIsFoundByItsUuid) {
  std::string session = h_->Register("a1", 1);
  TrialWithThreeCheckpointsEnds(session);
  v1::GetCheckpointRequest req;
  req.set_uuid("c-20");
  v1::GetCheckpointResponse resp;
  absl::Status st;
  st = GetCheckpoint(Reader(), req, &resp);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(resp.checkpoint().uuid(), "c-20");
  EXPECT_EQ(resp.checkpoint().trial_id(), trial_);
  EXPECT_EQ(resp.checkpoint().total_batches(), 20);
  EXPECT_EQ(resp.checkpoint().experiment_id(), h_->Trial(trial_).experiment_id());
  req.set_uuid("c-nope");
  st = GetCheckpoint(Reader(), req, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(st.message(), "checkpoint c-nope not found");
}

// A Core API checkpoint carries no metrics: it gets the validation the trial reported at its
// batch, whether the validation came before or after it, so that `det e lc --best` and the
// GC policy's ranking find it. A later run's validation at the same batch wins.
TEST_F(CheckpointManagerTest, ACheckpointWithoutMetricsCarriesTheValidationAtItsBatch) {
  std::string session = h_->Register("a1", 1);
  trial_ = h_->CreateExperiment("lc");
  v1::LaunchCommand launch = h_->NextLaunch("a1", session);
  auto validation = [&](int64_t batches, double loss) {
    v1::Metrics m;
    m.set_group("validation");
    m.set_total_batches(batches);
    (*m.mutable_values())["validation_loss"] = loss;
    return m;
  };
  ASSERT_TRUE(h_->ReportMetrics(launch, {validation(10, 0.9)}).ok());
  ASSERT_TRUE(h_->ReportCheckpoint(launch, "c-10", 10).ok());  // after its validation
  ASSERT_TRUE(h_->ReportCheckpoint(launch, "c-20", 20).ok());  // before its validation
  ASSERT_TRUE(h_->ReportMetrics(launch, {validation(20, 0.4)}).ok());
  ASSERT_TRUE(h_->ReportCheckpoint(launch, "c-25", 25).ok());  // no validation there

  v1::ListCheckpointsRequest req;
  req.set_experiment_id(h_->Trial(trial_).experiment_id());
  v1::ListCheckpointsResponse resp;
  absl::Status st;
  st = ListCheckpoints(Reader(), req, &resp);
  ASSERT_TRUE(st.ok()) << st;
  std::map<std::string, std::map<std::string, double>> metrics;
  for (const auto& c : resp.checkpoints()) {
    metrics[c.uuid()] = {c.metrics().begin(), c.metrics().end()};
  }
  EXPECT_EQ(metrics["c-10"], (std::map<std::string, double>{{"validation_loss", 0.9}}));
  EXPECT_EQ(metrics["c-20"], (std::map<std::string, double>{{"validation_loss", 0.4}}));
  EXPECT_TRUE(metrics["c-25"].empty());

  v1::GetCheckpointRequest get;
  get.set_uuid("c-20");
  v1::GetCheckpointResponse got;
  st = GetCheckpoint(Reader(), get, &got);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(got.checkpoint().metrics().at("validation_loss"), 0.4);
}

// Issue 25: a uuid reported twice (by another trial) answered INTERNAL with SQLite's text.
TEST_F(CheckpointManagerTest, AUuidUsedTwiceIsRefusedPlainly) {
  std::string session = h_->Register("a1", 2);
  h_->CreateExperiment("dup-a");
  v1::LaunchCommand first = h_->NextLaunch("a1", session);
  h_->CreateExperiment("dup-b");
  v1::LaunchCommand second = h_->NextLaunch("a1", session);
  ASSERT_TRUE(h_->ReportCheckpoint(first, "c-1", 10).ok());
  ASSERT_TRUE(h_->ReportCheckpoint(first, "c-1", 10).ok());  // a retry: the same report
  absl::Status st = h_->ReportCheckpoint(second, "c-1", 10);
  EXPECT_EQ(st.code(), absl::StatusCode::kAlreadyExists) << st;
  EXPECT_EQ(st.message(), "checkpoint.uuid: 'c-1' is already registered; each checkpoint needs "
                          "a uuid of its own");
}

TEST(AttachValidationMetricsTest, LaterRowsWinAndReportedMetricsStay) {
  std::vector<v1::Metrics> rows(3);
  rows[0].set_total_batches(5);
  (*rows[0].mutable_values())["acc"] = 0.1;
  rows[1].set_total_batches(5);
  (*rows[1].mutable_values())["acc"] = 0.2;  // a rerun of batch 5
  rows[2].set_total_batches(7);
  (*rows[2].mutable_values())["acc"] = 0.3;
  std::vector<v1::Checkpoint> cs(3);
  cs[0].set_total_batches(5);
  cs[1].set_total_batches(7);
  (*cs[1].mutable_metrics())["acc"] = 0.9;  // reported with the checkpoint: kept
  cs[2].set_total_batches(6);
  AttachValidationMetrics(rows, &cs);
  EXPECT_EQ(cs[0].metrics().at("acc"), 0.2);
  EXPECT_EQ(cs[1].metrics().at("acc"), 0.9);
  EXPECT_TRUE(cs[2].metrics().empty());
}

// det e set gc-policy: a policy keeping fewer checkpoints collects those of ended trials
// it no longer keeps; the new policy is in the stored config.
TEST_F(CheckpointManagerTest, ANewGcPolicyCollectsWhatItNoLongerKeeps) {
  std::string session = h_->Register("a1", 1);
  v1::LaunchCommand gc = TrialWithThreeCheckpointsEnds(session);
  ASSERT_TRUE(h_->ReportExit("a1", session, gc.allocation_id(), 0).ok());
  ASSERT_EQ(CheckpointStates()["c-30"], v1::STATE_COMPLETED);
  const int64_t experiment = h_->Trial(trial_).experiment_id();

  v1::PatchExperimentRequest req;
  req.set_id(experiment);
  req.set_save_trial_best(-1);
  v1::PatchExperimentResponse resp;
  absl::Status st;
  h_->Turn([&] { st = h_->experiments.Patch(req, &resp); });
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "save_trial_best: expected an integer >= 0, got -1");

  req.set_save_trial_best(0);
  req.set_save_trial_latest(0);
  h_->Turn([&] { st = h_->experiments.Patch(req, &resp); });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_THAT(resp.experiment().config_yaml(), HasSubstr("save_trial_latest: 0"));
  v1::LaunchCommand again = h_->NextLaunch("a1", session);
  EXPECT_EQ(again.allocation_id(), "gc-2.0");
  ASSERT_TRUE(h_->ReportExit("a1", session, again.allocation_id(), 0).ok());
  EXPECT_EQ(CheckpointStates()["c-30"], v1::STATE_DELETED);
}

// det checkpoint delete: ended trials' checkpoints only, through a GC task; nothing is
// queued when one UUID is refused; the callback's refusal (ownership) stands.
TEST_F(CheckpointManagerTest, DeletedCheckpointsGoThroughAGcTask) {
  std::string session = h_->Register("a1", 1);
  v1::LaunchCommand gc = TrialWithThreeCheckpointsEnds(session);
  ASSERT_TRUE(h_->ReportExit("a1", session, gc.allocation_id(), 0).ok());
  auto allow = [](const v1::Experiment&) { return absl::OkStatus(); };
  v1::DeleteCheckpointsRequest req;
  v1::DeleteCheckpointsResponse resp;
  absl::Status st;
  auto del = [&](auto allowed) {
    resp.Clear();
    h_->Turn([&] { st = h_->checkpoints.DeleteCheckpoints(req, &resp, allowed); });
  };
  req.add_uuids("c-30");
  req.add_uuids("c-nope");
  del(allow);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(st.message(), "checkpoint c-nope not found");
  req.clear_uuids();
  req.add_uuids("c-30");
  del([](const v1::Experiment&) { return absl::PermissionDeniedError("not yours"); });
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  req.add_uuids("c-10");  // Deleted already: skipped.
  del(allow);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_THAT(resp.queued(), ElementsAre("c-30"));
  v1::LaunchCommand again = h_->NextLaunch("a1", session);
  ASSERT_TRUE(h_->ReportExit("a1", session, again.allocation_id(), 0).ok());
  EXPECT_EQ(CheckpointStates()["c-30"], v1::STATE_DELETED);

  // A running trial's checkpoints are refused, naming its state.
  const int64_t running = h_->CreateExperiment("running");
  v1::LaunchCommand launch = h_->NextLaunch("a1", session);
  ASSERT_TRUE(h_->ReportCheckpoint(launch, "r-1", 5).ok());
  req.clear_uuids();
  req.add_uuids("r-1");
  del(allow);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr(absl::StrCat("checkpoint r-1 belongs to trial ", running)));
}

absl::Status DeleteExperiment(ManagerHarness& h, int64_t id, v1::DeleteExperimentResponse* resp) {
  v1::DeleteExperimentRequest req;
  req.set_id(id);
  absl::Status st;
  h.Turn([&] { st = h.experiments.Delete(req, resp); });
  return st;
}

// det experiment delete: a deletion task on an agent removes the files of the checkpoints
// left, then the experiment's rows go in one transaction; until then it is all there.
TEST_F(CheckpointManagerTest, DeletingAnExperimentDeletesItsFilesThenItsRows) {
  std::string session = h_->Register("a1", 1);
  v1::LaunchCommand gc = TrialWithThreeCheckpointsEnds(session);
  ASSERT_TRUE(h_->ReportExit("a1", session, gc.allocation_id(), 0).ok());
  const int64_t experiment = h_->Trial(trial_).experiment_id();

  // A running experiment is refused, naming its state.
  const int64_t running_trial = h_->CreateExperiment("running");
  v1::LaunchCommand launch = h_->NextLaunch("a1", session);
  const int64_t running = h_->Trial(running_trial).experiment_id();
  v1::DeleteExperimentResponse resp;
  absl::Status st = DeleteExperiment(*h_, running, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr(absl::StrCat("experiment ", running,
                                                   " is ACTIVE: only an ended experiment")));
  ASSERT_TRUE(h_->ReportExit("a1", session, launch.allocation_id(), 0).ok());
  (void)h_->Commands("a1", session);  // Its GC task, if any: not needed here.

  st = DeleteExperiment(*h_, experiment, &resp);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(resp.checkpoints(), 1);  // c-30; c-10 and c-20 were collected already.
  EXPECT_THAT(resp.gc_task(), HasSubstr("gc-"));
  v1::DeleteExperimentResponse again;
  st = DeleteExperiment(*h_, experiment, &again);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("(the experiment is being deleted)"));

  // The master restarts while the task runs: the experiment is whole, the task goes on.
  v1::LaunchCommand files;
  for (const v1::AgentCommand& c : h_->Commands("a1", session)) {
    if (c.has_launch() && c.launch().allocation_id() == resp.gc_task()) files = c.launch();
  }
  ASSERT_EQ(files.allocation_id(), resp.gc_task());
  ASSERT_EQ(files.checkpoint_gc().checkpoints_size(), 1);
  EXPECT_EQ(files.checkpoint_gc().checkpoints(0).uuid(), "c-30");
  RestartMaster();
  EXPECT_EQ(h_->Trial(trial_).experiment_id(), experiment);
  EXPECT_EQ(CheckpointStates().size(), 3u);
  session = h_->Register("a1", 1, {resp.gc_task()});
  ASSERT_TRUE(h_->ReportExit("a1", session, resp.gc_task(), 0).ok());
  h_->Turn([] {});  // The deletion's last step is a turn of its own.

  bool known = true;
  h_->Turn([&] {
    known = h_->registry.experiments.count(experiment) > 0 || h_->registry.trials.count(trial_) > 0;
  });
  EXPECT_FALSE(known);
  auto snap = store_.Load();
  ASSERT_TRUE(snap.ok()) << snap.status();
  for (const auto& e : snap->experiments) EXPECT_NE(e.id(), experiment);
  for (const auto& t : snap->trials) EXPECT_NE(t.id(), trial_);
  for (const auto& g : snap->checkpoint_gc_tasks) EXPECT_NE(g.experiment_id(), experiment);
  EXPECT_TRUE(CheckpointStates().empty());
  for (const v1::Task& t : h_->GcTasks()) EXPECT_NE(t.experiment_id(), experiment);
  st = DeleteExperiment(*h_, experiment, &again);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(st.message(), absl::StrCat("experiment ", experiment, " not found"));
  // The other experiment (no checkpoint left to delete) goes at once, without a task.
  again.Clear();
  st = DeleteExperiment(*h_, running, &again);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(again.gc_task(), "");
  h_->Turn([&] { known = h_->registry.experiments.count(running) > 0; });
  EXPECT_FALSE(known);
}

// Never half deleted: a deletion task the store refuses leaves the experiment as it was
// (the call fails); rows the store refuses to delete after the files went leave the whole
// experiment there, and the next start finishes the deletion.
TEST_F(CheckpointManagerTest, ADeletionTheStoreRefusesIsFinishedOrUndone) {
  std::string session = h_->Register("a1", 1);
  v1::LaunchCommand gc = TrialWithThreeCheckpointsEnds(session);
  ASSERT_TRUE(h_->ReportExit("a1", session, gc.allocation_id(), 0).ok());
  const int64_t experiment = h_->Trial(trial_).experiment_id();

  faulty_.FailWrites(true, "InsertCheckpointGcTask");
  v1::DeleteExperimentResponse resp;
  absl::Status st = DeleteExperiment(*h_, experiment, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  faulty_.FailWrites(false, "InsertCheckpointGcTask");
  EXPECT_TRUE(h_->Commands("a1", session).empty());
  EXPECT_EQ(CheckpointStates()["c-30"], v1::STATE_COMPLETED);

  faulty_.FailWrites(true, "DeleteExperiment");
  st = DeleteExperiment(*h_, experiment, &resp);
  ASSERT_TRUE(st.ok()) << st;
  v1::LaunchCommand files = h_->NextLaunch("a1", session);
  ASSERT_EQ(files.allocation_id(), resp.gc_task());
  ASSERT_TRUE(h_->ReportExit("a1", session, files.allocation_id(), 0).ok());
  h_->Turn([] {});
  // The files went (the checkpoint reads DELETED), the rows stay, whole.
  EXPECT_EQ(CheckpointStates()["c-30"], v1::STATE_DELETED);
  EXPECT_EQ(h_->Trial(trial_).experiment_id(), experiment);
  EXPECT_EQ(store_.Load()->experiments.size(), 1u);

  faulty_.FailWrites(false, "DeleteExperiment");
  RestartMaster();
  bool known = true;
  h_->Turn([&] { known = h_->registry.experiments.count(experiment) > 0; });
  EXPECT_FALSE(known);
  EXPECT_TRUE(store_.Load()->experiments.empty());
  EXPECT_TRUE(CheckpointStates().empty());
}

}  // namespace
}  // namespace det::master
