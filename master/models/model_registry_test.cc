// ModelRegistry with the managers it works with (master/testing:manager_harness) on a
// FakeClock loop over a real SQLite file: models and versions, and the protection of the
// checkpoints they name from garbage collection, det checkpoint delete and det experiment
// delete. A second harness on the same store is a restarted master.
#include "master/models/model_registry.h"

#include <unistd.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock/clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/fault_injecting_store.h"
#include "master/store/sqlite_store.h"
#include "master/testing/manager_harness.h"
#include "master/testing/master_testing.h"

namespace det::master {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::det::testing::StatusIs;
using testing::ManagerHarness;

std::unique_ptr<SqliteStore> OpenStore() {
  static int serial = 0;
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path =
      absl::StrCat(dir ? dir : "/tmp", "/models-", getpid(), "-", ++serial, ".db");
  for (const char* suffix : {"", "-wal", "-shm"}) unlink((path + suffix).c_str());
  auto store = SqliteStore::Open(path);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

class ModelRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(sqlite_, nullptr);
    StartMaster();
  }
  void StartMaster() {
    h_ = std::make_unique<ManagerHarness>(testing::LoopbackMasterConfig("/unused"), faulty_,
                                          clock_);
    ASSERT_TRUE(h_->Start().ok());
  }
  void RestartMaster() {
    h_.reset();
    StartMaster();
  }

  absl::StatusOr<v1::Model> Create(const std::string& name, const std::string& user = "alice") {
    v1::CreateModelRequest req;
    req.set_name(name);
    req.set_description("digits");
    req.add_labels("prod");
    absl::StatusOr<v1::Model> out = absl::UnknownError("not run");
    h_->Turn([&] { out = h_->models.Create(req, user); });
    return out;
  }
  absl::StatusOr<v1::ModelVersion> Register(const std::string& model, const std::string& uuid) {
    v1::RegisterModelVersionRequest req;
    req.set_model_name(model);
    req.set_checkpoint_uuid(uuid);
    req.set_notes("notes of " + uuid);
    absl::StatusOr<v1::ModelVersion> out = absl::UnknownError("not run");
    h_->Turn([&] { out = h_->models.RegisterVersion(req, "alice"); });
    return out;
  }
  absl::Status DeleteVersion(const std::string& model, int version) {
    absl::Status st;
    h_->Turn([&] { st = h_->models.DeleteVersion(model, version); });
    return st;
  }
  std::string WhyProtected(const std::string& uuid) {
    std::string why;
    h_->Turn([&] { why = h_->models.WhyProtected(uuid); });
    return why;
  }
  absl::Status DeleteCheckpoint(const std::string& uuid) {
    v1::DeleteCheckpointsRequest req;
    req.add_uuids(uuid);
    v1::DeleteCheckpointsResponse resp;
    absl::Status st;
    h_->Turn([&] {
      st = h_->checkpoints.DeleteCheckpoints(
          req, &resp, [](const v1::Experiment&) { return absl::OkStatus(); });
    });
    return st;
  }
  absl::Status DeleteExperiment(int64_t id) {
    v1::DeleteExperimentRequest req;
    req.set_id(id);
    v1::DeleteExperimentResponse resp;
    absl::Status st;
    h_->Turn([&] { st = h_->experiments.Delete(req, &resp); });
    return st;
  }
  std::map<std::string, v1::State> CheckpointStates(int64_t trial) {
    std::map<std::string, v1::State> out;
    auto stored = sqlite_->GetCheckpoints(trial);
    EXPECT_TRUE(stored.ok()) << stored.status();
    if (stored.ok()) {
      for (const auto& c : *stored) out[c.uuid()] = c.state();
    }
    return out;
  }

  FakeClock clock_;
  std::unique_ptr<SqliteStore> sqlite_ = OpenStore();
  FaultInjectingStore faulty_{*sqlite_};
  std::unique_ptr<ManagerHarness> h_;
};

