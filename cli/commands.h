// The det CLI's command groups. Each Register* function adds its group of subcommands to
// `app`; a subcommand's callback only stores its work in `ctx.action`, which RunDet()
// runs once parsing succeeded. REQUIRES: `ctx` outlives `app`'s use.
#ifndef DET_CLI_COMMANDS_H_
#define DET_CLI_COMMANDS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/api_client.h"
#include "cli/cli_context.h"
#include "proto/types.pb.h"

namespace CLI {
class App;
}  // namespace CLI

namespace det::cli {

void RegisterExperimentCommands(CLI::App& app, CliContext& ctx);
void RegisterTrialCommands(CLI::App& app, CliContext& ctx);
void RegisterAgentCommands(CLI::App& app, CliContext& ctx);
void RegisterSlotCommands(CLI::App& app, CliContext& ctx);
void RegisterMasterCommands(CLI::App& app, CliContext& ctx);
void RegisterDeployCommands(CLI::App& app, CliContext& ctx);
// det user login|logout|whoami|create|list|change-password.
void RegisterUserCommands(CLI::App& app, CliContext& ctx);
void RegisterTemplateCommands(CLI::App& app, CliContext& ctx);
// det model|m create|list|describe|register-version|list-versions|delete|delete-version
// (model_cmd.cc).
void RegisterModelCommands(CLI::App& app, CliContext& ctx);
// det job, det task, det resource-pool: the scheduler's view.
void RegisterSchedulingCommands(CLI::App& app, CliContext& ctx);
// det checkpoint list|ls|describe (checkpoint_cmd.cc).
void RegisterCheckpointCommands(CLI::App& app, CliContext& ctx);
// det version (version_cmd.cc); PrintVersion is also det --version.
void RegisterVersionCommand(CLI::App& app, CliContext& ctx);
absl::Status PrintVersion(CliContext& ctx);

// A user's password: DET_PASSWORD when set, else asked for on the terminal with `prompt`
// (user_cmd.cc).
absl::StatusOr<std::string> UserPassword(const std::string& prompt);

// det experiment archive|unarchive|label and det experiment set description|name|priority
// (experiment_edit_cmd.cc): `group` is det experiment, `set` its set command.
void RegisterExperimentEditCommands(CLI::App& group, CLI::App& set, CliContext& ctx);

// OK when the user confirms `question` (e.g. "Delete experiment 3 ...?") on the terminal
// with y or yes; FailedPrecondition saying to pass `flag` when stdin is not a terminal,
// Cancelled "not confirmed" on any other answer. The question goes to ctx.err.
absl::Status Confirm(CliContext& ctx, const std::string& question, const std::string& flag);

struct CheckpointsOptions {
  int64_t id = 0;
  // > 0: only the best N by the searcher's metric.
  int best = 0;
  bool diagnostics = false;
};
// An experiment's checkpoints as a table (or JSON): det e lc, det checkpoint list.
absl::Status ListExperimentCheckpoints(CliContext& ctx, const CheckpointsOptions& options);

// Copies checkpoint `uuid`'s files into `output_dir` (default: checkpoints/UUID) and says
// so (only the directory when `quiet`; JSON with ctx.json). FailedPrecondition for a
// deleted checkpoint (checkpoint_cmd.cc).
absl::Status DownloadCheckpoint(CliContext& ctx, const std::string& uuid,
                                const std::string& output_dir, bool quiet);

// Where a reader of one trial's logs stands.
struct TrialLogCursor {
  int64_t trial_id = 0;
  std::optional<int32_t> rank;
  int64_t after_id = 0;
  // The master said every line of the ended trial has been returned.
  bool done = false;
};

// Fetches one page of the trial's logs after the cursor (waiting up to `wait_ms` for the
// first line when > 0), passes each line to `emit` and advances the cursor. Returns the
// number of lines.
absl::StatusOr<int> FetchTrialLogs(ApiClient& api, TrialLogCursor& cursor, int wait_ms,
                                   const std::function<void(const v1::LogLine&)>& emit);

}  // namespace det::cli

#endif  // DET_CLI_COMMANDS_H_
