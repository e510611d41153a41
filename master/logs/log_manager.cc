#include "master/logs/log_manager.h"

#include <algorithm>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging/logging.h"
#include "common/status/status_macros.h"
#include "master/loop/on_loop.h"

namespace det::master {
namespace {
constexpr absl::Duration kMaxPollWait = absl::Seconds(60);
// How long events the store refused wait before the next try.
constexpr absl::Duration kRetryWait = absl::Seconds(1);
}  // namespace

LogManager::LogManager(Clock& clock, EventLoop& loop, Store& store, StoreReads& reads,
                       TrialEnded trial_ended)
    : clock_(clock),
      loop_(loop),
      store_(store),
      reads_(reads),
      trial_ended_(std::move(trial_ended)) {}

void LogManager::Event(int64_t trial_id, const std::string& message, bool verbose) {
  DET_CHECK_ON_LOOP(loop_);
  if (verbose) {
    Logger("master")->debug("trial {}: {}", trial_id, message);
  } else {
    Logger("master")->info("trial {}: {}", trial_id, message);
  }
  v1::LogLine& line = pending_events_.emplace_back();
  line.set_trial_id(trial_id);
  line.set_rank(-1);
  line.set_stream("master");
  line.set_time_ms(clock_.NowMs());
  line.set_message(message);
  // The master flushes at the end of its turn; this posted flush only serves an event
  // recorded outside one.
  if (!flush_posted_) {
    flush_posted_ = true;
    loop_.Post([this] {
      flush_posted_ = false;
      if (HasPendingEvents()) FlushEvents();
    });
  }
}

bool LogManager::HasPendingEvents() const { return !pending_events_.empty(); }

void LogManager::FlushEvents() {
  DET_CHECK_ON_LOOP(loop_);
  // After a refused write, wait a little before the next try (every turn ends in a flush).
  if (clock_.Now() < retry_after_) return;
  std::vector<v1::LogLine> lines = std::move(pending_events_);
  pending_events_.clear();
  // Notes about events dropped earlier go first (they were older).
  std::vector<v1::LogLine> notes;
  for (const auto& [trial_id, count] : events_dropped_) {
    v1::LogLine& note = notes.emplace_back();
    note.set_trial_id(trial_id);
    note.set_rank(-1);
    note.set_stream("master");
    note.set_time_ms(clock_.NowMs());
    note.set_message(absl::StrCat("[", count, " of the master's lines about this trial were "
                                  "dropped: the database refused them]"));
  }
  lines.insert(lines.begin(), notes.begin(), notes.end());
  absl::Status st = store_.AddLogs(&lines);
  if (!st.ok()) {
    Logger("master")->error("cannot store {} trial events (kept, tried again at the next "
                            "flush): {}", lines.size(), st.ToString());
    lines.erase(lines.begin(), lines.begin() + static_cast<std::ptrdiff_t>(notes.size()));
    // Kept in order, before the events recorded since; beyond the bound the oldest go.
    lines.insert(lines.end(), pending_events_.begin(), pending_events_.end());
    size_t excess = lines.size() > kMaxPendingEvents ? lines.size() - kMaxPendingEvents : 0;
    std::map<int64_t, int64_t> dropped;
    for (size_t i = 0; i < excess; ++i) ++dropped[lines[i].trial_id()];
    lines.erase(lines.begin(), lines.begin() + static_cast<std::ptrdiff_t>(excess));
    pending_events_ = std::move(lines);
    retry_after_ = clock_.Now() + kRetryWait;
    for (const auto& [trial_id, count] : dropped) {
      events_dropped_[trial_id] += count;
      if (lines_dropped_) {
        lines_dropped_(trial_id, count, absl::StrCat("the master's, ", st.message()));
      }
    }
    return;
  }
  events_dropped_.clear();
  std::set<int64_t> trials;
  for (const auto& l : lines) trials.insert(l.trial_id());
  for (int64_t t : trials) AnswerWaiters(t);
}

absl::Status LogManager::AddLines(std::vector<v1::LogLine>* lines,
                                  const std::vector<int64_t>& trials) {
  DET_CHECK_ON_LOOP(loop_);
  for (const v1::LogLine& l : *lines) {
    if (l.stream() == "master") {
      return absl::PermissionDeniedError(absl::StrCat(
          "agent ", l.agent_id(), ": shipped log lines may not claim the master's stream "
          "'master' (line of allocation ", l.allocation_id(), ", rank ", l.rank(), ")"));
    }
    if (shipped_line_check_) RETURN_IF_ERROR(shipped_line_check_(l));
  }
  if (absl::Status st = store_.AddLogs(lines); !st.ok()) {
    Logger("master")->error("cannot store {} log lines: {}", lines->size(), st.ToString());
    return absl::UnavailableError(absl::StrCat("the master could not store ", lines->size(),
                                               " log lines (send them again): ", st.message()));
  }
  lines_stored_total_ += static_cast<int64_t>(lines->size());
  for (const v1::LogLine& l : *lines) {
    // The note MasterService::ShipLogs stores for ShipLogsRequest.dropped.
    int64_t count = 0;
    if (l.stream() == "agent" && absl::StartsWith(l.message(), "[") &&
        absl::StrContains(l.message(), " log lines dropped") &&
        absl::SimpleAtoi(l.message().substr(1, l.message().find(' ') - 1), &count) &&
        count > 0 && lines_dropped_) {
      lines_dropped_(l.trial_id(), count, absl::StrCat("agent ", l.agent_id()));
    }
  }
  for (int64_t t : trials) AnswerWaiters(t);
  return absl::OkStatus();
}

absl::Status LogManager::Fill(MetricsReader& reader, const v1::GetTrialLogsRequest& req,
                              bool ended, v1::GetTrialLogsResponse* resp) {
  int limit = req.limit() > 0 ? std::min(req.limit(), 5000) : 1000;
  std::optional<int> rank;
  if (req.has_rank()) rank = req.rank();
  ASSIGN_OR_RETURN(auto lines, reader.GetLogs(req.trial_id(), req.after_id(), limit, rank));
  resp->clear_lines();
  for (auto& l : lines) *resp->add_lines() = std::move(l);
  resp->set_done(ended && resp->lines_size() < limit);
  return absl::OkStatus();
}

int64_t& LogManager::Generation(int64_t trial_id) {
  return generations_[static_cast<uint64_t>(trial_id) % generations_.size()];
}

void LogManager::Read(const v1::GetTrialLogsRequest& req, v1::GetTrialLogsResponse* resp,
                      Done done, bool no_wait) {
  DET_CHECK_ON_LOOP(loop_);
  absl::StatusOr<bool> ended = trial_ended_(req.trial_id());
  if (!ended.ok()) {
    done(ended.status());
    return;
  }
  // Ended with every event of it stored: no line of the master's is still to come.
  const bool finished =
      *ended && std::none_of(pending_events_.begin(), pending_events_.end(),
                             [&](const v1::LogLine& l) { return l.trial_id() == req.trial_id(); });
  const bool may_wait = !no_wait && !closed_ && req.wait_ms() > 0;
  const int64_t generation = Generation(req.trial_id());
  // The stored lines are read on the pool; only a poll that must wait comes back here.
  reads_.Submit([this, &req, resp, done = std::move(done), finished, may_wait,
                 generation](absl::StatusOr<MetricsReader*> reader) mutable {
    absl::Status st = reader.ok() ? Fill(**reader, req, finished, resp) : reader.status();
    if (!st.ok() || resp->lines_size() > 0 || resp->done() || !may_wait) {
      done(st);
      return;
    }
    loop_.Post([this, &req, resp, done = std::move(done), generation]() mutable {
      Wait(req, resp, std::move(done), generation);
    });
  });
}

void LogManager::Wait(const v1::GetTrialLogsRequest& req, v1::GetTrialLogsResponse* resp,
                      Done done, int64_t generation) {
  DET_CHECK_ON_LOOP(loop_);
  if (closed_) {
    done(absl::OkStatus());
    return;
  }
  const int64_t trial_id = req.trial_id();
  if (Generation(trial_id) != generation) {
    // Lines came while the pool read: answered with what there is now, as a waiter is.
    Read(req, resp, std::move(done), /*no_wait=*/true);
    return;
  }
  auto wait = std::min(absl::Milliseconds(req.wait_ms()), kMaxPollWait);
  auto timer = loop_.PostAfter(wait, [this, trial_id, resp] {
    auto& waiters = waiters_[trial_id];
    for (auto it = waiters.begin(); it != waiters.end(); ++it) {
      if (it->response != resp) continue;
      Done d = std::move(it->done);
      waiters.erase(it);
      if (waiters.empty()) waiters_.erase(trial_id);
      d(absl::OkStatus());
      return;
    }
  });
  waiters_[trial_id].push_back({&req, resp, std::move(done), timer});
}

size_t LogManager::waiting_polls() const {
  DET_CHECK_ON_LOOP(loop_);
  size_t n = 0;
  for (const auto& [trial_id, waiters] : waiters_) n += waiters.size();
  return n;
}

void LogManager::AnswerWaiters(int64_t trial_id) {
  DET_CHECK_ON_LOOP(loop_);
  ++Generation(trial_id);
  auto it = waiters_.find(trial_id);
  if (it == waiters_.end()) return;
  std::vector<Waiter> waiters = std::move(it->second);
  waiters_.erase(it);
  for (auto& w : waiters) {
    loop_.Cancel(w.timer);
    Read(*w.request, w.response, std::move(w.done), /*no_wait=*/true);
  }
}

void LogManager::ForgetTrials(const std::vector<int64_t>& trial_ids) {
  DET_CHECK_ON_LOOP(loop_);
  const std::set<int64_t> gone(trial_ids.begin(), trial_ids.end());
  pending_events_.erase(
      std::remove_if(pending_events_.begin(), pending_events_.end(),
                     [&](const v1::LogLine& l) { return gone.count(l.trial_id()) > 0; }),
      pending_events_.end());
  for (int64_t id : trial_ids) {
    events_dropped_.erase(id);
    AnswerWaiters(id);
  }
}

void LogManager::AnswerAll() {
  DET_CHECK_ON_LOOP(loop_);
  closed_ = true;
  for (auto& [id, waiters] : waiters_) {
    for (auto& w : waiters) {
      loop_.Cancel(w.timer);
      w.done(absl::OkStatus());
    }
  }
  waiters_.clear();
}

}  // namespace det::master
