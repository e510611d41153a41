#include "master/store/postgres_store.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc/context_sha256.h"
#include "common/status/status_macros.h"
#include "master/store/metric_records.h"
#include "master/store/metric_summary.h"
#include "master/store/metric_values_json.h"
#include "master/store/postgres_internal.h"

namespace det::master {
namespace {

using postgres_internal::Bytes;
using postgres_internal::Connection;
using postgres_internal::ParseRow;
using postgres_internal::ReserveIds;
using postgres_internal::Result;
using postgres_internal::Transaction;

// The metric rows of `trial_id` (of `group` unless empty) on `conn`, in report order.
absl::StatusOr<std::vector<v1::Metrics>> ReadMetrics(Connection* conn, int64_t trial_id,
                                                     const std::string& group) {
  ASSIGN_OR_RETURN(Result r, conn->Exec("SELECT grp, rows FROM metric_records "
                                        "WHERE trial_id = $1 AND ($2 = '' OR grp = $2) "
                                        "ORDER BY id",
                                        {trial_id, group}));
  std::vector<v1::Metrics> out;
  for (int i = 0; i < r.rows(); ++i) {
    RETURN_IF_ERROR(AppendMetricRecordRows(r.Text(i, 1), trial_id, r.Text(i, 0), nullptr, &out));
  }
  return out;
}

// MetricsReader::GetTrialMetrics on `conn`, in one repeatable-read transaction (one
// snapshot): each group's rows are counted from its records' counts, and only the records
// holding a row DownsamplePositions chooses are read whole (and only those rows parsed).
absl::StatusOr<std::vector<v1::Metrics>> ReadTrialMetrics(Connection* conn, int64_t trial_id,
                                                          const std::string& group,
                                                          int max_points) {
  Transaction tx(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
  RETURN_IF_ERROR(tx.status());
  ASSIGN_OR_RETURN(Result t, conn->Exec("SELECT 1 FROM trials WHERE id = $1", {trial_id}));
  if (t.rows() == 0) return absl::NotFoundError(absl::StrCat("trial ", trial_id, " not found"));
  if (max_points <= 0) return ReadMetrics(conn, trial_id, group);
  std::vector<MetricRecordExtent> extents;
  {
    ASSIGN_OR_RETURN(Result r, conn->Exec("SELECT grp, id, n FROM metric_records "
                                          "WHERE trial_id = $1 AND ($2 = '' OR grp = $2) "
                                          "ORDER BY grp, id",
                                          {trial_id, group}));
    extents.reserve(static_cast<size_t>(r.rows()));
    for (int i = 0; i < r.rows(); ++i) {
      extents.push_back({r.Text(i, 0), r.Int(i, 1), r.Int(i, 2)});
    }
  }
  std::map<int64_t, std::vector<int64_t>> picks = PickDownsampledRows(extents, max_points);
  std::vector<int64_t> ids;
  ids.reserve(picks.size());
  for (const auto& [id, unused] : picks) ids.push_back(id);
  ASSIGN_OR_RETURN(Result r, conn->Exec("SELECT id, grp, rows FROM metric_records "
                                        "WHERE id = ANY($1::bigint[]) ORDER BY id",
                                        {postgres_internal::Int64Array(ids)}));
  std::vector<v1::Metrics> out;
  for (int i = 0; i < r.rows(); ++i) {
    auto it = picks.find(r.Int(i, 0));
    if (it == picks.end()) continue;
    RETURN_IF_ERROR(
        AppendMetricRecordRows(r.Text(i, 2), trial_id, r.Text(i, 1), &it->second, &out));
  }
  return out;
}

// Store::GetLogs on `conn`.
absl::StatusOr<std::vector<v1::LogLine>> ReadLogs(Connection* conn, int64_t trial_id,
                                                  int64_t after_id, int limit,
                                                  std::optional<int> rank) {
  ASSIGN_OR_RETURN(
      Result r,
      conn->Exec("SELECT id, allocation_id, agent_id, rank, stream, time_ms, message FROM logs "
                 "WHERE trial_id = $1 AND id > $2 AND ($3 = 1 OR rank = $4) ORDER BY id LIMIT $5",
                 {trial_id, after_id, rank.has_value() ? 0 : 1, rank.value_or(0),
                  limit > 0 ? limit : 1000}));
  std::vector<v1::LogLine> out;
  for (int i = 0; i < r.rows(); ++i) {
    v1::LogLine& l = out.emplace_back();
    l.set_id(r.Int(i, 0));
    l.set_trial_id(trial_id);
    l.set_allocation_id(r.Text(i, 1));
    l.set_agent_id(r.Text(i, 2));
    l.set_rank(static_cast<int32_t>(r.Int(i, 3)));
    l.set_stream(r.Text(i, 4));
    l.set_time_ms(r.Int(i, 5));
    l.set_message(r.Text(i, 6));
  }
  return out;
}

// Store::GetCheckpoints on `conn`.
absl::StatusOr<std::vector<v1::Checkpoint>> ReadCheckpoints(Connection* conn, int64_t trial_id) {
  ASSIGN_OR_RETURN(Result r, conn->Exec("SELECT data FROM checkpoints WHERE trial_id = $1 "
                                        "ORDER BY total_batches, time_ms",
                                        {trial_id}));
  std::vector<v1::Checkpoint> out;
  for (int i = 0; i < r.rows(); ++i) {
    RETURN_IF_ERROR(ParseRow(r.Text(i, 0), &out.emplace_back(), "checkpoints"));
  }
  return out;
}

// One column of experiment `experiment_id`'s row.
absl::StatusOr<std::string> ReadExperimentColumn(Connection* conn, const char* column,
                                                 int64_t experiment_id) {
  ASSIGN_OR_RETURN(Result r, conn->Exec(absl::StrCat("SELECT ", column,
                                                     " FROM experiments WHERE id = $1"),
                                        {experiment_id}));
  if (r.rows() == 0) {
    return absl::NotFoundError(absl::StrCat("experiment ", experiment_id, " not found"));
  }
  return r.Text(0, 0);
}

class PostgresMetricsReader : public MetricsReader {
 public:
  explicit PostgresMetricsReader(std::unique_ptr<Connection> conn) : conn_(std::move(conn)) {}

  absl::StatusOr<std::vector<v1::Metrics>> GetMetrics(int64_t trial_id,
                                                      const std::string& group) override {
    absl::MutexLock l(&mu_);
    return ReadMetrics(conn_.get(), trial_id, group);
  }
  absl::StatusOr<std::vector<v1::Metrics>> GetTrialMetrics(int64_t trial_id,
                                                           const std::string& group,
                                                           int max_points) override {
    absl::MutexLock l(&mu_);
    return ReadTrialMetrics(conn_.get(), trial_id, group, max_points);
  }
  absl::StatusOr<std::vector<v1::LogLine>> GetLogs(int64_t trial_id, int64_t after_id, int limit,
                                                   std::optional<int> rank) override {
    absl::MutexLock l(&mu_);
    return ReadLogs(conn_.get(), trial_id, after_id, limit, rank);
  }
  absl::StatusOr<std::vector<v1::Checkpoint>> GetCheckpoints(int64_t trial_id) override {
    absl::MutexLock l(&mu_);
    return ReadCheckpoints(conn_.get(), trial_id);
  }
  absl::StatusOr<std::vector<int64_t>> GetTrialIds(int64_t experiment_id) override {
    absl::MutexLock l(&mu_);
    // One statement: the experiment's row and its trials in one snapshot.
    ASSIGN_OR_RETURN(Result r, conn_->Exec("SELECT COALESCE(t.id, 0) FROM experiments e LEFT JOIN "
                                           "trials t "
                                           "ON t.experiment_id = e.id WHERE e.id = $1 "
                                           "ORDER BY t.id",
                                           {experiment_id}));
    if (r.rows() == 0) {
      return absl::NotFoundError(absl::StrCat("experiment ", experiment_id, " not found"));
    }
    std::vector<int64_t> out;
    for (int i = 0; i < r.rows(); ++i) {
      if (r.Int(i, 0) != 0) out.push_back(r.Int(i, 0));  // 0: an experiment without trials
    }
    return out;
  }
  absl::StatusOr<v1::Checkpoint> GetCheckpoint(const std::string& uuid) override {
    absl::MutexLock l(&mu_);
    ASSIGN_OR_RETURN(Result r, conn_->Exec("SELECT c.data, t.experiment_id FROM checkpoints c "
                                           "JOIN trials t ON t.id = c.trial_id WHERE c.uuid = $1",
                                           {uuid}));
    if (r.rows() == 0) return absl::NotFoundError(absl::StrCat("checkpoint ", uuid, " not found"));
    v1::Checkpoint c;
    RETURN_IF_ERROR(ParseRow(r.Text(0, 0), &c, "checkpoints"));
    c.set_experiment_id(r.Int(0, 1));
    return c;
  }
  absl::StatusOr<std::string> GetExperimentContext(int64_t experiment_id) override {
    absl::MutexLock l(&mu_);
    return ReadExperimentColumn(conn_.get(), "context", experiment_id);
  }

 private:
  absl::Mutex mu_;
  const std::unique_ptr<Connection> conn_ ABSL_PT_GUARDED_BY(mu_);
};

}  // namespace

PostgresStore::PostgresStore(std::unique_ptr<Connection> conn, std::string conninfo,
                             std::string password)
    : conn_(std::move(conn)), conninfo_(std::move(conninfo)), password_(std::move(password)) {}

PostgresStore::~PostgresStore() = default;

absl::StatusOr<std::unique_ptr<PostgresStore>> PostgresStore::Open(const std::string& conninfo,
                                                                   const std::string& password) {
  ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Connection::Open(conninfo, password));
  std::unique_ptr<PostgresStore> store(new PostgresStore(std::move(conn), conninfo, password));
  RETURN_IF_ERROR(store->Migrate());
  return store;
}

absl::StatusOr<StoreSnapshot> PostgresStore::Load() {
  StoreSnapshot snap;
  {
    // A new cluster's id, kept by the first master to store one.
    RETURN_IF_ERROR(conn_->Exec("INSERT INTO cluster (key, value) VALUES ('cluster_id', "
                                "replace(gen_random_uuid()::text, '-', '')) "
                                "ON CONFLICT (key) DO NOTHING")
                        .status());
    ASSIGN_OR_RETURN(Result r, conn_->Exec("SELECT value FROM cluster WHERE key = 'cluster_id'"));
    if (r.rows() == 1) snap.cluster_id = r.Text(0, 0);
  }
  {
    ASSIGN_OR_RETURN(Result r, conn_->Exec("SELECT data FROM experiments ORDER BY id"));
    for (int i = 0; i < r.rows(); ++i) {
      RETURN_IF_ERROR(ParseRow(r.Text(i, 0), &snap.experiments.emplace_back(), "experiments"));
    }
  }
  {
    ASSIGN_OR_RETURN(Result r, conn_->Exec("SELECT data FROM trials ORDER BY id"));
    for (int i = 0; i < r.rows(); ++i) {
      RETURN_IF_ERROR(ParseRow(r.Text(i, 0), &snap.trials.emplace_back(), "trials"));
    }
  }
  {
    ASSIGN_OR_RETURN(Result r, conn_->Exec("SELECT data, token FROM allocations "
                                           "WHERE state NOT IN ($1, $2, $3) ORDER BY seq",
                                           {v1::STATE_COMPLETED, v1::STATE_CANCELED,
                                            v1::STATE_ERROR}));
    for (int i = 0; i < r.rows(); ++i) {
      auto& entry = snap.open_allocations.emplace_back();
      RETURN_IF_ERROR(ParseRow(r.Text(i, 0), &entry.first, "allocations"));
      entry.second = r.Text(i, 1);
    }
  }
  {
    ASSIGN_OR_RETURN(Result r,
                     conn_->Exec("SELECT data, credential_hash FROM agents ORDER BY id COLLATE \"C\""));
    for (int i = 0; i < r.rows(); ++i) {
      RETURN_IF_ERROR(ParseRow(r.Text(i, 0), &snap.agents.emplace_back(), "agents"));
      std::string hash = r.Text(i, 1);
      if (!hash.empty()) snap.agent_credential_hashes[snap.agents.back().id()] = std::move(hash);
    }
  }
  {
    ASSIGN_OR_RETURN(Result r, conn_->Exec("SELECT data FROM checkpoint_gc_tasks ORDER BY id"));
    for (int i = 0; i < r.rows(); ++i) {
      RETURN_IF_ERROR(
          ParseRow(r.Text(i, 0), &snap.checkpoint_gc_tasks.emplace_back(), "checkpoint_gc_tasks"));
    }
  }
  {
    ASSIGN_OR_RETURN(Result r, conn_->Exec("SELECT data FROM models ORDER BY id"));
    for (int i = 0; i < r.rows(); ++i) {
      RETURN_IF_ERROR(ParseRow(r.Text(i, 0), &snap.models.emplace_back(), "models"));
    }
  }
  {
    ASSIGN_OR_RETURN(Result r, conn_->Exec("SELECT data FROM model_versions ORDER BY id"));
    for (int i = 0; i < r.rows(); ++i) {
      RETURN_IF_ERROR(ParseRow(r.Text(i, 0), &snap.model_versions.emplace_back(), "model_versions"));
    }
  }
  return snap;
}

absl::StatusOr<int64_t> PostgresStore::InsertExperiment(const v1::Experiment& experiment,
                                                        const std::string& context,
                                                        std::vector<v1::Trial>* trials) {
  Transaction tx(conn_.get());
  RETURN_IF_ERROR(tx.status());
  ASSIGN_OR_RETURN(int64_t id, ReserveIds(conn_.get(), "experiments"));
  v1::Experiment stored = experiment;
  stored.set_id(id);
  const std::string data = stored.SerializeAsString();
  RETURN_IF_ERROR(conn_->Exec("INSERT INTO experiments (id, name, state, start_ms, config_yaml, "
                              "context, context_sha256, data) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                              {id, experiment.name(), experiment.state(),
                               experiment.start_time_ms(), experiment.config_yaml(),
                               Bytes{context}, rpc::ContextSha256(context), Bytes{data}})
                      .status());
  // Set only once committed: a failed call leaves `trials` as it was.
  std::vector<v1::Trial> inserted = *trials;
  for (auto& t : inserted) {
    t.set_experiment_id(id);
    ASSIGN_OR_RETURN(int64_t tid, InsertTrialRow(t));
    t.set_id(tid);
  }
  RETURN_IF_ERROR(tx.Commit());
  *trials = std::move(inserted);
  return id;
}

