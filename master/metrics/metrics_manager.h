// MetricsManager: metric rows workers report. A report is checked, copied into storable
// rows and summarised on the caller's thread (gRPC's), then queued; a flush turn on the
// loop authorises each queued report against its allocation, orders the rows and stores
// them by one transaction (group commit) together with the trials' summaries, and only
// then acknowledges them; validation rows go to the searcher (experiment manager) and
// progress is recomputed. The trials' summaries are written by the trial manager
// (TrialManager::AddProgress), the one writer of a trial's record. Reads of the rows are
// master/reads' (StoreReads), not this.
//
// Called by: the master service (ReportMetrics). Report may be called from any thread;
// its flush runs on the loop thread (and checks it does).
#ifndef DET_MASTER_METRICS_METRICS_MANAGER_H_
#define DET_MASTER_METRICS_METRICS_MANAGER_H_

#include <cstddef>
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
#include "master/trials/trial_manager.h"

namespace det::master {

class MetricsManager {
 public:
  // Everything must outlive this.
  MetricsManager(Clock& clock, Turns& turns, ExperimentRegistry& registry, TrialManager& trials,
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
  ExperimentRegistry& registry_;
  TrialManager& trials_;
  ExperimentManager& experiments_manager_;
  std::map<int64_t, ExperimentState>& experiments_;
  v1::GetMasterStatsResponse& counters_;
  // The reports queued by Report (any thread) for the next flush (the loop).
  absl::Mutex queue_mu_;
  std::vector<QueuedReport> queue_ ABSL_GUARDED_BY(queue_mu_);
  size_t queued_rows_ ABSL_GUARDED_BY(queue_mu_) = 0;
  bool flush_posted_ ABSL_GUARDED_BY(queue_mu_) = false;
  // The rows of the last flush, freed by the next Report on its caller's thread rather than
  // on the loop.
  std::vector<v1::Metrics> stored_rows_ ABSL_GUARDED_BY(queue_mu_);
};

}  // namespace det::master

#endif  // DET_MASTER_METRICS_METRICS_MANAGER_H_
