#include "master/store/postgres_store.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc/context_sha256.h"
#include "common/status/status_macros.h"
#include "master/store/metric_summary.h"
#include "master/store/downsample_sql.h"
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

// Array literals (PostgreSQL's text format) that bind a batch of rows as one parameter per
// column, so that a flush is one statement and one round trip whatever its size.

// {e1,e2,...}: `append` writes the element of each row.
template <typename T, typename A>
std::string ArrayOf(const std::vector<T>& rows, A append) {
  std::string out = "{";
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i > 0) out += ',';
    append(rows[i], &out);
  }
  out += '}';
  return out;
}

// {1,2,3}: integers need no quoting.
template <typename T, typename F>
std::string IntArray(const std::vector<T>& rows, F field) {
  return ArrayOf(rows, [&](const T& row, std::string* out) {
    absl::StrAppend(out, static_cast<int64_t>(field(row)));
  });
}

// {"a","b\"c"}: every element quoted (so none reads as NULL), its quotes and backslashes
// escaped, and cut at a NUL as a text parameter of its own would be.
template <typename T, typename F>
std::string TextArray(const std::vector<T>& rows, F field) {
  return ArrayOf(rows, [&](const T& row, std::string* out) {
    *out += '"';
    for (char c : field(row)) {
      if (c == '\0') break;
      if (c == '"' || c == '\\') *out += '\\';
      *out += c;
    }
    *out += '"';
  });
}

// Bytes as hex text elements, decoded to BYTEA by the statement (decode(x, 'hex')).
template <typename T, typename F>
std::string HexArray(const std::vector<T>& rows, F field) {
  return ArrayOf(rows, [&](const T& row, std::string* out) {
    absl::StrAppend(out, "\"", absl::BytesToHexString(field(row)), "\"");
  });
}

// The metric rows of `r` (run_id, grp, total_batches, time_ms, vals) of `trial_id`.
absl::StatusOr<std::vector<v1::Metrics>> MetricRows(const Result& r, int64_t trial_id) {
  std::vector<v1::Metrics> out;
  for (int i = 0; i < r.rows(); ++i) {
    v1::Metrics& m = out.emplace_back();
    m.set_trial_id(trial_id);
    m.set_run_id(static_cast<int32_t>(r.Int(i, 0)));
    m.set_group(r.Text(i, 1));
    m.set_total_batches(r.Int(i, 2));
    m.set_report_time_ms(r.Int(i, 3));
    RETURN_IF_ERROR(ParseMetricValuesJson(r.Text(i, 4), trial_id, &m));
  }
  return out;
}

absl::StatusOr<std::vector<v1::Metrics>> ReadMetrics(Connection* conn, int64_t trial_id,
                                                     const std::string& group) {
  ASSIGN_OR_RETURN(Result r,
                   conn->Exec("SELECT run_id, grp, total_batches, time_ms, vals FROM metrics "
                              "WHERE trial_id = $1 AND ($2 = '' OR grp = $2) ORDER BY id",
                              {trial_id, group}));
  return MetricRows(r, trial_id);
}

