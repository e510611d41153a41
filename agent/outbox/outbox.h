// What the agent sends the master in order: its workers' log lines and its reports (a launch,
// a worker's exit), kept until the master takes them.
#ifndef DET_AGENT_OUTBOX_OUTBOX_H_
#define DET_AGENT_OUTBOX_OUTBOX_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/master_client/master_client.h"
#include "common/clock/clock.h"
#include "proto/agent.pb.h"

namespace det::agent {

// One entry of the outbox: a log line, or a report. Exactly one of the three is set.
struct Outgoing {
  std::optional<v1::LogLine> line;
  std::optional<v1::ReportLaunchedRequest> launched;
  std::optional<v1::ReportExitRequest> exit;
  // For a worker's output line: its stream (0 stdout, 1 stderr) and the file offset just
  // after it; -1 for lines the agent writes itself.
  int stream = -1;
  int64_t end_offset = 0;

  const std::string& allocation_id() const;
};

struct OutboxLimits {
  // Past this many lines, the oldest line is dropped for each new one (never a report).
  int64_t max_buffered_lines = 100000;
  // HasRoom() is false from this many lines on: readers of worker output pause, so that it
  // never overflows the outbox (the files keep the rest).
  int64_t read_pause_lines = 30000;
  // A batch of lines stays far below the 4 MiB the master receives in one message (lines
  // are cut at 64 KiB, so 1000 of them could be 64 MiB).
  int max_lines_per_batch = 1000;
  size_t max_batch_bytes = 1 << 20;
  // After a failed send, the next waits this long, doubling up to max_backoff.
  absl::Duration first_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
};

// Thread-safe. Consecutive log lines go in one ShipLogs call, a report alone; items leave
// the outbox once the master accepts them, or refuses them for good (refused lines are
// counted as dropped, and the count goes with the next batch: ShipLogsRequest.dropped).
class Outbox {
 public:
  // `client` and `clock` must outlive the outbox.
  Outbox(std::string agent_id, MasterClient& client, Clock& clock, OutboxLimits limits = {});

  void Enqueue(Outgoing item);
  // Logs `message` and queues it as a line of `rank` of `launch` on the "agent" stream.
  void AgentLine(const v1::LaunchCommand& launch, int rank, const std::string& message);
  // Fewer than read_pause_lines lines are queued.
  bool HasRoom();
  // Waits up to `timeout` (real time) for HasRoom(); returns it.
  bool AwaitRoom(absl::Duration timeout);
  // Waits up to `timeout` (real time) for an item, or for Wake(); true when there is one.
  bool AwaitItems(absl::Duration timeout);
  // Waits up to `timeout` (real time) for Wake().
  void AwaitWake(absl::Duration timeout);
  // Ends the waits in progress in AwaitItems and AwaitWake.
  void Wake();
  // Lines of `allocation_id` are queued.
  bool HasLinesOf(const std::string& allocation_id);
  int64_t lines();
  // Lines dropped (outbox full, or refused by the master) not yet told to the master.
  int64_t dropped_lines();

  enum class Result {
    kEmpty,        // nothing queued
    kNotDue,       // a failed send waits for next_attempt()
    kDelivered,    // `delivered` left the outbox
    kRetrying,     // a transient failure: kept, sent again at next_attempt()
    kSessionLost,  // the master does not know `session` (NotFound): kept
  };
  struct SendResult {
    Result result = Result::kEmpty;
    // The items that left the outbox (kDelivered), in order.
    std::vector<Outgoing> delivered;
    absl::Status status;
  };
  // One send of the next batch on `session` if one is due (clock time at or after
  // next_attempt()). After a transient failure of lines, the first report queued behind
  // them goes next (a worker's exit frees its slot even while the master cannot store its
  // last lines); reports keep their order among themselves. Call from one thread.
  SendResult SendNext(const std::string& session);
  absl::Time next_attempt();

 private:
  // Waits up to `timeout` for Wake() (or, with `for_items`, an item).
  void Await(absl::Duration timeout, bool for_items) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the oldest queued line (never a report).
  void DropOldestLine() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Send(const std::string& session, const std::vector<Outgoing>& batch,
                    int64_t dropped);
  // Schedules the next attempt after a failed send (of lines: `lines`); returns the wait.
  absl::Duration Failed(bool lines) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string agent_id_;
  MasterClient& client_;
  Clock& clock_;
  const OutboxLimits limits_;

  absl::Mutex mu_;
  std::deque<Outgoing> items_ ABSL_GUARDED_BY(mu_);
  int64_t lines_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_lines_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t wakes_ ABSL_GUARDED_BY(mu_) = 0;
  // The items at the front being sent (not to be dropped meanwhile).
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration backoff_ ABSL_GUARDED_BY(mu_);
  absl::Time next_attempt_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace det::agent

#endif  // DET_AGENT_OUTBOX_OUTBOX_H_
