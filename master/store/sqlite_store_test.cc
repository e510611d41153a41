#include "master/store/sqlite_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <tuple>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include <sqlite3.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  unlink(path.c_str());
  unlink((path + "-wal").c_str());
  unlink((path + "-shm").c_str());
  return path;
}

TEST(SqliteStore, EverythingSurvivesReopen) {
  std::string path = TempPath("reopen.db");
  int64_t exp_id, trial_id;
  std::string cluster_id;
  {
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ((*store)->SchemaVersion(), 11);
    auto snap = (*store)->Load();
    ASSERT_TRUE(snap.ok());
    cluster_id = snap->cluster_id;
    EXPECT_EQ(cluster_id.size(), 32u);

    v1::Experiment e;
    e.set_name("mnist");
    e.set_state(v1::STATE_ACTIVE);
    e.set_config_yaml("name: mnist\n");
    std::vector<v1::Trial> none;
    auto id = (*store)->InsertExperiment(e, "context-bytes", &none);
    ASSERT_TRUE(id.ok()) << id.status();
    exp_id = *id;
    // What det e archive, set name|description and label add change.
    e.set_id(exp_id);
    e.set_state(v1::STATE_COMPLETED);
    e.set_archived(true);
    e.set_name("mnist-renamed");
    e.set_description("why");
    e.add_labels("a");
    e.add_labels("b");
    ASSERT_TRUE((*store)->UpdateExperiment(e).ok());
    bool created = false;
    ASSERT_TRUE((*store)->PutTemplate("base", "description: x\n", "alice", 1, &created).ok());
    ASSERT_TRUE(created);
    // A replacement keeps the owner.
    ASSERT_TRUE((*store)->PutTemplate("base", "description: y\n", "bob", 2, &created).ok());

    v1::Trial t;
    t.set_experiment_id(exp_id);
    t.set_state(v1::STATE_RUNNING);
    t.set_seed(17);
    auto tid = (*store)->InsertTrial(t);
    ASSERT_TRUE(tid.ok()) << tid.status();
    trial_id = *tid;
    t.set_id(trial_id);

    v1::Metrics m;
    m.set_trial_id(trial_id);
    m.set_group("validation");
    m.set_total_batches(100);
    (*m.mutable_values())["accuracy"] = 0.875;
    (*t.mutable_validation_summary())["accuracy"].set_last(0.875);
    ASSERT_TRUE((*store)->AddMetrics({t}, {m}).ok());

    v1::Allocation a;
    a.set_id("alloc-1");
    a.set_trial_id(trial_id);
    a.set_state(v1::STATE_RUNNING);
    ASSERT_TRUE((*store)->UpsertAllocation(a, "tok").ok());

    std::vector<v1::LogLine> lines(3);
    for (int i = 0; i < 3; ++i) {
      lines[i].set_trial_id(trial_id);
      lines[i].set_rank(i % 2);
      lines[i].set_message("line " + std::to_string(i));
    }
    ASSERT_TRUE((*store)->AddLogs(&lines).ok());
    EXPECT_LT(lines[0].id(), lines[2].id());
  }
  auto store = SqliteStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->CheckIntegrity().ok());
  auto snap = (*store)->Load();
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(snap->cluster_id, cluster_id);
  ASSERT_EQ(snap->experiments.size(), 1u);
  EXPECT_EQ(snap->experiments[0].id(), exp_id);
  EXPECT_EQ(snap->experiments[0].name(), "mnist-renamed");
  EXPECT_TRUE(snap->experiments[0].archived());
  EXPECT_EQ(snap->experiments[0].description(), "why");
  EXPECT_THAT(snap->experiments[0].labels(), ::testing::ElementsAre("a", "b"));
  auto tmpl = (*store)->GetTemplate("base");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  EXPECT_EQ(tmpl->owner(), "alice");
  EXPECT_EQ(tmpl->config_yaml(), "description: y\n");
  EXPECT_EQ((*store)->ListTemplates()->at(0).owner(), "alice");
  ASSERT_EQ(snap->trials.size(), 1u);
  EXPECT_EQ(snap->trials[0].seed(), 17);
  EXPECT_DOUBLE_EQ(snap->trials[0].validation_summary().at("accuracy").last(), 0.875);
  ASSERT_EQ(snap->open_allocations.size(), 1u);
  EXPECT_EQ(snap->open_allocations[0].second, "tok");
  EXPECT_EQ(*(*store)->GetExperimentContext(exp_id), "context-bytes");

  auto metrics = (*store)->GetMetrics(trial_id, "validation");
  ASSERT_TRUE(metrics.ok());
  ASSERT_EQ(metrics->size(), 1u);
  EXPECT_DOUBLE_EQ(metrics->at(0).values().at("accuracy"), 0.875);
  EXPECT_TRUE((*store)->GetMetrics(trial_id, "training")->empty());

  auto all = (*store)->GetLogs(trial_id, 0, 100, std::nullopt);
  ASSERT_EQ(all->size(), 3u);
  auto rank1 = (*store)->GetLogs(trial_id, 0, 100, 1);
  ASSERT_EQ(rank1->size(), 1u);
  EXPECT_EQ(rank1->at(0).message(), "line 1");
  auto after = (*store)->GetLogs(trial_id, all->at(0).id(), 100, std::nullopt);
  EXPECT_EQ(after->size(), 2u);
}

