#include "master/store/fault_injecting_store.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/in_memory_store.h"
#include "master/store/sqlite_store.h"

namespace det::master {
namespace {

using ::testing::IsEmpty;

// The rows of a read, by value: a range-for over `*store.Get...()` would use them after
// the StatusOr holding them is gone.
template <typename T>
T Rows(absl::StatusOr<T> rows) {
  EXPECT_TRUE(rows.ok()) << rows.status();
  return std::move(rows).value_or(T{});
}

// Each call of the Store interface, by name, on a store holding experiment 1 with trial 1,
// user 1 and GC task 1 (see Seed).
using Call = std::pair<std::string, std::function<absl::Status(Store&)>>;

std::vector<Call> Writes() {
  v1::Trial trial;
  trial.set_id(1);
  trial.set_experiment_id(1);
  v1::Experiment experiment;
  experiment.set_id(1);
  v1::Allocation allocation;
  allocation.set_id("1.0");
  allocation.set_trial_id(1);
  v1::CheckpointGcTask task;
  task.set_id(1);
  task.set_experiment_id(1);
  v1::Checkpoint checkpoint;
  checkpoint.set_uuid("u");
  checkpoint.set_trial_id(1);
  return {
      {"InsertExperiment",
       [=](Store& s) {
         std::vector<v1::Trial> trials(1);
         return s.InsertExperiment(experiment, "", &trials).status();
       }},
      {"UpdateExperiment", [=](Store& s) { return s.UpdateExperiment(experiment); }},
      {"InsertTrial", [=](Store& s) { return s.InsertTrial(trial).status(); }},
      {"UpdateTrial", [=](Store& s) { return s.UpdateTrial(trial); }},
      {"UpsertAllocation", [=](Store& s) { return s.UpsertAllocation(allocation, "tok"); }},
      {"UpsertAgent",
       [](Store& s) {
         v1::Agent agent;
         agent.set_id("agent");
         return s.UpsertAgent(agent);
       }},
      {"SetAgentCredential",
       [](Store& s) {
         v1::Agent agent;
         agent.set_id("agent");
         return s.SetAgentCredential(agent, "hash");
       }},
      {"AddMetrics",
       [=](Store& s) {
         v1::Metrics m;
         m.set_trial_id(1);
         m.set_group("training");
         return s.AddMetrics({trial}, {m});
       }},
      {"SupersedeMetrics",
       [=](Store& s) {
         v1::Trial t = trial;
         return s.SupersedeMetrics(&t, 1, 0).status();
       }},
      {"AddLogs",
       [](Store& s) {
         std::vector<v1::LogLine> lines(1);
         lines[0].set_trial_id(1);
         return s.AddLogs(&lines);
       }},
      {"AddCheckpoint", [=](Store& s) { return s.AddCheckpoint(checkpoint, trial); }},
      {"InsertCheckpointGcTask", [=](Store& s) { return s.InsertCheckpointGcTask(task).status(); }},
      {"UpdateCheckpointGcTask", [=](Store& s) { return s.UpdateCheckpointGcTask(task); }},
      {"DeleteExperiment", [](Store& s) { return s.DeleteExperiment(1); }},
      {"PutTemplate",
       [](Store& s) {
         bool created;
         return s.PutTemplate("t", "a: 1\n", "", 5, &created).status();
       }},
      {"DeleteTemplate", [](Store& s) { return s.DeleteTemplate("kept"); }},
      {"AddSystemMetrics",
       [](Store& s) {
         v1::SystemMetrics m;
         m.set_agent_id("agent");
         m.set_time_ms(10);
         return s.AddSystemMetrics({m}, 0);
       }},
      {"InsertUser",
       [](Store& s) {
         return s.InsertUser({0, "new", "h", false, 1}).status();
       }},
      {"SetUserPassword", [](Store& s) { return s.SetUserPassword(1, "h2"); }},
      {"SetUserAgentUserGroup",
       [](Store& s) {
         v1::AgentUserGroup link;
         link.set_agent_user("nobody");
         link.set_agent_uid(65534);
         return s.SetUserAgentUserGroup(1, link);
       }},
      {"InsertSession",
       [](Store& s) {
         return s.InsertSession({"new", 1, 0, 100});
       }},
      {"DeleteSession", [](Store& s) { return s.DeleteSession("kept"); }},
      {"DeleteUserSessions", [](Store& s) { return s.DeleteUserSessions(1, ""); }},
  };
}

std::vector<Call> Reads() {
  return {
      {"Load", [](Store& s) { return s.Load().status(); }},
      {"GetExperimentContext", [](Store& s) { return s.GetExperimentContext(1).status(); }},
      {"GetExperimentContextSha256",
       [](Store& s) { return s.GetExperimentContextSha256(1).status(); }},
      {"GetMetrics", [](Store& s) { return s.GetMetrics(1, "").status(); }},
      {"GetLogs", [](Store& s) { return s.GetLogs(1, 0, 10, std::nullopt).status(); }},
      {"GetCheckpoints", [](Store& s) { return s.GetCheckpoints(1).status(); }},
      {"GetTemplate", [](Store& s) { return s.GetTemplate("kept").status(); }},
      {"ListTemplates", [](Store& s) { return s.ListTemplates().status(); }},
      {"GetSystemMetrics", [](Store& s) { return s.GetSystemMetrics("agent", 10).status(); }},
      {"ListUsers", [](Store& s) { return s.ListUsers().status(); }},
      {"LoadSessions", [](Store& s) { return s.LoadSessions(0).status(); }},
  };
}

void Seed(Store& store) {
  v1::Experiment e;
  std::vector<v1::Trial> trials(1);
  ASSERT_TRUE(store.InsertExperiment(e, "ctx", &trials).ok());
  v1::CheckpointGcTask task;
  task.set_experiment_id(1);
  ASSERT_TRUE(store.InsertCheckpointGcTask(task).ok());
  ASSERT_TRUE(store.InsertUser({0, "user", "h", false, 1}).ok());
  ASSERT_TRUE(store.InsertSession({"kept", 1, 0, 100}).ok());
  bool created;
  ASSERT_TRUE(store.PutTemplate("kept", "a: 1\n", "", 1, &created).ok());
}

// Everything a reader of `store` can see, as text, to compare before and after a call.
std::string Contents(Store& store) {
  std::string out;
  auto snap = store.Load();
  EXPECT_TRUE(snap.ok()) << snap.status();
  for (const auto& e : snap->experiments) out += e.DebugString();
  for (const auto& t : snap->trials) out += t.DebugString();
  for (const auto& [a, token] : snap->open_allocations) out += a.DebugString() + token;
  for (const auto& a : snap->agents) out += a.DebugString();
  for (const auto& t : snap->checkpoint_gc_tasks) out += t.DebugString();
  for (const auto& m : Rows(store.GetMetrics(1, ""))) out += m.DebugString();
  for (const auto& l : Rows(store.GetLogs(1, 0, 1000, std::nullopt))) out += l.DebugString();
  for (const auto& c : Rows(store.GetCheckpoints(1))) out += c.DebugString();
  for (const auto& t : Rows(store.ListTemplates())) out += t.DebugString();
  for (const auto& m : Rows(store.GetSystemMetrics("agent", 100))) out += m.DebugString();
  for (const auto& u : Rows(store.ListUsers())) out += u.username + u.password_hash;
  for (const auto& s : Rows(store.LoadSessions(0))) out += s.token_hash;
  return out;
}

TEST(FaultInjectingStore, TheNthWriteFailsNamingItsMethodAndChangesNothing) {
  FaultInjectingStore store(std::make_unique<InMemoryStore>());
  Seed(store);
  int64_t seeded = store.writes_seen();
  EXPECT_EQ(seeded, 5);
  store.FailNthWrite(3);
  std::vector<v1::LogLine> lines(1);
  lines[0].set_trial_id(1);
  lines[0].set_message("first");
  ASSERT_TRUE(store.AddLogs(&lines).ok());
  // Reads neither count nor fail.
  EXPECT_EQ(store.GetLogs(1, 0, 10, std::nullopt)->size(), 1u);
  lines[0].set_message("second");
  ASSERT_TRUE(store.AddLogs(&lines).ok());

  std::string before = Contents(store);
  std::vector<v1::LogLine> third(2);
  third[0].set_trial_id(1);
  third[1].set_trial_id(1);
  absl::Status st = store.AddLogs(&third);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_EQ(st.message(), "injected fault: AddLogs");
  EXPECT_EQ(third[0].id(), 0);  // Not assigned.
  EXPECT_EQ(Contents(store), before);

  // The writes after it pass.
  ASSERT_TRUE(store.AddLogs(&third).ok());
  EXPECT_EQ(store.GetLogs(1, 0, 10, std::nullopt)->size(), 4u);
  EXPECT_EQ(store.writes_seen(), seeded + 4);
  EXPECT_EQ(store.writes_failed(), 1);
}

TEST(FaultInjectingStore, EveryWriteFailsWhileAskedAndPassesAfter) {
  InMemoryStore memory;
  FaultInjectingStore store(memory);
  Seed(store);
  std::string before = Contents(memory);
  store.FailWrites(true);
  store.SetFaultCode(absl::StatusCode::kResourceExhausted);
  for (const auto& [method, call] : Writes()) {
    absl::Status st = call(store);
    EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << method << ": " << st;
    EXPECT_EQ(st.message(), "injected fault: " + method);
  }
  EXPECT_EQ(Contents(memory), before);
  EXPECT_EQ(store.writes_failed(), static_cast<int64_t>(Writes().size()));
  for (const auto& [method, call] : Reads()) EXPECT_TRUE(call(store).ok()) << method;

  store.FailWrites(false);
  for (const auto& [method, call] : Writes()) {
    absl::Status st = call(store);
    EXPECT_NE(st.message(), "injected fault: " + method) << method;
  }
  EXPECT_NE(Contents(memory), before);
  EXPECT_EQ(store.writes_failed(), static_cast<int64_t>(Writes().size()));
}

TEST(FaultInjectingStore, ReadsFailOnlyWhenAsked) {
  FaultInjectingStore store(std::make_unique<InMemoryStore>());
  Seed(store);
  auto reader = store.OpenReader();  // its reads fail with the store's
  ASSERT_TRUE(reader.ok()) << reader.status();
  store.FailReads(true);
  for (const auto& [method, call] : Reads()) {
    absl::Status st = call(store);
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << method << ": " << st;
    EXPECT_EQ(st.message(), "injected fault: " + method);
  }
  EXPECT_EQ(store.reads_failed(), static_cast<int64_t>(Reads().size()));
  EXPECT_EQ(store.writes_failed(), 0);
  absl::Status read = (*reader)->GetMetrics(1, "").status();
  EXPECT_EQ(read.code(), absl::StatusCode::kUnavailable) << read;
  EXPECT_EQ(read.message(), "injected fault: GetMetrics");
  store.FailReads(false);
  for (const auto& [method, call] : Reads()) EXPECT_TRUE(call(store).ok()) << method;
  EXPECT_TRUE((*reader)->GetMetrics(1, "").ok());
}

TEST(FaultInjectingStore, FaultsOfOneMethodCountOnlyThatMethod) {
  FaultInjectingStore store(std::make_unique<InMemoryStore>());
  Seed(store);
  v1::Trial trial = store.Load()->trials[0];
  store.FailNthWrite(2, "UpdateTrial");
  v1::Agent agent;
  agent.set_id("agent");
  ASSERT_TRUE(store.UpsertAgent(agent).ok());
  trial.set_restarts(1);
  ASSERT_TRUE(store.UpdateTrial(trial).ok());
  ASSERT_TRUE(store.UpsertAgent(agent).ok());
  trial.set_restarts(2);
  EXPECT_EQ(store.UpdateTrial(trial).message(), "injected fault: UpdateTrial");
  EXPECT_EQ(store.Load()->trials[0].restarts(), 1);
  ASSERT_TRUE(store.UpdateTrial(trial).ok());

  store.FailWrites(true, "AddMetrics");
  v1::Metrics m;
  m.set_trial_id(trial.id());
  EXPECT_EQ(store.AddMetrics({trial}, {m}).message(), "injected fault: AddMetrics");
  EXPECT_THAT(*store.GetMetrics(trial.id(), ""), IsEmpty());
  EXPECT_TRUE(store.UpdateTrial(trial).ok());
  EXPECT_EQ(store.writes_failed(), 2);
}

TEST(FaultInjectingStore, AFailedWriteLeavesItsOutParametersAlone) {
  FaultInjectingStore store(std::make_unique<InMemoryStore>());
  Seed(store);
  v1::Trial trial = store.Load()->trials[0];
  v1::Metrics m;
  m.set_trial_id(trial.id());
  m.set_group("training");
  m.set_total_batches(10);
  (*m.mutable_values())["loss"] = 1;
  ASSERT_TRUE(store.AddMetrics({trial}, {m}).ok());
  store.FailNthWrite(1);
  v1::Trial before = trial;
  trial.set_total_batches(10);
  EXPECT_EQ(store.SupersedeMetrics(&trial, 1, 0).status().message(),
            "injected fault: SupersedeMetrics");
  EXPECT_EQ(trial.total_batches(), 10);
  EXPECT_EQ(store.GetMetrics(trial.id(), "")->size(), 1u);

  store.FailNthWrite(1);
  std::vector<v1::Trial> trials(2);
  EXPECT_EQ(store.InsertExperiment(v1::Experiment(), "", &trials).status().message(),
            "injected fault: InsertExperiment");
  EXPECT_EQ(trials[0].id(), 0);
  EXPECT_EQ(trials[0].experiment_id(), 0);
  EXPECT_EQ(store.Load()->experiments.size(), 1u);
}

// The decorator wraps any Store: here SQLite, whose own errors pass through unchanged, and
// a cancelled fault does not fire.
TEST(FaultInjectingStore, WrapsSqliteAndPassesItsErrorsThrough) {
  auto sqlite = SqliteStore::Open(":memory:");
  ASSERT_TRUE(sqlite.ok()) << sqlite.status();
  FaultInjectingStore store(std::move(*sqlite));
  Seed(store);
  store.FailNthWrite(2);
  store.FailNthWrite(0);
  v1::Trial missing;
  missing.set_id(99);
  absl::Status st = store.UpdateTrial(missing);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_EQ(st.message(), "trial 99 not in the database");
  v1::Agent agent;
  agent.set_id("agent");
  EXPECT_TRUE(store.UpsertAgent(agent).ok());
  EXPECT_EQ(store.writes_failed(), 0);
  EXPECT_EQ(store.Load()->agents.size(), 1u);
}

}  // namespace
}  // namespace det::master
