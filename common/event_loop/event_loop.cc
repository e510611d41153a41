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
    std::deque<std::function<void()>> work;
    {
      absl::MutexLock l(&mu_);
      absl::Duration wait = kMaxIdle;
      if (!timers_.empty()) {
        wait = std::min(wait, std::max(absl::ZeroDuration(),
                                       timers_.begin()->first.first - clock_.Now()));
      }
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || woken_ || !queue_.empty();
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), wait);
      if (stopping_) return;
      woken_ = false;
      work.swap(queue_);
      absl::Time now = clock_.Now();
      while (!timers_.empty() && timers_.begin()->first.first <= now) {
        auto node = timers_.extract(timers_.begin());
        timer_deadlines_.erase(node.key().second);
        work.push_back(std::move(node.mapped()));
      }
    }
    for (auto& fn : work) fn();
  }
}

}  // namespace det