TEST(SqliteStore, ARerunSupersedesWhatEarlierRunsReportedPastItsCheckpoint) {
  auto store = SqliteStore::Open(":memory:");
  ASSERT_TRUE(store.ok());
  std::vector<v1::Trial> trials(1);
  v1::Experiment e;
  ASSERT_TRUE((*store)->InsertExperiment(e, "", &trials).ok());
  v1::Trial t = trials[0];
  std::vector<v1::Metrics> rows;
  for (int b = 1; b <= 5; ++b) {  // Run 0 reported batches 1..5, then failed.
    v1::Metrics& m = rows.emplace_back();
    m.set_trial_id(t.id());
    m.set_group("training");
    m.set_total_batches(b);
    (*m.mutable_values())["loss"] = 10 - b;
  }
  v1::Metrics& timing = rows.emplace_back();
  timing.set_trial_id(t.id());
  timing.set_group("timings");
  timing.set_total_batches(5);
  (*timing.mutable_values())["train_batch_s"] = 0.01;
  (*t.mutable_timings_summary())["train_batch_s"].set_count(1);
  ASSERT_TRUE((*store)->AddMetrics({t}, rows).ok());
  // Run 1 resumes from the checkpoint at batch 3.
  auto deleted = (*store)->SupersedeMetrics(&t, 1, 3);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 3);
  auto left = (*store)->GetMetrics(t.id(), "training");
  ASSERT_EQ(left->size(), 3u);
  EXPECT_EQ(left->back().total_batches(), 3);
  EXPECT_EQ(t.total_batches(), 3);
  EXPECT_EQ(t.training_summary().at("loss").count(), 3);
  EXPECT_DOUBLE_EQ(t.training_summary().at("loss").last(), 7);
  EXPECT_DOUBLE_EQ(t.training_summary().at("loss").min(), 7);
  EXPECT_TRUE(t.timings_summary().empty());
  // The trial row in the store has the recomputed summaries.
  auto snap = (*store)->Load();
  EXPECT_EQ(snap->trials[0].training_summary().at("loss").count(), 3);
  // Nothing more to supersede for the same run.
  EXPECT_EQ(*(*store)->SupersedeMetrics(&t, 1, 3), 0);
}

