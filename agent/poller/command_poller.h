// The agent's long poll for the master's commands (launch an allocation, kill one).
#ifndef DET_AGENT_POLLER_COMMAND_POLLER_H_
#define DET_AGENT_POLLER_COMMAND_POLLER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/master_client/master_client.h"
#include "agent/session/session.h"
#include "agent/stop_signal.h"
#include "proto/agent.pb.h"

namespace det::agent {

// What the agent does with the commands. Called on the poller's thread.
class CommandHandler {
 public:
  virtual ~CommandHandler() = default;
  virtual void Launch(const v1::LaunchCommand& launch) = 0;
  // `grace` zero: the agent's kill_grace.
  virtual void Kill(const std::string& allocation_id, const std::string& reason,
                    absl::Duration grace) = 0;
};

struct PollerOptions {
  // How long the master may hold one poll.
  absl::Duration poll_wait = absl::Seconds(20);
  // Between polls while there is no session.
  absl::Duration no_session_wait = absl::Milliseconds(100);
  // After a failed poll; doubles up to max_backoff.
  absl::Duration first_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(5);
};

// Not thread-safe: one thread runs it. Everything passed must outlive it.
class CommandPoller {
 public:
  CommandPoller(std::string agent_id, MasterClient& client, Session& session,
                CommandHandler& handler, StopSignal& stop, PollerOptions options = {});
  // One poll on `session`, its commands handed over in order. NotFound: the session is
  // dropped.
  absl::Status PollOnce(const std::string& session);
  // Polls until Stop() (waiting for a session, backing off after failures).
  void Run();

 private:
  const std::string agent_id_;
  MasterClient& client_;
  Session& session_;
  CommandHandler& handler_;
  StopSignal& stop_;
  const PollerOptions options_;
};

}  // namespace det::agent

#endif  // DET_AGENT_POLLER_COMMAND_POLLER_H_
