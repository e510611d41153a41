// det-agent: three programs in one binary, chosen by the first argument.
//   det-agent --config AGENT_YAML ...         the agent daemon (daemon.h, agent_flags.h)
//   det-agent --worker-shim ...               a worker's shim (supervisor/shim.h)
//   det-agent --checkpoint-gc SPEC_FILE       a checkpoint GC task (checkpoint_gc/)
// The last two are how the agent runs its own code as a supervised process; their argument
// lists are theirs, not flags of the daemon.
#include <iostream>
#include <string>
#include <variant>
#include <vector>

#include "agent/agent_flags.h"
#include "agent/checkpoint_gc/checkpoint_gc.h"
#include "agent/daemon.h"
#include "agent/supervisor/shim.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == det::agent::kWorkerShimFlag) {
    return det::agent::RunWorkerShim({args.begin() + 1, args.end()});
  }
  if (!args.empty() && args[0] == det::agent::kCheckpointGcFlag) {
    return det::agent::RunCheckpointGc({args.begin() + 1, args.end()});
  }
  std::variant<det::agent::AgentFlags, int> flags =
      det::agent::ParseAgentFlags(args, std::cout, std::cerr);
  if (const int* exit_code = std::get_if<int>(&flags)) return *exit_code;
  return det::agent::RunAgentDaemon(std::get<det::agent::AgentFlags>(flags));
}
