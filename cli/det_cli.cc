#include "cli/det_cli.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <iostream>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/auth_store.h"
#include "cli/cli_context.h"
#include "cli/command_words.h"
#include "cli/commands.h"

namespace det::cli {

namespace {

// $COLUMNS when it is a number, else the terminal's width when `out` is standard output
// and that is a terminal; 0 (no limit: pipes and files get whole lines) otherwise.
size_t OutputWidth(const std::ostream& out) {
  if (const char* columns = std::getenv("COLUMNS"); columns != nullptr) {
    int n = 0;
    if (absl::SimpleAtoi(columns, &n) && n > 0) return static_cast<size_t>(n);
  }
  winsize size{};
  if (&out == &std::cout && ::isatty(1) == 1 && ::ioctl(1, TIOCGWINSZ, &size) == 0) {
    return size.ws_col;
  }
  return 0;
}

}  // namespace

int RunDet(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CliContext ctx(out, err);
  ctx.width = OutputWidth(out);
  CLI::App app("det: command-line client of a det cluster", "det");
  app.fallthrough();  // -m/--master also after the subcommand
  // One command, or none with --version (checked after parsing).
  app.require_subcommand(0, 1);
  app.add_option("-m,--master", ctx.master,
                 "master address: http://host:port, host:port or host (port 8080)")
      ->envname("DET_MASTER")
      ->capture_default_str();
  app.add_option("-u,--user", ctx.user,
                 "act as this user: their kept session, else log in (password from the "
                 "terminal or DET_PASSWORD) and keep it")
      ->envname("DET_USER");
  bool version = false;
  app.add_flag("-v,--version", version, "print the CLI's and the master's versions");
  ctx.login_user = [&ctx](const std::string& address) -> absl::StatusOr<std::string> {
    absl::StatusOr<std::string> password =
        UserPassword(absl::StrCat("Password for ", ctx.user, ": "));
    if (!password.ok()) return password.status();
    absl::StatusOr<std::unique_ptr<ApiClient>> api = ApiClient::Create(address);
    if (!api.ok()) return api.status();
    absl::StatusOr<v1::LoginResponse> login = (*api)->Login(ctx.user, *password);
    if (!login.ok()) return login.status();
    absl::StatusOr<std::string> path = AuthFilePath();
    // Without HOME the session lasts this command only.
    if (path.ok()) {
      absl::Status kept =
          SaveUserSession(*path, (*api)->address(), {ctx.user, login->token()});
      if (!kept.ok()) return kept;
    }
    return login->token();
  };

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
  RegisterVersionCommand(app, ctx);

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
  if (version && !ctx.action) ctx.action = [&ctx] { return PrintVersion(ctx); };
  if (app.get_subcommands().empty() && !version) {
    // CLI11's own "A subcommand is required" names nothing; ours names the commands.
    app.require_subcommand(1);
    std::optional<std::string> why = DiagnoseCommandWords(app, {});
    err << "det: " << why.value_or("a command is required (add --help)") << '\n';
    return static_cast<int>(CLI::ExitCodes::RequiredError);
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
