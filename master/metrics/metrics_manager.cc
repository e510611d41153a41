#include "master/metrics/metrics_manager.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/logging/logging.h"
#include "common/status/status_macros.h"
#include "master/loop/on_loop.h"
#include "master/metrics/downsample.h"
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

// InvalidArgument naming the field of the first thing wrong in a report from an allocation
// of `ranks` ranks.
absl::Status CheckReport(const v1::ReportMetricsRequest& req, int ranks) {
  if (req.auth().rank() < 0 || req.auth().rank() >= ranks) {
    return absl::InvalidArgumentError(absl::StrCat("auth.rank: ", req.auth().rank(),
                                                   " is not a rank of allocation ",
                                                   req.auth().allocation_id(), " (0..",
                                                   ranks - 1, ")"));
  }
  for (int i = 0; i < req.metrics_size(); ++i) {
    const v1::Metrics& m = req.metrics(i);
    const std::string at = absl::StrCat("metrics[", i, "].");
    if (std::find(kGroups.begin(), kGroups.end(), m.group()) == kGroups.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, "group: expected one of ", absl::StrJoin(kGroups, ", "), ", got '",
          m.group().substr(0, 64), m.group().size() > 64 ? "...'" : "'"));
    }
    if (m.total_batches() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, "total_batches: expected a count >= 0, got ", m.total_batches()));
    }
    for (const auto& [name, value] : m.values()) {
      if (name.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(at, "values: a metric name is empty"));
      }
      if (name.size() > kMaxMetricNameBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            at, "values: metric name '", name.substr(0, 64), "...' is ", name.size(),
            " bytes, over the limit of ", kMaxMetricNameBytes));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

MetricsManager::MetricsManager(Clock& clock, Turns& turns, Store& store,
                               ExperimentRegistry& registry, ExperimentManager& experiments)
    : clock_(clock),
      turns_(turns),
      loop_(turns.loop()),
      store_(store),
      registry_(registry),
      experiments_manager_(experiments),
      experiments_(registry.experiments),
      trials_(registry.trials),
      counters_(registry.counters),
      reads_(clock) {}

MetricsManager::~MetricsManager() {
  // Whatever reads are queued run before this returns (their callers wait on `done`).
  if (reader_ != nullptr) reads_.RunSync([] {});
}

void MetricsManager::Report(const v1::ReportMetricsRequest& req, Done done) {
  DET_CHECK_ON_LOOP(loop_);
  absl::Status st = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(TrialState * t, registry_.AuthorizeWorker(req.auth()));
    if (req.trial_id() != t->trial.id()) {
      return absl::PermissionDeniedError(
          absl::StrCat("allocation ", req.auth().allocation_id(), " may report only for trial ",
                       t->trial.id(), ", not ", req.trial_id()));
    }
    RETURN_IF_ERROR(CheckReport(req, t->trial.allocation().ranks_size()));
    for (const auto& m : req.metrics()) {
      v1::Metrics& row = pending_metrics_.rows.emplace_back(m);
      row.set_trial_id(t->trial.id());
      row.set_run_id(t->trial.run_id());
      if (row.report_time_ms() == 0) row.set_report_time_ms(clock_.NowMs());
    }
    return absl::OkStatus();
  }();
  if (!st.ok()) {
    done(st);
    return;
  }
  pending_metrics_.acks.push_back(std::move(done));
  pending_metrics_.ack_rows.push_back(static_cast<size_t>(req.metrics_size()));
  if (!pending_metrics_.flush_posted) {
    pending_metrics_.flush_posted = true;
    turns_.Post([this] { Flush(); });
  }
}