// A reader on its own connection reads while the store writes: every read holds whole
// transactions only (a multiple of the 10 rows each commit adds) and at least every commit
// that returned before the read began. ":memory:" has no second connection.
TEST(SqliteStore, AReaderSeesEveryCommittedTransactionAndNoHalfOne) {
  auto store = SqliteStore::Open(TempPath("reader.db"));
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<v1::Trial> trials(1);
  ASSERT_TRUE((*store)->InsertExperiment(v1::Experiment(), "", &trials).ok());
  const v1::Trial t = trials[0];
  auto reader = (*store)->OpenReader();
  ASSERT_TRUE(reader.ok()) << reader.status();
  constexpr int kCommits = 100;
  std::atomic<int> committed{0};
  std::atomic<bool> stop{false};
  std::vector<std::string> wrong;
  int reads = 0;
  std::thread read_thread([&] {
    while (!stop.load()) {
      const int before = committed.load();
      auto rows = (*reader)->GetMetrics(t.id(), "training");
      ++reads;
      if (!rows.ok()) {
        wrong.push_back(rows.status().ToString());
      } else if (rows->size() % 10 != 0 || rows->size() < static_cast<size_t>(before) * 10) {
        wrong.push_back(absl::StrCat(rows->size(), " rows after ", before, " commits"));
      }
    }
  });
  for (int c = 0; c < kCommits; ++c) {
    std::vector<v1::Metrics> rows(10);
    for (v1::Metrics& m : rows) {
      m.set_trial_id(t.id());
      m.set_group("training");
      m.set_total_batches(c);
      (*m.mutable_values())["loss"] = c;
    }
    ASSERT_TRUE((*store)->AddMetrics({t}, rows).ok());
    committed.store(c + 1);
  }
  stop.store(true);
  read_thread.join();
  EXPECT_THAT(wrong, ::testing::IsEmpty());
  EXPECT_GT(reads, 0);
  auto all = (*reader)->GetMetrics(t.id(), "");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 10u * kCommits);

  auto private_db = SqliteStore::Open(":memory:");
  ASSERT_TRUE(private_db.ok());
  auto none = (*private_db)->OpenReader();
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("':memory:'"));
}

TEST(SqliteStore, ClosedAllocationsAreNotReloaded) {
  auto store = SqliteStore::Open(":memory:");
  ASSERT_TRUE(store.ok());
  v1::Experiment e;
  std::vector<v1::Trial> none;
  auto eid = (*store)->InsertExperiment(e, "", &none);
  v1::Trial t;
  t.set_experiment_id(*eid);
  auto tid = (*store)->InsertTrial(t);
  v1::Allocation a;
  a.set_id("a");
  a.set_trial_id(*tid);
  a.set_state(v1::STATE_RUNNING);
  ASSERT_TRUE((*store)->UpsertAllocation(a, "t").ok());
  a.set_state(v1::STATE_COMPLETED);
  ASSERT_TRUE((*store)->UpsertAllocation(a, "t").ok());
  EXPECT_TRUE((*store)->Load()->open_allocations.empty());
}

TEST(SqliteStore, ExperimentAndItsTrialsAreInsertedTogether) {
  auto store = SqliteStore::Open(":memory:");
  ASSERT_TRUE(store.ok());
  std::vector<v1::Trial> trials(3);
  for (int i = 0; i < 3; ++i) trials[i].set_seed(100 + i);
  v1::Experiment e;
  auto id = (*store)->InsertExperiment(e, "", &trials);
  ASSERT_TRUE(id.ok()) << id.status();
  auto snap = (*store)->Load();
  ASSERT_EQ(snap->trials.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(trials[i].experiment_id(), *id);
    EXPECT_EQ(snap->trials[i].id(), trials[i].id());
    EXPECT_EQ(snap->trials[i].seed(), 100 + i);
  }
}

TEST(SqliteStore, UpdatingAMissingRowIsNotFound) {
  auto store = SqliteStore::Open(":memory:");
  v1::Trial t;
  t.set_id(99);
  EXPECT_EQ((*store)->UpdateTrial(t).code(), absl::StatusCode::kNotFound);
  v1::Experiment e;
  e.set_id(5);
  EXPECT_EQ((*store)->UpdateExperiment(e).code(), absl::StatusCode::kNotFound);
}

