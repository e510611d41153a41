// Trial logs: the lines agents ship (worker output), the master's own lines about a trial
// ("trial events": scheduling, exits, checkpoints), and the GetTrialLogs long polls.
//
// Owns the events not yet stored and the waiting long polls. Events are stored together
// (one transaction) by FlushEvents, which the master calls at the end of every loop turn;
// every waiter of a trial that got lines is then answered. The stored lines a poll answers
// with are read on the store's read pool (StoreReads), not on the loop: the loop only
// decides whether the trial is over and keeps the polls that wait.
//
// Loop-thread only: every method must be called on `loop` (checked).
#ifndef DET_MASTER_LOGS_LOG_MANAGER_H_
#define DET_MASTER_LOGS_LOG_MANAGER_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock/clock.h"
#include "common/event_loop/event_loop.h"
#include "master/api/handlers.h"
#include "master/reads/store_reads.h"
#include "master/store/store.h"
#include "proto/api.pb.h"

namespace det::master {

class LogManager {
 public:
  // Whether trial `id` has ended (a terminal state); NotFound for an unknown trial.
  using TrialEnded = std::function<absl::StatusOr<bool>(int64_t trial_id)>;

  // `clock`, `loop`, `store` and `reads` must outlive the manager; the reads it submitted
  // must have run before it is destroyed (StoreReads::Stop).
  LogManager(Clock& clock, EventLoop& loop, Store& store, StoreReads& reads,
             TrialEnded trial_ended);

  // Records a line about the trial in its logs (stream "master", rank -1), stored by the
  // next FlushEvents; also logged by the master (`verbose` ones at debug level). Only the
  // master writes the stream "master".
  void Event(int64_t trial_id, const std::string& message, bool verbose = false);
  bool HasPendingEvents() const;
  // Stores the pending events and answers the waiters of their trials. When the store
  // refuses them (e.g. the database is full) they stay pending and the next flush tries
  // again; beyond kMaxPendingEvents the oldest are dropped, counted per trial, reported
  // to LinesDropped and noted in the trial's log once a flush succeeds.
  void FlushEvents();
  static constexpr size_t kMaxPendingEvents = 10000;

  // Whether an agent may ship `line` (line.agent_id() is the agent that shipped it):
  // PERMISSION_DENIED naming the rule when not.
  using ShippedLineCheck = std::function<absl::Status(const v1::LogLine& line)>;
  // Lines about trial `trial_id` that are lost for good: `count` of them, `what` says
  // whose and why.
  using LinesDropped =
      std::function<void(int64_t trial_id, int64_t count, const std::string& what)>;
  // Installed by the manager that knows where allocations run (the allocation manager).
  void SetShippedLineCheck(ShippedLineCheck check) { shipped_line_check_ = std::move(check); }
  void SetLinesDropped(LinesDropped observer) { lines_dropped_ = std::move(observer); }

  // Stores lines shipped by an agent (ids assigned in place) and answers the waiters of
  // `trials`. Refused whole (PERMISSION_DENIED) when one line claims the master's stream
  // ("master") or fails the shipped-line check. When the store refuses them the answer is
  // UNAVAILABLE with the store's error: the agent keeps the lines and sends them again
  // (nothing is lost silently). A stored note of the agent's about lines it dropped
  // ("[N log lines dropped ...]", stream "agent") is reported to LinesDropped.
  absl::Status AddLines(std::vector<v1::LogLine>* lines, const std::vector<int64_t>& trials);

  // GetTrialLogs: answers when there are lines, the trial has ended, the request does not
  // wait or `no_wait`; else waits up to req.wait_ms (at most 60 s) for lines. The lines are
  // read on the read pool, and `done` is called from its thread or from the loop's. Every
  // line stored before this call is seen. `req` and `resp` stay valid until `done`.
  void Read(const v1::GetTrialLogsRequest& req, v1::GetTrialLogsResponse* resp, Done done,
            bool no_wait);
  // Answers the long polls of `trial_id` with what there is now (read again on the pool).
  void AnswerWaiters(int64_t trial_id);
  // Answers every long poll (shutdown); later polls do not wait.
  void AnswerAll();
  // The trials were deleted (det experiment delete): their pending events and dropped
  // counts are forgotten, their long polls answered with what there is.
  void ForgetTrials(const std::vector<int64_t>& trial_ids);

  int64_t lines_stored_total() const { return lines_stored_total_; }
  // GetTrialLogs polls waiting for lines now.
  size_t waiting_polls() const;

 private:
  struct Waiter {
    const v1::GetTrialLogsRequest* request;
    v1::GetTrialLogsResponse* response;
    Done done;
    EventLoop::TimerId timer;
  };
  // On a pool thread: the lines req asks for into `resp`; resp.done when `finished` (the
  // trial ended, its events stored) and fewer than the limit came.
  static absl::Status Fill(MetricsReader& reader, const v1::GetTrialLogsRequest& req,
                           bool finished, v1::GetTrialLogsResponse* resp);
  // On the loop, after a read found nothing: the poll waits, unless lines of its trial were
  // stored since it began (its trial's generation moved), when it is read again.
  void Wait(const v1::GetTrialLogsRequest& req, v1::GetTrialLogsResponse* resp, Done done,
            int64_t generation);
  // Moves (AnswerWaiters) whenever lines of a trial are stored. Trials share a fixed
  // number of counters (trial id modulo their count): a move for another trial only makes
  // a poll answer early, with what there is.
  int64_t& Generation(int64_t trial_id);

  Clock& clock_;
  EventLoop& loop_;
  Store& store_;
  StoreReads& reads_;
  TrialEnded trial_ended_;
  std::vector<v1::LogLine> pending_events_;
  // Events dropped (kMaxPendingEvents) per trial, not yet noted in its log.
  std::map<int64_t, int64_t> events_dropped_;
  absl::Time retry_after_ = absl::InfinitePast();
  ShippedLineCheck shipped_line_check_;
  LinesDropped lines_dropped_;
  bool flush_posted_ = false;
  std::map<int64_t, std::vector<Waiter>> waiters_;
  std::array<int64_t, 4096> generations_{};
  // Set by AnswerAll: the master stops, no poll waits.
  bool closed_ = false;
  int64_t lines_stored_total_ = 0;
};

}  // namespace det::master

#endif  // DET_MASTER_LOGS_LOG_MANAGER_H_
