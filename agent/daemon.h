// det-agent's daemon program: agent.yaml -> slots, task user, worker interpreter -> Agent,
// run until SIGTERM/SIGINT (stop the workers) or SIGUSR1 (leave them running).
#ifndef DET_AGENT_DAEMON_H_
#define DET_AGENT_DAEMON_H_

#include "agent/agent_flags.h"

namespace det::agent {

// The process's exit status: 0 after a signal; 2 for bad startup configuration (printed to
// stderr, naming the flag or key); 3 when the master refuses the agent.
int RunAgentDaemon(const AgentFlags& flags);

}  // namespace det::agent

#endif  // DET_AGENT_DAEMON_H_
