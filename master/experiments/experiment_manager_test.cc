// ExperimentManager on the manager harness (FakeClock loop over an InMemoryStore): what a
// pause, a preemption and a resize cost a trial without checkpoint storage, ended
// experiments refusing changes, progress as batches trained, limits at submit, an ended
// experiment continued (det experiment continue).
#include "master/experiments/experiment_manager.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/in_memory_store.h"
#include "master/testing/manager_harness.h"
#include "master/testing/master_testing.h"
#include "master/views/views.h"

namespace det::master {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ManagerHarness;

// ExperimentYaml without its checkpoint_storage section.
std::string NoStorageYaml(const std::string& name, int slots = 1) {
  std::string yaml = testing::ExperimentYaml(name, slots);
  return yaml.substr(0, yaml.find("checkpoint_storage:"));
}

v1::Metrics Training(int64_t batches) {
  v1::Metrics m;
  m.set_group("training");
  m.set_total_batches(batches);
  (*m.mutable_values())["loss"] = 1.0;
  return m;
}

class ExperimentManagerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(h_.Start().ok()); }

  // Creates an experiment from `yaml` (+ `overrides`); returns its id.
  int64_t Create(const std::string& yaml, std::vector<std::string> overrides = {}) {
    v1::CreateExperimentRequest req;
    req.set_config_yaml(yaml);
    for (auto& o : overrides) req.add_config_overrides(o);
    v1::CreateExperimentResponse resp;
    absl::Status st = h_.Create(req, &resp);
    EXPECT_TRUE(st.ok()) << st;
    return resp.experiment().id();
  }
  int64_t FirstTrial(int64_t experiment) {
    int64_t id = 0;
    h_.Turn([&] { id = h_.registry.experiments.at(experiment).trial_ids.at(0); });
    return id;
  }
  v1::Experiment Experiment(int64_t id) {
    v1::Experiment e;
    h_.Turn([&] { e = h_.registry.experiments.at(id).experiment; });
    return e;
  }
  absl::Status Pause(int64_t id, v1::PauseExperimentResponse* resp) {
    v1::PauseExperimentRequest req;
    req.set_id(id);
    absl::Status st;
    h_.Turn([&] { st = h_.experiments.Pause(req, resp); });
    return st;
  }
  absl::Status Kill(int64_t id) {
    v1::KillExperimentRequest req;
    req.set_id(id);
    absl::Status st;
    h_.Turn([&] { st = h_.experiments.Kill(req); });
    return st;
  }
  absl::Status SetSlots(int64_t id, int slots, v1::SetExperimentSlotsResponse* resp) {
    v1::SetExperimentSlotsRequest req;
    req.set_id(id);
    req.set_slots_per_trial(slots);
    req.set_force(true);
    absl::Status st;
    h_.Turn([&] { st = h_.experiments.SetSlots(req, resp); });
    return st;
  }

  FakeClock clock_;
  InMemoryStore store_;
  ManagerHarness h_{testing::LoopbackMasterConfig("/unused"), store_, clock_};
};

TEST_F(ExperimentManagerTest, PausingATrialWithoutCheckpointStorageWarnsItsProgressIsLost) {
  const int64_t e = Create(NoStorageYaml("no-storage"));
  const int64_t trial = FirstTrial(e);
  const std::string session = h_.Register("a", 1);
  v1::LaunchCommand launch = h_.NextLaunch("a", session);
  ASSERT_TRUE(h_.ReportMetrics(launch, {Training(10)}).ok());

  v1::PauseExperimentResponse resp;
  ASSERT_TRUE(Pause(e, &resp).ok());
  const std::string warning =
      absl::StrCat("trial ", trial, " has no checkpoint storage: its progress will be lost");
  EXPECT_THAT(resp.warnings(), ElementsAre(warning));
  EXPECT_THAT(h_.Trial(trial).warnings(), ElementsAre(warning));
  EXPECT_THAT(Experiment(e).warnings(), Contains(warning));
  EXPECT_THAT(h_.Logs(trial), HasSubstr("warning: " + warning));

  // `set slots` while the trial is still stopping is accepted and applies to its next run.
  v1::SetExperimentSlotsResponse slots;
  absl::Status st = SetSlots(e, 2, &slots);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(slots.experiment().slots_per_trial(), 2);
  EXPECT_THAT(slots.warnings(),
              Contains(absl::StrCat("slots_per_trial (applies once trial ", trial,
                                    " has stopped)")));
  EXPECT_THAT(slots.warnings(), Contains(warning));
  ASSERT_TRUE(h_.ReportExit("a", session, launch.allocation_id(), 0).ok());
  EXPECT_EQ(h_.Trial(trial).state(), v1::STATE_PAUSED);
  v1::ActivateExperimentRequest activate;
  activate.set_id(e);
  h_.Turn([&] { ASSERT_TRUE(h_.experiments.Activate(activate).ok()); });
  h_.Register("b", 2);
  v1::Trial rerun = h_.Trial(trial);
  EXPECT_EQ(rerun.state(), v1::STATE_STARTING);
  EXPECT_EQ(rerun.allocation().ranks_size(), 2);
  // Stored: a restarted master shows the same warnings.
  auto snap = store_.Load();
  ASSERT_TRUE(snap.ok());
  for (const auto& t : snap->trials) {
    if (t.id() == trial) EXPECT_THAT(t.warnings(), ElementsAre(warning));
  }
}

