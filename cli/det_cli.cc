#include "cli/det_cli.h"

#include <CLI/CLI.hpp>

#include "absl/status/status.h"
#include "cli/cli_context.h"
#include "cli/command_words.h"
#include "cli/commands.h"

namespace det::cli {

int RunDet(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CliContext ctx(out, err);
  CLI::App app("det: command-line client of a det cluster", "det");
  app.fallthrough();  // -m/--master also after the subcommand
  app.require_subcommand(1);
  app.add_option("-m,--master", ctx.master,
                 "master address: http://host:port, host:port or host (port 8080)")
      ->envname("DET_MASTER")
      ->capture_default_str();

  RegisterExperimentCommands(app, ctx);
  RegisterTrialCommands(app, ctx);
  RegisterAgentCommands(app, ctx);
  RegisterSlotCommands(app, ctx);
  RegisterMasterCommands(app, ctx);
  RegisterDeployCommands(app, ctx);
  RegisterUserCommands(app, ctx);
  RegisterTemplateCommands(app, ctx);
  RegisterModelCommands(app, ctx);
  RegisterSchedulingCommands(app, ctx);
  RegisterCheckpointCommands(app, ctx);

  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    // A mistyped or missing command word: name it and the commands there are.
    const bool help = dynamic_cast<const CLI::CallForHelp*>(&e) != nullptr ||
                      dynamic_cast<const CLI::CallForAllHelp*>(&e) != nullptr ||
                      dynamic_cast<const CLI::CallForVersion*>(&e) != nullptr;
    if (!help) {
      if (std::optional<std::string> why = DiagnoseCommandWords(app, args)) {
        err << "det: " << *why << '\n';
        return e.get_exit_code();
      }
    }
    return app.exit(e, out, err);
  }
  if (!ctx.action) return 0;
  absl::Status status = ctx.action();
  out.flush();
  if (!status.ok()) {
    err << "det: " << status.message() << '\n';
    return 1;
  }
  return 0;
}

}  // namespace det::cli
