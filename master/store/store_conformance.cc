// The Store contract (store_conformance.h): the cases, instantiated by each backend's test.
#include "master/store/store_conformance.h"

#include <google/protobuf/util/message_differencer.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/rpc/context_sha256.h"
#include "common/testing/status_matchers.h"
#include "master/metrics/downsample.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::master {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::det::testing::StatusIs;
using ::testing::UnorderedElementsAre;

// The rows of a read, by value: a range-for over `*store.Get...()` would use them after
// the StatusOr holding them is gone.
template <typename T>
T Rows(absl::StatusOr<T> rows) {
  EXPECT_TRUE(rows.ok()) << rows.status();
  return std::move(rows).value_or(T{});
}

TEST_P(StoreConformanceTest, AnEmptyStoreLoadsAStableClusterIdAndNothingElse) {
  auto first = store_->Load();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->cluster_id.size(), 32u);
  EXPECT_EQ(first->cluster_id.find_first_not_of("0123456789abcdef"), std::string::npos)
      << first->cluster_id;
  EXPECT_TRUE(first->experiments.empty());
  EXPECT_TRUE(first->trials.empty());
  EXPECT_TRUE(first->open_allocations.empty());
  EXPECT_TRUE(first->agents.empty());
  EXPECT_TRUE(first->checkpoint_gc_tasks.empty());
  EXPECT_EQ(store_->Load()->cluster_id, first->cluster_id);
}

TEST_P(StoreConformanceTest, ExperimentsAndTrialsGetIdsFromOneAndLoadInIdOrder) {
  v1::Experiment e;
  e.set_name("first");
  e.set_config_yaml("name: first\n");
  e.set_state(v1::STATE_ACTIVE);
  e.set_start_time_ms(1234);
  std::vector<v1::Trial> trials(2);
  trials[0].set_seed(10);
  trials[1].set_seed(11);
  auto id = store_->InsertExperiment(e, "context-bytes", &trials);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, 1);
  EXPECT_EQ(trials[0].id(), 1);
  EXPECT_EQ(trials[1].id(), 2);
  EXPECT_EQ(trials[1].experiment_id(), 1);

  std::vector<v1::Trial> none;
  e.set_name("second");
  auto second = store_->InsertExperiment(e, "", &none);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, 2);
  EXPECT_EQ(AddTrial(*second), 3);

  auto snap = store_->Load();
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->experiments.size(), 2u);
  EXPECT_EQ(snap->experiments[0].id(), 1);
  EXPECT_EQ(snap->experiments[0].name(), "first");
  EXPECT_EQ(snap->experiments[0].start_time_ms(), 1234);
  EXPECT_EQ(snap->experiments[1].name(), "second");
  ASSERT_EQ(snap->trials.size(), 3u);
  EXPECT_EQ(snap->trials[0].seed(), 10);
  EXPECT_EQ(snap->trials[1].id(), 2);
  EXPECT_EQ(snap->trials[2].experiment_id(), 2);
  EXPECT_EQ(*store_->GetExperimentContext(1), "context-bytes");
  EXPECT_EQ(*store_->GetExperimentContext(2), "");
  // The context's hash, kept at insert (what agents cache it by), and the context itself
  // through a reader (off the master's loop).
  EXPECT_EQ(*store_->GetExperimentContextSha256(1), rpc::ContextSha256("context-bytes"));
  EXPECT_EQ(*store_->GetExperimentContextSha256(2), rpc::ContextSha256(""));
  EXPECT_THAT(store_->GetExperimentContextSha256(3).status(),
              StatusIs(absl::StatusCode::kNotFound, "experiment 3 not found"));
  auto reader = store_->OpenReader();
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(*(*reader)->GetExperimentContext(1), "context-bytes");
  EXPECT_THAT((*reader)->GetExperimentContext(3).status(),
              StatusIs(absl::StatusCode::kNotFound, "experiment 3 not found"));
}

TEST_P(StoreConformanceTest, UpdatesReplaceRowsAndMissingRowsAreNotFound) {
  std::vector<v1::Trial> trials;
  int64_t exp = AddExperiment(1, &trials);
  v1::Experiment e = store_->Load()->experiments[0];
  e.set_state(v1::STATE_COMPLETED);
  e.set_progress(0.5);
  ASSERT_TRUE(store_->UpdateExperiment(e).ok());
  v1::Trial t = trials[0];
  t.set_state(v1::STATE_RUNNING);
  t.set_restarts(2);
  ASSERT_TRUE(store_->UpdateTrial(t).ok());
  auto snap = store_->Load();
  EXPECT_TRUE(MessageDifferencer::Equals(snap->experiments[0], e))
      << snap->experiments[0].DebugString();
  EXPECT_TRUE(MessageDifferencer::Equals(snap->trials[0], t)) << snap->trials[0].DebugString();
  // The context is not part of the update.
  EXPECT_EQ(*store_->GetExperimentContext(exp), "ctx");

  e.set_id(5);
  EXPECT_THAT(store_->UpdateExperiment(e),
              StatusIs(absl::StatusCode::kNotFound, "experiment 5 not in the database"));
  t.set_id(99);
  EXPECT_THAT(store_->UpdateTrial(t),
              StatusIs(absl::StatusCode::kNotFound, "trial 99 not in the database"));
  EXPECT_THAT(store_->GetExperimentContext(7).status(),
              StatusIs(absl::StatusCode::kNotFound, "experiment 7 not found"));
}

TEST_P(StoreConformanceTest, TrialsAreStoredWithoutTheirAllocation) {
  int64_t exp = AddExperiment();
  v1::Trial t;
  t.set_experiment_id(exp);
  t.mutable_allocation()->set_id("1.0");
  auto id = store_->InsertTrial(t);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_FALSE(store_->Load()->trials[0].has_allocation());
  t.set_id(*id);
  ASSERT_TRUE(store_->UpdateTrial(t).ok());
  EXPECT_FALSE(store_->Load()->trials[0].has_allocation());
}

TEST_P(StoreConformanceTest, RowsNamingAMissingParentAreRefusedAndUseNoId) {
  v1::Trial orphan;
  orphan.set_experiment_id(42);
  EXPECT_THAT(store_->InsertTrial(orphan).status(),
              StatusIs(absl::StatusCode::kInternal, "FOREIGN KEY constraint failed"));
  v1::Allocation a;
  a.set_id("9.0");
  a.set_trial_id(9);
  a.set_state(v1::STATE_RUNNING);
  EXPECT_THAT(store_->UpsertAllocation(a, "tok"),
              StatusIs(absl::StatusCode::kInternal, "FOREIGN KEY constraint failed"));
  v1::CheckpointGcTask task;
  task.set_experiment_id(42);
  EXPECT_THAT(store_->InsertCheckpointGcTask(task).status(),
              StatusIs(absl::StatusCode::kInternal, "FOREIGN KEY constraint failed"));
  EXPECT_THAT(store_->InsertSession({"hash", 3, 0, 100}),
              StatusIs(absl::StatusCode::kInternal, "FOREIGN KEY constraint failed"));

  auto snap = store_->Load();
  EXPECT_TRUE(snap->trials.empty());
  EXPECT_TRUE(snap->open_allocations.empty());
  EXPECT_TRUE(snap->checkpoint_gc_tasks.empty());
  EXPECT_TRUE(store_->LoadSessions(0)->empty());
  // The refused rows took no id.
  int64_t exp = AddExperiment();
  EXPECT_EQ(AddTrial(exp), 1);
  task.set_experiment_id(exp);
  EXPECT_EQ(*store_->InsertCheckpointGcTask(task), 1);
}

