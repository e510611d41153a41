#include "master/searcher/searcher.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "master/searcher/sampling.h"

namespace det::master::searcher {
namespace {

// What every searcher shares: brackets of trials (one for all but adaptive_asha), each
// created up to its max_trials with at most max_concurrent_trials not ended; hyperparameters
// and seeds drawn from the experiment's generator in creation order.
class SearchBase : public Searcher {
 public:
  // `replaces_invalid`: an invalid trial does not count toward its bracket's max_trials.
  SearchBase(const config::ExperimentConfig& config, std::vector<AshaBracket> brackets,
             bool replaces_invalid)
      : config_(config),
        replaces_invalid_(replaces_invalid),
        brackets_(std::move(brackets)),
        gen_(static_cast<uint32_t>(config.experiment_seed)) {}

  // Adopts the records of existing trials, replaying the generator past them.
  absl::Status Init(std::vector<TrialRecord> existing) {
    for (size_t i = 0; i < existing.size(); ++i) {
      const TrialRecord& r = existing[i];
      if (r.bracket < 0 || r.bracket >= static_cast<int>(brackets_.size())) {
        return absl::DataLossError(absl::StrCat("trial ", i, " of the experiment is in bracket ",
                                                r.bracket, ", but its searcher has ",
                                                brackets_.size()));
      }
      Draw(static_cast<int>(i), r.bracket);
    }
    records_ = std::move(existing);
    for (int b = 0; b < static_cast<int>(brackets_.size()); ++b) {
      if (Created(b) > brackets_[b].max_trials) {
        return absl::DataLossError(absl::StrCat("bracket ", b, " of the experiment has ", Created(b),
                                                " trials, more than the ", brackets_[b].max_trials,
                                                " its searcher plans"));
      }
    }
    return Adopted();
  }

  std::vector<TrialRequest> NextTrials() override {
    std::vector<TrialRequest> out;
    for (int b = 0; b < static_cast<int>(brackets_.size()); ++b) {
      const AshaBracket& br = brackets_[b];
      while (Created(b) < br.max_trials &&
             (br.max_concurrent_trials == 0 || Active(b) < br.max_concurrent_trials)) {
        TrialRecord record;
        record.bracket = b;
        records_.push_back(record);
        out.push_back(Draw(static_cast<int>(records_.size()) - 1, b));
      }
    }
    return out;
  }

  Decision OnValidation(int, int64_t, double) override { return {}; }

  void OnTrialEnded(int index) override {
    if (index >= 0 && index < NumTrials()) records_[index].ended = true;
  }

  void OnTrialInvalid(int index) override {
    if (index < 0 || index >= NumTrials() || records_[index].ended) return;
    records_[index].ended = true;
    records_[index].invalid = true;
    Invalidated(index);
  }

  bool Done() const override {
    for (int b = 0; b < static_cast<int>(brackets_.size()); ++b) {
      if (Created(b) < brackets_[b].max_trials || Active(b) > 0) return false;
    }
    return true;
  }

  int PlannedTrials() const override {
    int n = 0;
    for (const auto& b : brackets_) n += b.max_trials;
    return n;
  }

  int NumTrials() const override { return static_cast<int>(records_.size()); }
  const TrialRecord& Record(int index) const override { return records_[index]; }

 protected:
  // The hyperparameters of trial `index`. Default: a sample from the generator.
  virtual std::string Hyperparameters(int /*index*/) {
    return SampleHyperparameters(config_.hyperparameters, gen_);
  }
  // Called once the existing records are in place.
  virtual absl::Status Adopted() { return absl::OkStatus(); }
  // Called when trial `index` was marked invalid.
  virtual void Invalidated(int /*index*/) {}
  // Whether record `r` is out of the search: invalid, and replaced.
  bool Replaced(const TrialRecord& r) const { return replaces_invalid_ && r.invalid; }
  // The target (batches) of trial `index`. REQUIRES: 0 <= index < NumTrials().
  int64_t Target(int index) const { return targets_[index]; }

  const config::ExperimentConfig config_;
  const bool replaces_invalid_;
  std::vector<AshaBracket> brackets_;
  std::vector<TrialRecord> records_;

 private:
  TrialRequest Draw(int index, int bracket) {
    TrialRequest t;
    t.index = index;
    t.bracket = bracket;
    t.hparams_json = Hyperparameters(index);
    t.seed = DrawTrialSeed(gen_);
    // searcher.max_length in the trial's batches (its own global batch size converts
    // epochs and records); 0 without one: the trial's script decides its length.
    const std::optional<config::Length>& max = config_.searcher.max_length;
    t.target_batches =
        max ? max->Batches(config::TrialGlobalBatchSize(config_, t.hparams_json),
                           config_.records_per_epoch)
            : 0;
    if (static_cast<size_t>(index) >= targets_.size()) targets_.resize(index + 1);
    targets_[index] = t.target_batches;
    return t;
  }
  // Trials of `bracket` that count toward its max_trials.
  int Created(int bracket) const {
    return static_cast<int>(std::count_if(records_.begin(), records_.end(), [&](const TrialRecord& r) {
      return r.bracket == bracket && !Replaced(r);
    }));
  }
  int Active(int bracket) const {
    return static_cast<int>(std::count_if(records_.begin(), records_.end(), [&](const TrialRecord& r) {
      return r.bracket == bracket && !r.ended;
    }));
  }

