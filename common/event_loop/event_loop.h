// A single thread that runs posted closures and timers in order. Daemons keep their
// mutable state on one loop; other threads (gRPC handlers) post work to it.
#ifndef DET_COMMON_EVENT_LOOP_EVENT_LOOP_H_
#define DET_COMMON_EVENT_LOOP_EVENT_LOOP_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock/clock.h"

namespace det {

class EventLoop {
 public:
  using TimerId = uint64_t;

  // `clock` must outlive the loop. Timers fire when clock.Now() reaches their deadline;
  // with a FakeClock call Wake() after advancing it.
  explicit EventLoop(Clock& clock);
  // Stops the thread; closures still queued are dropped.
  ~EventLoop();

  void Start();
  void Stop();

  // Thread-safe. Runs `fn` on the loop thread, after everything posted before it.
  void Post(std::function<void()> fn);
  // Thread-safe. Runs `fn` on the loop thread before any work posted with Post() that has
  // not started yet (for cheap reads that must not wait behind heavy writes).
  void PostUrgent(std::function<void()> fn);
  // Thread-safe. Runs `fn` on the loop thread once `delay` has passed on the clock.
  TimerId PostAfter(absl::Duration delay, std::function<void()> fn);
  // Thread-safe. A timer that has not fired yet never fires.
  void Cancel(TimerId id);
  // Thread-safe. Re-examines timers (after a FakeClock moved).
  void Wake();

  // True on the loop thread.
  bool InLoop() const { return std::this_thread::get_id() == thread_id_; }

  // Thread-safe, not from the loop thread: runs `fn` on the loop and waits for it.
  void RunSync(std::function<void()> fn);

 private:
  void Run();

  Clock& clock_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void()>> urgent_ ABSL_GUARDED_BY(mu_);
  // (deadline, id) -> closure.
  std::map<std::pair<absl::Time, TimerId>, std::function<void()>> timers_ ABSL_GUARDED_BY(mu_);
  std::map<TimerId, absl::Time> timer_deadlines_ ABSL_GUARDED_BY(mu_);
  TimerId next_timer_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::thread::id thread_id_;
};

}  // namespace det

#endif  // DET_COMMON_EVENT_LOOP_EVENT_LOOP_H_