void MetricsManager::Flush() {
  DET_CHECK_ON_LOOP(loop_);
  PendingMetrics batch = std::move(pending_metrics_);
  pending_metrics_ = PendingMetrics();
  if (batch.rows.size() > kMaxRowsPerFlush) {
    // Keep transactions short so nothing waits long behind one; the rest goes next.
    size_t keep_acks = 0, rows = 0;
    for (; keep_acks < batch.acks.size() && rows < kMaxRowsPerFlush; ++keep_acks) {
      rows += batch.ack_rows[keep_acks];
    }
    pending_metrics_.rows.assign(std::make_move_iterator(batch.rows.begin() + rows),
                                 std::make_move_iterator(batch.rows.end()));
    pending_metrics_.acks.assign(std::make_move_iterator(batch.acks.begin() + keep_acks),
                                 std::make_move_iterator(batch.acks.end()));
    pending_metrics_.ack_rows.assign(batch.ack_rows.begin() + keep_acks, batch.ack_rows.end());
    batch.rows.resize(rows);
    batch.acks.resize(keep_acks);
    batch.ack_rows.resize(keep_acks);
    if (!pending_metrics_.acks.empty()) {
      pending_metrics_.flush_posted = true;
      turns_.Post([this] { Flush(); });
    }
  }
  // The trials' summaries as they will be once the rows are stored.
  std::map<int64_t, v1::Trial> updated;
  for (const v1::Metrics& m : batch.rows) {
    auto t = trials_.find(m.trial_id());
    if (t == trials_.end()) continue;
    auto [it, inserted] = updated.try_emplace(m.trial_id(), t->second.trial);
    ApplyToSummaries(m, &it->second);
  }
  std::vector<v1::Trial> trials;
  for (const auto& [id, t] : updated) trials.push_back(t);
  absl::Status st = store_.AddMetrics(trials, batch.rows);
  if (st.ok()) {
    counters_.set_metric_rows_stored_total(counters_.metric_rows_stored_total() +
                                           static_cast<int64_t>(batch.rows.size()));
    std::set<int64_t> experiments;
    for (auto& [id, u] : updated) {
      v1::Trial& live = trials_.at(id).trial;
      *live.mutable_training_summary() = u.training_summary();
      *live.mutable_validation_summary() = u.validation_summary();
      *live.mutable_timings_summary() = u.timings_summary();
      live.set_total_batches(u.total_batches());
      experiments.insert(live.experiment_id());
    }
    for (const v1::Metrics& m : batch.rows) {
      if (m.group() == "validation") experiments_manager_.SearcherValidation(m);
    }
    for (int64_t e : experiments) experiments_manager_.UpdateExperiment(experiments_.at(e));
  } else {
    Logger("master")->error("cannot store {} metric rows: {}", batch.rows.size(), st.ToString());
    // The workers are told (their reports fail); their users see it in describe.
    std::map<int64_t, int64_t> refused;
    for (const v1::Metrics& m : batch.rows) ++refused[m.trial_id()];
    for (const auto& [id, n] : refused) {
      auto t = trials_.find(id);
      if (t != trials_.end()) NoteRefusedReports(store_, t->second, "metric rows", n, st);
    }
  }
  // Acknowledged only now that the rows are stored (or refused with the reason).
  for (auto& ack : batch.acks) ack(st);
}

void MetricsManager::GetTrialMetrics(const v1::GetTrialMetricsRequest& req,
                                     v1::GetTrialMetricsResponse* resp, Done done) {
  DET_CHECK_ON_LOOP(loop_);
  // Only the cheap part on the loop: the trial exists, the reader is open.
  absl::Status st = registry_.FindTrial(req.trial_id()).status();
  if (st.ok() && reader_ == nullptr) {
    absl::StatusOr<std::unique_ptr<MetricsReader>> opened = store_.OpenReader();
    if (opened.ok()) {
      reader_ = *std::move(opened);
      reads_.Start();
    } else {
      st = opened.status();
    }
  }
  if (!st.ok()) {
    done(st);
    return;
  }
  // The rows of every report acknowledged so far are committed: the read sees them.
  reads_.Post([reader = reader_.get(), trial = req.trial_id(), group = req.group(),
               max_points = req.max_points(), resp, done = std::move(done)] {
    absl::StatusOr<std::vector<v1::Metrics>> rows = reader->GetMetrics(trial, group);
    if (!rows.ok()) {
      done(rows.status());
      return;
    }
    for (auto& m : DownsampleMetrics(*std::move(rows), max_points)) {
      *resp->add_metrics() = std::move(m);
    }
    done(absl::OkStatus());
  });
}

}  // namespace det::master
