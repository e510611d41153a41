// det-agent's command line: `det-agent --config AGENT_YAML [--system-metrics-period D]
// [--task-user NAME|UID:GID]`.
#ifndef DET_AGENT_AGENT_FLAGS_H_
#define DET_AGENT_AGENT_FLAGS_H_

#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"

namespace det::agent {

struct AgentFlags {
  // --config: agent.yaml. Required.
  std::string config_path;
  // --system-metrics-period: overrides agent.yaml's system_metrics_period (>= 0).
  std::optional<absl::Duration> system_metrics_period;
  // --task-user: NAME or UID:GID; empty: none.
  std::string task_user;
};

// Parses `args` (the command line without the program name). Each flag may be given as
// `--flag VALUE` or `--flag=VALUE`, the last one winning. Returns the flags, or the exit
// status once it has printed the help (0, to `out`) or what is wrong and the usage (2, to
// `err`, each error naming its flag).
std::variant<AgentFlags, int> ParseAgentFlags(const std::vector<std::string>& args,
                                              std::ostream& out, std::ostream& err);

// --task-user's value: "NAME" (a passwd entry: its uid and primary group, and the name) or
// "UID:GID" (no name). Errors name --task-user and say what is wrong.
absl::StatusOr<std::pair<RunAs, std::string>> ParseTaskUser(const std::string& text);

}  // namespace det::agent

#endif  // DET_AGENT_AGENT_FLAGS_H_
