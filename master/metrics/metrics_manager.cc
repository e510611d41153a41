#include "master/metrics/metrics_manager.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/logging/logging.h"
#include "common/status/status_macros.h"
#include "master/loop/on_loop.h"
#include "master/store/metric_summary.h"

namespace det::master {
namespace {

// Metric rows stored by one group commit at most.
constexpr size_t kMaxRowsPerFlush = 5000;
// The metric groups workers report (the harness and det.core send no other).
constexpr std::array<absl::string_view, 4> kGroups = {"training", "validation", "timings",
                                                      "progress"};
// The longest metric name.
constexpr size_t kMaxMetricNameBytes = 1024;

// InvalidArgument naming auth.rank unless it is a rank of an allocation of `ranks` ranks.
absl::Status CheckRank(const v1::WorkerAuth& auth, int ranks) {
  if (auth.rank() < 0 || auth.rank() >= ranks) {
    return absl::InvalidArgumentError(absl::StrCat("auth.rank: ", auth.rank(),
                                                   " is not a rank of allocation ",
                                                   auth.allocation_id(), " (0..", ranks - 1,
                                                   ")"));
  }
  return absl::OkStatus();
}

// InvalidArgument naming the field of the first thing wrong in the rows of a report.
absl::Status CheckRows(const v1::ReportMetricsRequest& req) {
  for (int i = 0; i < req.metrics_size(); ++i) {
    const v1::Metrics& m = req.metrics(i);
    if (std::find(kGroups.begin(), kGroups.end(), m.group()) == kGroups.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "metrics[", i, "].group: expected one of ", absl::StrJoin(kGroups, ", "), ", got '",
          m.group().substr(0, 64), m.group().size() > 64 ? "...'" : "'"));
    }
    if (m.total_batches() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "metrics[", i, "].total_batches: expected a count >= 0, got ", m.total_batches()));
    }
    for (const auto& [name, value] : m.values()) {
      if (name.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("metrics[", i, "].values: a metric name is empty"));
      }
      if (name.size() > kMaxMetricNameBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "metrics[", i, "].values: metric name '", name.substr(0, 64), "...' is ",
            name.size(), " bytes, over the limit of ", kMaxMetricNameBytes));
      }
    }
  }
  return absl::OkStatus();
}

// Folds `part` (the summaries of later rows, as ApplyToSummaries made them from none) into
// `into`: the same as applying those rows to `into` one by one.
void MergeSummaries(const google::protobuf::Map<std::string, v1::MetricSummary>& part,
                    google::protobuf::Map<std::string, v1::MetricSummary>* into) {
  for (const auto& [name, p] : part) {
    v1::MetricSummary& s = (*into)[name];
    if (s.count() == 0) {
      s = p;
      continue;
    }
    // min and max are NaN while no finite value was seen.
    if (!std::isnan(p.min()) && (std::isnan(s.min()) || p.min() < s.min())) s.set_min(p.min());
    if (!std::isnan(p.max()) && (std::isnan(s.max()) || p.max() > s.max())) s.set_max(p.max());
    s.set_last(p.last());
    s.set_count(s.count() + p.count());
  }
}

void MergeSummaries(const v1::Trial& part, v1::Trial* into) {
  MergeSummaries(part.training_summary(), into->mutable_training_summary());
  MergeSummaries(part.validation_summary(), into->mutable_validation_summary());
  MergeSummaries(part.timings_summary(), into->mutable_timings_summary());
  into->set_total_batches(std::max(into->total_batches(), part.total_batches()));
}

}  // namespace

MetricsManager::MetricsManager(Clock& clock, Turns& turns, ExperimentRegistry& registry,
                               TrialManager& trials, ExperimentManager& experiments)
    : clock_(clock),
      turns_(turns),
      loop_(turns.loop()),
      registry_(registry),
      trials_(trials),
      experiments_manager_(experiments),
      experiments_(registry.experiments),
      counters_(registry.counters) {}

void MetricsManager::Report(const v1::ReportMetricsRequest& req, Done done) {
  // Everything per row happens here, on the caller's thread; the loop sees the report whole.
  absl::Status rows_error = CheckRows(req);
  if (!rows_error.ok()) {
    // Rare: the loop says what is wrong with its auth first, as for any report.
    turns_.Post([this, auth = req.auth(), trial_id = req.trial_id(),
                 rows_error = std::move(rows_error), done = std::move(done)]() mutable {
      Refuse(auth, trial_id, std::move(rows_error), std::move(done));
    });
    return;
  }
  QueuedReport r;
  r.auth = req.auth();
  r.trial_id = req.trial_id();
  r.rows.reserve(static_cast<size_t>(req.metrics_size()));
  int64_t now_ms = -1;
  for (const v1::Metrics& m : req.metrics()) {
    v1::Metrics& row = r.rows.emplace_back(m);
    row.set_trial_id(req.trial_id());
    if (row.report_time_ms() == 0) {
      if (now_ms < 0) now_ms = clock_.NowMs();
      row.set_report_time_ms(now_ms);
    }
    if (row.group() == "validation") r.validation_rows.push_back(r.rows.size() - 1);
    ApplyToSummaries(row, &r.summary);
  }
  r.done = std::move(done);
  bool post = false;
  std::vector<v1::Metrics> stored;  // freed here, after the lock
  {
    absl::MutexLock l(&queue_mu_);
    queued_rows_ += r.rows.size();
    queue_.push_back(std::move(r));
    post = !flush_posted_;
    flush_posted_ = true;
    stored.swap(stored_rows_);
  }
  if (post) turns_.Post([this] { Flush(); });
}