TEST_P(StoreConformanceTest, AllocationsKeepTheirFirstTokenAndOrderAndClosedOnesAreNotLoaded) {
  int64_t exp = AddExperiment();
  int64_t t1 = AddTrial(exp);
  int64_t t2 = AddTrial(exp);
  v1::Allocation b;
  b.set_id("b");
  b.set_trial_id(t1);
  b.set_state(v1::STATE_STARTING);
  v1::Allocation a = b;
  a.set_id("a");
  a.set_trial_id(t2);
  v1::Allocation c = b;
  c.set_id("c");
  ASSERT_TRUE(store_->UpsertAllocation(b, "tok-b").ok());
  ASSERT_TRUE(store_->UpsertAllocation(a, "tok-a").ok());
  ASSERT_TRUE(store_->UpsertAllocation(c, "tok-c").ok());
  b.set_state(v1::STATE_RUNNING);
  b.set_slots(4);
  ASSERT_TRUE(store_->UpsertAllocation(b, "other-token").ok());
  c.set_state(v1::STATE_ERROR);
  ASSERT_TRUE(store_->UpsertAllocation(c, "tok-c").ok());

  auto snap = store_->Load();
  ASSERT_EQ(snap->open_allocations.size(), 2u);
  // In order of first insertion, not of id.
  EXPECT_EQ(snap->open_allocations[0].first.id(), "b");
  EXPECT_EQ(snap->open_allocations[0].first.state(), v1::STATE_RUNNING);
  EXPECT_EQ(snap->open_allocations[0].first.slots(), 4);
  EXPECT_EQ(snap->open_allocations[0].second, "tok-b");
  EXPECT_EQ(snap->open_allocations[1].first.id(), "a");
  EXPECT_EQ(snap->open_allocations[1].second, "tok-a");

  for (v1::State ended : {v1::STATE_COMPLETED, v1::STATE_CANCELED}) {
    a.set_state(ended);
    ASSERT_TRUE(store_->UpsertAllocation(a, "tok-a").ok());
    EXPECT_EQ(store_->Load()->open_allocations.size(), 1u);
  }
}

TEST_P(StoreConformanceTest, AgentsAreUpsertedAndLoadedById) {
  for (const char* id : {"zeta", "alpha", "mid"}) {
    v1::Agent agent;
    agent.set_id(id);
    agent.set_hostname("old");
    ASSERT_TRUE(store_->UpsertAgent(agent).ok());
  }
  v1::Agent alpha;
  alpha.set_id("alpha");
  alpha.set_hostname("new");
  alpha.add_slots()->set_id("cpu0");
  ASSERT_TRUE(store_->UpsertAgent(alpha).ok());
  auto snap = store_->Load();
  ASSERT_EQ(snap->agents.size(), 3u);
  EXPECT_EQ(snap->agents[0].id(), "alpha");
  EXPECT_EQ(snap->agents[0].hostname(), "new");
  EXPECT_EQ(snap->agents[0].slots_size(), 1);
  EXPECT_EQ(snap->agents[1].id(), "mid");
  EXPECT_EQ(snap->agents[2].id(), "zeta");
}

// An agent's credential hash is set with its row, kept by later UpsertAgents (a heartbeat's
// or a disconnect's write), loaded by id, and cleared with "" (an admin's reset).
TEST_P(StoreConformanceTest, AgentCredentialHashesAreKeptAcrossUpsertsAndCleared) {
  v1::Agent a;
  a.set_id("a");
  a.set_hostname("first");
  ASSERT_TRUE(store_->SetAgentCredential(a, "hash-a").ok());
  v1::Agent b;
  b.set_id("b");
  ASSERT_TRUE(store_->UpsertAgent(b).ok());
  a.set_hostname("second");
  ASSERT_TRUE(store_->UpsertAgent(a).ok());
  auto snap = store_->Load();
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->agents.size(), 2u);
  EXPECT_EQ(snap->agents[0].hostname(), "second");
  EXPECT_EQ(snap->agent_credential_hashes,
            (std::map<std::string, std::string>{{"a", "hash-a"}}));

  // A new agent enrolled in one write; then a's cleared.
  v1::Agent c;
  c.set_id("c");
  ASSERT_TRUE(store_->SetAgentCredential(c, "hash-c").ok());
  ASSERT_TRUE(store_->SetAgentCredential(a, "").ok());
  snap = store_->Load();
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(snap->agents.size(), 3u);
  EXPECT_EQ(snap->agent_credential_hashes,
            (std::map<std::string, std::string>{{"c", "hash-c"}}));
}

v1::Metrics Row(int64_t trial, const std::string& group, int64_t batches, double value,
                int32_t run = 0) {
  v1::Metrics m;
  m.set_trial_id(trial);
  m.set_group(group);
  m.set_total_batches(batches);
  m.set_run_id(run);
  m.set_report_time_ms(1000 + batches);
  (*m.mutable_values())["loss"] = value;
  return m;
}