TEST_F(ExperimentManagerTest, PausingATrialWithCheckpointStorageWarnsOfNothing) {
  const int64_t trial = h_.CreateExperiment("with-storage");
  const std::string session = h_.Register("a", 1);
  v1::LaunchCommand launch = h_.NextLaunch("a", session);
  ASSERT_TRUE(h_.ReportMetrics(launch, {Training(10)}).ok());
  v1::PauseExperimentResponse resp;
  ASSERT_TRUE(Pause(h_.Trial(trial).experiment_id(), &resp).ok());
  EXPECT_THAT(resp.warnings(), ::testing::IsEmpty());
  EXPECT_THAT(h_.Trial(trial).warnings(), ::testing::IsEmpty());
}

TEST_F(ExperimentManagerTest, ActivatedWhileItsTrialStillStopsThePausedRunIsRequeued) {
  const int64_t trial = h_.CreateExperiment("reactivated");
  const int64_t e = h_.Trial(trial).experiment_id();
  const std::string session = h_.Register("a", 1);
  v1::LaunchCommand launch = h_.NextLaunch("a", session);
  ASSERT_TRUE(h_.ReportMetrics(launch, {Training(10)}).ok());
  v1::PauseExperimentResponse paused;
  ASSERT_TRUE(Pause(e, &paused).ok());
  v1::SetExperimentSlotsResponse slots;
  ASSERT_TRUE(SetSlots(e, 2, &slots).ok());
  v1::ActivateExperimentRequest activate;
  activate.set_id(e);
  h_.Turn([&] { ASSERT_TRUE(h_.experiments.Activate(activate).ok()); });
  // The paused run exits normally after the experiment is active again: the trial is not
  // done (10 of 100 batches), it runs again on the new size.
  ASSERT_TRUE(h_.ReportExit("a", session, launch.allocation_id(), 0).ok());
  v1::Trial t = h_.Trial(trial);
  EXPECT_EQ(t.state(), v1::STATE_QUEUED);
  EXPECT_EQ(t.restarts(), 0);
  EXPECT_THAT(h_.Logs(trial), HasSubstr("stopped for a pause; the experiment is active again"));
  h_.Register("b", 2);
  EXPECT_EQ(h_.Trial(trial).allocation().ranks_size(), 2);
}

TEST_F(ExperimentManagerTest, APreemptedTrialWithoutCheckpointStorageIsWarned) {
  ManagerHarness& h = h_;
  h.Turn([&] { h.config.resource_pools[0].preemption = true; });
  const int64_t low = Create(NoStorageYaml("low"), {"resources.priority=50"});
  const int64_t trial = FirstTrial(low);
  const std::string session = h.Register("a", 1);
  ASSERT_TRUE(h.ReportMetrics(h.NextLaunch("a", session), {Training(10)}).ok());
  Create(testing::ExperimentYaml("high", 1), {"resources.priority=10"});
  const std::string warning =
      absl::StrCat("trial ", trial, " has no checkpoint storage: its progress will be lost");
  EXPECT_THAT(h.Trial(trial).warnings(), ElementsAre(warning));
  EXPECT_THAT(Experiment(low).warnings(), Contains(warning));
  EXPECT_THAT(h.Logs(trial), HasSubstr("preempted by trial"));
}

TEST_F(ExperimentManagerTest, EndedExperimentsRefuseKillPriorityAndSlotsNamingTheirState) {
  const int64_t trial = h_.CreateExperiment("killed-early");
  const int64_t e = h_.Trial(trial).experiment_id();
  ASSERT_TRUE(Kill(e).ok());
  EXPECT_EQ(Experiment(e).state(), v1::STATE_CANCELED);
  // Killed after 0 batches: 0%, not 100%.
  EXPECT_EQ(Experiment(e).progress(), 0);

  const std::string ended = absl::StrCat("experiment ", e, " is CANCELED");
  absl::Status st = Kill(e);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_EQ(st.message(), ended);
  v1::UpdateJobPriorityRequest priority;
  priority.set_experiment_id(e);
  priority.set_priority(10);
  h_.Turn([&] { st = h_.experiments.UpdateJobPriority(priority); });
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_EQ(st.message(), ended);
  v1::SetExperimentSlotsResponse slots;
  st = SetSlots(e, 2, &slots);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_EQ(st.message(), ended);
}

TEST_F(ExperimentManagerTest, ProgressCountsBatchesTrained) {
  // A trial that ends having trained nothing: 0%, and a warning in its describe and log.
  const int64_t idle = h_.CreateExperiment("idle");
  std::string session = h_.Register("a", 1);
  v1::LaunchCommand launch = h_.NextLaunch("a", session);
  ASSERT_TRUE(h_.ReportExit("a", session, launch.allocation_id(), 0).ok());
  v1::Trial t = h_.Trial(idle);
  EXPECT_EQ(t.state(), v1::STATE_COMPLETED);
  EXPECT_EQ(Experiment(t.experiment_id()).progress(), 0);
  ASSERT_EQ(t.warnings_size(), 1);
  EXPECT_THAT(t.warnings(0), HasSubstr("reported no metrics and no progress"));
  EXPECT_THAT(h_.Logs(idle), HasSubstr("warning: trial "));

  // Half the batches, then all of them.
  const int64_t busy = h_.CreateExperiment("busy");
  launch = h_.NextLaunch("a", session);
  ASSERT_EQ(launch.trial_id(), busy);
  ASSERT_TRUE(h_.ReportMetrics(launch, {Training(50)}).ok());
  const int64_t e = h_.Trial(busy).experiment_id();
  EXPECT_DOUBLE_EQ(Experiment(e).progress(), 0.5);
  ASSERT_TRUE(h_.ReportMetrics(launch, {Training(100)}).ok());
  ASSERT_TRUE(h_.ReportExit("a", session, launch.allocation_id(), 0).ok());
  EXPECT_EQ(Experiment(e).state(), v1::STATE_COMPLETED);
  EXPECT_DOUBLE_EQ(Experiment(e).progress(), 1.0);
  EXPECT_THAT(h_.Trial(busy).warnings(), ::testing::IsEmpty());
}

