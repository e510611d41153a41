// PostgresStore beyond the conformance suite: a server that stops and comes back, a
// schema newer than the master's, an unreachable server. A real PostgreSQL per test.
#include "master/store/postgres_store.h"

#include <postgresql/libpq-fe.h>

#include <memory>
#include <string>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/schema_version.h"
#include "master/store/testing/postgres_server.h"

namespace det::master {
namespace {

using ::det::testing::StatusIs;

class PostgresStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = testing::PostgresServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    auto url = server_->CreateDatabase("det");
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
  }

  std::unique_ptr<testing::PostgresServer> server_;
  std::string url_;
};

v1::Trial QueuedTrial(int64_t experiment_id) {
  v1::Trial t;
  t.set_experiment_id(experiment_id);
  t.set_state(v1::STATE_QUEUED);
  return t;
}

TEST_F(PostgresStoreTest, CallsFailUnavailableWhileTheServerIsDownAndReconnectAfter) {
  auto store = PostgresStore::Open(url_);
  ASSERT_TRUE(store.ok()) << store.status();
  v1::Experiment e;
  e.set_name("survives");
  std::vector<v1::Trial> trials(1);
  ASSERT_TRUE((*store)->InsertExperiment(e, "ctx", &trials).ok());
  auto reader = (*store)->OpenReader();
  ASSERT_TRUE(reader.ok()) << reader.status();

  ASSERT_TRUE(server_->Stop().ok());
  // Not acknowledged: neither the write nor the reads.
  EXPECT_THAT((*store)->InsertTrial(QueuedTrial(1)).status(),
              StatusIs(absl::StatusCode::kUnavailable, "database"));
  EXPECT_THAT((*store)->Load().status(), StatusIs(absl::StatusCode::kUnavailable, "database"));
  std::vector<v1::Metrics> rows(1);
  rows[0].set_trial_id(1);
  EXPECT_THAT((*store)->AddMetrics({}, rows), StatusIs(absl::StatusCode::kUnavailable, "database"));
  EXPECT_THAT((*reader)->GetMetrics(1, "").status(),
              StatusIs(absl::StatusCode::kUnavailable, "database"));

  ASSERT_TRUE(server_->Restart().ok());
  // The next calls reconnect by themselves; what was acknowledged is there, what failed is
  // not, and ids go on from the acknowledged ones.
  auto snap = (*store)->Load();
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->experiments.size(), 1u);
  EXPECT_EQ(snap->experiments[0].name(), "survives");
  EXPECT_EQ(snap->trials.size(), 1u);
  EXPECT_EQ(*(*store)->InsertTrial(QueuedTrial(1)), 2);
  auto metrics = (*reader)->GetMetrics(1, "");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_TRUE(metrics->empty());
  EXPECT_EQ(*(*reader)->GetExperimentContext(1), "ctx");
}

TEST_F(PostgresStoreTest, EverythingSurvivesReopenAndMigratesOnce) {
  {
    auto store = PostgresStore::Open(url_);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ((*store)->SchemaVersion(), kStoreSchemaVersion);
    v1::Experiment e;
    std::vector<v1::Trial> trials(2);
    ASSERT_TRUE((*store)->InsertExperiment(e, "ctx", &trials).ok());
    v1::Model m;
    m.set_name("resnet");
    ASSERT_TRUE((*store)->InsertModel(m).ok());
  }
  auto store = PostgresStore::Open(url_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->SchemaVersion(), kStoreSchemaVersion);
  auto snap = (*store)->Load();
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(snap->trials.size(), 2u);
  ASSERT_EQ(snap->models.size(), 1u);
  EXPECT_EQ(snap->models[0].name(), "resnet");
  v1::Model again;
  again.set_name("resnet");
  EXPECT_THAT((*store)->InsertModel(again).status(),
              StatusIs(absl::StatusCode::kAlreadyExists, "model 'resnet' already exists"));
}

TEST_F(PostgresStoreTest, ANewerSchemaIsRefused) {
  ASSERT_TRUE(PostgresStore::Open(url_).ok());
  PGconn* conn = PQconnectdb(url_.c_str());
  ASSERT_EQ(PQstatus(conn), CONNECTION_OK) << PQerrorMessage(conn);
  PGresult* res = PQexec(conn, "UPDATE schema_version SET version = 99");
  EXPECT_EQ(PQresultStatus(res), PGRES_COMMAND_OK) << PQerrorMessage(conn);
  PQclear(res);
  PQfinish(conn);
  EXPECT_THAT(PostgresStore::Open(url_).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "database has schema version 99, newer than this master's"));
}

TEST_F(PostgresStoreTest, AnUnreachableServerIsUnavailableAndAMissingDatabaseIsAnError) {
  EXPECT_THAT(PostgresStore::Open(server_->Url("nosuchdb")).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "\"nosuchdb\" does not exist"));
  ASSERT_TRUE(server_->Stop().ok());
  EXPECT_THAT(PostgresStore::Open(url_).status(),
              StatusIs(absl::StatusCode::kUnavailable, "cannot connect to the database"));
}

}  // namespace
}  // namespace det::master