TEST_P(StoreConformanceTest, MetricRowsAreKeptInReportOrderPerTrialAndGroup) {
  std::vector<v1::Trial> trials;
  AddExperiment(2, &trials);
  v1::Trial& t = trials[0];
  t.set_total_batches(30);
  (*t.mutable_training_summary())["loss"].set_count(2);
  std::vector<v1::Metrics> rows = {
      Row(t.id(), "training", 30, 0.5), Row(t.id(), "validation", 20, 0.25),
      Row(t.id(), "training", 10, 0.75), Row(trials[1].id(), "training", 5, 9)};
  (*rows[1].mutable_values())["nan"] = std::nan("");
  (*rows[1].mutable_values())["inf"] = std::numeric_limits<double>::infinity();
  (*rows[1].mutable_values())["-inf"] = -std::numeric_limits<double>::infinity();
  (*rows[1].mutable_values())["precise"] = 0.1 + 0.2;
  ASSERT_TRUE(store_->AddMetrics({t}, rows).ok());

  auto training = store_->GetMetrics(t.id(), "training");
  ASSERT_TRUE(training.ok()) << training.status();
  ASSERT_EQ(training->size(), 2u);
  EXPECT_EQ((*training)[0].total_batches(), 30);
  EXPECT_EQ((*training)[0].report_time_ms(), 1030);
  EXPECT_EQ((*training)[0].trial_id(), t.id());
  EXPECT_EQ((*training)[1].total_batches(), 10);
  auto all = store_->GetMetrics(t.id(), "");
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[1].group(), "validation");
  // Every value survives storage: finite ones exactly, NaN and infinities as such.
  EXPECT_THAT((*all)[1].values(), ::testing::SizeIs(5));
  EXPECT_EQ((*all)[1].values().at("precise"), 0.1 + 0.2);
  EXPECT_TRUE(std::isnan((*all)[1].values().at("nan")));
  EXPECT_EQ((*all)[1].values().at("inf"), std::numeric_limits<double>::infinity());
  EXPECT_EQ((*all)[1].values().at("-inf"), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(store_->GetMetrics(trials[1].id(), "")->size(), 1u);
  EXPECT_TRUE(store_->GetMetrics(t.id(), "timings")->empty());
  EXPECT_TRUE(store_->GetMetrics(99, "")->empty());
  EXPECT_EQ(store_->Load()->trials[0].total_batches(), 30);

  // A trial that is not stored fails the whole write.
  v1::Trial missing;
  missing.set_id(99);
  EXPECT_THAT(store_->AddMetrics({t, missing}, {Row(t.id(), "training", 40, 0.1)}),
              StatusIs(absl::StatusCode::kNotFound, "trial 99 not in the database"));
  EXPECT_EQ(store_->GetMetrics(t.id(), "training")->size(), 2u);

  // A reader (for other threads than the store's) reads the same rows.
  auto reader = store_->OpenReader();
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto read = (*reader)->GetMetrics(t.id(), "");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 3u);
  EXPECT_EQ((*read)[0].total_batches(), 30);
  EXPECT_TRUE(std::isnan((*read)[1].values().at("nan")));
  EXPECT_EQ((*reader)->GetMetrics(t.id(), "training")->size(), 2u);
}

TEST_P(StoreConformanceTest, ARerunSupersedesWhatEarlierRunsReportedPastItsCheckpoint) {
  std::vector<v1::Trial> trials;
  AddExperiment(1, &trials);
  v1::Trial t = trials[0];
  std::vector<v1::Metrics> rows;
  for (int b = 1; b <= 5; ++b) rows.push_back(Row(t.id(), "training", b, 10 - b));
  v1::Metrics timing = Row(t.id(), "timings", 5, 0.01);
  rows.push_back(timing);
  (*t.mutable_timings_summary())["loss"].set_count(1);
  t.set_total_batches(5);
  ASSERT_TRUE(store_->AddMetrics({t}, rows).ok());
  // Run 1 resumes from the checkpoint at batch 3; its own row at batch 4 stays.
  ASSERT_TRUE(store_->AddMetrics({t}, {Row(t.id(), "training", 4, 1, /*run=*/1)}).ok());
  auto deleted = store_->SupersedeMetrics(&t, 1, 3);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 3);
  auto left = store_->GetMetrics(t.id(), "training");
  ASSERT_EQ(left->size(), 4u);
  EXPECT_EQ(left->back().run_id(), 1);
  EXPECT_EQ(t.total_batches(), 4);
  EXPECT_EQ(t.training_summary().at("loss").count(), 4);
  EXPECT_DOUBLE_EQ(t.training_summary().at("loss").last(), 1);
  EXPECT_DOUBLE_EQ(t.training_summary().at("loss").max(), 9);
  EXPECT_TRUE(t.timings_summary().empty());
  EXPECT_TRUE(MessageDifferencer::Equals(store_->Load()->trials[0], t));
  EXPECT_EQ(*store_->SupersedeMetrics(&t, 1, 3), 0);

  // With rows to delete, a trial that is not stored fails and deletes nothing.
  ASSERT_TRUE(store_->AddMetrics({}, {Row(77, "training", 9, 1)}).ok());
  v1::Trial missing;
  missing.set_id(77);
  EXPECT_THAT(store_->SupersedeMetrics(&missing, 1, 0).status(),
              StatusIs(absl::StatusCode::kNotFound, "trial 77 not in the database"));
  EXPECT_EQ(store_->GetMetrics(77, "")->size(), 1u);
}

// What storing a flush's rows together risks (SqliteStore keeps one record per run of a
// trial's rows of one group): many small writes with groups and trials interleaved, one
// write larger than a record holds, and a rerun superseding rows in the middle of such
// records. Every read (all, by group, through a reader, downsampled) returns each row as
// written, in write order.
TEST_P(StoreConformanceTest, MetricRowsWrittenInManySmallAndLargeWritesKeepTheirOrder) {
  std::vector<v1::Trial> trials;
  AddExperiment(2, &trials);
  const int64_t a = trials[0].id(), b = trials[1].id();
  std::vector<v1::Metrics> want;  // trial a's rows, in write order
  int64_t batches = 0;
  size_t b_rows = 0;
  auto row = [&](int64_t trial, const std::string& group, int32_t run = 0) {
    ++batches;
    v1::Metrics m = Row(trial, group, batches, 0.5 * batches, run);
    m.set_report_time_ms(5000 + 3 * batches);
    (*m.mutable_values())[absl::StrCat("k", batches % 3)] = -1.0 * batches;
    if (trial == a) want.push_back(m);
    if (trial != a) ++b_rows;
    return m;
  };
  // 300 small writes of 1-3 rows, the groups alternating, trial b's rows between.
  for (int w = 0; w < 300; ++w) {
    std::vector<v1::Metrics> rows;
    for (int i = 0; i <= w % 3; ++i) {
      rows.push_back(row(a, (w + i) % 5 == 0 ? "validation" : "training"));
      if (w % 4 == 0) rows.push_back(row(b, "training"));
    }
    ASSERT_TRUE(store_->AddMetrics({}, rows).ok()) << w;
  }
  // One write of 9,000 rows of one group (more than one record of SqliteStore's holds),
  // with a validation row and trial b's rows in the middle.
  std::vector<v1::Metrics> big;
  for (int i = 0; i < 9000; ++i) {
    big.push_back(row(a, i == 4500 ? "validation" : "training", /*run=*/i < 6000 ? 0 : 1));
    if (i % 1000 == 0) big.push_back(row(b, "validation"));
  }
  ASSERT_TRUE(store_->AddMetrics({}, big).ok());

  auto same = [](const std::vector<v1::Metrics>& got, const std::vector<v1::Metrics>& expected) {
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(MessageDifferencer::Equals(got[i], expected[i]))
          << i << ": " << got[i].ShortDebugString() << " != " << expected[i].ShortDebugString();
    }
  };
  auto of_group = [&](const std::string& group) {
    std::vector<v1::Metrics> out;
    for (const auto& m : want) {
      if (group.empty() || m.group() == group) out.push_back(m);
    }
    return out;
  };
  auto opened = store_->OpenReader();
  ASSERT_TRUE(opened.ok()) << opened.status();
  MetricsReader& reader = **opened;
  auto check = [&](const std::string& when) {
    SCOPED_TRACE(when);
    for (const std::string group : {"", "training", "validation"}) {
      SCOPED_TRACE(absl::StrCat("group '", group, "'"));
      same(*store_->GetMetrics(a, group), of_group(group));
      same(*reader.GetMetrics(a, group), of_group(group));
      for (int max_points : {0, 1, 2, 3, 200, 1000, 20000}) {
        SCOPED_TRACE(absl::StrCat("max_points ", max_points));
        auto got = reader.GetTrialMetrics(a, group, max_points);
        ASSERT_TRUE(got.ok()) << got.status();
        same(*got, DownsampleMetrics(of_group(group), max_points));
      }
    }
  };
  check("as written");
  EXPECT_EQ(store_->GetMetrics(b, "")->size(), b_rows);

  // Run 2 resumes from batch 4000: the rows of runs 0 and 1 after it go, wherever they
  // lie in the records; trial b keeps its rows.
  v1::Trial t = trials[0];
  auto deleted = store_->SupersedeMetrics(&t, 2, 4000);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  const size_t before = want.size();
  want.erase(std::remove_if(want.begin(), want.end(),
                            [](const v1::Metrics& m) { return m.total_batches() > 4000; }),
             want.end());
  EXPECT_EQ(*deleted, static_cast<int64_t>(before - want.size()));
  EXPECT_GT(*deleted, 0);
  EXPECT_EQ(t.total_batches(), want.back().total_batches());
  check("superseded");
  EXPECT_EQ(store_->GetMetrics(b, "")->size(), b_rows);
  ASSERT_TRUE(store_->AddMetrics({}, {row(a, "validation", 2), row(a, "training", 2)}).ok());
  check("written after");
}