// MetricsReader::GetTrialMetrics on `conn` (read committed: each statement sees every
// commit before it began).
absl::StatusOr<std::vector<v1::Metrics>> ReadTrialMetrics(Connection* conn, int64_t trial_id,
                                                          const std::string& group,
                                                          int max_points) {
  ASSIGN_OR_RETURN(Result t, conn->Exec("SELECT 1 FROM trials WHERE id = $1", {trial_id}));
  if (t.rows() == 0) return absl::NotFoundError(absl::StrCat("trial ", trial_id, " not found"));
  static const std::string* const kSql = new std::string(
      store_internal::DownsampledMetricsSql("$1::bigint", "$2::text", "$3::bigint"));
  ASSIGN_OR_RETURN(Result r, conn->Exec(*kSql, {trial_id, group, max_points}));
  return MetricRows(r, trial_id);
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

absl::Status PostgresStore::WriteTrials(const std::vector<v1::Trial>& trials) {
  if (trials.size() <= 1) {
    for (const auto& t : trials) RETURN_IF_ERROR(WriteTrial(t));
    return absl::OkStatus();
  }
  // One UPDATE for the batch. A trial listed twice is written once, with its last version
  // (what writing them in order leaves).
  absl::flat_hash_map<int64_t, size_t> last;
  for (size_t i = 0; i < trials.size(); ++i) last[trials[i].id()] = i;
  std::vector<v1::Trial> rows;
  std::vector<std::string> data;
  rows.reserve(last.size());
  data.reserve(last.size());
  for (size_t i = 0; i < trials.size(); ++i) {
    if (last[trials[i].id()] != i) continue;
    v1::Trial& row = rows.emplace_back(trials[i]);
    row.clear_allocation();
    data.push_back(row.SerializeAsString());
  }
  ASSIGN_OR_RETURN(
      Result r,
      conn_->Exec("UPDATE trials SET state = u.state, data = decode(u.data, 'hex') "
                  "FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS u(id, state, data) "
                  "WHERE trials.id = u.id RETURNING trials.id",
                  {IntArray(rows, [](const v1::Trial& t) { return t.id(); }),
                   IntArray(rows, [](const v1::Trial& t) { return t.state(); }),
                   HexArray(data, [](const std::string& d) -> const std::string& { return d; })}));
  if (r.rows() != static_cast<int>(rows.size())) {
    absl::flat_hash_set<int64_t> written;
    for (int i = 0; i < r.rows(); ++i) written.insert(r.Int(i, 0));
    for (const auto& t : trials) {
      if (!written.contains(t.id())) {
        return absl::NotFoundError(absl::StrCat("trial ", t.id(), " not in the database"));
      }
    }
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
  Transaction tx(conn_.get());
  RETURN_IF_ERROR(tx.status());
  if (!metrics.empty()) {
    ASSIGN_OR_RETURN(int64_t id, ReserveIds(conn_.get(), "metrics", metrics.size()));
    // One INSERT for the batch; the n-th row takes the n-th reserved id.
    std::vector<std::string> vals;
    vals.reserve(metrics.size());
    for (const auto& m : metrics) vals.push_back(MetricValuesJson(m));
    using M = v1::Metrics;
    RETURN_IF_ERROR(
        conn_
            ->Exec("INSERT INTO metrics (id, trial_id, run_id, grp, total_batches, time_ms, vals) "
                   "SELECT $1::bigint + u.n - 1, u.trial_id, u.run_id, u.grp, u.total_batches, "
                   "u.time_ms, u.vals FROM unnest($2::bigint[], $3::bigint[], $4::text[], "
                   "$5::bigint[], $6::bigint[], $7::text[]) WITH ORDINALITY "
                   "AS u(trial_id, run_id, grp, total_batches, time_ms, vals, n)",
                   {id, IntArray(metrics, [](const M& m) { return m.trial_id(); }),
                    IntArray(metrics, [](const M& m) { return m.run_id(); }),
                    TextArray(metrics, [](const M& m) -> const std::string& { return m.group(); }),
                    IntArray(metrics, [](const M& m) { return m.total_batches(); }),
                    IntArray(metrics, [](const M& m) { return m.report_time_ms(); }),
                    TextArray(vals, [](const std::string& v) -> const std::string& { return v; })})
            .status());
  }
  RETURN_IF_ERROR(WriteTrials(trials));
  return tx.Commit();
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
  ASSIGN_OR_RETURN(Result del, conn_->Exec("DELETE FROM metrics WHERE trial_id = $1 AND "
                                           "run_id < $2 AND total_batches > $3",
                                           {trial->id(), run_id, after_batches}));
  const int64_t deleted = del.changed();
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
  Transaction tx(conn_.get());
  RETURN_IF_ERROR(tx.status());
  ASSIGN_OR_RETURN(int64_t first, ReserveIds(conn_.get(), "logs", lines->size()));
  // One INSERT for the batch; the n-th line takes the n-th reserved id.
  using L = v1::LogLine;
  const std::vector<L>& ls = *lines;
  RETURN_IF_ERROR(
      conn_
          ->Exec("INSERT INTO logs (id, trial_id, allocation_id, agent_id, rank, stream, time_ms, "
                 "message) SELECT $1::bigint + u.n - 1, u.trial_id, u.allocation_id, u.agent_id, "
                 "u.rank, u.stream, u.time_ms, decode(u.message, 'hex') FROM unnest("
                 "$2::bigint[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::bigint[], "
                 "$8::text[]) WITH ORDINALITY AS u(trial_id, allocation_id, agent_id, rank, "
                 "stream, time_ms, message, n)",
                 {first, IntArray(ls, [](const L& l) { return l.trial_id(); }),
                  TextArray(ls, [](const L& l) -> const std::string& { return l.allocation_id(); }),
                  TextArray(ls, [](const L& l) -> const std::string& { return l.agent_id(); }),
                  IntArray(ls, [](const L& l) { return l.rank(); }),
                  TextArray(ls, [](const L& l) -> const std::string& { return l.stream(); }),
                  IntArray(ls, [](const L& l) { return l.time_ms(); }),
                  HexArray(ls, [](const L& l) -> const std::string& { return l.message(); })})
          .status());
  RETURN_IF_ERROR(tx.Commit());
  for (auto& l : *lines) l.set_id(first++);
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
           "DELETE FROM metrics WHERE trial_id IN (SELECT id FROM trials WHERE experiment_id = $1)",
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
