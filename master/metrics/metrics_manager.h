// MetricsManager: metric rows workers report. A report is checked, copied into storable
// rows and summarised on the caller's thread (gRPC's), then queued; a flush turn on the
// loop authorises each queued report against its allocation, orders the rows and stores
// them by one transaction (group commit) together with the trials' summaries, and only
// then acknowledges them; validation rows go to the searcher (experiment manager) and
// progress is recomputed. Reads a trial's rows back, downsampled (downsample.h), off the
// loop: the row query and the thinning run on a reader thread of its own, through the
// store's MetricsReader, so a large read never holds up the loop.
//
// Called by: the master service (ReportMetrics, GetTrialMetrics). Report may be called
// from any thread; every other public method on the loop thread only (each checks it).
#ifndef DET_MASTER_METRICS_METRICS_MANAGER_H_
#define DET_MASTER_METRICS_METRICS_MANAGER_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
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
  // called once they are stored (a later turn), or with the refusal:
  // InvalidArgument naming the field for a rank outside the allocation (auth.rank), a
  // negative total_batches, a group other than training, validation, timings and
  // progress, or an empty metric name or one over 1,024 bytes. NaN and infinities are
  // values like any other: stored and returned as such. A report whose token, trial or
  // rank is wrong is refused for that (PermissionDenied, InvalidArgument "auth.rank")
  // before anything wrong in its rows. Any thread (the loop included); the rows are
  // checked and copied here, `req` is not used after this returns.
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
  // A report checked and copied on its caller's thread, queued for the next flush: its
  // allocation, trial and rank are checked there (on the loop).
  struct QueuedReport {
    v1::WorkerAuth auth;
    int64_t trial_id = 0;
    std::vector<v1::Metrics> rows;  // trial_id and report_time_ms set; run_id at the flush
    v1::Trial summary;              // the rows' summaries and total_batches alone
    std::vector<size_t> validation_rows;  // indices of the validation rows, in order
    Done done;
  };
  // On the loop: the trial of the allocation of `auth` if it is `trial_id` and `auth.rank`
  // is one of its ranks, else the refusal.
  absl::StatusOr<TrialState*> Authorize(const v1::WorkerAuth& auth, int64_t trial_id);
  // The slow path of a report whose rows are malformed: on the loop, the refusal of its
  // auth if any, else `rows_error`.
  void Refuse(const v1::WorkerAuth& auth, int64_t trial_id, absl::Status rows_error, Done done);
  // Stores the queued reports (up to kMaxRowsPerFlush rows, the rest in another turn) and
  // the trials' summaries, then acknowledges them.
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
  // The reports queued by Report (any thread) for the next flush (the loop).
  absl::Mutex queue_mu_;
  std::vector<QueuedReport> queue_ ABSL_GUARDED_BY(queue_mu_);
  size_t queued_rows_ ABSL_GUARDED_BY(queue_mu_) = 0;
  bool flush_posted_ ABSL_GUARDED_BY(queue_mu_) = false;
  // The rows of the last flush, freed by the next Report on its caller's thread rather than
  // on the loop.
  std::vector<v1::Metrics> stored_rows_ ABSL_GUARDED_BY(queue_mu_);
  // Set by the first GetTrialMetrics (on the loop), then only used on reads_'s thread.
  std::unique_ptr<MetricsReader> reader_;
  // The reader thread (started with reader_); declared after reader_ so it stops first.
  EventLoop reads_;
};

}  // namespace det::master

#endif  // DET_MASTER_METRICS_METRICS_MANAGER_H_