TEST(SqliteStore, AFullDatabaseRefusesWritesAndStaysIntact) {
  std::string path = TempPath("full.db");
  int64_t trial_id;
  int stored = 0;
  {
    auto store = SqliteStore::Open(path, /*max_size_mb=*/1);
    ASSERT_TRUE(store.ok()) << store.status();
    std::vector<v1::Trial> trials(1);
    v1::Experiment e;
    ASSERT_TRUE((*store)->InsertExperiment(e, "", &trials).ok());
    trial_id = trials[0].id();
    absl::Status st;
    for (int batch = 0; batch < 1000 && st.ok(); ++batch) {
      std::vector<v1::LogLine> lines(200);
      for (auto& l : lines) {
        l.set_trial_id(trial_id);
        l.set_message(std::string(100, 'x'));
      }
      st = (*store)->AddLogs(&lines);
      if (st.ok()) stored += 200;
    }
    EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
    EXPECT_THAT(st.message(), HasSubstr("disk full"));
    EXPECT_TRUE((*store)->CheckIntegrity().ok());
  }
  // Reopened without the limit: everything committed before is there, nothing more.
  auto store = SqliteStore::Open(path);
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE((*store)->CheckIntegrity().ok());
  auto lines = (*store)->GetLogs(trial_id, 0, 1000000, std::nullopt);
  ASSERT_TRUE(lines.ok());
  EXPECT_EQ(static_cast<int>(lines->size()), stored);
  EXPECT_GT(stored, 0);
}

TEST(SqliteStore, UnopenablePathNamesTheFile) {
  auto store = SqliteStore::Open("/nonexistent-dir/sub/det.db");
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("/nonexistent-dir/sub/det.db"));
}

TEST(SqliteStore, ModelsAndTheirVersionsSurviveReopen) {
  std::string path = TempPath("models.db");
  {
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    v1::Model m;
    m.set_name("mnist");
    m.set_metadata_json("{\"a\":1}");
    auto id = (*store)->InsertModel(m);
    ASSERT_TRUE(id.ok()) << id.status();
    m.set_id(*id);
    v1::ModelVersion v;
    v.set_model_id(*id);
    v.set_version(1);
    v.set_checkpoint_uuid("ck-1");
    v.set_notes("first");
    ASSERT_TRUE((*store)->InsertModelVersion(v, m).ok());
  }
  auto store = SqliteStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto snap = (*store)->Load();
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->models.size(), 1u);
  EXPECT_EQ(snap->models[0].metadata_json(), "{\"a\":1}");
  ASSERT_EQ(snap->model_versions.size(), 1u);
  EXPECT_EQ(snap->model_versions[0].notes(), "first");
  EXPECT_EQ(snap->model_versions[0].model_id(), snap->models[0].id());
}

TEST(SqliteStore, NewerSchemaIsRefused) {
  std::string path = TempPath("newer.db");
  { ASSERT_TRUE(SqliteStore::Open(path).ok()); }
  {
    // Simulate a database written by a future master.
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok());
  }
  std::string cmd = "sqlite3 " + path + " 'PRAGMA user_version=99'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto store = SqliteStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("schema version 99"));
}

TEST(SqliteStore, SystemMetricsAreKeptPerAgentForABoundedTime) {
  auto store = SqliteStore::Open(TempPath("sysmetrics.db"));
  ASSERT_TRUE(store.ok()) << store.status();
  auto sample = [](const std::string& agent, int64_t t, double cpu) {
    v1::SystemMetrics m;
    m.set_agent_id(agent);
    m.set_time_ms(t);
    m.set_cpu_utilization_percent(cpu);
    m.add_gpus()->set_uuid("GPU-1");
    return m;
  };
  ASSERT_TRUE((*store)->AddSystemMetrics({sample("a", 1000, 10), sample("b", 1000, 50)}, 0).ok());
  ASSERT_TRUE((*store)->AddSystemMetrics({sample("a", 2000, 20), sample("a", 3000, 30)}, 0).ok());
  auto latest = (*store)->GetSystemMetrics("a", 2);
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_EQ(latest->size(), 2u);
  EXPECT_EQ((*latest)[0].time_ms(), 2000);  // Oldest first.
  EXPECT_EQ((*latest)[1].cpu_utilization_percent(), 30);
  EXPECT_EQ((*latest)[1].gpus(0).uuid(), "GPU-1");
  // Samples before keep_after_ms go, whichever agent they belong to.
  ASSERT_TRUE((*store)->AddSystemMetrics({sample("a", 4000, 40)}, 2500).ok());
  auto a = (*store)->GetSystemMetrics("a", 100);
  ASSERT_EQ(a->size(), 2u);
  EXPECT_EQ((*a)[0].time_ms(), 3000);
  EXPECT_TRUE((*store)->GetSystemMetrics("b", 100)->empty());
}

}  // namespace
}  // namespace det::master

