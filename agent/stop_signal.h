// The agent's stop request (Stop: stop the workers and exit; Detach: exit leaving them
// running), and the waits of its threads, which end early when it comes.
#ifndef DET_AGENT_STOP_SIGNAL_H_
#define DET_AGENT_STOP_SIGNAL_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock/clock.h"

namespace det::agent {

// Thread-safe.
class StopSignal {
 public:
  // Waits last `clock` time; a wait re-reads the clock at least every `max_real_wait` of
  // real time (so that a FakeClock moved by a test ends it). `clock` must outlive this.
  explicit StopSignal(Clock& clock, absl::Duration max_real_wait = absl::Seconds(1))
      : clock_(clock), max_real_wait_(max_real_wait) {}

  void Stop();
  // Stop, leaving the workers running.
  void Detach();
  bool stopping();
  bool detaching();

  // Waits `d` of clock time; returns early (true) on Stop() or Detach().
  bool SleepOrStop(absl::Duration d);
  // Waits `d` of clock time; returns early (true) on Detach().
  bool SleepOrDetach(absl::Duration d);
  // Waits `d` of clock time.
  void Sleep(absl::Duration d);

 private:
  enum class Until { kStop, kDetach, kNever };
  bool Wait(absl::Duration d, Until until);

  Clock& clock_;
  const absl::Duration max_real_wait_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool detaching_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace det::agent

#endif  // DET_AGENT_STOP_SIGNAL_H_
