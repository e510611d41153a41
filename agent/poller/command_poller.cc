#include "agent/poller/command_poller.h"

#include <algorithm>
#include <utility>

namespace det::agent {

CommandPoller::CommandPoller(std::string agent_id, MasterClient& client, Session& session,
                             CommandHandler& handler, StopSignal& stop, PollerOptions options)
    : agent_id_(std::move(agent_id)),
      client_(client),
      session_(session),
      handler_(handler),
      stop_(stop),
      options_(options) {}

absl::Status CommandPoller::PollOnce(const std::string& session) {
  v1::PollCommandsRequest req;
  req.set_agent_id(agent_id_);
  req.set_session_id(session);
  req.set_wait_ms(static_cast<int32_t>(absl::ToInt64Milliseconds(options_.poll_wait)));
  auto resp = client_.PollCommands(req);
  if (!resp.ok()) {
    if (absl::IsNotFound(resp.status())) session_.Lost(session);
    return resp.status();
  }
  for (const auto& cmd : resp->commands()) {
    if (cmd.has_launch()) handler_.Launch(cmd.launch());
    if (cmd.has_kill()) {
      handler_.Kill(cmd.kill().allocation_id(), cmd.kill().reason(),
                    absl::Milliseconds(cmd.kill().grace_ms()));
    }
  }
  return absl::OkStatus();
}

void CommandPoller::Run() {
  absl::Duration backoff = options_.first_backoff;
  while (!stop_.stopping()) {
    std::string session = session_.id();
    if (session.empty()) {
      if (stop_.SleepOrStop(options_.no_session_wait)) return;
      continue;
    }
    if (!PollOnce(session).ok()) {
      if (stop_.SleepOrStop(backoff)) return;
      backoff = std::min(backoff * 2, options_.max_backoff);
      continue;
    }
    backoff = options_.first_backoff;
  }
}

}  // namespace det::agent
