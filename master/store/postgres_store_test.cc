// PostgresStore beyond the conformance suite: a server that stops and comes back, a
// schema newer than the master's, an unreachable server. A real PostgreSQL per test.
#include "master/store/postgres_store.h"

#include <postgresql/libpq-fe.h>

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

// A flush is one statement per table (array parameters): awkward text, bytes and a trial
// listed twice or missing keep the meaning of one statement per row.
TEST_F(PostgresStoreTest, BatchedFlushesKeepEveryValueAndError) {
  auto store = PostgresStore::Open(url_);
  ASSERT_TRUE(store.ok()) << store.status();
  v1::Experiment e;
  std::vector<v1::Trial> trials = {QueuedTrial(0), QueuedTrial(0)};
  ASSERT_TRUE((*store)->InsertExperiment(e, "ctx", &trials).ok());
  const std::vector<std::string> awkward = {
      "", "NULL", "a\"b", "back\\slash", "{x,y}", " spaced ", "\xc3\xa9t\xc3\xa9", "\\\"\\"};
  std::vector<v1::Metrics> rows;
  for (size_t i = 0; i < awkward.size(); ++i) {
    v1::Metrics& m = rows.emplace_back();
    m.set_trial_id(trials[i % 2].id());
    m.set_group(awkward[i]);
    m.set_total_batches(static_cast<int64_t>(i) * 10);
    m.set_report_time_ms(-5 + static_cast<int64_t>(i));
    m.set_run_id(static_cast<int32_t>(i % 3));
    (*m.mutable_values())[awkward[i] + "k"] = 0.1 * static_cast<double>(i);
  }
  trials[0].set_state(v1::STATE_ACTIVE);
  trials[0].set_total_batches(70);
  v1::Trial stale = trials[0];
  stale.set_total_batches(1);
  // trials[0] listed twice: its last version is what stays.
  ASSERT_TRUE((*store)->AddMetrics({stale, trials[1], trials[0]}, rows).ok());
  for (int t = 0; t < 2; ++t) {
    auto got = (*store)->GetMetrics(trials[t].id(), "");
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), awkward.size() / 2);
    for (size_t j = 0; j < got->size(); ++j) {
      const v1::Metrics& want = rows[t + 2 * j];
      EXPECT_EQ((*got)[j].group(), want.group());
      EXPECT_EQ((*got)[j].total_batches(), want.total_batches());
      EXPECT_EQ((*got)[j].report_time_ms(), want.report_time_ms());
      EXPECT_EQ((*got)[j].run_id(), want.run_id());
      EXPECT_EQ((*got)[j].values().at(want.group() + "k"), 0.1 * static_cast<double>(t + 2 * j));
    }
  }
  auto snap = (*store)->Load();
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->trials.size(), 2u);
  EXPECT_EQ(snap->trials[0].state(), v1::STATE_ACTIVE);
  EXPECT_EQ(snap->trials[0].total_batches(), 70);

  // A missing trial among several: NotFound naming it, and nothing of the flush written.
  v1::Trial missing = trials[1];
  missing.set_id(9999);
  EXPECT_THAT((*store)->AddMetrics({trials[0], missing, trials[1]}, rows),
              StatusIs(absl::StatusCode::kNotFound, "trial 9999 not in the database"));
  EXPECT_EQ((*store)->GetMetrics(trials[0].id(), "")->size(), 4u);

  std::vector<v1::LogLine> lines;
  for (size_t i = 0; i < awkward.size(); ++i) {
    v1::LogLine& l = lines.emplace_back();
    l.set_trial_id(trials[0].id());
    l.set_allocation_id(awkward[i]);
    l.set_agent_id(awkward[awkward.size() - 1 - i]);
    l.set_stream(awkward[i]);
    l.set_rank(static_cast<int32_t>(i));
    l.set_time_ms(static_cast<int64_t>(i));
    l.set_message(std::string("bytes \0 \" \\ ", 12) + awkward[i]);
  }
  ASSERT_TRUE((*store)->AddLogs(&lines).ok());
  auto logs = (*store)->GetLogs(trials[0].id(), 0, 100, std::nullopt);
  ASSERT_TRUE(logs.ok()) << logs.status();
  ASSERT_EQ(logs->size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ((*logs)[i].id(), lines[i].id());
    EXPECT_EQ((*logs)[i].SerializeAsString(), lines[i].SerializeAsString())
        << (*logs)[i].DebugString();
  }
}

// Runs `sql` on the database at `url` through libpq; the first column of each row.
std::vector<std::string> Sql(const std::string& url, const std::string& sql) {
  PGconn* conn = PQconnectdb(url.c_str());
  EXPECT_EQ(PQstatus(conn), CONNECTION_OK) << PQerrorMessage(conn);
  PGresult* res = PQexec(conn, sql.c_str());
  EXPECT_TRUE(PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK)
      << PQerrorMessage(conn) << sql;
  std::vector<std::string> out;
  for (int i = 0; i < PQntuples(res); ++i) out.emplace_back(PQgetvalue(res, i, 0));
  PQclear(res);
  PQfinish(conn);
  return out;
}

