#include "agent/stop_signal.h"

#include <algorithm>

namespace det::agent {

void StopSignal::Stop() {
  absl::MutexLock l(&mu_);
  stopping_ = true;
}

void StopSignal::Detach() {
  absl::MutexLock l(&mu_);
  detaching_ = true;
  stopping_ = true;
}

bool StopSignal::stopping() {
  absl::MutexLock l(&mu_);
  return stopping_;
}

bool StopSignal::detaching() {
  absl::MutexLock l(&mu_);
  return detaching_;
}

bool StopSignal::SleepOrStop(absl::Duration d) { return Wait(d, Until::kStop); }
bool StopSignal::SleepOrDetach(absl::Duration d) { return Wait(d, Until::kDetach); }
void StopSignal::Sleep(absl::Duration d) { Wait(d, Until::kNever); }

bool StopSignal::Wait(absl::Duration d, Until until) {
  const absl::Time end = clock_.Now() + d;
  absl::MutexLock l(&mu_);
  auto woken = [this, until]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (until == Until::kStop && stopping_) || (until == Until::kDetach && detaching_);
  };
  while (!woken()) {
    absl::Duration left = end - clock_.Now();
    if (left <= absl::ZeroDuration()) return false;
    mu_.AwaitWithTimeout(absl::Condition(&woken), std::min(left, max_real_wait_));
  }
  return true;
}

}  // namespace det::agent
