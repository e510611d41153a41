// Hyperparameter values for trials: random samples from the experiment's one generator, and
// grid points. Pure functions; docs/configuration.md ("Seeds") documents the draw order.
#ifndef DET_MASTER_SEARCHER_SAMPLING_H_
#define DET_MASTER_SEARCHER_SAMPLING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/config/experiment_config.h"

namespace det::master::searcher {

// The experiment's random generator: SplitMix64 with its state starting at the experiment
// seed. Every random number of an experiment (hyperparameter samples, trial seeds) comes
// from one Generator, in trial creation order. Copyable value; not thread-safe.
class Generator {
 public:
  explicit Generator(uint32_t experiment_seed) : state_(experiment_seed) {}
  // The next 64 random bits.
  uint64_t Next();
  // Uniform in [0, 1): the top 53 bits of Next() over 2^53.
  double NextUniform();
  // Uniform in [0, n) without modulo bias (rejection: draws again when Next() falls in the
  // top, incomplete block of n values). REQUIRES: n > 0.
  uint64_t NextBelow(uint64_t n);

 private:
  uint64_t state_;
};

// One sample of every hyperparameter of `space` (a kObject) as a JSON object. Members are
// drawn in name order, a nested group's members at the group's place; const values take no
// draw, int/double/log/categorical one each (int and categorical: NextBelow; double and log:
// NextUniform).
std::string SampleHyperparameters(const config::Hyperparameter& space, Generator& gen);

// A trial seed in [0, 2^31-1]: the low 31 bits of the next draw.
uint32_t DrawTrialSeed(Generator& gen);

// The grid of `space`: one axis per member in name order (nested groups' members at the
// group's place). Axis values: const: its value; categorical: `vals`; int: `count` evenly
// spaced integers from minval to maxval (rounded; every integer when count exceeds them; the
// midpoint, rounded down, when count is 1); double: `count` evenly spaced values (the
// midpoint when 1); log: base^e for `count` evenly spaced exponents e. Points are the
// cartesian product with the first axis varying slowest. REQUIRES: every numeric member
// has a count (ParseExperimentConfig checks this for the grid searcher).
class Grid {
 public:
  explicit Grid(const config::Hyperparameter& space);
  // Number of points (1 for an empty space).
  int64_t size() const { return size_; }
  // Point `i` (0 <= i < size()) as a JSON object.
  std::string Point(int64_t i) const;

 private:
  config::Hyperparameter space_;
  // Values (JSON text) of each axis, in axis order.
  std::vector<std::vector<std::string>> axes_;
  int64_t size_ = 1;
};

// `value` as a JSON number: the shortest text that reads back as the same double.
// REQUIRES: finite.
std::string JsonNumber(double value);

}  // namespace det::master::searcher

#endif  // DET_MASTER_SEARCHER_SAMPLING_H_