// The database as migration 10 left it, with metric rows of the old table (one SQL row
// each, ids 5, 6, 7, 9), at schema `version` (10; or 11, as builds whose migration 11 did
// nothing left it).
void MakeOldMetricsTable(const std::string& url, int version) {
  auto store = PostgresStore::Open(url);
  ASSERT_TRUE(store.ok()) << store.status();
  v1::Experiment e;
  std::vector<v1::Trial> trials(2);
  ASSERT_TRUE((*store)->InsertExperiment(e, "ctx", &trials).ok());
  Sql(url, absl::StrCat(R"sql(
DROP VIEW metrics;
DROP TABLE metric_records;
CREATE TABLE metrics (
  id BIGINT PRIMARY KEY,
  trial_id BIGINT NOT NULL,
  run_id BIGINT NOT NULL,
  grp TEXT NOT NULL,
  total_batches BIGINT NOT NULL,
  time_ms BIGINT NOT NULL,
  vals TEXT NOT NULL);
CREATE INDEX metrics_by_trial ON metrics(trial_id, grp, id);
INSERT INTO metrics VALUES
  (5, 1, 0, 'training', 10, 100, '{"loss":0.5}'),
  (6, 2, 0, 'training', 10, 101, '{"loss":"NaN"}'),
  (7, 1, 1, 'validation', 20, 102, '{"acc":0.75}'),
  (9, 1, 1, 'training', 30, 103, '{"loss":0.25,"lr":"Infinity"}');
DELETE FROM id_sequences WHERE name = 'metric_records';
INSERT INTO id_sequences (name, last) VALUES ('metrics', 9);
UPDATE schema_version SET version = )sql",
                        version));
}

TEST_F(PostgresStoreTest, MigrationElevenMakesTheOldMetricRowsRecordsInTheirOrder) {
  for (int version : {10, 11}) {
    SCOPED_TRACE(absl::StrCat("schema version ", version));
    auto url = server_->CreateDatabase(absl::StrCat("old", version));
    ASSERT_TRUE(url.ok()) << url.status();
    MakeOldMetricsTable(*url, version);
    auto store = PostgresStore::Open(*url);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ((*store)->SchemaVersion(), kStoreSchemaVersion);
    auto rows = (*store)->GetMetrics(1, "");
    ASSERT_TRUE(rows.ok()) << rows.status();
    ASSERT_EQ(rows->size(), 3u);
    EXPECT_EQ((*rows)[0].group(), "training");
    EXPECT_EQ((*rows)[0].total_batches(), 10);
    EXPECT_EQ((*rows)[0].report_time_ms(), 100);
    EXPECT_EQ((*rows)[0].values().at("loss"), 0.5);
    EXPECT_EQ((*rows)[1].group(), "validation");
    EXPECT_EQ((*rows)[1].run_id(), 1);
    EXPECT_EQ((*rows)[1].values().at("acc"), 0.75);
    EXPECT_EQ((*rows)[2].total_batches(), 30);
    EXPECT_EQ((*rows)[2].values().at("lr"), std::numeric_limits<double>::infinity());
    auto other = (*store)->GetMetrics(2, "training");
    ASSERT_TRUE(other.ok()) << other.status();
    ASSERT_EQ(other->size(), 1u);
    EXPECT_TRUE(std::isnan(other->at(0).values().at("loss")));
    // New rows go after the old ones (ids from the old rows' sequence), in every read.
    v1::Metrics later;
    later.set_trial_id(1);
    later.set_group("training");
    later.set_total_batches(40);
    ASSERT_TRUE((*store)->AddMetrics({}, {later}).ok());
    auto training = (*store)->GetMetrics(1, "training");
    ASSERT_TRUE(training.ok()) << training.status();
    ASSERT_EQ(training->size(), 3u);
    EXPECT_EQ(training->back().total_batches(), 40);
    auto reader = (*store)->OpenReader();
    ASSERT_TRUE(reader.ok()) << reader.status();
    auto last = (*reader)->GetTrialMetrics(1, "training", 1);
    ASSERT_TRUE(last.ok()) << last.status();
    ASSERT_EQ(last->size(), 1u);
    EXPECT_EQ(last->at(0).total_batches(), 40);
    // The view `metrics` shows the records as the old table's rows, for psql.
    EXPECT_THAT(Sql(*url, "SELECT id || ' ' || run_id || ' ' || grp || ' ' || total_batches || "
                          "' ' || time_ms || ' ' || vals FROM metrics WHERE trial_id = 1 "
                          "ORDER BY id"),
                ::testing::ElementsAre("20480 0 training 10 100 {\"loss\":0.5}",
                                       "28672 1 validation 20 102 {\"acc\":0.75}",
                                       "36864 1 training 30 103 {\"loss\":0.25,\"lr\":\"Infinity\"}",
                                       "40960 0 training 40 0 {}"));
  }
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