  Generator gen_;
  // Per trial index: its target in batches.
  std::vector<int64_t> targets_;
};

int Concurrency(const config::SearcherConfig& s, int max_trials) {
  return s.max_concurrent_trials == 0 ? 0 : std::min(s.max_concurrent_trials, max_trials);
}

class GridSearch : public SearchBase {
 public:
  GridSearch(const config::ExperimentConfig& config, Grid grid)
      : SearchBase(config, {{{0}, static_cast<int>(grid.size()),
                             Concurrency(config.searcher, static_cast<int>(grid.size()))}},
                   /*replaces_invalid=*/false),
        grid_(std::move(grid)) {}

 protected:
  std::string Hyperparameters(int index) override { return grid_.Point(index); }

 private:
  Grid grid_;
};

// Determined's adaptive_asha with stop_once: brackets of asynchronous successive halving
// in which a trial continues past a rung only while it ranks in the top 1/divisor of the
// trials that reached that rung so far; the others stop for good.
class AshaSearch : public SearchBase {
 public:
  // `longest`: the max_length the brackets' rungs were computed for, the longest target a
  // trial can have (with the smallest global batch size a trial can get).
  AshaSearch(const config::ExperimentConfig& config, std::vector<AshaBracket> brackets,
             int64_t longest)
      : SearchBase(config, std::move(brackets), /*replaces_invalid=*/true), longest_(longest) {
    rung_values_.resize(brackets_.size());
    for (size_t b = 0; b < brackets_.size(); ++b) rung_values_[b].resize(brackets_[b].rungs.size());
  }

  Decision OnValidation(int index, int64_t batches, double metric) override {
    if (index < 0 || index >= NumTrials() || !std::isfinite(metric)) return {};
    TrialRecord& r = records_[index];
    if (r.stopped || r.ended) return {};
    const std::vector<int64_t> rungs = Rungs(index);
    // The top rung is max_length: reaching it ends the trial anyway.
    while (r.rung_metrics.size() + 1 < rungs.size() && batches >= rungs[r.rung_metrics.size()]) {
      const size_t rung = r.rung_metrics.size();
      r.rung_metrics.push_back(metric);
      auto [rank, recorded] = Insert(r.bracket, rung, metric);
      const int keep = std::max(1, static_cast<int>(static_cast<double>(recorded) / config_.searcher.divisor));
      if (rank >= keep) {
        r.stopped = true;
        return {true, absl::StrFormat(
                          "stopped by adaptive_asha at rung %d (%d of %d batches): %s %.6g ranks %d "
                          "of the %d trials that reached it in bracket %d; the best %d continue",
                          rung, rungs[rung], rungs.back(), config_.searcher.metric, metric,
                          rank + 1, recorded, r.bracket, keep)};
      }
    }
    return {};
  }

 protected:
  absl::Status Adopted() override {
    for (const TrialRecord& r : records_) {
      if (r.invalid) continue;  // Dropped from its rungs when it ended (Invalidated).
      if (r.rung_metrics.size() >= brackets_[r.bracket].rungs.size()) {
        return absl::DataLossError(absl::StrCat("a trial of the experiment passed ",
                                                r.rung_metrics.size(), " rungs; its bracket has ",
                                                brackets_[r.bracket].rungs.size()));
      }
      for (size_t rung = 0; rung < r.rung_metrics.size(); ++rung) {
        Insert(r.bracket, rung, r.rung_metrics[rung]);
      }
    }
    return absl::OkStatus();
  }

  // Determined's TrialExitedEarly(InvalidHP): the trial's metrics leave every rung it
  // reached; NextTrials creates its replacement in the same bracket.
  void Invalidated(int index) override {
    const TrialRecord& r = records_[index];
    for (size_t rung = 0; rung < r.rung_metrics.size(); ++rung) {
      std::vector<double>& values = rung_values_[r.bracket][rung];
      const double key = config_.searcher.smaller_is_better ? r.rung_metrics[rung] : -r.rung_metrics[rung];
      auto at = std::lower_bound(values.begin(), values.end(), key);
      if (at != values.end() && *at == key) values.erase(at);
    }
  }

