// Time source for everything in det that needs "now". Tests use FakeClock.
#ifndef DET_COMMON_CLOCK_CLOCK_H_
#define DET_COMMON_CLOCK_CLOCK_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace det {

// Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
  int64_t NowMs() { return absl::ToUnixMillis(Now()); }
};

class RealClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
};

// Starts at a fixed instant; moves only when told.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1700000000)) : now_(start) {}
  absl::Time Now() override {
    absl::MutexLock l(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock l(&mu_);
    now_ += d;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace det

#endif  // DET_COMMON_CLOCK_CLOCK_H_