TEST_P(StoreConformanceTest, LogLinesGetIncreasingIdsAndAreReadByTrialRankAndPage) {
  int64_t exp = AddExperiment();
  int64_t t1 = AddTrial(exp);
  int64_t t2 = AddTrial(exp);
  std::vector<v1::LogLine> lines(6);
  for (int i = 0; i < 6; ++i) {
    lines[i].set_trial_id(i % 3 == 2 ? t2 : t1);
    lines[i].set_rank(i % 2);
    lines[i].set_stream("stdout");
    lines[i].set_time_ms(100 + i);
    lines[i].set_agent_id("agent-1");
    lines[i].set_allocation_id("1.0");
    lines[i].set_message(absl::StrCat("line ", i));
  }
  ASSERT_TRUE(store_->AddLogs(&lines).ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(lines[i].id(), i + 1);

  auto all = store_->GetLogs(t1, 0, 100, std::nullopt);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 4u);
  EXPECT_TRUE(MessageDifferencer::Equals((*all)[1], lines[1])) << (*all)[1].DebugString();
  std::vector<std::string> messages;
  for (const auto& l : Rows(store_->GetLogs(t1, lines[1].id(), 2, std::nullopt))) {
    messages.push_back(l.message());
  }
  EXPECT_THAT(messages, ElementsAre("line 3", "line 4"));
  messages.clear();
  for (const auto& l : Rows(store_->GetLogs(t1, 0, 100, 1))) messages.push_back(l.message());
  EXPECT_THAT(messages, ElementsAre("line 1", "line 3"));
  EXPECT_EQ(store_->GetLogs(t2, 0, 100, std::nullopt)->size(), 2u);
  EXPECT_TRUE(store_->GetLogs(t2, 0, 100, 7)->empty());
  EXPECT_TRUE(store_->GetLogs(t1, lines[5].id(), 100, std::nullopt)->empty());

  // No limit means pages of 1000.
  std::vector<v1::LogLine> many(1001);
  for (auto& l : many) l.set_trial_id(t2);
  ASSERT_TRUE(store_->AddLogs(&many).ok());
  EXPECT_EQ(many.back().id(), 1007);
  EXPECT_EQ(store_->GetLogs(t2, 0, 0, std::nullopt)->size(), 1000u);
}

v1::Checkpoint StoredCheckpoint(const std::string& uuid, int64_t trial_id, int64_t batches,
                                int64_t time_ms = 0) {
  v1::Checkpoint c;
  c.set_uuid(uuid);
  c.set_trial_id(trial_id);
  c.set_total_batches(batches);
  c.set_report_time_ms(time_ms);
  c.set_storage_path("/ckpt/" + uuid);
  c.set_state(v1::STATE_COMPLETED);
  (*c.mutable_metrics())["loss"] = 0.5;
  (*c.mutable_resources())["model.pt"] = 1024;
  return c;
}

TEST_P(StoreConformanceTest, CheckpointsAreUniqueByUuidAndListedByBatchesThenTime) {
  AddExperiment(2);  // Trials 1 and 2.
  ASSERT_TRUE(AddCheckpoint(StoredCheckpoint("u-late", 1, 200, 5)).ok());
  ASSERT_TRUE(AddCheckpoint(StoredCheckpoint("u-early", 1, 200, 2)).ok());
  ASSERT_TRUE(AddCheckpoint(StoredCheckpoint("u-first", 1, 100, 9)).ok());
  ASSERT_TRUE(AddCheckpoint(StoredCheckpoint("other", 2, 50)).ok());
  EXPECT_THAT(AddCheckpoint(StoredCheckpoint("u-late", 1, 300)),
              StatusIs(absl::StatusCode::kAlreadyExists, "UNIQUE constraint failed: checkpoints.uuid"));
  auto cs = store_->GetCheckpoints(1);
  ASSERT_TRUE(cs.ok()) << cs.status();
  std::vector<std::string> uuids;
  for (const auto& c : *cs) uuids.push_back(c.uuid());
  EXPECT_THAT(uuids, ElementsAre("u-first", "u-early", "u-late"));
  EXPECT_TRUE(MessageDifferencer::Equals((*cs)[2], StoredCheckpoint("u-late", 1, 200, 5)));
  EXPECT_TRUE(store_->GetCheckpoints(3)->empty());
}

// A checkpoint and its trial's update are one write: the trial row points at the
// checkpoint exactly when the checkpoint is stored.
TEST_P(StoreConformanceTest, ACheckpointIsStoredWithItsTrialOrNotAtAll) {
  std::vector<v1::Trial> trials;
  AddExperiment(1, &trials);
  v1::Trial t = trials[0];
  v1::Checkpoint c = StoredCheckpoint("u-1", t.id(), 100);
  t.set_latest_checkpoint(c.storage_path());
  t.set_total_batches(100);
  ASSERT_TRUE(store_->AddCheckpoint(c, t).ok());
  auto snap = store_->Load();
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->trials.size(), 1u);
  EXPECT_EQ(snap->trials[0].latest_checkpoint(), "/ckpt/u-1");
  EXPECT_EQ(snap->trials[0].total_batches(), 100);

  // The same uuid again: refused, and the trial row keeps what it had.
  v1::Trial again = t;
  again.set_latest_checkpoint("/ckpt/elsewhere");
  EXPECT_THAT(store_->AddCheckpoint(StoredCheckpoint("u-1", t.id(), 200), again),
              StatusIs(absl::StatusCode::kAlreadyExists, "UNIQUE constraint failed: checkpoints.uuid"));
  EXPECT_EQ(store_->Load()->trials[0].latest_checkpoint(), "/ckpt/u-1");

  // A trial not stored: NotFound, and no checkpoint row is left behind.
  v1::Trial missing;
  missing.set_id(999);
  EXPECT_THAT(store_->AddCheckpoint(StoredCheckpoint("u-2", 999, 100), missing),
              StatusIs(absl::StatusCode::kNotFound, "trial 999 not in the database"));
  EXPECT_TRUE(store_->GetCheckpoints(999)->empty());
  EXPECT_EQ(Rows(store_->GetCheckpoints(t.id())).size(), 1u);
}

