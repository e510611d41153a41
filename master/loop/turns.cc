#include "master/loop/turns.h"

#include "master/loop/on_loop.h"

namespace det::master {

void Turns::Post(std::function<void()> fn) {
  loop_.Post([this, fn = std::move(fn)] {
    in_turn_ = true;
    fn();
    EndTurn();
  });
}

EventLoop::TimerId Turns::PostAfter(absl::Duration delay, std::function<void()> fn) {
  return loop_.PostAfter(delay, [this, fn = std::move(fn)] {
    in_turn_ = true;
    fn();
    EndTurn();
  });
}

void Turns::OnLoop(Done done, std::function<absl::Status()> fn) {
  loop_.Post([this, done = std::move(done), fn = std::move(fn)] {
    in_turn_ = true;
    absl::Status st = fn();
    EndTurn();
    done(st);
  });
}

void Turns::OnLoopUrgent(Done done, std::function<absl::Status()> fn) {
  loop_.PostUrgent([this, done = std::move(done), fn = std::move(fn)] {
    in_turn_ = true;
    absl::Status st = fn();
    EndTurn();
    done(st);
  });
}

void Turns::RequestSchedule() {
  DET_CHECK_ON_LOOP(loop_);
  schedule_requested_ = true;
  // The pass runs at the end of the current turn (EndTurn); this posted turn only serves
  // a request made outside one.
  if (schedule_posted_) return;
  schedule_posted_ = true;
  Post([this] { schedule_posted_ = false; });
}

void Turns::EndTurn() {
  DET_CHECK_ON_LOOP(loop_);
  // A pass may request another (a placement that failed at once requeues its task): a
  // few run here; beyond that the posted pass of RequestSchedule runs them.
  constexpr int kMaxPassesPerTurn = 4;
  for (int i = 0; schedule_requested_ && i < kMaxPassesPerTurn; ++i) {
    schedule_requested_ = false;
    if (pass_) pass_();
  }
  if (end_) end_();
  if (publish_) publish_();
  in_turn_ = false;
  std::vector<std::function<void()>> acks;
  acks.swap(acks_);
  for (auto& ack : acks) ack();
}

Turns::Done Turns::AckAfterTurn(Done done) {
  return [this, done = std::move(done)](absl::Status st) mutable {
    if (loop_.InLoop() && in_turn_) {
      acks_.push_back([done = std::move(done), st = std::move(st)] { done(st); });
      return;
    }
    done(st);
  };
}

}  // namespace det::master
