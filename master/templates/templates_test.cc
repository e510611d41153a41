#include "master/templates/templates.h"

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock/clock.h"
#include "common/config/experiment_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/in_memory_store.h"
#include "master/store/sqlite_store.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;

std::string TempDb(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  for (const char* suffix : {"", "-wal", "-shm"}) unlink((path + suffix).c_str());
  return path;
}

class TemplatesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempDb("templates.db");
    Open();
  }
  void Open() {
    templates_.reset();
    store_.reset();
    auto store = SqliteStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    templates_ = std::make_unique<Templates>(*store_, clock_);
  }

  std::string path_;
  FakeClock clock_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<Templates> templates_;
};

TEST_F(TemplatesTest, SetReplacesAndSurvivesReopen) {
  bool created = false;
  auto t = templates_->Set("base", "description: one\n", "base.yaml", "alice", &created);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(created);
  const int64_t first = t->create_time_ms();
  clock_.Advance(absl::Seconds(5));
  t = templates_->Set("base", "description: two\n", "", "bob", &created);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(created);
  EXPECT_EQ(t->create_time_ms(), first);
  EXPECT_EQ(t->update_time_ms(), first + 5000);
  EXPECT_EQ(t->owner(), "alice");  // A replacement keeps the owner.
  ASSERT_TRUE(templates_->Set("a-first", "labels: [x]\n", "", "", &created).ok());

  Open();
  auto got = templates_->Get("base");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->config_yaml(), "description: two\n");
  EXPECT_EQ(got->create_time_ms(), first);
  EXPECT_EQ(got->owner(), "alice");
  auto all = templates_->List();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].name(), "a-first");
  EXPECT_EQ((*all)[1].name(), "base");

  EXPECT_TRUE(templates_->Remove("base").ok());
  absl::Status again = templates_->Remove("base");
  EXPECT_EQ(again.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(again.message(), "template 'base' does not exist");
  EXPECT_EQ(templates_->Get("base").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(TemplatesTest, RefusesWhatCannotBeUsed) {
  bool created;
  struct Case {
    std::string name, yaml, source, message;
  };
  const std::vector<Case> cases = {
      {"a b", "description: x\n", "", "template name 'a b': use 1 to 128 letters"},
      {"", "description: x\n", "", "template name '': use 1 to 128"},
      {"-x", "description: x\n", "", "starting with a letter or a digit"},
      {"t", "description: x\ntemplate: other\n", "t.yaml",
       "t.yaml:2: template: a template cannot use another template (it names 'other')"},
      {"t", "[1, 2]\n", "", "template t:1: template t must be a mapping of keys to values"},
      {"t", "resources:\n  slots_per_trial: eight\n", "t.yaml",
       "t.yaml:2: resources.slots_per_trial: expected an integer >= 0, got \"eight\""},
      {"t", "checkpoint_storage:\n  type: s3\n", "",
       "template t:2: checkpoint_storage.type: expected shared_fs"},
      {"t", "resoures: {}\n", "", "template t:1: resoures: unknown key (did you mean 'resources'?)"},
      {"t", "a: [unclosed\n", "t.yaml", "t.yaml:2: malformed YAML"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.yaml);
    auto t = templates_->Set(c.name, c.yaml, c.source, "", &created);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), HasSubstr(c.message));
  }
  EXPECT_TRUE(templates_->List()->empty());
}

TEST_F(TemplatesTest, ExperimentsMergeTheStoredTemplate) {
  bool created;
  ASSERT_TRUE(templates_->Set("base", "resources: {slots_per_trial: 2}\nlabels: [from-template]\n",
                              "", "", &created).ok());
  config::ConfigInput input;
  input.config_yaml = "entrypoint: x\nsearcher: {name: single, metric: m, max_length: {batches: 1}}\nlabels: [mine]\n";
  input.config_path = "exp.yaml";
  input.template_name = "base";
  auto parsed = config::ParseExperimentConfig(input, templates_->Lookup(), 3);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->config.resources.slots_per_trial, 2);
  EXPECT_EQ(parsed->config.labels, (std::vector<std::string>{"from-template", "mine"}));
  EXPECT_EQ(parsed->template_name, "base");

  input.template_name = "missing";
  auto missing = config::ParseExperimentConfig(input, templates_->Lookup(), 3);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("template 'missing' does not exist"));
}

// det user rename: a renamed user's templates follow the new name, stored with the rename
// (Store::SetUsername), in SQLite as in memory; others' stay theirs, and a refused rename
// (a taken name) moves none.
TEST_F(TemplatesTest, ARenamedUsersTemplatesFollowTheNewName) {
  InMemoryStore memory;
  Templates in_memory(memory, clock_);
  const std::vector<std::pair<Store*, Templates*>> backends = {{store_.get(), templates_.get()},
                                                                {&memory, &in_memory}};
  for (const auto& [store, templates] : backends) {
    UserRow bob;
    bob.username = "bob";
    bob.password_hash = "x";
    absl::StatusOr<int64_t> id = store->InsertUser(bob);
    ASSERT_TRUE(id.ok()) << id.status();
    UserRow alice = bob;
    alice.username = "alice";
    ASSERT_TRUE(store->InsertUser(alice).ok());
    bool created = false;
    ASSERT_TRUE(templates->Set("bobs", "description: b\n", "", "bob", &created).ok());
    ASSERT_TRUE(templates->Set("alices", "description: a\n", "", "alice", &created).ok());

    ASSERT_TRUE(store->SetUsername(*id, "robert").ok());
    EXPECT_EQ(templates->Get("bobs")->owner(), "robert");
    EXPECT_EQ(templates->Get("alices")->owner(), "alice");
    // Replaced by its owner under the new name, it stays theirs.
    ASSERT_TRUE(templates->Set("bobs", "description: c\n", "", "robert", &created).ok());
    EXPECT_EQ(templates->Get("bobs")->owner(), "robert");

    absl::Status taken = store->SetUsername(*id, "alice");
    EXPECT_EQ(taken.code(), absl::StatusCode::kAlreadyExists) << taken;
    EXPECT_EQ(templates->Get("bobs")->owner(), "robert");
    EXPECT_EQ(templates->Get("alices")->owner(), "alice");
  }
  Open();  // Stored.
  EXPECT_EQ(templates_->Get("bobs")->owner(), "robert");
}

}  // namespace
}  // namespace det::master