TEST_P(StoreConformanceTest, CompletingAGcTaskMarksItsStoredCheckpointsDeleted) {
  int64_t exp = AddExperiment(1);
  for (auto [uuid, batches] : {std::pair{"u-1", 100}, {"u-2", 200}, {"u-3", 300}}) {
    ASSERT_TRUE(AddCheckpoint(StoredCheckpoint(uuid, 1, batches)).ok());
  }
  v1::CheckpointGcTask task;
  task.set_experiment_id(exp);
  task.set_trial_id(1);
  task.set_state(v1::STATE_QUEUED);
  for (const char* uuid : {"u-1", "u-2"}) *task.add_checkpoints() = StoredCheckpoint(uuid, 1, 0);
  auto id = store_->InsertCheckpointGcTask(task);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, 1);
  EXPECT_EQ(*store_->InsertCheckpointGcTask(task), 2);
  task.set_id(*id);

  task.set_state(v1::STATE_RUNNING);
  task.set_agent_id("agent-a");
  ASSERT_TRUE(store_->UpdateCheckpointGcTask(task).ok());
  for (const auto& c : Rows(store_->GetCheckpoints(1))) EXPECT_EQ(c.state(), v1::STATE_COMPLETED);
  auto snap = store_->Load();
  ASSERT_EQ(snap->checkpoint_gc_tasks.size(), 2u);
  EXPECT_TRUE(MessageDifferencer::Equals(snap->checkpoint_gc_tasks[0], task));
  EXPECT_EQ(snap->checkpoint_gc_tasks[1].id(), 2);
  EXPECT_EQ(snap->checkpoint_gc_tasks[1].state(), v1::STATE_QUEUED);

  v1::CheckpointGcTask missing = task;
  missing.set_id(999);
  EXPECT_THAT(store_->UpdateCheckpointGcTask(missing),
              StatusIs(absl::StatusCode::kNotFound, "checkpoint GC task 999 not in the database"));

  task.set_state(v1::STATE_COMPLETED);
  *task.add_checkpoints() = StoredCheckpoint("gone-already", 1, 0);  // No row: skipped.
  ASSERT_TRUE(store_->UpdateCheckpointGcTask(task).ok());
  auto cs = store_->GetCheckpoints(1);
  ASSERT_EQ(cs->size(), 3u);
  EXPECT_EQ((*cs)[0].state(), v1::STATE_DELETED);
  EXPECT_EQ((*cs)[0].storage_path(), "/ckpt/u-1");
  EXPECT_EQ((*cs)[1].state(), v1::STATE_DELETED);
  EXPECT_EQ((*cs)[2].state(), v1::STATE_COMPLETED);
  EXPECT_EQ(store_->Load()->checkpoint_gc_tasks[0].state(), v1::STATE_COMPLETED);
}

TEST_P(StoreConformanceTest, DeletingAnExperimentRemovesEverythingOfItAndNothingElse) {
  std::vector<v1::Trial> doomed, kept;
  int64_t exp = AddExperiment(2, &doomed);
  int64_t other = AddExperiment(1, &kept);
  for (const v1::Trial& t : {doomed[0], doomed[1], kept[0]}) {
    v1::Metrics m;
    m.set_trial_id(t.id());
    m.set_group("training");
    m.set_total_batches(1);
    (*m.mutable_values())["loss"] = 1;
    ASSERT_TRUE(store_->AddMetrics({t}, {m}).ok());
    std::vector<v1::LogLine> lines(1);
    lines[0].set_trial_id(t.id());
    lines[0].set_message("hello");
    ASSERT_TRUE(store_->AddLogs(&lines).ok());
    ASSERT_TRUE(store_->AddCheckpoint(StoredCheckpoint(absl::StrCat("u-", t.id()), t.id(), 10), t).ok());
    v1::Allocation a;
    a.set_id(absl::StrCat(t.id(), ".0"));
    a.set_trial_id(t.id());
    a.set_state(v1::STATE_RUNNING);
    ASSERT_TRUE(store_->UpsertAllocation(a, "token").ok());
  }
  for (int64_t e : {exp, other}) {
    v1::CheckpointGcTask task;
    task.set_experiment_id(e);
    task.set_state(v1::STATE_QUEUED);
    ASSERT_TRUE(store_->InsertCheckpointGcTask(task).ok());
  }

  ASSERT_TRUE(store_->DeleteExperiment(exp).ok());
  auto snap = store_->Load();
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->experiments.size(), 1u);
  EXPECT_EQ(snap->experiments[0].id(), other);
  ASSERT_EQ(snap->trials.size(), 1u);
  EXPECT_EQ(snap->trials[0].id(), kept[0].id());
  ASSERT_EQ(snap->open_allocations.size(), 1u);
  EXPECT_EQ(snap->open_allocations[0].first.trial_id(), kept[0].id());
  ASSERT_EQ(snap->checkpoint_gc_tasks.size(), 1u);
  EXPECT_EQ(snap->checkpoint_gc_tasks[0].experiment_id(), other);
  for (const v1::Trial& t : doomed) {
    EXPECT_TRUE(Rows(store_->GetMetrics(t.id(), "")).empty());
    EXPECT_TRUE(Rows(store_->GetLogs(t.id(), 0, 100, std::nullopt)).empty());
    EXPECT_TRUE(Rows(store_->GetCheckpoints(t.id())).empty());
  }
  EXPECT_EQ(Rows(store_->GetMetrics(kept[0].id(), "")).size(), 1u);
  EXPECT_EQ(Rows(store_->GetLogs(kept[0].id(), 0, 100, std::nullopt)).size(), 1u);
  EXPECT_EQ(Rows(store_->GetCheckpoints(kept[0].id())).size(), 1u);
  EXPECT_THAT(store_->GetExperimentContext(exp).status(), StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_THAT(store_->DeleteExperiment(exp),
              StatusIs(absl::StatusCode::kNotFound,
                       absl::StrCat("experiment ", exp, " not in the database")));
}