TEST_F(ExperimentManagerTest, TheClusterDefaultCheckpointStorageAppliesOnlyToConfigsWithNone) {
  config::CheckpointStorageConfig storage;
  storage.host_path = "/srv/det/checkpoints";
  storage.save_trial_latest = 2;
  h_.Turn([&] { h_.experiments.SetDefaultCheckpointStorage(storage); });
  const int64_t plain = Create(NoStorageYaml("plain"));
  const int64_t own = Create(testing::ExperimentYaml("own", 1));
  ExperimentState* es = nullptr;
  h_.Turn([&] { es = &h_.registry.experiments.at(plain); });
  ASSERT_TRUE(es->config.checkpoint_storage.has_value());
  EXPECT_EQ(es->config.checkpoint_storage->host_path, "/srv/det/checkpoints");
  EXPECT_EQ(es->config.checkpoint_storage->save_trial_latest, 2);
  EXPECT_THAT(Experiment(plain).config_yaml(), HasSubstr("/srv/det/checkpoints"));
  h_.Turn([&] { es = &h_.registry.experiments.at(own); });
  ASSERT_TRUE(es->config.checkpoint_storage.has_value());
  EXPECT_EQ(es->config.checkpoint_storage->host_path, "/ckpt");
  // Its trials keep checkpoints: a pause warns of nothing.
  const std::string session = h_.Register("a", 1);
  ASSERT_TRUE(h_.ReportMetrics(h_.NextLaunch("a", session), {Training(10)}).ok());
  v1::PauseExperimentResponse resp;
  ASSERT_TRUE(Pause(plain, &resp).ok());
  EXPECT_THAT(resp.warnings(), ::testing::IsEmpty());
}

// checkpoint_storage_allowed_roots: an experiment's storage must lie under one of them
// (or the cluster default's, which CheckpointStorageRoots adds).
TEST_F(ExperimentManagerTest, CheckpointStorageOutsideTheAllowedRootsIsRefusedAtSubmit) {
  h_.Turn([&] { h_.checkpoints.SetStorageRoots({"/srv/det", "/ckpt/team"}); });
  v1::CreateExperimentRequest req;
  req.set_config_yaml(testing::ExperimentYaml("own", 1));  // host_path: /ckpt
  req.set_config_path("exp.yaml");
  v1::CreateExperimentResponse resp;
  absl::Status st = h_.Create(req, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("exp.yaml: checkpoint_storage.host_path: '/ckpt' is not under a "
                        "checkpoint storage root this cluster allows (/srv/det, /ckpt/team; "
                        "master.yaml checkpoint_storage_allowed_roots"));
  EXPECT_EQ(Create(testing::ExperimentYaml("team", 1),
                   {"checkpoint_storage.host_path=/ckpt/team/alice"}) > 0, true);
  req.add_config_overrides("checkpoint_storage.host_path=/srv/det/../../etc");
  st = h_.Create(req, &resp);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("'/srv/det/../../etc' is not an absolute path without '.' or '..'"));
}

TEST_F(ExperimentManagerTest, ModelContextsBreakingALimitAreRefusedAtSubmit) {
  auto refused = [&](std::vector<std::string> paths, const std::string& why) {
    v1::CreateExperimentRequest req;
    req.set_config_yaml(testing::ExperimentYaml("ctx", 1));
    for (const auto& p : paths) {
      v1::ContextFile* f = req.add_context();
      f->set_path(p);
      f->set_content("x");
    }
    v1::CreateExperimentResponse resp;
    absl::Status st = h_.Create(req, &resp);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr(why));
  };
  refused({"ok.py", "../escape.py"}, "file '../escape.py': a '..' component");
  refused({"/etc/passwd"}, "file '/etc/passwd': an absolute path");
  refused({"a.py", "a.py"}, "file 'a.py': appears twice");
  refused({"lib", "lib/x.py"}, "'lib' is a file and also the directory of 'lib/x.py'");
  std::vector<std::string> many;
  for (int i = 0; i <= 10000; ++i) many.push_back(absl::StrCat("f", i));
  refused(many, "10001 files; at most 10000 are accepted");
  int experiments = 0;
  h_.Turn([&] { experiments = static_cast<int>(h_.registry.experiments.size()); });
  EXPECT_EQ(experiments, 0);
}

TEST_F(ExperimentManagerTest, ATwoMebibyteConfigIsRefusedBeforeParsingNamingTheLimit) {
  v1::CreateExperimentRequest req;
  // The quoted value is never closed: a parse would fail naming the YAML error instead.
  req.set_config_yaml(testing::ExperimentYaml("big", 1) + "description: \"" +
                      std::string(2 << 20, 'x') + "\n");
  v1::CreateExperimentResponse resp;
  absl::Status st = h_.Create(req, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("the document is 2.0 MiB; at most 1024 KiB is accepted"));
  EXPECT_LT(st.message().size(), 500u);  // The value is not echoed.
}