namespace det::master {
namespace {

v1::Checkpoint StoredCheckpoint(const std::string& uuid, int64_t trial_id, int64_t batches) {
  v1::Checkpoint c;
  c.set_uuid(uuid);
  c.set_trial_id(trial_id);
  c.set_total_batches(batches);
  c.set_storage_path("/ckpt/" + uuid);
  c.set_state(v1::STATE_COMPLETED);
  (*c.mutable_metrics())["loss"] = 0.5;
  return c;
}

// A database at schema 4 (before checkpoint GC tasks) is migrated on open, keeping its
// rows; GC tasks are then stored, updated and reloaded, and completing one marks its
// checkpoints deleted in the same write.
// The metrics table of schema versions 1-10 (one SQL row per metric row).
constexpr const char* kOldMetricsTable =
    "CREATE TABLE metrics (id INTEGER PRIMARY KEY AUTOINCREMENT, trial_id INTEGER NOT NULL, "
    "run_id INTEGER NOT NULL, grp TEXT NOT NULL, total_batches INTEGER NOT NULL, "
    "time_ms INTEGER NOT NULL, vals TEXT NOT NULL); "
    "CREATE INDEX metrics_by_trial ON metrics(trial_id, grp, id)";

// Runs `sql` on its own connection to `path`; the rows as "a|b\n" lines.
std::string Sql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  std::string out;
  char* error = nullptr;
  auto row = [](void* arg, int n, char** values, char**) {
    auto* out = static_cast<std::string*>(arg);
    for (int i = 0; i < n; ++i) absl::StrAppend(out, i ? "|" : "", values[i] ? values[i] : "NULL");
    out->push_back('\n');
    return 0;
  };
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), row, &out, &error), SQLITE_OK)
      << (error ? error : "") << " in " << sql;
  sqlite3_free(error);
  sqlite3_close(db);
  return out;
}