TEST_P(StoreConformanceTest, TemplatesAreReplacedByNameKeepingTheirCreationTime) {
  bool created = false;
  auto t = store_->PutTemplate("zz", "a: 1\n", "", 1000, &created);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(created);
  EXPECT_EQ(t->create_time_ms(), 1000);
  ASSERT_TRUE(store_->PutTemplate("aa", "b: 2\n", "", 1500, &created).ok());
  t = store_->PutTemplate("zz", "a: 3\n", "", 2000, &created);
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(created);
  EXPECT_EQ(t->create_time_ms(), 1000);
  EXPECT_EQ(t->update_time_ms(), 2000);
  EXPECT_TRUE(MessageDifferencer::Equals(*store_->GetTemplate("zz"), *t));
  auto list = store_->ListTemplates();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name(), "aa");
  EXPECT_EQ((*list)[1].config_yaml(), "a: 3\n");

  ASSERT_TRUE(store_->DeleteTemplate("aa").ok());
  EXPECT_THAT(store_->DeleteTemplate("aa"),
              StatusIs(absl::StatusCode::kNotFound, "template 'aa' does not exist"));
  EXPECT_THAT(store_->GetTemplate("aa").status(),
              StatusIs(absl::StatusCode::kNotFound, "template 'aa' does not exist"));
  EXPECT_EQ(store_->ListTemplates()->size(), 1u);
}

TEST_P(StoreConformanceTest, ModelsAreUniqueByNameAndLoadWithTheirVersions) {
  v1::Model m;
  m.set_name("mnist");
  m.set_description("digits");
  m.add_labels("prod");
  m.set_creation_time_ms(1000);
  m.set_num_versions(7);  // computed by the master: not stored
  auto id = store_->InsertModel(m);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, 1);
  EXPECT_THAT(store_->InsertModel(m).status(),
              StatusIs(absl::StatusCode::kAlreadyExists, "model 'mnist' already exists"));
  v1::Model other;
  other.set_name("cifar");
  auto other_id = store_->InsertModel(other);
  ASSERT_TRUE(other_id.ok()) << other_id.status();
  EXPECT_EQ(*other_id, 2);  // The refused insert used no id.

  m.set_id(*id);
  m.set_last_updated_time_ms(2000);
  v1::ModelVersion v;
  v.set_model_id(*id);
  v.set_version(1);
  v.set_checkpoint_uuid("ck-1");
  v.set_model_name("mnist");                    // not stored
  v.mutable_checkpoint()->set_uuid("ck-1");     // not stored
  auto vid = store_->InsertModelVersion(v, m);
  ASSERT_TRUE(vid.ok()) << vid.status();
  EXPECT_THAT(store_->InsertModelVersion(v, m).status(),
              StatusIs(absl::StatusCode::kAlreadyExists, "UNIQUE constraint failed"));
  v.set_version(2);
  v.set_checkpoint_uuid("ck-2");
  ASSERT_TRUE(store_->InsertModelVersion(v, m).ok());
  v1::Model gone;
  gone.set_id(99);
  v.set_model_id(99);
  EXPECT_THAT(store_->InsertModelVersion(v, gone).status(),
              StatusIs(absl::StatusCode::kNotFound, "model 99 not in the database"));
  EXPECT_THAT(store_->UpdateModel(gone),
              StatusIs(absl::StatusCode::kNotFound, "model 99 not in the database"));
  other.set_id(*other_id);
  other.set_name("mnist");
  EXPECT_THAT(store_->UpdateModel(other),
              StatusIs(absl::StatusCode::kAlreadyExists, "model 'mnist' already exists"));

  auto snap = store_->Load();
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->models.size(), 2u);
  EXPECT_EQ(snap->models[0].name(), "mnist");
  EXPECT_EQ(snap->models[0].last_updated_time_ms(), 2000);
  EXPECT_EQ(snap->models[0].num_versions(), 0);
  EXPECT_EQ(snap->models[1].name(), "cifar");
  ASSERT_EQ(snap->model_versions.size(), 2u);
  EXPECT_EQ(snap->model_versions[0].id(), *vid);
  EXPECT_EQ(snap->model_versions[0].checkpoint_uuid(), "ck-1");
  EXPECT_EQ(snap->model_versions[0].model_name(), "");
  EXPECT_FALSE(snap->model_versions[0].has_checkpoint());
  EXPECT_EQ(snap->model_versions[1].version(), 2);

  m.set_last_updated_time_ms(3000);
  ASSERT_TRUE(store_->DeleteModelVersion(*vid, m).ok());
  EXPECT_THAT(store_->DeleteModelVersion(*vid, m),
              StatusIs(absl::StatusCode::kNotFound,
                       absl::StrCat("model version ", *vid, " not in the database")));
  snap = store_->Load();
  ASSERT_EQ(snap->model_versions.size(), 1u);
  EXPECT_EQ(snap->model_versions[0].checkpoint_uuid(), "ck-2");
  EXPECT_EQ(snap->models[0].last_updated_time_ms(), 3000);

  ASSERT_TRUE(store_->DeleteModel(*id).ok());
  EXPECT_THAT(store_->DeleteModel(*id),
              StatusIs(absl::StatusCode::kNotFound, "model 1 not in the database"));
  snap = store_->Load();
  ASSERT_EQ(snap->models.size(), 1u);
  EXPECT_EQ(snap->models[0].name(), "cifar");
  EXPECT_TRUE(snap->model_versions.empty());
  // The name is free again.
  m.clear_id();
  EXPECT_TRUE(store_->InsertModel(m).ok());
}

v1::SystemMetrics Sample(const std::string& agent, int64_t t, double cpu) {
  v1::SystemMetrics m;
  m.set_agent_id(agent);
  m.set_time_ms(t);
  m.set_cpu_utilization_percent(cpu);
  m.add_gpus()->set_uuid("GPU-1");
  return m;
}

TEST_P(StoreConformanceTest, SystemMetricsAreTheLatestPerAgentOldestFirstForABoundedTime) {
  ASSERT_TRUE(store_->AddSystemMetrics({Sample("a", 1000, 10), Sample("b", 1000, 50)}, 0).ok());
  // Stored out of time order: the latest are chosen by time, then returned by arrival.
  ASSERT_TRUE(store_->AddSystemMetrics({Sample("a", 3000, 30), Sample("a", 2000, 20)}, 0).ok());
  auto latest = store_->GetSystemMetrics("a", 2);
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_EQ(latest->size(), 2u);
  EXPECT_EQ((*latest)[0].time_ms(), 3000);
  EXPECT_EQ((*latest)[1].time_ms(), 2000);
  EXPECT_EQ((*latest)[1].gpus(0).uuid(), "GPU-1");
  EXPECT_TRUE(store_->GetSystemMetrics("a", 0)->empty());
  EXPECT_TRUE(store_->GetSystemMetrics("nobody", 10)->empty());
  // Samples before keep_after_ms go, whichever agent and call they belong to.
  ASSERT_TRUE(store_->AddSystemMetrics({Sample("a", 4000, 40), Sample("b", 2400, 1)}, 2500).ok());
  auto a = store_->GetSystemMetrics("a", 100);
  ASSERT_EQ(a->size(), 2u);
  EXPECT_EQ((*a)[0].time_ms(), 3000);
  EXPECT_EQ((*a)[1].cpu_utilization_percent(), 40);
  EXPECT_TRUE(store_->GetSystemMetrics("b", 100)->empty());
}