// det e archive|unarchive, label, set name|description, create --paused: checked,
// kept by a restarted master (a second harness on the same store), archived ones hidden.
TEST_F(ExperimentManagerTest, ArchivedLabelledRenamedExperimentsSurviveARestart) {
  const int64_t e = Experiment(h_.Trial(h_.CreateExperiment("to-archive")).experiment_id()).id();
  absl::Status st;
  h_.Turn([&] { st = h_.experiments.SetArchived(e, true); });
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_EQ(st.message(), absl::StrCat("experiment ", e, " is ACTIVE: only an ended experiment "
                                       "(COMPLETED, CANCELED or ERROR) can be archived"));

  v1::PatchExperimentRequest patch;
  patch.set_id(e);
  patch.set_name("renamed");
  patch.set_description("why it ran");
  for (const char* l : {"b", "a", "b"}) patch.add_add_labels(l);
  v1::PatchExperimentResponse patched;
  h_.Turn([&] { st = h_.experiments.Patch(patch, &patched); });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_THAT(patched.experiment().labels(), ElementsAre("a", "b"));
  v1::PatchExperimentRequest bad;
  bad.set_id(e);
  bad.set_name("");
  h_.Turn([&] { st = h_.experiments.Patch(bad, &patched); });
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "name: must not be empty");
  bad.clear_name();
  bad.add_add_labels(std::string(200, 'x'));
  h_.Turn([&] { st = h_.experiments.Patch(bad, &patched); });
  EXPECT_EQ(st.message(), "add_labels[0]: at most 128 bytes, got 200");
  v1::PatchExperimentRequest remove;
  remove.set_id(e);
  remove.add_remove_labels("b");
  h_.Turn([&] { st = h_.experiments.Patch(remove, &patched); });
  EXPECT_THAT(patched.experiment().labels(), ElementsAre("a"));

  ASSERT_TRUE(Kill(e).ok());
  h_.Turn([&] { st = h_.experiments.SetArchived(e, true); });
  ASSERT_TRUE(st.ok()) << st;
  v1::ListExperimentsRequest list;
  v1::ListExperimentsResponse listed;
  h_.Turn([&] { st = h_.experiments.List(list, &listed); });
  EXPECT_EQ(listed.experiments_size(), 0);
  list.set_include_archived(true);
  listed.Clear();
  h_.Turn([&] { st = h_.experiments.List(list, &listed); });
  ASSERT_EQ(listed.experiments_size(), 1);
  EXPECT_TRUE(listed.experiments(0).archived());

  v1::CreateExperimentRequest paused_req;
  paused_req.set_config_yaml(testing::ExperimentYaml("paused"));
  paused_req.set_paused(true);
  v1::CreateExperimentResponse paused;
  ASSERT_TRUE(h_.Create(paused_req, &paused).ok());
  EXPECT_EQ(paused.experiment().state(), v1::STATE_PAUSED);
  const int64_t paused_trial = FirstTrial(paused.experiment().id());
  EXPECT_EQ(h_.Trial(paused_trial).state(), v1::STATE_PAUSED);

  ManagerHarness restarted(testing::LoopbackMasterConfig("/unused"), store_, clock_);
  ASSERT_TRUE(restarted.Start().ok());
  v1::Experiment after, after_paused;
  restarted.Turn([&] {
    after = restarted.registry.experiments.at(e).experiment;
    after_paused = restarted.registry.experiments.at(paused.experiment().id()).experiment;
  });
  EXPECT_TRUE(after.archived());
  EXPECT_EQ(after.name(), "renamed");
  EXPECT_EQ(after.description(), "why it ran");
  EXPECT_THAT(after.labels(), ElementsAre("a"));
  EXPECT_EQ(after_paused.state(), v1::STATE_PAUSED);
  // (Its PAUSED trial is put back to QUEUED by AllocationManager::Restore, as are those
  // of any paused experiment: reported, not changed here.)
}

// ListExperiments: in id order, paged with a total, filtered by a plain substring of the
// name, by states and by the owner's exact username; the owner is kept across a restart.
// (Moved from http_server_test's ExperimentsCreateListFilterGetKill,
// ExperimentsRecordTheirOwnerAndListByUser and NamesFullOfQuotesAndSqlComeBackUnchanged.)
TEST_F(ExperimentManagerTest, ListPagesAndFiltersByNameStatesAndOwnerAcrossARestart) {
  auto create = [&](const std::string& owner, const std::string& name) {
    v1::CreateExperimentRequest req;
    req.set_config_yaml(testing::ExperimentYaml(name));
    v1::CreateExperimentResponse resp;
    absl::Status st;
    h_.Turn([&] { st = h_.experiments.Create(owner, req, &resp); });
    EXPECT_TRUE(st.ok()) << st;
    EXPECT_EQ(resp.experiment().owner(), owner);
    return resp.experiment().id();
  };
  const std::string quoted = "x'); DROP TABLE experiments; --";
  const std::string wild = "back\\slash %_ wildcards";
  ASSERT_EQ(create("admin", "alpha"), 1);
  ASSERT_EQ(create("bob", "beta"), 2);
  ASSERT_EQ(create("bob", "alphabet"), 3);
  ASSERT_EQ(create("admin", quoted), 4);
  ASSERT_EQ(create("admin", wild), 5);
  ASSERT_TRUE(Kill(2).ok());
  EXPECT_EQ(Experiment(2).state(), v1::STATE_CANCELED);

  auto list = [&](ManagerHarness& h, v1::ListExperimentsRequest req) {
    v1::ListExperimentsResponse resp;
    absl::Status st;
    h.Turn([&] { st = h.experiments.List(req, &resp); });
    EXPECT_TRUE(st.ok()) << st;
    std::vector<std::string> out;
    for (const auto& e : resp.experiments()) out.push_back(e.owner() + ":" + e.name());
    EXPECT_GE(resp.total(), static_cast<int>(out.size()));
    return std::make_pair(out, resp.total());
  };
  using V = std::vector<std::string>;
  v1::ListExperimentsRequest all;
  EXPECT_EQ(list(h_, all).first, (V{"admin:alpha", "bob:beta", "bob:alphabet", "admin:" + quoted,
                                    "admin:" + wild}));
  EXPECT_EQ(list(h_, all).second, 5);
  v1::ListExperimentsRequest page;
  page.set_limit(1);
  page.set_offset(1);
  EXPECT_EQ(list(h_, page), std::make_pair(V{"bob:beta"}, 5));
  v1::ListExperimentsRequest named;
  named.set_name("alpha");
  EXPECT_EQ(list(h_, named).first, (V{"admin:alpha", "bob:alphabet"}));
  named.set_name("'; DROP");
  EXPECT_EQ(list(h_, named).first, V{});
  named.set_name("'); DROP");
  EXPECT_EQ(list(h_, named).first, V{"admin:" + quoted});
  named.set_name("%_");  // A plain substring, not a pattern.
  EXPECT_EQ(list(h_, named).first, V{"admin:" + wild});
  v1::ListExperimentsRequest canceled;
  canceled.add_states(v1::STATE_CANCELED);
  EXPECT_EQ(list(h_, canceled), std::make_pair(V{"bob:beta"}, 1));
  v1::ListExperimentsRequest active;
  active.add_states(v1::STATE_ACTIVE);
  active.add_states(v1::STATE_PAUSED);
  EXPECT_EQ(list(h_, active).second, 4);

  auto owners = [&](ManagerHarness& h, const std::string& user, const std::string& name = "") {
    v1::ListExperimentsRequest req;
    req.set_user(user);
    req.set_name(name);
    auto [names, total] = list(h, req);
    EXPECT_EQ(total, static_cast<int>(names.size())) << user;
    return names;
  };
  EXPECT_EQ(owners(h_, "bob"), (V{"bob:beta", "bob:alphabet"}));
  EXPECT_EQ(owners(h_, "admin", "alpha"), V{"admin:alpha"});
  EXPECT_EQ(owners(h_, "bo"), V{});  // A username, not a substring.
  EXPECT_EQ(owners(h_, "nobody"), V{});

  // Kept with the experiment: a restarted master lists the same.
  ManagerHarness restarted(testing::LoopbackMasterConfig("/unused"), store_, clock_);
  ASSERT_TRUE(restarted.Start().ok());
  EXPECT_EQ(list(restarted, all).first, list(h_, all).first);
  EXPECT_EQ(owners(restarted, "bob"), (V{"bob:beta", "bob:alphabet"}));
}

