// MetricsManager: metric rows workers report. Rows are accepted on the loop and stored by
// one transaction per flush (group commit) together with the trials' summaries, and only
// then acknowledged; validation rows go to the searcher (experiment manager) and progress
// is recomputed. Reads a trial's rows back, downsampled (downsample.h), off the loop: the
// row query and the thinning run on a reader thread of its own, through the store's
// MetricsReader, so a large read never holds up the loop.
//
// Called by: the master service (ReportMetrics, GetTrialMetrics). Loop thread only: every
// public method checks it.
#ifndef DET_MASTER_METRICS_METRICS_MANAGER_H_
#define DET_MASTER_METRICS_METRICS_MANAGER_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "common/clock/clock.h"
#include "common/event_loop/event_loop.h"
#include "master/api/handlers.h"
#include "master/experiments/experiment_manager.h"
#include "master/experiments/registry.h"
#include "master/loop/turns.h"
#include "master/store/store.h"

namespace det::master {

class MetricsManager {
 public:
  // Everything must outlive this.
  MetricsManager(Clock& clock, Turns& turns, Store& store, ExperimentRegistry& registry,
                 ExperimentManager& experiments);

  // Accepts the rows of `req` (checked against the run's token and trial); `done` is
  // called once they are stored (a later turn), or at once with the refusal:
  // InvalidArgument naming the field for a rank outside the allocation (auth.rank), a
  // negative total_batches, a group other than training, validation, timings and
  // progress, or an empty metric name or one over 1,024 bytes. NaN and infinities are
  // values like any other: stored and returned as such.
  void Report(const v1::ReportMetricsRequest& req, Done done);
  // Reads finish before this returns (their `done`s called).
  ~MetricsManager();

  // Checks on the loop that the trial exists (NotFound otherwise), then reads its rows (of
  // req.group() unless empty) on the reader thread, thins them to req.max_points(), fills
  // `resp` and calls `done` from that thread. The answer holds every row acknowledged
  // before this call. The reader is opened (Store::OpenReader) by the first call; its
  // failure is the answer. REQUIRES: `resp` lives until `done` is called.
  void GetTrialMetrics(const v1::GetTrialMetricsRequest& req, v1::GetTrialMetricsResponse* resp,
                       Done done);

 private:
  // Metric rows accepted on the loop but not yet stored; one transaction stores them all
  // (group commit) before any of their reports is acknowledged.
  struct PendingMetrics {
    std::vector<v1::Metrics> rows;
    std::vector<Done> acks;
    std::vector<size_t> ack_rows;  // rows of each ack, in order
    bool flush_posted = false;
  };
  // Stores the pending metric rows and the trials' summaries, then acknowledges them.
  void Flush();

  Clock& clock_;
  Turns& turns_;
  EventLoop& loop_;
  Store& store_;
  ExperimentRegistry& registry_;
  ExperimentManager& experiments_manager_;
  std::map<int64_t, ExperimentState>& experiments_;
  std::map<int64_t, TrialState>& trials_;
  v1::GetMasterStatsResponse& counters_;
  PendingMetrics pending_metrics_;
  // Set by the first GetTrialMetrics (on the loop), then only used on reads_'s thread.
  std::unique_ptr<MetricsReader> reader_;
  // The reader thread (started with reader_); declared after reader_ so it stops first.
  EventLoop reads_;
};

}  // namespace det::master

#endif  // DET_MASTER_METRICS_METRICS_MANAGER_H_