// Migration 11 turns each row a schema-10 master stored into a record of its own, in the
// old order; the rows read back exactly (all, by group, downsampled, through the `metrics`
// view), and rows stored after the migration come after them.
TEST(SqliteStore, MetricRowsOfTheOldSchemaAreMigratedIntoRecordsInOrder) {
  std::string path = TempPath("metrics-migration.db");
  std::vector<v1::Trial> trials(2);
  {
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    v1::Experiment e;
    e.set_name("old");
    e.set_state(v1::STATE_ACTIVE);
    ASSERT_TRUE((*store)->InsertExperiment(e, "", &trials).ok());
  }
  // What a schema-10 master left: rows of two trials and groups interleaved, values as
  // MetricValuesJson wrote them (NaN and infinities as strings, a key needing escapes).
  std::string down =
      "DROP VIEW metrics; DROP TABLE metric_records; " + std::string(kOldMetricsTable) + "; ";
  std::vector<std::tuple<int64_t, std::string, int64_t>> want;
  for (int i = 1; i <= 30; ++i) {
    const int64_t trial = trials[i % 3 == 0 ? 1 : 0].id();
    const std::string grp = i % 4 == 0 ? "validation" : "training";
    std::string vals = i == 5   ? R"({"a]\"[":"NaN","loss":"-Infinity"})"
                       : i == 6 ? "{}"
                                : absl::StrCat(R"({"loss":)", i, ".5}");
    absl::StrAppend(&down, "INSERT INTO metrics (trial_id, run_id, grp, total_batches, time_ms, "
                           "vals) VALUES (", trial, ", ", i % 2, ", '", grp, "', ", 100 - i, ", ",
                    1000 + i, ", '", vals, "'); ");
    if (trial == trials[0].id()) want.emplace_back(i % 2, grp, 100 - i);
  }
  Sql(path, down + "PRAGMA user_version=10");
  ASSERT_EQ(Sql(path, "PRAGMA user_version"), "10\n");
  ASSERT_EQ(Sql(path, "SELECT COUNT(*) FROM metrics"), "30\n");

  auto store = SqliteStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->SchemaVersion(), 11);
  auto rows = (*store)->GetMetrics(trials[0].id(), "");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& [run, grp, batches] = want[i];
    EXPECT_EQ((*rows)[i].run_id(), run) << i;
    EXPECT_EQ((*rows)[i].group(), grp) << i;
    EXPECT_EQ((*rows)[i].total_batches(), batches) << i;
    EXPECT_EQ((*rows)[i].trial_id(), trials[0].id()) << i;
  }
  // Row 5 (index 3 of trial 0's rows: i = 1, 2, 4, 5): its odd key and NaN kept.
  EXPECT_EQ((*rows)[3].total_batches(), 95);
  EXPECT_TRUE(std::isnan((*rows)[3].values().at("a]\"[")));
  EXPECT_EQ((*rows)[3].values().at("loss"), -std::numeric_limits<double>::infinity());
  EXPECT_EQ((*store)->GetMetrics(trials[0].id(), "validation")->size(), 5u);
  EXPECT_EQ((*store)->GetMetrics(trials[1].id(), "")->size(), 10u);

  // New rows follow the migrated ones; the view shows all of them, in order.
  v1::Metrics m;
  m.set_trial_id(trials[0].id());
  m.set_group("training");
  m.set_total_batches(7);
  m.set_report_time_ms(2000);
  (*m.mutable_values())["loss"] = 0.25;
  ASSERT_TRUE((*store)->AddMetrics({}, {m, m}).ok());
  rows = (*store)->GetMetrics(trials[0].id(), "training");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 17u);
  EXPECT_EQ((*rows)[14].total_batches(), 71);  // the last old training row of trial 0 (i = 29)
  EXPECT_EQ((*rows)[16].total_batches(), 7);
  auto reader = (*store)->OpenReader();
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto two = (*reader)->GetTrialMetrics(trials[0].id(), "training", 2);
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].total_batches(), 99);
  EXPECT_EQ((*two)[1].total_batches(), 7);
  EXPECT_EQ(Sql(path, absl::StrCat("SELECT total_batches, grp, vals FROM metrics WHERE trial_id = ",
                                   trials[0].id(), " ORDER BY id LIMIT 2")),
            "99|training|{\"loss\":1.5}\n98|training|{\"loss\":2.5}\n");
  EXPECT_EQ(Sql(path, absl::StrCat("SELECT total_batches, vals FROM metrics WHERE trial_id = ",
                                   trials[0].id(), " ORDER BY id DESC LIMIT 1")),
            "7|{\"loss\":0.25}\n");
  EXPECT_EQ(Sql(path, "SELECT COUNT(*), COUNT(DISTINCT id) FROM metrics"), "32|32\n");
}