// det e set max-slots: resources.max_slots holds a 2-trial grid to one trial at a time on a
// 2-slot agent (the other waits, saying why); cleared, the second starts; refused for a
// negative value and for an ended experiment.
TEST_F(ExperimentManagerTest, MaxSlotsLimitsTheTrialsRunningAtOnce) {
  const int64_t e =
      Create(testing::ExperimentYaml("capped"),
             {"searcher.name=grid", "hyperparameters.lr={type: categorical, vals: [1, 2]}",
              "resources.max_slots=1"});
  const std::string session = h_.Register("a", 2);
  std::vector<v1::LaunchCommand> launches;
  for (const auto& c : h_.Commands("a", session)) {
    if (c.has_launch()) launches.push_back(c.launch());
  }
  ASSERT_EQ(launches.size(), 1u);
  std::vector<int64_t> trials;
  h_.Turn([&] { trials = h_.registry.experiments.at(e).trial_ids; });
  ASSERT_EQ(trials.size(), 2u);
  const int64_t waiting = launches[0].trial_id() == trials[0] ? trials[1] : trials[0];
  EXPECT_EQ(h_.Trial(waiting).state(), v1::STATE_QUEUED);
  EXPECT_THAT(h_.Trial(waiting).pending_reason(),
              HasSubstr("max_slots 1 of its experiment reached (1 slot in use, needs 1 more)"));

  v1::PatchExperimentRequest patch;
  patch.set_id(e);
  patch.set_max_slots(-1);
  v1::PatchExperimentResponse patched;
  absl::Status st;
  h_.Turn([&] { st = h_.experiments.Patch(patch, &patched); });
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "max_slots: expected an integer >= 0 (0: unlimited), got -1");

  int kept = 0;
  h_.Turn([&] { kept = h_.registry.experiments.at(e).config.resources.max_slots; });
  EXPECT_EQ(kept, 1);

  patch.set_max_slots(0);
  h_.Turn([&] { st = h_.experiments.Patch(patch, &patched); });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_THAT(patched.experiment().config_yaml(), HasSubstr("max_slots: 0"));
  v1::LaunchCommand second = h_.NextLaunch("a", session);
  EXPECT_EQ(second.trial_id(), waiting);

  ASSERT_TRUE(Kill(e).ok());
  for (const v1::LaunchCommand* l : {&launches[0], &second}) {
    ASSERT_TRUE(h_.ReportExit("a", session, l->allocation_id(), 0).ok());
  }
  ASSERT_EQ(Experiment(e).state(), v1::STATE_CANCELED);
  patch.set_max_slots(2);
  h_.Turn([&] { st = h_.experiments.Patch(patch, &patched); });
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(), absl::StrCat("experiment ", e, " is CANCELED"));
}