TEST_F(ModelRegistryTest, ModelsAreUniqueByNameAndPatchedAndListed) {
  clock_.Advance(absl::Seconds(5));
  auto m = Create("mnist");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->name(), "mnist");
  EXPECT_EQ(m->username(), "alice");
  EXPECT_EQ(m->creation_time_ms(), clock_.NowMs());
  EXPECT_EQ(m->num_versions(), 0);
  EXPECT_THAT(Create("mnist").status(),
              StatusIs(absl::StatusCode::kAlreadyExists, "model 'mnist' already exists"));
  EXPECT_THAT(Create("a/b").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "model name 'a/b': use 1 to 128"));
  v1::CreateModelRequest bad;
  bad.set_name("meta");
  bad.set_metadata_json("[1]");
  absl::StatusOr<v1::Model> refused;
  h_->Turn([&] { refused = h_->models.Create(bad, ""); });
  EXPECT_THAT(refused.status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "metadata: expected a JSON object"));
  ASSERT_TRUE(Create("cifar", "bob").ok());

  clock_.Advance(absl::Seconds(5));
  v1::PatchModelRequest patch;
  patch.set_name("mnist");
  patch.set_description("handwritten digits");
  patch.add_add_labels("cnn");
  patch.add_add_labels("prod");  // Already there: once.
  patch.add_remove_labels("nope");
  patch.set_metadata_json(R"({"owner":"team-a"})");
  absl::StatusOr<v1::Model> patched;
  h_->Turn([&] { patched = h_->models.Patch(patch); });
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ(patched->description(), "handwritten digits");
  EXPECT_THAT(patched->labels(), ElementsAre("prod", "cnn"));
  EXPECT_EQ(patched->last_updated_time_ms(), clock_.NowMs());
  patch.Clear();
  patch.set_name("mnist");
  patch.add_remove_labels("prod");
  h_->Turn([&] { patched = h_->models.Patch(patch); });
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_THAT(patched->labels(), ElementsAre("cnn"));
  EXPECT_EQ(patched->description(), "handwritten digits");  // Unset fields are kept.

  std::vector<v1::Model> all, prod, bobs;
  h_->Turn([&] {
    all = h_->models.List({});
    v1::ListModelsRequest req;
    req.add_labels("prod");
    prod = h_->models.List(req);
    req.Clear();
    req.set_user("bob");
    bobs = h_->models.List(req);
  });
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].name(), "mnist");  // By id.
  ASSERT_EQ(prod.size(), 1u);
  EXPECT_EQ(prod[0].name(), "cifar");
  ASSERT_EQ(bobs.size(), 1u);
  EXPECT_EQ(bobs[0].username(), "bob");

  // Stored before answered: a refused write changes nothing.
  faulty_.FailWrites(true);
  EXPECT_THAT(Create("later").status(), StatusIs(absl::StatusCode::kUnavailable, "InsertModel"));
  faulty_.FailWrites(false);
  RestartMaster();
  absl::StatusOr<v1::Model> back;
  h_->Turn([&] { back = h_->models.Get("mnist"); });
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_THAT(back->labels(), ElementsAre("cnn"));
  EXPECT_EQ(back->metadata_json(), R"({"owner":"team-a"})");
  h_->Turn([&] { back = h_->models.Get("later"); });
  EXPECT_THAT(back.status(), StatusIs(absl::StatusCode::kNotFound, "model 'later' does not exist"));
}