TEST(SqliteStore, CheckpointGcTasksAreMigratedStoredAndCompleted) {
  std::string path = TempPath("gc.db");
  int64_t exp_id;
  {
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    v1::Experiment e;
    e.set_name("old");
    e.set_state(v1::STATE_COMPLETED);
    std::vector<v1::Trial> one(1);
    exp_id = *(*store)->InsertExperiment(e, "", &one);
    ASSERT_EQ(one[0].id(), 1);
    for (auto [uuid, batches] : {std::pair{"u-1", 100}, {"u-2", 200}, {"u-3", 300}}) {
      ASSERT_TRUE((*store)->AddCheckpoint(StoredCheckpoint(uuid, 1, batches), one[0]).ok());
    }
  }
  // Back to what a schema-4 master left.
  std::string down = "sqlite3 " + path +
                     " 'DROP TABLE checkpoint_gc_tasks; ALTER TABLE templates DROP COLUMN owner; "
                     "ALTER TABLE users DROP COLUMN agent_user; "
                     "ALTER TABLE users DROP COLUMN agent_uid; "
                     "ALTER TABLE users DROP COLUMN agent_group; "
                     "ALTER TABLE users DROP COLUMN agent_gid; "
                     "ALTER TABLE experiments DROP COLUMN context_sha256; "
                     "ALTER TABLE agents DROP COLUMN credential_hash; "
                     "DROP TABLE model_versions; DROP TABLE models; "
                     "DROP VIEW metrics; DROP TABLE metric_records; " + std::string(kOldMetricsTable) +
                     "; PRAGMA user_version=4'";
  ASSERT_EQ(std::system(down.c_str()), 0);

  v1::CheckpointGcTask task;
  {
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ((*store)->SchemaVersion(), 11);
    auto snap = (*store)->Load();
    ASSERT_TRUE(snap.ok()) << snap.status();
    ASSERT_EQ(snap->experiments.size(), 1u);
    EXPECT_TRUE(snap->checkpoint_gc_tasks.empty());

    task.set_experiment_id(exp_id);
    task.set_trial_id(1);
    task.set_resource_pool("default");
    task.set_state(v1::STATE_QUEUED);
    task.set_create_time_ms(1000);
    for (const char* uuid : {"u-1", "u-2"}) *task.add_checkpoints() = StoredCheckpoint(uuid, 1, 0);
    auto id = (*store)->InsertCheckpointGcTask(task);
    ASSERT_TRUE(id.ok()) << id.status();
    task.set_id(*id);
    auto second = (*store)->InsertCheckpointGcTask(task);
    ASSERT_TRUE(second.ok());
    EXPECT_GT(*second, *id);

    task.set_state(v1::STATE_RUNNING);
    task.set_agent_id("agent-a");
    task.set_attempt(1);
    ASSERT_TRUE((*store)->UpdateCheckpointGcTask(task).ok());
    // Not completed: the checkpoints are untouched.
    auto untouched = (*store)->GetCheckpoints(1);
    ASSERT_TRUE(untouched.ok());
    for (const auto& c : *untouched) EXPECT_EQ(c.state(), v1::STATE_COMPLETED);

    v1::CheckpointGcTask missing = task;
    missing.set_id(999);
    EXPECT_EQ((*store)->UpdateCheckpointGcTask(missing).code(), absl::StatusCode::kNotFound);
  }
  auto store = SqliteStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto snap = (*store)->Load();
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->checkpoint_gc_tasks.size(), 2u);
  const v1::CheckpointGcTask& loaded = snap->checkpoint_gc_tasks[0];
  EXPECT_EQ(loaded.id(), task.id());
  EXPECT_EQ(loaded.state(), v1::STATE_RUNNING);
  EXPECT_EQ(loaded.agent_id(), "agent-a");
  EXPECT_EQ(loaded.attempt(), 1);
  ASSERT_EQ(loaded.checkpoints_size(), 2);
  EXPECT_EQ(loaded.checkpoints(1).storage_path(), "/ckpt/u-2");
  EXPECT_EQ(snap->checkpoint_gc_tasks[1].state(), v1::STATE_QUEUED);

  // Completed: its checkpoints become DELETED (the rest of their rows kept), the others not.
  v1::CheckpointGcTask done = loaded;
  done.set_state(v1::STATE_COMPLETED);
  done.set_end_time_ms(2000);
  *done.add_checkpoints() = StoredCheckpoint("gone-already", 1, 0);  // No row: skipped.
  ASSERT_TRUE((*store)->UpdateCheckpointGcTask(done).ok());
  auto cs = (*store)->GetCheckpoints(1);
  ASSERT_TRUE(cs.ok());
  ASSERT_EQ(cs->size(), 3u);
  EXPECT_EQ((*cs)[0].state(), v1::STATE_DELETED);
  EXPECT_EQ((*cs)[0].total_batches(), 100);
  EXPECT_DOUBLE_EQ((*cs)[0].metrics().at("loss"), 0.5);
  EXPECT_EQ((*cs)[1].state(), v1::STATE_DELETED);
  EXPECT_EQ((*cs)[2].state(), v1::STATE_COMPLETED);
  EXPECT_EQ((*store)->Load()->checkpoint_gc_tasks[0].state(), v1::STATE_COMPLETED);
  EXPECT_TRUE((*store)->CheckIntegrity().ok());
}

}  // namespace
}  // namespace det::master