 private:
  // Records `metric` at the rung; returns its rank (0 = best; later among equals) and the
  // number of metrics recorded there.
  std::pair<int, int> Insert(int bracket, size_t rung, double metric) {
    std::vector<double>& values = rung_values_[bracket][rung];
    const double key = config_.searcher.smaller_is_better ? metric : -metric;
    auto at = std::upper_bound(values.begin(), values.end(), key);
    const int rank = static_cast<int>(at - values.begin());
    values.insert(at, key);
    return {rank, static_cast<int>(values.size())};
  }

  // The rungs of trial `index` in its batches: its bracket's, which are for a trial of
  // length `longest_`; for a shorter trial (a larger searched global batch size, with
  // max_length in epochs or records), the same fractions of its own target, at least 1
  // batch, the last its target.
  std::vector<int64_t> Rungs(int index) const {
    const std::vector<int64_t>& rungs = brackets_[records_[index].bracket].rungs;
    const int64_t target = Target(index);
    if (target == longest_ || longest_ <= 0) return rungs;
    std::vector<int64_t> out;
    for (size_t i = 0; i + 1 < rungs.size(); ++i) {
      const int64_t scaled =
          static_cast<int64_t>(static_cast<__int128>(rungs[i]) * target / longest_);
      out.push_back(std::max<int64_t>(1, std::min(scaled, target)));
    }
    out.push_back(target);
    return out;
  }

  int64_t longest_;
  // Per bracket, per rung: the recorded metrics (negated when larger is better), sorted.
  std::vector<std::vector<std::vector<double>>> rung_values_;
};

}  // namespace

std::vector<AshaBracket> AshaBrackets(const config::SearcherConfig& s, int64_t max_length) {
  const int max_rungs = std::max(1, s.max_rungs);
  int num = s.mode == "aggressive" ? 1 : s.mode == "conservative" ? max_rungs
                                                                  : std::max(max_rungs - 1, 1);
  num = std::max(1, std::min(num, s.max_trials));
  std::vector<AshaBracket> brackets(num);
  std::vector<double> weights(num);
  double total = 0;
  for (int b = 0; b < num; ++b) {
    const int rungs = max_rungs - b;
    for (int i = 0; i < rungs; ++i) {
      const double scaled = static_cast<double>(max_length) / std::pow(s.divisor, rungs - 1 - i);
      const int64_t length = i == rungs - 1 ? max_length : std::max<int64_t>(1, static_cast<int64_t>(scaled));
      if (brackets[b].rungs.empty() || length > brackets[b].rungs.back()) {
        brackets[b].rungs.push_back(length);
      }
    }
    weights[b] = std::pow(s.divisor, rungs - 1) / rungs;
    total += weights[b];
  }
  // Each bracket gets one trial, the rest in proportion to its weight; what rounding
  // leaves goes to the first (most aggressive) bracket.
  const int spare = s.max_trials - num;
  int given = 0;
  for (int b = 0; b < num; ++b) {
    brackets[b].max_trials = 1 + static_cast<int>(spare * weights[b] / total);
    given += brackets[b].max_trials;
  }
  brackets[0].max_trials += s.max_trials - given;
  if (s.max_concurrent_trials > 0) {
    const int c = std::max(s.max_concurrent_trials, num);
    for (int b = 0; b < num; ++b) brackets[b].max_concurrent_trials = c / num + (b < c % num ? 1 : 0);
  }
  return brackets;
}

absl::StatusOr<std::unique_ptr<Searcher>> NewSearcher(const config::ExperimentConfig& config,
                                                      std::vector<TrialRecord> existing) {
  const config::SearcherConfig& s = config.searcher;
  // The longest target a trial can get: with the smallest global batch size (0: no length).
  const int64_t length =
      s.max_length ? s.max_length->Batches(config::GlobalBatchSizeRange(config).first,
                                           config.records_per_epoch)
                   : 0;
  std::unique_ptr<SearchBase> searcher;
  if (s.name == "single") {
    searcher = std::make_unique<SearchBase>(config, std::vector<AshaBracket>{{{length}, 1, 1}},
                                            /*replaces_invalid=*/false);
  } else if (s.name == "random") {
    searcher = std::make_unique<SearchBase>(
        config, std::vector<AshaBracket>{{{length}, s.max_trials, Concurrency(s, s.max_trials)}},
        /*replaces_invalid=*/true);
  } else if (s.name == "grid") {
    searcher = std::make_unique<GridSearch>(config, Grid(config.hyperparameters));
  } else if (s.name == "adaptive_asha") {
    searcher = std::make_unique<AshaSearch>(config, AshaBrackets(s, length), length);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("searcher.name: unknown searcher \"", s.name, "\""));
  }
  absl::Status st = searcher->Init(std::move(existing));
  if (!st.ok()) return st;
  return std::unique_ptr<Searcher>(std::move(searcher));
}

}  // namespace det::master::searcher