// det trial kill: a running trial ends CANCELED once its workers exit, a queued one at
// once; its experiment goes on until its trials ended, then ends CANCELED; an ended trial
// is refused naming its state.
TEST_F(ExperimentManagerTest, KillingATrialCancelsItAlone) {
  const int64_t e =
      Create(testing::ExperimentYaml("kill-one"),
             {"searcher.name=grid", "hyperparameters.lr={type: categorical, vals: [1, 2]}"});
  const std::string session = h_.Register("a", 1);
  v1::LaunchCommand launch = h_.NextLaunch("a", session);
  std::vector<int64_t> trials;
  h_.Turn([&] { trials = h_.registry.experiments.at(e).trial_ids; });
  ASSERT_EQ(trials.size(), 2u);
  const int64_t running = launch.trial_id();
  const int64_t queued = running == trials[0] ? trials[1] : trials[0];
  auto kill = [&](int64_t id) {
    v1::KillTrialRequest req;
    req.set_id(id);
    absl::Status st;
    h_.Turn([&] { st = h_.experiments.KillTrial(req); });
    return st;
  };
  ASSERT_TRUE(kill(running).ok());
  bool asked = false;
  for (const auto& c : h_.Commands("a", session)) {
    asked |= c.has_kill() && c.kill().allocation_id() == launch.allocation_id();
  }
  EXPECT_TRUE(asked);
  ASSERT_TRUE(h_.ReportExit("a", session, launch.allocation_id(), 0).ok());
  EXPECT_EQ(h_.Trial(running).state(), v1::STATE_CANCELED);
  EXPECT_EQ(Experiment(e).state(), v1::STATE_ACTIVE);
  EXPECT_EQ(h_.Trial(running).allocation().exit_reason(), "killed by user");
  EXPECT_THAT(h_.Logs(running), HasSubstr("kill requested by the user"));
  absl::Status again = kill(running);
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.message(), absl::StrCat("trial ", running, " is CANCELED"));

  // The other trial now runs; killed too, the experiment ends CANCELED (none failed).
  v1::LaunchCommand second = h_.NextLaunch("a", session);
  ASSERT_EQ(second.trial_id(), queued);
  ASSERT_TRUE(kill(queued).ok());
  ASSERT_TRUE(h_.ReportExit("a", session, second.allocation_id(), 0).ok());
  EXPECT_EQ(h_.Trial(queued).state(), v1::STATE_CANCELED);
  EXPECT_EQ(Experiment(e).state(), v1::STATE_CANCELED);
  EXPECT_EQ(Experiment(e).progress(), 0);
  EXPECT_EQ(kill(999).code(), absl::StatusCode::kNotFound);
}

// A trial killed while a pause stops it ends when the experiment is activated, instead of
// running again.
TEST_F(ExperimentManagerTest, ATrialKilledWhileItPausesEndsAtActivate) {
  const int64_t e = Create(testing::ExperimentYaml("pause-kill"));
  const int64_t trial = FirstTrial(e);
  const std::string session = h_.Register("a", 1);
  v1::LaunchCommand launch = h_.NextLaunch("a", session);
  v1::PauseExperimentResponse paused;
  ASSERT_TRUE(Pause(e, &paused).ok());
  v1::KillTrialRequest kill;
  kill.set_id(trial);
  absl::Status st;
  h_.Turn([&] { st = h_.experiments.KillTrial(kill); });
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(h_.ReportExit("a", session, launch.allocation_id(), 0).ok());
  EXPECT_EQ(h_.Trial(trial).state(), v1::STATE_PAUSED);
  v1::ActivateExperimentRequest activate;
  activate.set_id(e);
  h_.Turn([&] { st = h_.experiments.Activate(activate); });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(h_.Trial(trial).state(), v1::STATE_CANCELED);
  EXPECT_EQ(Experiment(e).state(), v1::STATE_CANCELED);
  for (const auto& c : h_.Commands("a", session)) EXPECT_FALSE(c.has_launch());
}

// det trial describe's system metrics: those of the agents of the open run, and once the
// trial ended, those of the agents of its last run (not none).
TEST_F(ExperimentManagerTest, GetTrialShowsTheSystemMetricsOfItsLastRunOnceEnded) {
  const int64_t e = Create(testing::ExperimentYaml("sysmetrics"));
  const int64_t trial = FirstTrial(e);
  const std::string session = h_.Register("a", 1);
  h_.Register("b", 1);
  v1::LaunchCommand launch = h_.NextLaunch("a", session);
  std::vector<v1::SystemMetrics> samples(2);
  samples[0].set_agent_id("a");
  samples[0].set_time_ms(1000);
  samples[0].set_cpu_utilization_percent(42);
  samples[1].set_agent_id("b");
  samples[1].set_time_ms(1000);
  samples[1].set_cpu_utilization_percent(7);
  absl::Status added;
  h_.Turn([&] { added = store_.AddSystemMetrics(samples, 0); });
  ASSERT_TRUE(added.ok()) << added;
  auto describe = [&] {
    v1::GetTrialRequest req;
    req.set_id(trial);
    v1::GetTrialResponse resp;
    absl::Status st;
    h_.Turn([&] { st = h_.experiments.GetTrial(req, &resp); });
    EXPECT_TRUE(st.ok()) << st;
    return resp;
  };
  v1::GetTrialResponse running = describe();
  ASSERT_EQ(running.system_metrics_size(), 1);
  EXPECT_EQ(running.system_metrics(0).agent_id(), "a");

  ASSERT_TRUE(h_.ReportExit("a", session, launch.allocation_id(), 0).ok());
  v1::GetTrialResponse ended = describe();
  EXPECT_EQ(ended.trial().state(), v1::STATE_COMPLETED);
  EXPECT_EQ(ended.trial().allocation().id(), launch.allocation_id());
  ASSERT_EQ(ended.system_metrics_size(), 1);
  EXPECT_EQ(ended.system_metrics(0).agent_id(), "a");
  EXPECT_EQ(ended.system_metrics(0).cpu_utilization_percent(), 42);
}

// The same searcher section with `searcher` lines instead of the single searcher's name.
std::string WithSearcher(std::string yaml, const std::string& searcher) {
  const std::string single = "  name: single\n";
  yaml.replace(yaml.find(single), single.size(), searcher);
  return yaml;
}

absl::Status ContinueExperiment(ManagerHarness& h, int64_t id, std::vector<std::string> overrides,
                                v1::ContinueExperimentResponse* resp,
                                const std::string& override_config = "") {
  v1::ContinueExperimentRequest req;
  req.set_id(id);
  req.set_override_config(override_config);
  for (auto& o : overrides) req.add_config_overrides(o);
  absl::Status st;
  h.Turn([&] { st = h.experiments.Continue(req, resp); });
  return st;
}