// Versions are numbered per model (the highest + 1), carry their checkpoint as the master
// has it, and keep that checkpoint from every deletion: the policy's garbage collection
// passes it over, det checkpoint delete and det experiment delete are refused naming the
// model and version, across a restart, until the version is deleted.
TEST_F(ModelRegistryTest, AVersionsCheckpointIsNeverDeleted) {
  std::string session = h_->Register("a1", 1);
  const int64_t trial = h_->CreateExperiment("gc");
  const int64_t experiment = h_->Trial(trial).experiment_id();
  v1::LaunchCommand launch = h_->NextLaunch("a1", session);
  for (int b : {10, 20, 30}) {
    ASSERT_TRUE(h_->ReportCheckpoint(launch, absl::StrCat("c-", b), b).ok());
  }
  ASSERT_TRUE(Create("mnist").ok());
  EXPECT_THAT(Register("nope", "c-10").status(),
              StatusIs(absl::StatusCode::kNotFound, "model 'nope' does not exist"));
  EXPECT_THAT(Register("mnist", "c-99").status(),
              StatusIs(absl::StatusCode::kNotFound, "checkpoint c-99 not found"));
  auto v1 = Register("mnist", "c-10");
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_EQ(v1->version(), 1);
  EXPECT_EQ(v1->model_name(), "mnist");
  EXPECT_EQ(v1->checkpoint().uuid(), "c-10");
  EXPECT_EQ(v1->checkpoint().total_batches(), 10);
  EXPECT_EQ(v1->checkpoint().experiment_id(), experiment);
  EXPECT_EQ(WhyProtected("c-10"), "version 1 of model 'mnist'");
  EXPECT_EQ(WhyProtected("c-20"), "");

  // The trial ends: the policy (save_trial_latest 1, save_trial_best 1 of no metric) would
  // delete c-10 and c-20; c-10 is a model version.
  ASSERT_TRUE(h_->ReportExit("a1", session, launch.allocation_id(), 0).ok());
  v1::LaunchCommand gc = h_->NextLaunch("a1", session);
  ASSERT_EQ(gc.checkpoint_gc().checkpoints_size(), 1);
  EXPECT_EQ(gc.checkpoint_gc().checkpoints(0).uuid(), "c-20");
  // A checkpoint a GC task is deleting cannot be registered; once gone, neither.
  EXPECT_THAT(Register("mnist", "c-20").status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "checkpoint c-20 is being deleted"));
  ASSERT_TRUE(h_->ReportExit("a1", session, gc.allocation_id(), 0).ok());
  EXPECT_THAT(Register("mnist", "c-20").status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "checkpoint c-20 was deleted"));
  EXPECT_EQ(CheckpointStates(trial),
            (std::map<std::string, v1::State>{{"c-10", v1::STATE_COMPLETED},
                                              {"c-20", v1::STATE_DELETED},
                                              {"c-30", v1::STATE_COMPLETED}}));

  EXPECT_THAT(DeleteCheckpoint("c-10"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "checkpoint c-10 is version 1 of model 'mnist': a registered checkpoint "
                       "is never deleted; delete the model version first"));
  EXPECT_THAT(DeleteExperiment(experiment),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("experiment ", experiment, " cannot be deleted: its "
                                    "checkpoint c-10 is version 1 of model 'mnist'")));
  EXPECT_TRUE(h_->GcTasks().size() == 1u);  // Only the policy's, ended: nothing was queued.

  auto v2 = Register("mnist", "c-30");
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->version(), 2);

  RestartMaster();
  EXPECT_EQ(WhyProtected("c-10"), "version 1 of model 'mnist'");
  absl::StatusOr<std::vector<v1::ModelVersion>> versions;
  absl::StatusOr<v1::ModelVersion> latest;
  h_->Turn([&] {
    versions = h_->models.Versions("mnist");
    latest = h_->models.Version("mnist", 0);
  });
  ASSERT_TRUE(versions.ok()) << versions.status();
  ASSERT_EQ(versions->size(), 2u);
  EXPECT_EQ((*versions)[0].checkpoint().uuid(), "c-10");
  EXPECT_EQ((*versions)[0].checkpoint().state(), v1::STATE_COMPLETED);
  EXPECT_EQ((*versions)[0].notes(), "notes of c-10");
  EXPECT_EQ((*versions)[1].version(), 2);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->version(), 2);
  EXPECT_EQ(latest->checkpoint().total_batches(), 30);

  // Deleting version 2 and registering again gives the highest + 1 (2).
  ASSERT_TRUE(DeleteVersion("mnist", 2).ok());
  EXPECT_THAT(DeleteVersion("mnist", 2),
              StatusIs(absl::StatusCode::kNotFound, "model 'mnist' has no version 2"));
  auto again = Register("mnist", "c-30");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->version(), 2);

  // Once no version names it, c-10 may be deleted; deleting the model frees c-30.
  ASSERT_TRUE(DeleteVersion("mnist", 1).ok());
  EXPECT_EQ(WhyProtected("c-10"), "");
  EXPECT_TRUE(DeleteCheckpoint("c-10").ok());
  absl::Status deleted;
  h_->Turn([&] { deleted = h_->models.Delete("mnist"); });
  ASSERT_TRUE(deleted.ok()) << deleted;
  EXPECT_EQ(WhyProtected("c-30"), "");
  h_->Turn([&] { latest = h_->models.Version("mnist", 0); });
  EXPECT_THAT(latest.status(), StatusIs(absl::StatusCode::kNotFound, "model 'mnist' does not exist"));
}

TEST_F(ModelRegistryTest, TheLatestVersionOfAModelWithoutVersionsIsNotFound) {
  ASSERT_TRUE(Create("empty").ok());
  absl::StatusOr<v1::ModelVersion> latest;
  h_->Turn([&] { latest = h_->models.Version("empty", 0); });
  EXPECT_THAT(latest.status(),
              StatusIs(absl::StatusCode::kNotFound, "model 'empty' has no versions"));
  h_->Turn([&] { latest = h_->models.Version("empty", 3); });
  EXPECT_THAT(latest.status(),
              StatusIs(absl::StatusCode::kNotFound, "model 'empty' has no version 3"));
}

