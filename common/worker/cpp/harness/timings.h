// How long the phases of training take (Determined's timings: dataloader_next,
// to_device, train_batch, step_lr_schedulers, from_device, reduce_metrics), collected
// per batch and summarized per batch group for the "timings" metrics group.
#ifndef DET_COMMON_WORKER_CPP_HARNESS_TIMINGS_H_
#define DET_COMMON_WORKER_CPP_HARNESS_TIMINGS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/clock/clock.h"

namespace det::harness {

// Thread-compatible.
class Timings {
 public:
  // Adds one sample of phase `name`.
  void Add(const std::string& name, absl::Duration d);

  // For every phase with samples: "<name>_mean_ms", "<name>_p50_ms", "<name>_p90_ms",
  // "<name>_p99_ms" and "<name>_max_ms" (nearest-rank percentiles), and
  // "<name>_count". Then forgets the samples.
  std::map<std::string, double> Summarize();

  bool empty() const { return samples_.empty(); }

 private:
  std::map<std::string, std::vector<double>> samples_;  // ms
};

// Adds the time from construction to destruction (or Stop()) to a Timings.
class ScopedTiming {
 public:
  ScopedTiming(Timings& timings, std::string name, Clock& clock)
      : timings_(timings), name_(std::move(name)), clock_(clock), start_(clock.Now()) {}
  ~ScopedTiming() { Stop(); }
  void Stop() {
    if (stopped_) return;
    stopped_ = true;
    timings_.Add(name_, clock_.Now() - start_);
  }

 private:
  Timings& timings_;
  std::string name_;
  Clock& clock_;
  absl::Time start_;
  bool stopped_ = false;
};

}  // namespace det::harness

#endif  // DET_COMMON_WORKER_CPP_HARNESS_TIMINGS_H_