// det experiment continue of a single-trial experiment: refused while it is ACTIVE; once
// COMPLETED at 100 batches it continues with searcher.max_length 200 (stored), its trial
// queued again and launched with the new target from its latest checkpoint, and it
// COMPLETES again at 200; a restarted master shows what was stored.
TEST_F(ExperimentManagerTest, AContinuedSingleTrialResumesFromItsCheckpointToTheNewLength) {
  const int64_t trial = h_.CreateExperiment("to-continue");
  const int64_t e = h_.Trial(trial).experiment_id();
  v1::ContinueExperimentResponse resp;
  absl::Status st = ContinueExperiment(h_, e, {}, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_EQ(st.message(), absl::StrCat("experiment ", e, " is ACTIVE: only an ended experiment "
                                       "(COMPLETED, CANCELED or ERROR) can be continued"));

  const std::string session = h_.Register("a", 1);
  v1::LaunchCommand first = h_.NextLaunch("a", session);
  EXPECT_EQ(first.env().at("DET_TRIAL_TARGET_BATCHES"), "100");
  ASSERT_TRUE(h_.ReportMetrics(first, {Training(100)}).ok());
  ASSERT_TRUE(h_.ReportCheckpoint(first, "u-100", 100).ok());
  ASSERT_TRUE(h_.ReportExit("a", session, first.allocation_id(), 0).ok());
  ASSERT_EQ(Experiment(e).state(), v1::STATE_COMPLETED);
  const v1::Trial ended = h_.Trial(trial);
  ASSERT_FALSE(ended.latest_checkpoint().empty());

  st = ContinueExperiment(h_, e, {"searcher.max_length.batches=200"}, &resp);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_THAT(resp.warnings(), ::testing::IsEmpty());
  EXPECT_EQ(resp.experiment().state(), v1::STATE_ACTIVE);
  EXPECT_EQ(resp.experiment().end_time_ms(), 0);
  EXPECT_DOUBLE_EQ(resp.experiment().progress(), 0.5);
  EXPECT_THAT(resp.experiment().config_yaml(), HasSubstr("batches: 200"));
  v1::Trial revived = h_.Trial(trial);
  // Queued, and placed at once on the free agent.
  EXPECT_THAT(revived.state(), ::testing::AnyOf(v1::STATE_QUEUED, v1::STATE_STARTING));
  EXPECT_EQ(revived.target_batches(), 200);
  EXPECT_EQ(revived.total_batches(), 100);
  EXPECT_EQ(revived.latest_checkpoint(), ended.latest_checkpoint());
  EXPECT_EQ(revived.end_time_ms(), 0);
  EXPECT_THAT(h_.Logs(trial), HasSubstr("experiment continued: trial queued again; it resumes "
                                        "from its latest checkpoint toward 200 batches"));

  h_.Turn([] {});  // The scheduling turn it asked for.
  v1::LaunchCommand second = h_.NextLaunch("a", session);
  ASSERT_EQ(second.trial_id(), trial);
  EXPECT_NE(second.allocation_id(), first.allocation_id());
  EXPECT_EQ(second.env().at("DET_TRIAL_TARGET_BATCHES"), "200");
  EXPECT_EQ(second.env().at("DET_LATEST_CHECKPOINT"), ended.latest_checkpoint());
  EXPECT_EQ(std::stoi(second.env().at("DET_TRIAL_RUN_ID")),
            std::stoi(first.env().at("DET_TRIAL_RUN_ID")) + 1);
  ASSERT_TRUE(h_.ReportMetrics(second, {Training(150), Training(200)}).ok());
  ASSERT_TRUE(h_.ReportExit("a", session, second.allocation_id(), 0).ok());
  EXPECT_EQ(h_.Trial(trial).state(), v1::STATE_COMPLETED);
  EXPECT_EQ(h_.Trial(trial).total_batches(), 200);
  EXPECT_EQ(Experiment(e).state(), v1::STATE_COMPLETED);
  EXPECT_DOUBLE_EQ(Experiment(e).progress(), 1.0);

  {
    ManagerHarness restarted(testing::LoopbackMasterConfig("/unused"), store_, clock_);
    ASSERT_TRUE(restarted.Start().ok());
    v1::Experiment after;
    restarted.Turn([&] { after = restarted.registry.experiments.at(e).experiment; });
    EXPECT_EQ(after.state(), v1::STATE_COMPLETED);
    EXPECT_THAT(after.config_yaml(), HasSubstr("batches: 200"));
  }

  // Continued again without a longer length: it ends at once, and says so.
  st = ContinueExperiment(h_, e, {}, &resp);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_THAT(resp.warnings(),
              ElementsAre(absl::StrCat("trial ", trial, " already trained 200 of its 200 batches: "
                                       "it ends at once (raise searcher.max_length, e.g. --config "
                                       "searcher.max_length.batches=N, to train more)")));
}

// What continue refuses, naming why: an unknown experiment, another searcher, overrides of a
// search, a change of the single searcher, a bad override; a search whose trials all
// COMPLETED. A search's failed trial is continued alone (its COMPLETED sibling stays).
TEST_F(ExperimentManagerTest, ContinueRefusesNamingWhyAndContinuesOnlyASearchsUnfinishedTrials) {
  v1::ContinueExperimentResponse resp;
  absl::Status st = ContinueExperiment(h_, 999, {}, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;

  // Ended before any agent could run them: CANCELED at once.
  const int64_t asha = Create(WithSearcher(testing::ExperimentYaml("asha"),
                                           "  name: adaptive_asha\n  max_trials: 2\n"));
  ASSERT_TRUE(Kill(asha).ok());
  const int64_t single = Create(testing::ExperimentYaml("single"));
  ASSERT_TRUE(Kill(single).ok());
  ASSERT_EQ(Experiment(single).state(), v1::STATE_CANCELED);

  // One slot: the trials run one after the other.
  const std::string session = h_.Register("a", 1);
  auto run_all = [&](int64_t e, std::vector<int> exit_codes) {
    for (int code : exit_codes) {
      v1::LaunchCommand l = h_.NextLaunch("a", session);
      ASSERT_TRUE(h_.ReportMetrics(l, {Training(100)}).ok());
      ASSERT_TRUE(h_.ReportExit("a", session, l.allocation_id(), code).ok());
    }
    ASSERT_TRUE(views::Terminal(Experiment(e).state())) << e;
  };

  // adaptive_asha: refused, as Determined does.
  st = ContinueExperiment(h_, asha, {}, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(st.message(), absl::StrCat("experiment ", asha, " uses the adaptive_asha searcher: "
                                       "only an experiment of the single, grid or random "
                                       "searcher can be continued (det experiment fork ", asha,
                                       " runs it again as a new experiment)"));

  // random, 2 trials: one fails (no restarts), one COMPLETES: the experiment COMPLETED.
  const int64_t search = Create(WithSearcher(testing::ExperimentYaml("search", 1, 0),
                                             "  name: random\n  max_trials: 2\n"));
  run_all(search, {1, 0});
  ASSERT_EQ(Experiment(search).state(), v1::STATE_COMPLETED);
  std::vector<int64_t> ids;
  h_.Turn([&] { ids = h_.registry.experiments.at(search).trial_ids; });
  ASSERT_EQ(ids.size(), 2u);
  ASSERT_EQ(h_.Trial(ids[0]).state(), v1::STATE_ERROR);
  st = ContinueExperiment(h_, search, {"searcher.max_length.batches=200"}, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(st.message(),
            absl::StrCat("experiment ", search, " uses the random searcher (2 trials): only a "
                         "single-searcher experiment takes an override config when continued; "
                         "continue it without --config and --config-file, or fork it to change "
                         "its config (det experiment fork ", search, " --config KEY=VALUE)"));
  st = ContinueExperiment(h_, search, {}, &resp, "searcher: {max_length: {batches: 200}}");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(Experiment(search).state(), v1::STATE_COMPLETED);

  st = ContinueExperiment(h_, search, {}, &resp, " {} ");  // An empty override is none.
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_FALSE(views::Terminal(h_.Trial(ids[0]).state()));
  EXPECT_EQ(h_.Trial(ids[0]).error(), "");
  EXPECT_EQ(h_.Trial(ids[1]).state(), v1::STATE_COMPLETED);
  h_.Turn([] {});
  run_all(search, {0});
  EXPECT_EQ(h_.Trial(ids[0]).state(), v1::STATE_COMPLETED);
  EXPECT_EQ(Experiment(search).state(), v1::STATE_COMPLETED);
  // Every trial COMPLETED: nothing left.
  st = ContinueExperiment(h_, search, {}, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_EQ(st.message(), absl::StrCat("experiment ", search, " has been completed: each of its "
                                       "2 trials COMPLETED, so nothing is left to continue "
                                       "(det experiment fork ", search,
                                       " runs it again as a new experiment)"));

  // single: the searcher stays single; a bad override names where it is.
  st = ContinueExperiment(h_, single, {"searcher.name=random", "searcher.max_trials=3"}, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(st.message(), absl::StrCat("searcher.name: experiment ", single, " continues with "
                                       "the single searcher, got 'random' (det experiment fork ",
                                       single, " --config searcher.name=random starts a search)"));
  st = ContinueExperiment(h_, single, {"searcher.max_length.batches=-3"}, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("searcher.max_length"));
  st = ContinueExperiment(h_, single, {}, &resp, "searcher: [unclosed");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("override config"));
  EXPECT_EQ(Experiment(single).state(), v1::STATE_CANCELED);
  // A killed single trial continues (its kill forgotten) with a changed hyperparameter.
  st = ContinueExperiment(h_, single, {}, &resp,
                          "hyperparameters:\n  global_batch_size: 64\n");
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(Experiment(single).state(), v1::STATE_ACTIVE);
  const v1::Trial t = h_.Trial(FirstTrial(single));
  EXPECT_FALSE(views::Terminal(t.state())) << t.ShortDebugString();
  EXPECT_FALSE(t.search().stopped_early());
  EXPECT_THAT(t.hparams_json(), HasSubstr("64"));
}

// An experiment whose trials all failed names the first failure (det e describe shows it);
// continued, it is ACTIVE again without it.
TEST_F(ExperimentManagerTest, AFailedExperimentNamesItsFirstFailedTrialAndContinuesWithoutIt) {
  const int64_t e = Create(testing::ExperimentYaml("fails", 1, 0));
  const int64_t trial = FirstTrial(e);
  const std::string session = h_.Register("a", 1);
  v1::LaunchCommand launch = h_.NextLaunch("a", session);
  ASSERT_TRUE(h_.ReportExit("a", session, launch.allocation_id(), 3).ok());
  ASSERT_EQ(Experiment(e).state(), v1::STATE_ERROR);
  EXPECT_EQ(Experiment(e).error(), absl::StrCat("every trial failed; trial ", trial, ": ",
                                                h_.Trial(trial).error()));
  EXPECT_THAT(Experiment(e).error(), HasSubstr("exit code 3"));

  v1::ContinueExperimentResponse resp;
  absl::Status st = ContinueExperiment(h_, e, {}, &resp);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(Experiment(e).state(), v1::STATE_ACTIVE);
  EXPECT_EQ(Experiment(e).error(), "");
  EXPECT_EQ(h_.Trial(trial).error(), "");
  EXPECT_EQ(h_.Trial(trial).restarts(), 0);
}

}  // namespace
}  // namespace det::master
