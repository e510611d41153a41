// det-master migrate-db: an SQLite database with a row in every table, copied into a real
// PostgreSQL, reads back the same through PostgresStore; ids go on; a second copy into the
// same database is refused.
#include "master/store/migrate_db.h"

#include <google/protobuf/util/message_differencer.h>
#include <unistd.h>

#include <cstdlib>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/postgres_store.h"
#include "master/store/sqlite_store.h"
#include "master/store/testing/postgres_server.h"

namespace det::master {
namespace {

using ::det::testing::StatusIs;
using ::google::protobuf::util::MessageDifferencer;

template <typename M>
void ExpectSame(const std::vector<M>& a, const std::vector<M>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(MessageDifferencer::Equals(a[i], b[i])) << a[i].DebugString() << b[i].DebugString();
  }
}

// Fills `store` with rows of every table.
void Fill(Store* store) {
  v1::Experiment e;
  e.set_name("mnist");
  e.set_config_yaml("name: mnist\n");
  e.set_state(v1::STATE_ACTIVE);
  std::vector<v1::Trial> trials(2);
  ASSERT_TRUE(store->InsertExperiment(e, std::string("ctx\0bytes", 9), &trials).ok());
  v1::Allocation a;
  a.set_id("1.0");
  a.set_trial_id(1);
  a.set_state(v1::STATE_RUNNING);
  ASSERT_TRUE(store->UpsertAllocation(a, "token").ok());
  v1::Agent agent;
  agent.set_id("agent-1");
  ASSERT_TRUE(store->SetAgentCredential(agent, "hash").ok());
  v1::Metrics m;
  m.set_trial_id(1);
  m.set_group("training");
  m.set_total_batches(10);
  (*m.mutable_values())["loss"] = 0.5;
  (*m.mutable_values())["inf"] = std::numeric_limits<double>::infinity();
  ASSERT_TRUE(store->AddMetrics({trials[0]}, {m, m}).ok());
  std::vector<v1::LogLine> lines(3);
  for (auto& l : lines) {
    l.set_trial_id(1);
    l.set_message("line");
  }
  ASSERT_TRUE(store->AddLogs(&lines).ok());
  v1::Checkpoint c;
  c.set_uuid("c1");
  c.set_trial_id(1);
  ASSERT_TRUE(store->AddCheckpoint(c, trials[0]).ok());
  bool created = false;
  ASSERT_TRUE(store->PutTemplate("t", "x: 1\n", "alice", 5, &created).ok());
  UserRow u;
  u.username = "alice";
  u.password_hash = "argon";
  ASSERT_TRUE(store->InsertUser(u).ok());
  ASSERT_TRUE(store->InsertSession({"tok", 1, 1, 1LL << 50}).ok());
  v1::CheckpointGcTask gc;
  gc.set_experiment_id(1);
  ASSERT_TRUE(store->InsertCheckpointGcTask(gc).ok());
  v1::Model model;
  model.set_name("resnet");
  auto model_id = store->InsertModel(model);
  ASSERT_TRUE(model_id.ok());
  model.set_id(*model_id);
  v1::ModelVersion v;
  v.set_model_id(*model_id);
  v.set_version(1);
  v.set_checkpoint_uuid("c1");
  ASSERT_TRUE(store->InsertModelVersion(v, model).ok());
  v1::SystemMetrics sm;
  sm.set_agent_id("agent-1");
  sm.set_time_ms(100);
  ASSERT_TRUE(store->AddSystemMetrics({sm}, 0).ok());
}

TEST(MigrateDb, EveryTableIsCopiedAndIdsGoOn) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp ? tmp : "/tmp", "/migrate-", getpid(), ".db");
  unlink(path.c_str());
  {
    auto sqlite = SqliteStore::Open(path);
    ASSERT_TRUE(sqlite.ok()) << sqlite.status();
    ASSERT_TRUE((*sqlite)->Load().ok());  // The cluster id, as a master's first start.
    Fill(sqlite->get());
    // Metric rows in four records.
    for (int64_t batches : {20, 30, 40}) {
      v1::Metrics m;
      m.set_trial_id(1);
      m.set_group("training");
      m.set_total_batches(batches);
      m.set_report_time_ms(batches);
      ASSERT_TRUE((*sqlite)->AddMetrics({}, {m}).ok());
    }
    // A deleted row's id is not reused after the copy either.
    ASSERT_TRUE((*sqlite)->InsertTrial([] {
                           v1::Trial t;
                           t.set_experiment_id(1);
                           return t;
                         }())
                    .ok());
  }
  auto server = testing::PostgresServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  auto url = (*server)->CreateDatabase("det");
  ASSERT_TRUE(url.ok()) << url.status();

  auto copied = CopySqliteToPostgres(path, *url);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_GT(*copied, 15);

  auto sqlite = SqliteStore::Open(path);
  ASSERT_TRUE(sqlite.ok());
  auto pg = PostgresStore::Open(*url);
  ASSERT_TRUE(pg.ok()) << pg.status();
  auto a = (*sqlite)->Load();
  auto b = (*pg)->Load();
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  EXPECT_EQ(a->cluster_id, b->cluster_id);
  ExpectSame(a->experiments, b->experiments);
  ExpectSame(a->trials, b->trials);
  ExpectSame(a->agents, b->agents);
  EXPECT_EQ(a->agent_credential_hashes, b->agent_credential_hashes);
  ExpectSame(a->checkpoint_gc_tasks, b->checkpoint_gc_tasks);
  ExpectSame(a->models, b->models);
  ExpectSame(a->model_versions, b->model_versions);
  ASSERT_EQ(b->open_allocations.size(), 1u);
  EXPECT_EQ(b->open_allocations[0].second, "token");
  EXPECT_EQ(*(*pg)->GetExperimentContext(1), std::string("ctx\0bytes", 9));
  EXPECT_EQ(*(*pg)->GetExperimentContextSha256(1), *(*sqlite)->GetExperimentContextSha256(1));
  ExpectSame(*(*sqlite)->GetMetrics(1, ""), *(*pg)->GetMetrics(1, ""));
  ExpectSame(*(*sqlite)->GetLogs(1, 0, 100, std::nullopt), *(*pg)->GetLogs(1, 0, 100, std::nullopt));
  ExpectSame(*(*sqlite)->GetCheckpoints(1), *(*pg)->GetCheckpoints(1));
  ExpectSame(*(*sqlite)->ListTemplates(), *(*pg)->ListTemplates());
  ExpectSame(*(*sqlite)->GetSystemMetrics("agent-1", 10), *(*pg)->GetSystemMetrics("agent-1", 10));
  ASSERT_EQ((*pg)->ListUsers()->size(), 1u);
  EXPECT_EQ((*pg)->ListUsers()->at(0).password_hash, "argon");
  EXPECT_EQ((*pg)->LoadSessions(0)->size(), 1u);
  // Ids go on from SQLite's: trial 3 was taken.
  v1::Trial next;
  next.set_experiment_id(1);
  EXPECT_EQ(*(*pg)->InsertTrial(next), 4);
  std::vector<v1::LogLine> more(1);
  more[0].set_trial_id(1);
  ASSERT_TRUE((*pg)->AddLogs(&more).ok());
  EXPECT_EQ(more[0].id(), 4);
  // Metric rows stored on PostgreSQL after the copy come after the copied ones (records'
  // ids go on from SQLite's largest), in every read.
  std::vector<v1::Metrics> want = *(*sqlite)->GetMetrics(1, "");
  ASSERT_EQ(want.size(), 5u);
  v1::Metrics later;
  later.set_trial_id(1);
  later.set_group("training");
  later.set_total_batches(99);
  (*later.mutable_values())["loss"] = 0.25;
  ASSERT_TRUE((*pg)->AddMetrics({}, {later}).ok());
  want.push_back(later);
  ExpectSame(*(*pg)->GetMetrics(1, ""), want);
  auto reader = (*pg)->OpenReader();
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto ends = (*reader)->GetTrialMetrics(1, "training", 2);
  ASSERT_TRUE(ends.ok()) << ends.status();
  ExpectSame(*ends, {want.front(), want.back()});

  EXPECT_THAT(CopySqliteToPostgres(path, *url).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "the PostgreSQL database is not empty (table experiments has rows)"));
}

}  // namespace
}  // namespace det::master
