#include "common/event_loop/event_loop.h"

#include "absl/synchronization/notification.h"

namespace det {

EventLoop::EventLoop(Clock& clock) : clock_(clock) {}

EventLoop::~EventLoop() { Stop(); }

void EventLoop::Start() {
  thread_ = std::thread([this] { Run(); });
  thread_id_ = thread_.get_id();
}

void EventLoop::Stop() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void EventLoop::Post(std::function<void()> fn) {
  absl::MutexLock l(&mu_);
  queue_.push_back(std::move(fn));
}

void EventLoop::PostUrgent(std::function<void()> fn) {
  absl::MutexLock l(&mu_);
  urgent_.push_back(std::move(fn));
}

EventLoop::TimerId EventLoop::PostAfter(absl::Duration delay, std::function<void()> fn) {
  absl::Time deadline = clock_.Now() + delay;
  absl::MutexLock l(&mu_);
  TimerId id = next_timer_++;
  timers_.emplace(std::make_pair(deadline, id), std::move(fn));
  timer_deadlines_[id] = deadline;
  woken_ = true;
  return id;
}

void EventLoop::Cancel(TimerId id) {
  absl::MutexLock l(&mu_);
  auto it = timer_deadlines_.find(id);
  if (it == timer_deadlines_.end()) return;
  timers_.erase({it->second, id});
  timer_deadlines_.erase(it);
}

void EventLoop::Wake() {
  absl::MutexLock l(&mu_);
  woken_ = true;
}

void EventLoop::RunSync(std::function<void()> fn) {
  absl::Notification done;
  Post([&] {
    fn();
    done.Notify();
  });
  done.WaitForNotification();
}

void EventLoop::Run() {
  // Real time between re-checks of the clock when nothing is posted; bounds how late a
  // timer can fire if the clock is not the real one.
  constexpr absl::Duration kMaxIdle = absl::Milliseconds(50);
  while (true) {
    std::function<void()> fn;
    std::deque<std::function<void()>> timers;
    {
      absl::MutexLock l(&mu_);
      absl::Duration wait = kMaxIdle;
      if (!timers_.empty()) {
        wait = std::min(wait, std::max(absl::ZeroDuration(),
                                       timers_.begin()->first.first - clock_.Now()));
      }
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || woken_ || !queue_.empty() || !urgent_.empty();
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), wait);
      if (stopping_) return;
      woken_ = false;
      absl::Time now = clock_.Now();
      while (!timers_.empty() && timers_.begin()->first.first <= now) {
        auto node = timers_.extract(timers_.begin());
        timer_deadlines_.erase(node.key().second);
        timers.push_back(std::move(node.mapped()));
      }
      // One closure at a time, urgent ones first, so urgent work never waits behind more
      // than the closure already running.
      if (!urgent_.empty()) {
        fn = std::move(urgent_.front());
        urgent_.pop_front();
      } else if (!queue_.empty()) {
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      if (fn || !timers.empty()) woken_ = true;  // Look again without waiting.
    }
    for (auto& t : timers) t();
    if (fn) fn();
  }
}

}  // namespace det