TEST_P(StoreConformanceTest, ManySystemMetricsInOneCallKeepTheirArrivalOrderAndAgents) {
  // One call of 600 samples of three agents, times interleaved and some too old to keep.
  std::vector<v1::SystemMetrics> samples;
  for (int i = 0; i < 600; ++i) {
    v1::SystemMetrics m = Sample(absl::StrCat("agent-", i % 3), 10000 + 10 * (i / 3), i);
    if (i % 7 == 0) m.set_time_ms(50);  // before keep_after_ms
    samples.push_back(m);
  }
  ASSERT_TRUE(store_->AddSystemMetrics(samples, 100).ok());
  for (int agent = 0; agent < 3; ++agent) {
    std::vector<double> want;  // the kept samples of this agent, in arrival order
    for (int i = agent; i < 600; i += 3) {
      if (i % 7 != 0) want.push_back(i);
    }
    auto got = store_->GetSystemMetrics(absl::StrCat("agent-", agent), 1000);
    ASSERT_TRUE(got.ok()) << got.status();
    std::vector<double> cpu;
    for (const auto& m : *got) {
      EXPECT_EQ(m.agent_id(), absl::StrCat("agent-", agent));
      cpu.push_back(m.cpu_utilization_percent());
    }
    EXPECT_EQ(cpu, want);
    auto latest = store_->GetSystemMetrics(absl::StrCat("agent-", agent), 5);
    ASSERT_TRUE(latest.ok()) << latest.status();
    ASSERT_EQ(latest->size(), 5u);
    EXPECT_EQ(latest->back().cpu_utilization_percent(), want.back());
  }
}

TEST_P(StoreConformanceTest, UsersAndSessions) {
  auto admin = store_->InsertUser({0, "admin", "$argon2id$hash1", true, 1000});
  ASSERT_TRUE(admin.ok()) << admin.status();
  EXPECT_EQ(*admin, 1);
  auto other = store_->InsertUser({0, "o'brien\"; --", "$argon2id$hash2", false, 2000});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(*other, 2);
  EXPECT_THAT(store_->InsertUser({0, "admin", "x", false, 3}).status(),
              StatusIs(absl::StatusCode::kAlreadyExists, "user 'admin' already exists"));
  ASSERT_TRUE(store_->SetUserPassword(*admin, "$argon2id$hash3").ok());
  EXPECT_THAT(store_->SetUserPassword(99, "x"),
              StatusIs(absl::StatusCode::kNotFound, "user 99 does not exist"));
  auto users = store_->ListUsers();
  ASSERT_TRUE(users.ok()) << users.status();
  ASSERT_EQ(users->size(), 2u);
  EXPECT_EQ((*users)[0].id, 1);
  EXPECT_EQ((*users)[0].password_hash, "$argon2id$hash3");
  EXPECT_TRUE((*users)[0].admin);
  EXPECT_EQ((*users)[1].username, "o'brien\"; --");
  EXPECT_FALSE((*users)[1].admin);
  EXPECT_EQ((*users)[1].created_ms, 2000);

  ASSERT_TRUE(store_->InsertSession({"live-a", *admin, 1000, 5000}).ok());
  ASSERT_TRUE(store_->InsertSession({"live-b", *admin, 1000, 5000}).ok());
  ASSERT_TRUE(store_->InsertSession({"old", *other, 1000, 2000}).ok());
  ASSERT_TRUE(store_->InsertSession({"gone", *other, 1000, 5000}).ok());
  ASSERT_TRUE(store_->InsertSession({"theirs", *other, 1000, 5000}).ok());
  EXPECT_THAT(
      store_->InsertSession({"live-a", *other, 0, 9000}),
      StatusIs(absl::StatusCode::kAlreadyExists, "UNIQUE constraint failed: sessions.token_hash"));
  ASSERT_TRUE(store_->DeleteSession("gone").ok());
  ASSERT_TRUE(store_->DeleteSession("never-was").ok());

  auto tokens = [&](int64_t now_ms) {
    std::vector<std::string> out;
    auto sessions = store_->LoadSessions(now_ms);
    EXPECT_TRUE(sessions.ok()) << sessions.status();
    for (const SessionRow& s : sessions.value_or(std::vector<SessionRow>{})) {
      out.push_back(s.token_hash);
    }
    return out;
  };
  EXPECT_THAT(tokens(2000),
              UnorderedElementsAre("live-a", "live-b", "theirs"));  // Expired at 2000.
  ASSERT_TRUE(store_->DeleteUserSessions(*admin, "live-b").ok());
  EXPECT_THAT(tokens(2000), UnorderedElementsAre("live-b", "theirs"));
  auto sessions = store_->LoadSessions(0);
  ASSERT_EQ(sessions->size(), 2u);
  for (const SessionRow& s : *sessions) {
    if (s.token_hash == "live-b") {
      EXPECT_EQ(s.user_id, *admin);
      EXPECT_EQ(s.created_ms, 1000);
      EXPECT_EQ(s.expires_ms, 5000);
    }
  }
  // Deleted on load, not only hidden: an earlier `now` does not bring them back.
  ASSERT_TRUE(store_->InsertSession({"old", *other, 1000, 2000}).ok());
}

TEST_P(StoreConformanceTest, UserAgentUserGroupIsStoredAndCleared) {
  auto alice = store_->InsertUser({0, "alice", "$argon2id$h", false, 1000});
  ASSERT_TRUE(alice.ok()) << alice.status();
  v1::AgentUserGroup link;
  link.set_agent_user("nobody");
  link.set_agent_uid(65534);
  link.set_agent_group("nogroup");
  link.set_agent_gid(65533);
  ASSERT_TRUE(store_->SetUserAgentUserGroup(*alice, link).ok());
  EXPECT_THAT(store_->SetUserAgentUserGroup(99, link),
              StatusIs(absl::StatusCode::kNotFound, "user 99 does not exist"));
  auto users = store_->ListUsers();
  ASSERT_TRUE(users.ok()) << users.status();
  ASSERT_EQ(users->size(), 1u);
  EXPECT_EQ((*users)[0].agent_user_group.agent_user(), "nobody");
  EXPECT_EQ((*users)[0].agent_user_group.agent_uid(), 65534);
  EXPECT_EQ((*users)[0].agent_user_group.agent_group(), "nogroup");
  EXPECT_EQ((*users)[0].agent_user_group.agent_gid(), 65533);
  EXPECT_EQ((*users)[0].password_hash, "$argon2id$h");  // Nothing else changed.

  ASSERT_TRUE(store_->SetUserAgentUserGroup(*alice, v1::AgentUserGroup()).ok());
  users = store_->ListUsers();
  ASSERT_TRUE(users.ok()) << users.status();
  EXPECT_EQ((*users)[0].agent_user_group.agent_user(), "");
  EXPECT_EQ((*users)[0].agent_user_group.agent_uid(), 0);
}

// The rows DownsampleMetrics keeps (the API's documented choice), as (group, batches).
std::vector<std::pair<std::string, int64_t>> Points(const std::vector<v1::Metrics>& rows) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const v1::Metrics& m : rows) out.emplace_back(m.group(), m.total_batches());
  return out;
}