absl::Status PostgresStore::UpdateExperiment(const v1::Experiment& experiment) {
  const std::string data = experiment.SerializeAsString();
  ASSIGN_OR_RETURN(Result r,
                   conn_->Exec("UPDATE experiments SET name = $1, state = $2, data = $3 WHERE id = $4",
                               {experiment.name(), experiment.state(), Bytes{data},
                                experiment.id()}));
  if (r.changed() != 1) {
    return absl::NotFoundError(absl::StrCat("experiment ", experiment.id(), " not in the database"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> PostgresStore::GetExperimentContext(int64_t experiment_id) {
  return ReadExperimentColumn(conn_.get(), "context", experiment_id);
}

absl::StatusOr<std::string> PostgresStore::GetExperimentContextSha256(int64_t experiment_id) {
  return ReadExperimentColumn(conn_.get(), "context_sha256", experiment_id);
}

absl::StatusOr<int64_t> PostgresStore::InsertTrialRow(const v1::Trial& trial) {
  ASSIGN_OR_RETURN(int64_t id, ReserveIds(conn_.get(), "trials"));
  v1::Trial row = trial;
  row.set_id(id);
  row.clear_allocation();  // Allocations have their own table.
  const std::string data = row.SerializeAsString();
  RETURN_IF_ERROR(conn_->Exec("INSERT INTO trials (id, experiment_id, state, data) "
                              "VALUES ($1, $2, $3, $4)",
                              {id, trial.experiment_id(), trial.state(), Bytes{data}})
                      .status());
  return id;
}

absl::StatusOr<int64_t> PostgresStore::InsertTrial(const v1::Trial& trial) {
  Transaction tx(conn_.get());
  RETURN_IF_ERROR(tx.status());
  ASSIGN_OR_RETURN(int64_t id, InsertTrialRow(trial));
  RETURN_IF_ERROR(tx.Commit());
  return id;
}

absl::Status PostgresStore::WriteTrial(const v1::Trial& trial) {
  v1::Trial row = trial;
  row.clear_allocation();
  const std::string data = row.SerializeAsString();
  ASSIGN_OR_RETURN(Result r, conn_->Exec("UPDATE trials SET state = $1, data = $2 WHERE id = $3",
                                         {row.state(), Bytes{data}, row.id()}));
  if (r.changed() != 1) {
    return absl::NotFoundError(absl::StrCat("trial ", trial.id(), " not in the database"));
  }
  return absl::OkStatus();
}

absl::Status PostgresStore::UpdateTrial(const v1::Trial& trial) { return WriteTrial(trial); }

absl::Status PostgresStore::UpsertAllocation(const v1::Allocation& allocation,
                                             const std::string& token) {
  const std::string data = allocation.SerializeAsString();
  return conn_
      ->Exec("INSERT INTO allocations (id, trial_id, state, token, data) "
             "VALUES ($1, $2, $3, $4, $5) "
             "ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, data = EXCLUDED.data",
             {allocation.id(), allocation.trial_id(), allocation.state(), token, Bytes{data}})
      .status();
}

absl::Status PostgresStore::UpsertAgent(const v1::Agent& agent) {
  const std::string data = agent.SerializeAsString();
  return conn_
      ->Exec("INSERT INTO agents (id, data) VALUES ($1, $2) "
             "ON CONFLICT (id) DO UPDATE SET data = EXCLUDED.data",
             {agent.id(), Bytes{data}})
      .status();
}

absl::Status PostgresStore::SetAgentCredential(const v1::Agent& agent,
                                               const std::string& credential_hash) {
  const std::string data = agent.SerializeAsString();
  return conn_
      ->Exec("INSERT INTO agents (id, data, credential_hash) VALUES ($1, $2, $3) "
             "ON CONFLICT (id) DO UPDATE SET data = EXCLUDED.data, "
             "credential_hash = EXCLUDED.credential_hash",
             {agent.id(), Bytes{data}, credential_hash})
      .status();
}

absl::Status PostgresStore::AddMetrics(const std::vector<v1::Trial>& trials,
                                       const std::vector<v1::Metrics>& metrics) {
  const std::vector<MetricRecordBuilder> records = BuildMetricRecords(metrics);
  std::vector<std::string> texts;
  texts.reserve(records.size());
  for (const auto& r : records) texts.push_back(r.Finish());
  std::vector<int64_t> trial_ids, counts, min_run_ids, max_batches;
  std::vector<std::string_view> groups, rows;
  for (size_t i = 0; i < records.size(); ++i) {
    trial_ids.push_back(records[i].trial_id());
    groups.push_back(records[i].group());
    counts.push_back(records[i].count());
    min_run_ids.push_back(records[i].min_run_id());
    max_batches.push_back(records[i].max_batches());
    rows.push_back(texts[i]);
  }
  // Each trial once, with its last version (what writing them in order leaves).
  absl::flat_hash_map<int64_t, size_t> last;
  for (size_t i = 0; i < trials.size(); ++i) last[trials[i].id()] = i;
  std::vector<int64_t> ids, states;
  std::vector<std::string> data;
  for (size_t i = 0; i < trials.size(); ++i) {
    if (last[trials[i].id()] != i) continue;
    v1::Trial row = trials[i];
    row.clear_allocation();  // Allocations have their own table.
    ids.push_back(row.id());
    states.push_back(row.state());
    data.push_back(row.SerializeAsString());
  }
  std::vector<std::string_view> data_views(data.begin(), data.end());
  // One statement (one round trip, its own transaction): reserve the records' ids, insert
  // them (the k-th record takes the k-th id, so each trial's rows keep their order), write
  // the trials, and fail the whole statement (division by zero, mapped to NotFound below)
  // unless every trial was there to write.
  const int64_t n = static_cast<int64_t>(records.size());
  absl::StatusOr<Result> r = conn_->Exec(
      "WITH reserved AS ("
      " INSERT INTO id_sequences (name, last) VALUES ('metric_records', $1::bigint)"
      " ON CONFLICT (name) DO UPDATE SET last = id_sequences.last + EXCLUDED.last"
      " RETURNING last - $1::bigint AS base),"
      " stored AS ("
      " INSERT INTO metric_records (id, trial_id, grp, n, min_run_id, max_batches, rows)"
      " SELECT reserved.base + u.k, u.trial_id, u.grp, u.n, u.min_run_id, u.max_batches, u.rows"
      " FROM reserved, unnest($2::bigint[], $3::text[], $4::bigint[], $5::bigint[],"
      " $6::bigint[], $7::text[]) WITH ORDINALITY AS u(trial_id, grp, n, min_run_id,"
      " max_batches, rows, k)),"
      " written AS ("
      " UPDATE trials SET state = u.state, data = u.data"
      " FROM unnest($8::bigint[], $9::bigint[], $10::bytea[]) AS u(id, state, data)"
      " WHERE trials.id = u.id RETURNING trials.id)"
      " SELECT 1 / ((SELECT count(*) FROM written) = $11::bigint)::int",
      {n, postgres_internal::Int64Array(trial_ids), postgres_internal::TextArray(groups),
       postgres_internal::Int64Array(counts), postgres_internal::Int64Array(min_run_ids),
       postgres_internal::Int64Array(max_batches), postgres_internal::TextArray(rows),
       postgres_internal::Int64Array(ids), postgres_internal::Int64Array(states),
       postgres_internal::ByteaArray(data_views), static_cast<int64_t>(ids.size())});
  if (r.ok()) return absl::OkStatus();
  if (r.status().code() != absl::StatusCode::kInternal ||
      !absl::EndsWith(r.status().message(), "division by zero")) {
    return r.status();
  }
  // A trial was missing: nothing was stored. Name the first.
  ASSIGN_OR_RETURN(Result found, conn_->Exec("SELECT id FROM trials WHERE id = ANY($1::bigint[])",
                                             {postgres_internal::Int64Array(ids)}));
  absl::flat_hash_set<int64_t> present;
  for (int i = 0; i < found.rows(); ++i) present.insert(found.Int(i, 0));
  for (const auto& t : trials) {
    if (!present.contains(t.id())) {
      return absl::NotFoundError(absl::StrCat("trial ", t.id(), " not in the database"));
    }
  }
  return absl::NotFoundError("a trial of the metric rows is not in the database");
}

absl::StatusOr<std::vector<v1::Metrics>> PostgresStore::GetMetrics(int64_t trial_id,
                                                                   const std::string& group) {
  return ReadMetrics(conn_.get(), trial_id, group);
}

absl::StatusOr<std::unique_ptr<MetricsReader>> PostgresStore::OpenReader() {
  ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Connection::Open(conninfo_, password_));
  return std::unique_ptr<MetricsReader>(new PostgresMetricsReader(std::move(conn)));
}

absl::StatusOr<int64_t> PostgresStore::SupersedeMetrics(v1::Trial* trial, int32_t run_id,
                                                        int64_t after_batches) {
  Transaction tx(conn_.get());
  RETURN_IF_ERROR(tx.status());
  // Only records that may hold such a row are read; each is rewritten without them (in
  // place, keeping its id and so its rows' order) or deleted when none is left.
  ASSIGN_OR_RETURN(Result r, conn_->Exec("SELECT id, grp, rows FROM metric_records "
                                         "WHERE trial_id = $1 AND min_run_id < $2 AND "
                                         "max_batches > $3 ORDER BY id FOR UPDATE",
                                         {trial->id(), run_id, after_batches}));
  int64_t deleted = 0;
  for (int i = 0; i < r.rows(); ++i) {
    std::vector<v1::Metrics> rows;
    RETURN_IF_ERROR(AppendMetricRecordRows(r.Text(i, 2), trial->id(), r.Text(i, 1), nullptr, &rows));
    MetricRecordBuilder kept(trial->id(), "");
    const int64_t dropped = KeepUnsupersededRows(rows, run_id, after_batches, &kept);
    if (dropped == 0) continue;
    deleted += dropped;
    if (kept.count() == 0) {
      RETURN_IF_ERROR(
          conn_->Exec("DELETE FROM metric_records WHERE id = $1", {r.Int(i, 0)}).status());
      continue;
    }
    RETURN_IF_ERROR(conn_
                        ->Exec("UPDATE metric_records SET n = $1, min_run_id = $2, "
                               "max_batches = $3, rows = $4 WHERE id = $5",
                               {kept.count(), kept.min_run_id(), kept.max_batches(),
                                kept.Finish(), r.Int(i, 0)})
                        .status());
  }
  v1::Trial updated = *trial;
  if (deleted > 0) {
    ASSIGN_OR_RETURN(std::vector<v1::Metrics> rows, GetMetrics(trial->id(), ""));
    updated.clear_training_summary();
    updated.clear_validation_summary();
    updated.clear_timings_summary();
    updated.set_total_batches(0);
    for (const auto& m : rows) ApplyToSummaries(m, &updated);
    RETURN_IF_ERROR(WriteTrial(updated));
  }
  RETURN_IF_ERROR(tx.Commit());
  *trial = std::move(updated);
  return deleted;
}

absl::Status PostgresStore::AddLogs(std::vector<v1::LogLine>* lines) {
  if (lines->empty()) return absl::OkStatus();
  std::vector<int64_t> trial_ids, ranks, times;
  std::vector<std::string_view> allocations, agents, streams, messages;
  for (const v1::LogLine& l : *lines) {
    trial_ids.push_back(l.trial_id());
    allocations.push_back(l.allocation_id());
    agents.push_back(l.agent_id());
    ranks.push_back(l.rank());
    streams.push_back(l.stream());
    times.push_back(l.time_ms());
    messages.push_back(l.message());
  }
  // One statement (one round trip, its own transaction): the n-th line takes the n-th
  // reserved id.
  ASSIGN_OR_RETURN(
      Result r,
      conn_->Exec("WITH reserved AS ("
                  " INSERT INTO id_sequences (name, last) VALUES ('logs', $1::bigint)"
                  " ON CONFLICT (name) DO UPDATE SET last = id_sequences.last + EXCLUDED.last"
                  " RETURNING last - $1::bigint AS base),"
                  " stored AS ("
                  " INSERT INTO logs (id, trial_id, allocation_id, agent_id, rank, stream, time_ms,"
                  " message) SELECT reserved.base + u.k, u.trial_id, u.allocation_id, u.agent_id,"
                  " u.rank, u.stream, u.time_ms, u.message FROM reserved, unnest($2::bigint[],"
                  " $3::text[], $4::text[], $5::bigint[], $6::text[], $7::bigint[], $8::bytea[])"
                  " WITH ORDINALITY AS u(trial_id, allocation_id, agent_id, rank, stream, time_ms,"
                  " message, k))"
                  " SELECT base FROM reserved",
                  {static_cast<int64_t>(lines->size()), postgres_internal::Int64Array(trial_ids),
                   postgres_internal::TextArray(allocations), postgres_internal::TextArray(agents),
                   postgres_internal::Int64Array(ranks), postgres_internal::TextArray(streams),
                   postgres_internal::Int64Array(times), postgres_internal::ByteaArray(messages)}));
  int64_t id = r.Int(0, 0);
  for (auto& l : *lines) l.set_id(++id);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::LogLine>> PostgresStore::GetLogs(int64_t trial_id, int64_t after_id,
                                                                int limit, std::optional<int> rank) {
  return ReadLogs(conn_.get(), trial_id, after_id, limit, rank);
}

absl::Status PostgresStore::AddCheckpoint(const v1::Checkpoint& checkpoint, const v1::Trial& trial) {
  Transaction tx(conn_.get());
  RETURN_IF_ERROR(tx.status());
  const std::string data = checkpoint.SerializeAsString();
  RETURN_IF_ERROR(conn_->Exec("INSERT INTO checkpoints (uuid, trial_id, total_batches, time_ms, "
                              "data) VALUES ($1, $2, $3, $4, $5)",
                              {checkpoint.uuid(), checkpoint.trial_id(), checkpoint.total_batches(),
                               checkpoint.report_time_ms(), Bytes{data}})
                      .status());
  RETURN_IF_ERROR(WriteTrial(trial));
  return tx.Commit();
}

absl::StatusOr<int64_t> PostgresStore::InsertCheckpointGcTask(const v1::CheckpointGcTask& task) {
  Transaction tx(conn_.get());
  RETURN_IF_ERROR(tx.status());
  ASSIGN_OR_RETURN(int64_t id, ReserveIds(conn_.get(), "checkpoint_gc_tasks"));
  v1::CheckpointGcTask stored = task;
  stored.set_id(id);
  const std::string data = stored.SerializeAsString();
  RETURN_IF_ERROR(conn_->Exec("INSERT INTO checkpoint_gc_tasks (id, experiment_id, state, data) "
                              "VALUES ($1, $2, $3, $4)",
                              {id, task.experiment_id(), task.state(), Bytes{data}})
                      .status());
  RETURN_IF_ERROR(tx.Commit());
  return id;
}

absl::Status PostgresStore::WriteCheckpointGcTask(const v1::CheckpointGcTask& task) {
  const std::string data = task.SerializeAsString();
  ASSIGN_OR_RETURN(Result r,
                   conn_->Exec("UPDATE checkpoint_gc_tasks SET state = $1, data = $2 WHERE id = $3",
                               {task.state(), Bytes{data}, task.id()}));
  if (r.changed() != 1) {
    return absl::NotFoundError(absl::StrCat("checkpoint GC task ", task.id(), " not in the database"));
  }
  return absl::OkStatus();
}

absl::Status PostgresStore::UpdateCheckpointGcTask(const v1::CheckpointGcTask& task) {
  Transaction tx(conn_.get());
  RETURN_IF_ERROR(tx.status());
  RETURN_IF_ERROR(WriteCheckpointGcTask(task));
  if (task.state() == v1::STATE_COMPLETED) {
    for (const v1::Checkpoint& c : task.checkpoints()) {
      ASSIGN_OR_RETURN(Result r, conn_->Exec("SELECT data FROM checkpoints WHERE uuid = $1 FOR UPDATE",
                                             {c.uuid()}));
      if (r.rows() == 0) continue;
      v1::Checkpoint stored;
      RETURN_IF_ERROR(ParseRow(r.Text(0, 0), &stored, "checkpoints"));
      stored.set_state(v1::STATE_DELETED);
      const std::string data = stored.SerializeAsString();
      RETURN_IF_ERROR(conn_->Exec("UPDATE checkpoints SET data = $1 WHERE uuid = $2",
                                  {Bytes{data}, c.uuid()})
                          .status());
    }
  }
  return tx.Commit();
}

absl::StatusOr<std::vector<v1::Checkpoint>> PostgresStore::GetCheckpoints(int64_t trial_id) {
  return ReadCheckpoints(conn_.get(), trial_id);
}

absl::Status PostgresStore::DeleteExperiment(int64_t experiment_id) {
  Transaction tx(conn_.get());
  RETURN_IF_ERROR(tx.status());
  // Children before parents (foreign keys).
  for (const char* sql : {
           "DELETE FROM metric_records WHERE trial_id IN "
           "(SELECT id FROM trials WHERE experiment_id = $1)",
           "DELETE FROM logs WHERE trial_id IN (SELECT id FROM trials WHERE experiment_id = $1)",
           "DELETE FROM checkpoints WHERE trial_id IN "
           "(SELECT id FROM trials WHERE experiment_id = $1)",
           "DELETE FROM allocations WHERE trial_id IN "
           "(SELECT id FROM trials WHERE experiment_id = $1)",
           "DELETE FROM checkpoint_gc_tasks WHERE experiment_id = $1",
           "DELETE FROM trials WHERE experiment_id = $1",
       }) {
    RETURN_IF_ERROR(conn_->Exec(sql, {experiment_id}).status());
  }
  ASSIGN_OR_RETURN(Result r, conn_->Exec("DELETE FROM experiments WHERE id = $1", {experiment_id}));
  if (r.changed() != 1) {
    return absl::NotFoundError(absl::StrCat("experiment ", experiment_id, " not in the database"));
  }
  return tx.Commit();
}

absl::StatusOr<std::string> ReadDatabasePassword(const std::string& env,
                                                 absl::string_view env_what,
                                                 const std::string& file,
                                                 absl::string_view file_what) {
  if (!env.empty()) {
    const char* value = std::getenv(env.c_str());
    if (value == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(env_what, ": environment variable ", env, " is not set"));
    }
    return std::string(value);
  }
  if (file.empty()) return std::string();
  std::ifstream in(file);
  if (!in) return absl::FailedPreconditionError(absl::StrCat(file_what, ": cannot read '", file, "'"));
  std::string password;
  std::getline(in, password);
  if (!password.empty() && password.back() == '\r') password.pop_back();
  return password;
}

}  // namespace det::master
