// The experiments and trials the master keeps in memory, as stored: the one copy the
// managers (experiments, allocations, checkpoints, metrics, scheduling) read and change on
// the loop. A change goes to the store first (Persist*), then into memory.
//
// Owned by the composition root (master/server); loop thread only.
#ifndef DET_MASTER_EXPERIMENTS_REGISTRY_H_
#define DET_MASTER_EXPERIMENTS_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config/experiment_config.h"
#include "common/event_loop/event_loop.h"
#include "common/logging/logging.h"
#include "master/api/handlers.h"
#include "master/scheduling/waiting_reason.h"
#include "master/searcher/searcher.h"
#include "master/store/store.h"
#include "master/trials/run_outcome.h"
#include "master/views/views.h"

namespace det::master {

// "COMPLETED" for STATE_COMPLETED.
inline std::string StateName(v1::State s) { return v1::State_Name(s).substr(6); }

struct ExperimentState {
  v1::Experiment experiment;
  // Parsed once (at create, an edit, or recovery from the stored effective YAML in
  // experiment.config_yaml); every manager reads these typed fields.
  config::ExperimentConfig config;
  std::vector<int64_t> trial_ids;
  // Decides which trials to create and stop; null for an experiment that had ended when
  // the master started.
  std::unique_ptr<searcher::Searcher> searcher;
};

class TrialManager;

// The trial and its current allocation's runtime bookkeeping (not persisted). The trial's
// state, restarts, run number, open and last run, end and waiting reason are changed only
// by TrialManager (master/trials/trial_manager.h); its other fields by the managers of
// what they record (progress and metrics, checkpoints, the run's ranks and stop).
struct TrialState {
  v1::Trial trial;
  std::string token;
  std::map<int, std::string> exits;      // rank -> how it exited
  std::set<std::string> unattached;      // agents that must re-register to keep the run
  bool killing = false;                  // the master asked for the workers to stop
  // Why the master stopped the current run (lost agent, preemption, pause), the most
  // pressing noted (NoteStopCause); the searcher's and the user's stops are in trial.search().
  StopCause stop_cause = StopCause::kNone;
  bool searcher_metric_missing = false;  // reported once: no searcher.metric in validation
  v1::Allocation last_allocation;        // the latest ended run, for display
  std::string failure;                   // first abnormal exit
  // Rendezvous rounds of the current run: key -> rank -> value. A completed round keeps
  // its values, so a rank that retries gets the same answer.
  std::map<std::string, std::map<int, std::string>> rendezvous;
  std::vector<Done> rendezvous_waiters;
  std::vector<v1::RendezvousResponse*> rendezvous_responses;
  std::vector<std::string> rendezvous_keys;  // parallel to rendezvous_waiters
  // Why the master asked the current run to stop (set with `killing`).
  std::string kill_reason;
  // The run's script has asked should_preempt() (its chief polls ShouldPreempt): a stop it
  // can cooperate with (pause, preemption, an early stop) gives it the stop grace period to
  // checkpoint and exit before any signal (AllocationManager::Stop).
  bool asks_should_preempt = false;
  // The kill commands went to the agents (a cooperative stop sends them only once its grace
  // period has passed).
  bool kill_sent = false;
  // ShouldPreempt long polls of the current run, answered when it is asked to stop.
  struct PreemptWaiter {
    v1::ShouldPreemptResponse* response;
    Done done;
    EventLoop::TimerId timer;
  };
  std::vector<PreemptWaiter> preempt_waiters;

  void NoteStopCause(StopCause cause) { stop_cause = MorePressing(stop_cause, cause); }

  // Why the queued trial waits ("" when nothing was said); written by TrialManager only.
  const std::string& waiting_reason() const { return waiting_reason_.get(); }

 private:
  friend class TrialManager;
  WaitingReason waiting_reason_;
};

struct ExperimentRegistry {
  std::map<int64_t, ExperimentState> experiments;
  // Added and removed by TrialManager.
  std::map<int64_t, TrialState> trials;
  std::map<std::string, int64_t> allocation_trial;  // open allocation id -> trial id
  // Counters since start, for GetMasterStats.
  v1::GetMasterStatsResponse counters;
  // Set once Shutdown began: long polls answer at once.
  bool shutting_down = false;

  absl::StatusOr<TrialState*> FindTrial(int64_t id);
  // The trial as readers see it: the latest ended run while none is open, and why it waits.
  v1::Trial TrialView(const TrialState& t) const;
  // The experiments and their trials as the read views (master/views) see them.
  std::vector<views::ExperimentRow> ExperimentRows() const;
  // The trial whose open allocation `auth` names, if its token matches.
  absl::StatusOr<TrialState*> AuthorizeWorker(const v1::WorkerAuth& auth);
  // Position of `trial_id` in es.trial_ids (its index for the searcher), or -1.
  static int TrialIndex(const ExperimentState& es, int64_t trial_id);
};

// After a write of `updated` that returned `written` (evaluated before the call: the
// arguments' order is unspecified): keeps `updated` in `*memory` if the store took it;
// else logs one line naming `what` and returns the refusal, memory unchanged.
template <typename T>
absl::Status WriteThenKeep(absl::Status written, const std::string& what, T* memory, T updated) {
  if (!written.ok()) {
    Logger("master")->error("{}: cannot persist: {}", what, written.ToString());
    return written;
  }
  *memory = std::move(updated);
  return absl::OkStatus();
}

// Persist*: writes `updated` and only then puts it in memory; a refused write is logged
// once and returned, memory unchanged.
absl::Status PersistExperiment(Store& store, ExperimentState& es, v1::Experiment updated);
absl::Status PersistTrial(Store& store, TrialState& t, v1::Trial updated);
absl::Status PersistAllocation(Store& store, const v1::Allocation& allocation,
                               const std::string& token);
// Writes t.trial after a change that already happened outside the master (ranks exited,
// an agent was lost): memory follows reality; a refused write is logged, and a restarted
// master recovers from what is stored (docs/architecture.md).
void RecordTrial(Store& store, TrialState& t);

// Adds `warning` to t's warnings unless it is there already, and records the trial (as
// RecordTrial). Returns whether it was new (the caller then writes it to the trial's log).
bool AddTrialWarning(Store& store, TrialState& t, const std::string& warning);
// When es keeps no checkpoints (no checkpoint_storage) and t has progress to lose (an open
// run, or batches trained): "trial N has no checkpoint storage: its progress will be lost",
// added to t's warnings and es's warnings (each once, persisted); else "".
std::string WarnProgressLoss(Store& store, ExperimentState& es, TrialState& t);
// Counts `n` of a worker's reports that the store refused (`what`: "metric rows",
// "checkpoint reports") in one warning per kind on t, "metric rows refused: N (the master
// could not store them: ERROR)", N counting every refusal so far (kept across restarts in
// the warning's text). The warning is in memory at once (describe shows it) and stored with
// the trial's next write that succeeds. Returns the warning.
std::string NoteRefusedReports(Store& store, TrialState& t, absl::string_view what, int64_t n,
                               const absl::Status& error);

}  // namespace det::master

#endif  // DET_MASTER_EXPERIMENTS_REGISTRY_H_