// A trial's metric series downsampled by the reader's query: the same rows as loading every
// row and thinning them (DownsampleMetrics) for series shorter than, as long as and longer
// than max_points, never more than max_points a group, NaN and infinities as stored.
TEST_P(StoreConformanceTest, ReadersDownsampleMetricSeriesInTheQuery) {
  std::vector<v1::Trial> trials;
  AddExperiment(4, &trials);
  const double kInf = std::numeric_limits<double>::infinity();
  const double kNaN = std::numeric_limits<double>::quiet_NaN();
  // Trial 0: 7 training rows; trial 1: 60 training and 60 validation rows (interleaved);
  // trial 2: 2,000 training rows and 37 validation rows; trial 3: none.
  std::vector<v1::Metrics> rows;
  for (int b = 1; b <= 7; ++b) rows.push_back(Row(trials[0].id(), "training", b, b));
  for (int b = 1; b <= 60; ++b) {
    rows.push_back(Row(trials[1].id(), "training", b, 1.0 / b));
    rows.push_back(Row(trials[1].id(), "validation", b, b == 1 ? kNaN : 2.0 / b));
  }
  for (int b = 1; b <= 2000; ++b) {
    rows.push_back(Row(trials[2].id(), "training", b, b == 1 ? kInf : b == 2000 ? -kInf : b));
    if (b % 54 == 0) rows.push_back(Row(trials[2].id(), "validation", b, b == 1998 ? kNaN : b));
  }
  ASSERT_TRUE(store_->AddMetrics({trials[0], trials[1], trials[2]}, rows).ok());
  auto opened = store_->OpenReader();
  ASSERT_TRUE(opened.ok()) << opened.status();
  MetricsReader& reader = **opened;

  for (int t = 0; t < 4; ++t) {
    for (const std::string group : {"", "training", "validation"}) {
      const std::vector<v1::Metrics> all = *store_->GetMetrics(trials[t].id(), group);
      for (int max_points : {-1, 0, 1, 2, 3, 7, 10, 36, 37, 38, 60, 61, 200, 1999, 2000, 5000}) {
        SCOPED_TRACE(absl::StrCat("trial ", t, " group '", group, "' max_points ", max_points));
        auto got = reader.GetTrialMetrics(trials[t].id(), group, max_points);
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_EQ(Points(*got), Points(DownsampleMetrics(all, max_points)));
        if (max_points > 0) {
          std::map<std::string, int> per_group;
          for (const v1::Metrics& m : *got) ++per_group[m.group()];
          for (const auto& [g, n] : per_group) EXPECT_LE(n, max_points) << g;
        }
      }
    }
  }
  // 200 points of 2,000: both ends kept, with their infinities; rows whole.
  auto long_series = reader.GetTrialMetrics(trials[2].id(), "training", 200);
  ASSERT_TRUE(long_series.ok()) << long_series.status();
  ASSERT_EQ(long_series->size(), 200u);
  EXPECT_EQ(long_series->front().total_batches(), 1);
  EXPECT_EQ(long_series->front().values().at("loss"), kInf);
  EXPECT_EQ(long_series->back().total_batches(), 2000);
  EXPECT_EQ(long_series->back().values().at("loss"), -kInf);
  EXPECT_EQ(long_series->back().trial_id(), trials[2].id());
  EXPECT_EQ(long_series->back().report_time_ms(), 3000);
  auto nan_first = reader.GetTrialMetrics(trials[1].id(), "validation", 5);
  ASSERT_TRUE(nan_first.ok()) << nan_first.status();
  ASSERT_EQ(nan_first->size(), 5u);
  EXPECT_TRUE(std::isnan(nan_first->front().values().at("loss")));
  auto nan_kept = reader.GetTrialMetrics(trials[2].id(), "validation", 0);
  ASSERT_TRUE(nan_kept.ok()) << nan_kept.status();
  EXPECT_TRUE(std::isnan(nan_kept->back().values().at("loss")));

  // A trial that is not stored is NotFound from the same read.
  EXPECT_THAT(reader.GetTrialMetrics(trials[3].id() + 100, "", 10).status(),
              StatusIs(absl::StatusCode::kNotFound,
                       absl::StrCat("trial ", trials[3].id() + 100, " not found")));
}

// The reads the API makes off the loop (logs, checkpoints, an experiment's trials) read
// through a reader what the store holds.
TEST_P(StoreConformanceTest, ReadersReadLogsCheckpointsAndTrials) {
  std::vector<v1::Trial> trials;
  const int64_t exp = AddExperiment(2, &trials);
  const int64_t empty = AddExperiment(0);
  std::vector<v1::LogLine> lines(3);
  for (int i = 0; i < 3; ++i) {
    lines[i].set_trial_id(trials[i % 2].id());
    lines[i].set_rank(i);
    lines[i].set_stream("stdout");
    lines[i].set_message(absl::StrCat("line ", i));
  }
  ASSERT_TRUE(store_->AddLogs(&lines).ok());
  v1::Checkpoint c;
  c.set_uuid("c-1");
  c.set_trial_id(trials[1].id());
  c.set_total_batches(10);
  c.set_storage_path("/ckpt/c-1");
  v1::Trial reporting = trials[1];  // as the master writes it: the whole trial
  reporting.set_latest_checkpoint(c.storage_path());
  ASSERT_TRUE(store_->AddCheckpoint(c, reporting).ok());

  auto opened = store_->OpenReader();
  ASSERT_TRUE(opened.ok()) << opened.status();
  MetricsReader& reader = **opened;
  auto logs = reader.GetLogs(trials[0].id(), 0, 10, std::nullopt);
  ASSERT_TRUE(logs.ok()) << logs.status();
  ASSERT_EQ(logs->size(), 2u);
  EXPECT_EQ((*logs)[1].message(), "line 2");
  EXPECT_EQ((*logs)[1].id(), lines[2].id());
  EXPECT_EQ(reader.GetLogs(trials[0].id(), lines[0].id(), 10, std::nullopt)->size(), 1u);
  EXPECT_EQ(reader.GetLogs(trials[0].id(), 0, 10, 2)->size(), 1u);

  auto ids = reader.GetTrialIds(exp);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<int64_t>{trials[0].id(), trials[1].id()}));
  EXPECT_TRUE(reader.GetTrialIds(empty)->empty());
  EXPECT_THAT(reader.GetTrialIds(empty + 1).status(),
              StatusIs(absl::StatusCode::kNotFound, absl::StrCat("experiment ", empty + 1,
                                                                 " not found")));

  auto cs = reader.GetCheckpoints(trials[1].id());
  ASSERT_TRUE(cs.ok()) << cs.status();
  ASSERT_EQ(cs->size(), 1u);
  EXPECT_EQ((*cs)[0].storage_path(), "/ckpt/c-1");
  auto one = reader.GetCheckpoint("c-1");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->trial_id(), trials[1].id());
  EXPECT_EQ(one->experiment_id(), exp);
  EXPECT_EQ(one->total_batches(), 10);
  EXPECT_THAT(reader.GetCheckpoint("c-2").status(),
              StatusIs(absl::StatusCode::kNotFound, "checkpoint c-2 not found"));
}

}  // namespace
}  // namespace det::master