namespace det::master {
namespace {

TEST(SqliteStore, UsersAndSessionsSurviveReopen) {
  std::string path = TempPath("users.db");
  const std::string tricky = "o'brien\"; DROP TABLE users; --";
  {
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    UserRow admin{0, "admin", "$argon2id$hash1", true, 1000};
    auto id = (*store)->InsertUser(admin);
    ASSERT_TRUE(id.ok()) << id.status();
    UserRow other{0, tricky, "$argon2id$hash2", false, 2000};
    auto other_id = (*store)->InsertUser(other);
    ASSERT_TRUE(other_id.ok()) << other_id.status();
    auto dup = (*store)->InsertUser(admin);
    EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
    EXPECT_THAT(dup.status().message(), ::testing::HasSubstr("user 'admin' already exists"));
    ASSERT_TRUE((*store)->SetUserPassword(*id, "$argon2id$hash3").ok());
    EXPECT_EQ((*store)->SetUserPassword(99, "x").code(), absl::StatusCode::kNotFound);
    ASSERT_TRUE((*store)->InsertSession({"live-a", *id, 1000, 5000}).ok());
    ASSERT_TRUE((*store)->InsertSession({"live-b", *id, 1000, 5000}).ok());
    ASSERT_TRUE((*store)->InsertSession({"old", *other_id, 1000, 1500}).ok());
    ASSERT_TRUE((*store)->InsertSession({"gone", *other_id, 1000, 5000}).ok());
    ASSERT_TRUE((*store)->DeleteSession("gone").ok());
    ASSERT_TRUE((*store)->DeleteSession("never-was").ok());
    v1::AgentUserGroup link;
    link.set_agent_user("nobody");
    link.set_agent_uid(65534);
    link.set_agent_group("nogroup");
    link.set_agent_gid(65533);
    ASSERT_TRUE((*store)->SetUserAgentUserGroup(*other_id, link).ok());
    EXPECT_EQ((*store)->SetUserAgentUserGroup(99, link).code(), absl::StatusCode::kNotFound);
  }
  auto store = SqliteStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto users = (*store)->ListUsers();
  ASSERT_TRUE(users.ok()) << users.status();
  ASSERT_EQ(users->size(), 2u);
  EXPECT_EQ((*users)[0].username, "admin");
  EXPECT_EQ((*users)[0].password_hash, "$argon2id$hash3");
  EXPECT_TRUE((*users)[0].admin);
  EXPECT_EQ((*users)[1].username, tricky);
  EXPECT_FALSE((*users)[1].admin);
  EXPECT_EQ((*users)[1].created_ms, 2000);
  EXPECT_EQ((*users)[0].agent_user_group.agent_user(), "");  // Not linked.
  EXPECT_EQ((*users)[1].agent_user_group.agent_user(), "nobody");
  EXPECT_EQ((*users)[1].agent_user_group.agent_uid(), 65534);
  EXPECT_EQ((*users)[1].agent_user_group.agent_group(), "nogroup");
  EXPECT_EQ((*users)[1].agent_user_group.agent_gid(), 65533);
  auto sessions = (*store)->LoadSessions(2000);  // "old" expired at 1500.
  ASSERT_TRUE(sessions.ok()) << sessions.status();
  ASSERT_EQ(sessions->size(), 2u);
  ASSERT_TRUE((*store)->DeleteUserSessions((*users)[0].id, "live-b").ok());
  sessions = (*store)->LoadSessions(2000);
  ASSERT_EQ(sessions->size(), 1u);
  EXPECT_EQ((*sessions)[0].token_hash, "live-b");
  EXPECT_EQ((*sessions)[0].expires_ms, 5000);
}

}  // namespace
}  // namespace det::master
