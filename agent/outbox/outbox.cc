#include "agent/outbox/outbox.h"

#include <algorithm>
#include <utility>

#include "common/logging/logging.h"
#include "common/rpc/rpc.h"

namespace det::agent {

const std::string& Outgoing::allocation_id() const {
  return line       ? line->allocation_id()
         : launched ? launched->allocation_id()
                    : exit->allocation_id();
}

Outbox::Outbox(std::string agent_id, MasterClient& client, Clock& clock, OutboxLimits limits)
    : agent_id_(std::move(agent_id)),
      client_(client),
      clock_(clock),
      limits_(limits),
      backoff_(limits.first_backoff) {}

void Outbox::Enqueue(Outgoing item) {
  absl::MutexLock l(&mu_);
  if (item.line) {
    if (lines_ >= limits_.max_buffered_lines) DropOldestLine();
    ++lines_;
  }
  items_.push_back(std::move(item));
}

void Outbox::AgentLine(const v1::LaunchCommand& launch, int rank, const std::string& message) {
  Logger("agent")->info("allocation {} rank {}: {}", launch.allocation_id(), rank, message);
  Outgoing o;
  v1::LogLine& line = o.line.emplace();
  line.set_trial_id(launch.trial_id());
  line.set_allocation_id(launch.allocation_id());
  line.set_rank(rank);
  line.set_stream("agent");
  line.set_time_ms(clock_.NowMs());
  line.set_message(message);
  Enqueue(std::move(o));
}

void Outbox::DropOldestLine() {
  for (auto it = items_.begin() + in_flight_; it != items_.end(); ++it) {
    if (it->line) {
      items_.erase(it);
      --lines_;
      ++dropped_lines_;
      return;
    }
  }
}

bool Outbox::HasRoom() {
  absl::MutexLock l(&mu_);
  return lines_ < limits_.read_pause_lines;
}

bool Outbox::AwaitRoom(absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  auto room = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return lines_ < limits_.read_pause_lines; };
  return mu_.AwaitWithTimeout(absl::Condition(&room), timeout);
}

bool Outbox::AwaitItems(absl::Duration timeout) {
  Await(timeout, /*for_items=*/true);
  absl::MutexLock l(&mu_);
  return !items_.empty();
}

void Outbox::AwaitWake(absl::Duration timeout) { Await(timeout, /*for_items=*/false); }

void Outbox::Await(absl::Duration timeout, bool for_items) {
  absl::MutexLock l(&mu_);
  const int64_t wakes = wakes_;
  auto ready = [this, wakes, for_items]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (for_items && !items_.empty()) || wakes_ != wakes;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
}

void Outbox::Wake() {
  absl::MutexLock l(&mu_);
  ++wakes_;
}

bool Outbox::HasLinesOf(const std::string& allocation_id) {
  absl::MutexLock l(&mu_);
  return std::any_of(items_.begin(), items_.end(), [&](const Outgoing& o) {
    return o.line && o.line->allocation_id() == allocation_id;
  });
}

int64_t Outbox::lines() {
  absl::MutexLock l(&mu_);
  return lines_;
}

int64_t Outbox::dropped_lines() {
  absl::MutexLock l(&mu_);
  return dropped_lines_;
}

absl::Time Outbox::next_attempt() {
  absl::MutexLock l(&mu_);
  return next_attempt_;
}

Outbox::SendResult Outbox::SendNext(const std::string& session) {
  SendResult out;
  std::vector<Outgoing> batch;
  int64_t dropped = 0;
  {
    absl::MutexLock l(&mu_);
    if (items_.empty()) return out;
    if (clock_.Now() < next_attempt_) {
      out.result = Result::kNotDue;
      return out;
    }
    if (items_.front().line) {
      size_t bytes = 0;
      for (auto it = items_.begin(); it != items_.end() && it->line &&
                                     static_cast<int>(batch.size()) < limits_.max_lines_per_batch;
           ++it) {
        bytes += it->line->ByteSizeLong();
        if (!batch.empty() && bytes > limits_.max_batch_bytes) break;
        batch.push_back(*it);
      }
      dropped = dropped_lines_;
    } else {
      batch.push_back(items_.front());
    }
    in_flight_ = batch.size();
  }
  // Only SendNext removes the items in flight, so the batch is still at the front afterwards.
  out.status = Send(session, batch, dropped);
  const bool lines = batch[0].line.has_value();
  if (out.status.ok() || (!rpc::IsTransient(out.status) && !absl::IsNotFound(out.status))) {
    if (!out.status.ok()) {
      Logger("agent")->error("master rejected a report: {}", out.status.ToString());
    }
    absl::MutexLock l(&mu_);
    in_flight_ = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (items_.front().line) --lines_;
      items_.pop_front();
    }
    if (lines) {
      // Lines refused for good are counted as dropped: never lost without a word.
      if (out.status.ok()) {
        dropped_lines_ -= dropped;
      } else {
        dropped_lines_ += static_cast<int64_t>(batch.size());
      }
    }
    backoff_ = limits_.first_backoff;
    next_attempt_ = absl::InfinitePast();
    out.result = Result::kDelivered;
    out.delivered = std::move(batch);
    return out;
  }
  absl::Duration wait = Failed(lines && !absl::IsNotFound(out.status));
  if (lines && !absl::IsNotFound(out.status)) {
    Logger("agent")->warn("cannot ship {} log lines (kept; sending them again in {}): {}",
                          batch.size(), absl::FormatDuration(wait), out.status.ToString());
  }
  out.result = absl::IsNotFound(out.status) ? Result::kSessionLost : Result::kRetrying;
  return out;
}

absl::Duration Outbox::Failed(bool lines) {
  absl::MutexLock l(&mu_);
  in_flight_ = 0;
  const absl::Duration wait = backoff_;
  next_attempt_ = clock_.Now() + wait;
  backoff_ = std::min(backoff_ * 2, limits_.max_backoff);
  if (!lines) return wait;
  auto report =
      std::find_if(items_.begin(), items_.end(), [](const Outgoing& o) { return !o.line; });
  if (report != items_.end() && report != items_.begin()) {
    Outgoing o = std::move(*report);
    items_.erase(report);
    items_.push_front(std::move(o));
  }
  return wait;
}

absl::Status Outbox::Send(const std::string& session, const std::vector<Outgoing>& batch,
                          int64_t dropped) {
  if (batch[0].line) {
    v1::ShipLogsRequest req;
    req.set_agent_id(agent_id_);
    req.set_session_id(session);
    req.set_dropped(dropped);
    for (const auto& o : batch) *req.add_lines() = *o.line;
    return client_.ShipLogs(req);
  }
  if (batch[0].launched) {
    v1::ReportLaunchedRequest req = *batch[0].launched;
    req.set_agent_id(agent_id_);
    req.set_session_id(session);
    return client_.ReportLaunched(req);
  }
  v1::ReportExitRequest req = *batch[0].exit;
  req.set_agent_id(agent_id_);
  req.set_session_id(session);
  return client_.ReportExit(req);
}

}  // namespace det::agent
