// Turns of the master's event loop. Every closure a manager runs on the loop is one turn:
// the closure, then the end of the turn, which runs the scheduling pass the turn asked for
// (RequestSchedule) and then whatever else must follow every change (the trial events it
// recorded). So no reader, queued behind the turn, sees a change without the derived state
// it implies (waiting reasons, placements, events).
//
// Thread: Post, PostAfter, OnLoop and AckAfterTurn may be called from any thread;
// RequestSchedule and EndTurn only on the loop.
#ifndef DET_MASTER_LOOP_TURNS_H_
#define DET_MASTER_LOOP_TURNS_H_

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/event_loop/event_loop.h"

namespace det::master {

class Turns {
 public:
  using Done = std::function<void(absl::Status)>;

  // `loop` must outlive this.
  explicit Turns(EventLoop& loop) : loop_(loop) {}

  // Set once by the composition root before the loop runs turns: the scheduling pass
  // (runs when requested), then `end` (runs at the end of every turn).
  void SetSchedulePass(std::function<void()> pass) { pass_ = std::move(pass); }
  void SetTurnEnd(std::function<void()> end) { end_ = std::move(end); }
  // Set once (the master service's read model, ReadModel::Publish): runs last in every
  // turn's end, after `end`, before the turn's acknowledgements.
  void SetPublish(std::function<void()> publish) { publish_ = std::move(publish); }

  EventLoop& loop() { return loop_; }

  // Runs `fn` on the loop (a turn).
  void Post(std::function<void()> fn);
  // Runs `fn` on the loop once `delay` has passed on the clock (a turn).
  EventLoop::TimerId PostAfter(absl::Duration delay, std::function<void()> fn);
  // Runs `fn` on the loop; its status goes to `done` once the turn has ended.
  void OnLoop(Done done, std::function<absl::Status()> fn);
  // The same, ahead of queued work: for heartbeats only (liveness must not wait behind a
  // backlog). Never for reads: a read must not overtake the writes queued before it.
  void OnLoopUrgent(Done done, std::function<absl::Status()> fn);

  // `done`, deferred to the end of the current turn (after its publication) when called
  // on the loop inside a turn; else called at once. Every acknowledgement given inside a
  // turn (a closure of Post that calls its caller's Done) goes through it, so that no
  // reader acknowledged a write sees state from before it.
  Done AckAfterTurn(Done done);

  // Asks for a scheduling pass at the end of the current turn (a turn is posted when
  // called outside one).
  void RequestSchedule();
  // Completes the turn: the requested scheduling passes, then the turn end.
  void EndTurn();

 private:
  EventLoop& loop_;
  std::function<void()> pass_;
  std::function<void()> end_;
  std::function<void()> publish_;
  bool in_turn_ = false;              // a closure of Post/PostAfter/OnLoop is running
  std::vector<std::function<void()>> acks_;  // AckAfterTurn's, for the end of this turn
  bool schedule_requested_ = false;  // a pass is due at the end of this turn
  bool schedule_posted_ = false;     // a turn is posted that will run it
};

}  // namespace det::master

#endif  // DET_MASTER_LOOP_TURNS_H_
