#include "agent/supervisor/supervision.h"

#include <signal.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "agent/supervisor/allocation_record.h"
#include "common/logging/logging.h"

namespace det::agent {
namespace {

constexpr const char* kStreams[2] = {"stdout", "stderr"};

}  // namespace

Supervision::Supervision(Allocation& allocation, int worker, Outbox& outbox, Clock& clock,
                         StopSignal& stop, SupervisionOptions options)
    : allocation_(allocation),
      worker_(worker),
      rank_(allocation.rank(worker)),
      outbox_(outbox),
      clock_(clock),
      stop_(stop),
      options_(options) {
  std::array<int64_t, 2> from = allocation_.shipped(worker_);
  for (int i = 0; i < 2; ++i) {
    tailers_[i] =
        std::make_unique<FileTailer>(RankOutputPath(allocation_.run_dir(), rank_, i), from[i]);
  }
}

void Supervision::Run() {
  State s;
  do {
    s = Step();
  } while (s != State::kDone && s != State::kDetached);
}

bool Supervision::Ship(bool final) {
  if (!outbox_.HasRoom()) return false;
  const v1::LaunchCommand& launch = allocation_.launch();
  bool at_end = true;
  for (int i = 0; i < 2; ++i) {
    tailers_[i]->Poll(final, options_.max_lines_per_read, [&](std::string_view text, int64_t end) {
      Outgoing o;
      v1::LogLine& line = o.line.emplace();
      line.set_trial_id(launch.trial_id());
      line.set_allocation_id(launch.allocation_id());
      line.set_rank(rank_);
      line.set_stream(kStreams[i]);
      line.set_time_ms(clock_.NowMs());
      line.set_message(std::string(text));
      o.stream = i;
      o.end_offset = end;
      outbox_.Enqueue(std::move(o));
    });
    at_end &= tailers_[i]->at_end();
  }
  return at_end;
}

Supervision::State Supervision::Step() {
  Process& process = *allocation_.process(worker_);
  if (state_ == State::kRunning) {
    Ship(/*final=*/false);
    exit_ = process.Wait(options_.tick);
    if (exit_) {
      // The worker and its process group are gone: whatever they wrote is complete.
      state_ = State::kDraining;
      return state_;
    }
    if (stop_.detaching()) return state_ = State::kDetached;
    Allocation::Stopping stopping = allocation_.stopping();
    const absl::Time now = clock_.Now();
    const bool kill_now = stopping.killing && now > stopping.kill_deadline && !sigkilled_;
    bool term_now = false;
    if (stopping.killing && !kill_now && now >= next_term_) {
      term_now = next_term_ != absl::InfinitePast();
      next_term_ = now + options_.term_every;
    }
    if (term_now) process.SignalGroup(SIGTERM).IgnoreError();
    if (kill_now) {
      Logger("agent")->warn("allocation {} rank {}: still running after the grace period; SIGKILL",
                            allocation_.id(), rank_);
      process.SignalGroup(SIGKILL).IgnoreError();
      sigkilled_ = true;
    }
    return state_;
  }
  if (state_ == State::kDraining) {
    if (stop_.detaching()) return state_ = State::kDetached;
    if (!Ship(/*final=*/true)) {
      outbox_.AwaitRoom(options_.tick);
      return state_;
    }
    ReportExit();
    state_ = State::kDone;
  }
  return state_;
}

void Supervision::ReportExit() {
  const v1::LaunchCommand& launch = allocation_.launch();
  Allocation::Stopping stopping = allocation_.stopping();
  Outgoing o;
  v1::ReportExitRequest& report = o.exit.emplace();
  report.set_allocation_id(launch.allocation_id());
  report.set_rank(rank_);
  report.set_exit_code(exit_->status.exit_code);
  report.set_signal(exit_->status.signal);
  report.set_message(exit_->note);
  report.set_agent_stopping(stopping.agent_stopping);
  outbox_.AgentLine(launch, rank_,
                    absl::StrCat("worker exited: ", exit_->status.ToString(),
                                 exit_->note.empty() ? "" : absl::StrCat(" (", exit_->note, ")")));
  outbox_.Enqueue(std::move(o));
  allocation_.MarkExited(worker_);
  // One failed rank stops the others of its allocation on this agent.
  if (!exit_->status.ok() && !stopping.killing) {
    allocation_.Kill(absl::StrCat("rank ", rank_, " failed"), clock_.Now() + options_.kill_grace,
                     /*agent_stopping=*/false);
  }
}

}  // namespace det::agent