absl::StatusOr<TrialState*> MetricsManager::Authorize(const v1::WorkerAuth& auth,
                                                      int64_t trial_id) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(TrialState * t, registry_.AuthorizeWorker(auth));
  if (trial_id != t->trial.id()) {
    return absl::PermissionDeniedError(absl::StrCat("allocation ", auth.allocation_id(),
                                                    " may report only for trial ",
                                                    t->trial.id(), ", not ", trial_id));
  }
  RETURN_IF_ERROR(CheckRank(auth, t->trial.allocation().ranks_size()));
  return t;
}

void MetricsManager::Refuse(const v1::WorkerAuth& auth, int64_t trial_id,
                            absl::Status rows_error, Done done) {
  DET_CHECK_ON_LOOP(loop_);
  absl::Status st = Authorize(auth, trial_id).status();
  done(st.ok() ? std::move(rows_error) : std::move(st));
}

void MetricsManager::Flush() {
  DET_CHECK_ON_LOOP(loop_);
  std::vector<QueuedReport> batch;
  size_t batch_rows = 0;
  bool more = false;
  {
    absl::MutexLock l(&queue_mu_);
    if (queued_rows_ <= kMaxRowsPerFlush) {
      batch.swap(queue_);
      batch_rows = queued_rows_;
    } else {
      // Keep transactions short so nothing waits long behind one; the rest goes next.
      size_t n = 0;
      for (; n < queue_.size() && batch_rows < kMaxRowsPerFlush; ++n) {
        batch_rows += queue_[n].rows.size();
      }
      batch.assign(std::make_move_iterator(queue_.begin()),
                   std::make_move_iterator(queue_.begin() + static_cast<ptrdiff_t>(n)));
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<ptrdiff_t>(n));
    }
    queued_rows_ -= batch_rows;
    more = !queue_.empty();
    flush_posted_ = more;
  }
  if (more) turns_.Post([this] { Flush(); });

  // Each report is authorised now, on the loop, against the allocations as they are; its
  // rows join the transaction in the order the reports were queued.
  std::vector<v1::Metrics> rows;
  rows.reserve(batch_rows);
  std::vector<size_t> validation_rows;
  std::vector<Done> acks;
  acks.reserve(batch.size());
  // The trials' summaries as they will be once the rows are stored.
  std::map<int64_t, v1::Trial> updated;
  for (QueuedReport& r : batch) {
    absl::StatusOr<TrialState*> t = Authorize(r.auth, r.trial_id);
    if (!t.ok()) {
      r.done(t.status());
      continue;
    }
    auto [it, inserted] = updated.try_emplace(r.trial_id, (*t)->trial);
    MergeSummaries(r.summary, &it->second);
    for (size_t i : r.validation_rows) validation_rows.push_back(rows.size() + i);
    const int32_t run_id = (*t)->trial.run_id();
    for (v1::Metrics& m : r.rows) {
      m.set_run_id(run_id);
      rows.push_back(std::move(m));
    }
    acks.push_back(std::move(r.done));
  }
  std::vector<v1::Trial> progress;
  progress.reserve(updated.size());
  std::set<int64_t> experiments;
  for (auto& [id, u] : updated) {
    experiments.insert(u.experiment_id());
    progress.push_back(std::move(u));
  }
  absl::Status st = trials_.AddProgress(std::move(progress), rows);
  if (st.ok()) {
    counters_.set_metric_rows_stored_total(counters_.metric_rows_stored_total() +
                                           static_cast<int64_t>(rows.size()));
    for (size_t i : validation_rows) experiments_manager_.SearcherValidation(rows[i]);
    for (int64_t e : experiments) experiments_manager_.UpdateExperiment(experiments_.at(e));
  } else {
    Logger("master")->error("cannot store {} metric rows: {}", rows.size(), st.ToString());
    // The workers are told (their reports fail); their users see it in describe.
    std::map<int64_t, int64_t> refused;
    for (const v1::Metrics& m : rows) ++refused[m.trial_id()];
    for (const auto& [id, n] : refused) {
      auto t = registry_.trials.find(id);
      if (t != registry_.trials.end()) trials_.NoteRefusedReports(t->second, "metric rows", n, st);
    }
  }
  // Acknowledged only now that the rows are stored (or refused with the reason).
  for (auto& ack : acks) ack(st);
  // The rows are freed by the next report's thread (or here, when none came since the last).
  absl::MutexLock l(&queue_mu_);
  if (stored_rows_.empty()) stored_rows_.swap(rows);
}

}  // namespace det::master
