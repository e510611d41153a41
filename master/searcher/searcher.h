// Hyperparameter searchers: which trials an experiment creates, which it stops early, and
// when it is done. Pure (no I/O, no clock, no threads); the master calls them on its loop
// and persists what they decide (each trial's TrialRecord travels in its Trial row).
//
// The life of a search, as the master drives it:
//   searcher = NewSearcher(config, records of the trials it already has);
//   create NextTrials();                      // at creation and after a master restart
//   on each validation: OnValidation(...)     // stop the trial when it says so
//   on each trial's end: OnTrialEnded(i) (OnTrialInvalid(i) for invalid
//   hyperparameters); create NextTrials();
//   the experiment is done when Done().
#ifndef DET_MASTER_SEARCHER_SEARCHER_H_
#define DET_MASTER_SEARCHER_SEARCHER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/experiment_config.h"

namespace det::master::searcher {

// What a searcher remembers of one trial it created; the master stores it with the trial
// so that a restarted master rebuilds the searcher exactly.
struct TrialRecord {
  // adaptive_asha: the bracket the trial belongs to; 0 for the other searchers.
  int bracket = 0;
  // adaptive_asha: the searcher metric as reported at each rung the trial passed, in
  // rung order.
  std::vector<double> rung_metrics;
  // The searcher stopped the trial before max_length.
  bool stopped = false;
  // The trial reached a terminal state.
  bool ended = false;
  // It ended with invalid hyperparameters (det.InvalidHP). random and adaptive_asha do not
  // count it toward max_trials (they create a replacement; adaptive_asha in the same
  // bracket, its rung metrics dropped); grid and single count it as ended.
  bool invalid = false;
};

// A trial to create.
struct TrialRequest {
  // Position in creation order (0-based): the trial's index in the experiment.
  int index = 0;
  int bracket = 0;
  // Hyperparameters, a JSON object.
  std::string hparams_json;
  // In [0, 2^31-1].
  uint32_t seed = 0;
  // Training length in batches: searcher.max_length in this trial's batches (epochs and
  // records converted with its own global batch size); 0 when the searcher has no
  // max_length: the trial's script decides how long it trains.
  int64_t target_batches = 0;
};

struct Decision {
  // Stop the trial now: it ends COMPLETED with the length it has.
  bool stop = false;
  // Why, for the trial's log.
  std::string reason;
};

// Not thread-safe.
class Searcher {
 public:
  virtual ~Searcher() = default;

  // Trials to create now, so that as many run as the searcher allows. They count as created
  // (with the indexes given) as soon as this returns. Empty when nothing is to be created.
  virtual std::vector<TrialRequest> NextTrials() = 0;
  // Trial `index` reported `metric` (the value of searcher.metric) after `batches` batches.
  // Reports after a stop, or of unknown trials, are ignored.
  virtual Decision OnValidation(int index, int64_t batches, double metric) = 0;
  // Trial `index` reached a terminal state (completed, stopped, failed or canceled).
  virtual void OnTrialEnded(int index) = 0;
  // Trial `index` ended with invalid hyperparameters (Determined's TrialExitedEarly with
  // InvalidHP): as OnTrialEnded, and TrialRecord::invalid says what follows.
  virtual void OnTrialInvalid(int index) = 0;
  // Every trial the search will ever create has been created and has ended.
  virtual bool Done() const = 0;
  // How many trials the search creates in all, not counting invalid trials it replaced.
  virtual int PlannedTrials() const = 0;
  // Number of trials created so far.
  virtual int NumTrials() const = 0;
  // REQUIRES: 0 <= index < NumTrials().
  virtual const TrialRecord& Record(int index) const = 0;
};

// The searcher of `config` (REQUIRES: from ParseExperimentConfig: valid, experiment seed
// chosen). `existing`: the records of the trials created so far, in creation order (empty
// for a new experiment); the generator is replayed past them. DataLoss when a record does
// not fit the config (a bracket that does not exist, more trials than planned).
absl::StatusOr<std::unique_ptr<Searcher>> NewSearcher(const config::ExperimentConfig& config,
                                                      std::vector<TrialRecord> existing = {});

// One bracket of adaptive_asha: an asynchronous successive-halving search of its own.
struct AshaBracket {
  // Training length (batches) at each rung, increasing; the last is max_length.
  std::vector<int64_t> rungs;
  int max_trials = 0;
  // 0: no limit.
  int max_concurrent_trials = 0;
};

// The brackets adaptive_asha runs for `searcher` with max_length `max_length` batches
// (docs/configuration.md, "adaptive_asha"). NewSearcher computes them for the longest target
// a trial can get; with a searched global_batch_size and a length in epochs or records, a
// trial with a shorter target has its rungs at the same fractions of its own target (at
// least 1 batch; the last its target).
std::vector<AshaBracket> AshaBrackets(const config::SearcherConfig& searcher,
                                      int64_t max_length);

}  // namespace det::master::searcher

#endif  // DET_MASTER_SEARCHER_SEARCHER_H_