TEST_F(ModelRegistryTest, AVersionIsPatchedStoredAndItsOwnerRenamed) {
  std::string session = h_->Register("a1", 1);
  const int64_t trial = h_->CreateExperiment("patch");
  v1::LaunchCommand launch = h_->NextLaunch("a1", session);
  ASSERT_TRUE(h_->ReportCheckpoint(launch, "c-10", 10).ok());
  ASSERT_TRUE(Create("mnist").ok());
  ASSERT_TRUE(Register("mnist", "c-10").ok());
  (void)trial;

  auto patch = [&](const v1::PatchModelVersionRequest& req) {
    absl::StatusOr<v1::ModelVersion> out = absl::UnknownError("not run");
    h_->Turn([&] { out = h_->models.PatchVersion(req); });
    return out;
  };
  clock_.Advance(absl::Seconds(7));
  v1::PatchModelVersionRequest req;
  req.set_model_name("mnist");
  req.set_version(1);
  req.set_name("best");
  req.set_comment("from the grid");
  req.add_add_labels("prod");
  req.add_add_labels("candidate");
  req.add_add_labels("prod");
  auto patched = patch(req);
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ(patched->name(), "best");
  EXPECT_EQ(patched->comment(), "from the grid");
  EXPECT_EQ(patched->notes(), "notes of c-10");  // not set: kept
  EXPECT_THAT(patched->labels(), ElementsAre("prod", "candidate"));
  EXPECT_EQ(patched->model_name(), "mnist");
  EXPECT_EQ(patched->checkpoint().uuid(), "c-10");

  v1::PatchModelVersionRequest more;
  more.set_model_name("mnist");
  more.set_version(1);
  more.add_remove_labels("prod");
  more.set_notes("");
  more.set_metadata_json(R"({"stage": "staging"})");
  patched = patch(more);
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_THAT(patched->labels(), ElementsAre("candidate"));
  EXPECT_EQ(patched->notes(), "");
  EXPECT_EQ(patched->name(), "best");

  // Errors name the field or the version.
  v1::PatchModelVersionRequest bad = more;
  bad.set_metadata_json("[1]");
  EXPECT_THAT(patch(bad).status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("metadata: expected a JSON object")));
  bad = more;
  bad.add_add_labels("");
  EXPECT_THAT(patch(bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "add_labels: a label is empty"));
  bad = more;
  bad.set_version(2);
  EXPECT_THAT(patch(bad).status(),
              StatusIs(absl::StatusCode::kNotFound, "model 'mnist' has no version 2"));
  bad.set_version(0);
  EXPECT_THAT(patch(bad).status(),
              StatusIs(absl::StatusCode::kNotFound, "model 'mnist' has no version 0"));
  bad.set_model_name("nope");
  EXPECT_THAT(patch(bad).status(),
              StatusIs(absl::StatusCode::kNotFound, "model 'nope' does not exist"));
  // A failed write changes nothing.
  faulty_.FailWrites(true, "UpdateModelVersion");
  v1::PatchModelVersionRequest lost = more;
  lost.set_name("lost");
  EXPECT_FALSE(patch(lost).ok());
  faulty_.FailWrites(false, "UpdateModelVersion");

  // A user renamed: the model and version follow.
  absl::Status renamed;
  h_->Turn([&] { renamed = h_->models.RenameOwner("alice", "alicia"); });
  ASSERT_TRUE(renamed.ok()) << renamed;

  // All of it is stored: a restarted master has it.
  RestartMaster();
  absl::StatusOr<v1::ModelVersion> stored;
  h_->Turn([&] { stored = h_->models.Version("mnist", 1); });
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->name(), "best");
  EXPECT_EQ(stored->comment(), "from the grid");
  EXPECT_THAT(stored->labels(), ElementsAre("candidate"));
  EXPECT_EQ(stored->metadata_json(), R"({"stage": "staging"})");
  EXPECT_EQ(stored->username(), "alicia");
  absl::StatusOr<v1::Model> model;
  h_->Turn([&] { model = h_->models.Get("mnist"); });
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(model->username(), "alicia");
  EXPECT_EQ(model->last_updated_time_ms(), stored->creation_time_ms() + 7000);
}

}  // namespace
}  // namespace det::master
