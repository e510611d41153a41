#include "agent/agent_flags.h"

#include <pwd.h>

#include <CLI/CLI.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace det::agent {
namespace {

constexpr char kUsage[] =
    "usage: det-agent --config AGENT_YAML [--system-metrics-period DURATION]\n"
    "                 [--task-user NAME|UID:GID]\n"
    "  --task-user              the unprivileged OS user every worker runs as (its work dir\n"
    "                           is its own, mode 0700); needs an agent running as root\n"
    "  --system-metrics-period  how often host metrics are sampled and sent (overrides\n"
    "                           agent.yaml's system_metrics_period, default 5s; 0 off)\n"
    "Signals: SIGTERM/SIGINT stop the workers and exit; SIGUSR1 exits leaving the workers\n"
    "running for the next det-agent on the same work_dir (upgrades).\n";

}  // namespace

std::variant<AgentFlags, int> ParseAgentFlags(const std::vector<std::string>& args,
                                              std::ostream& out, std::ostream& err) {
  AgentFlags flags;
  std::string period;
  CLI::App app("det-agent: runs the workers of the allocations the master hands it", "det-agent");
  app.footer(
      "Signals: SIGTERM/SIGINT stop the workers and exit; SIGUSR1 exits leaving the workers\n"
      "running for the next det-agent on the same work_dir (upgrades).");
  app.add_option("--config", flags.config_path, "the agent's configuration (agent.yaml)")
      ->type_name("AGENT_YAML")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--system-metrics-period", period,
                 "how often host metrics are sampled and sent (overrides agent.yaml's "
                 "system_metrics_period, default 5s; 0 off)")
      ->type_name("DURATION")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--task-user", flags.task_user,
                 "the unprivileged OS user every worker runs as (its work dir is its own, "
                 "mode 0700); needs an agent running as root")
      ->type_name("NAME|UID:GID")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::ParseError& e) {
    err << "det-agent: " << e.what() << "\n" << kUsage;
    return 2;
  }
  if (!period.empty() || app.count("--system-metrics-period") > 0) {
    absl::Duration d;
    if (!absl::ParseDuration(period, &d) || d < absl::ZeroDuration()) {
      err << "det-agent: --system-metrics-period: expected a duration such as 5s, got \"" << period
          << "\"\n";
      return 2;
    }
    flags.system_metrics_period = d;
  }
  if (flags.config_path.empty()) {
    err << "det-agent: --config AGENT_YAML is required\n" << kUsage;
    return 2;
  }
  return flags;
}

absl::StatusOr<std::pair<RunAs, std::string>> ParseTaskUser(const std::string& text) {
  uint32_t uid = 0, gid = 0;
  size_t colon = text.find(':');
  if (colon != std::string::npos) {
    if (!absl::SimpleAtoi(text.substr(0, colon), &uid) ||
        !absl::SimpleAtoi(text.substr(colon + 1), &gid)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--task-user: expected NAME or UID:GID, got \"", text, "\""));
    }
    return std::pair{RunAs{uid, gid}, std::string()};
  }
  struct passwd entry;
  struct passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (getpwnam_r(text.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
      found == nullptr) {
    return absl::NotFoundError(absl::StrCat("--task-user: no user \"", text, "\""));
  }
  return std::pair{RunAs{found->pw_uid, found->pw_gid}, text};
}

}  // namespace det::agent
