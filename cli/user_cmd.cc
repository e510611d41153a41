// det user login|logout|whoami|create|list|change-password|link-with-agent-user|activate|
// deactivate
//
// Passwords come from the terminal (not echoed) or, for scripts, from DET_PASSWORD (the
// user's current password) and DET_NEW_PASSWORD (a password being set).
#include <fcntl.h>
#include <termios.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cli/auth_store.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "common/status/status_macros.h"

namespace det::cli {
namespace {

// Reads a line from the terminal with echo off.
absl::StatusOr<std::string> Prompt(const std::string& prompt, const char* env_hint) {
  int fd = ::open("/dev/tty", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("no terminal to ask for the password: set ", env_hint));
  }
  (void)!::write(fd, prompt.data(), prompt.size());
  termios old_mode;
  bool restore = ::tcgetattr(fd, &old_mode) == 0;
  if (restore) {
    termios quiet = old_mode;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    ::tcsetattr(fd, TCSAFLUSH, &quiet);
  }
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  if (restore) ::tcsetattr(fd, TCSAFLUSH, &old_mode);
  (void)!::write(fd, "\n", 1);
  ::close(fd);
  return line;
}

// `env` when set, else asked for on the terminal.
absl::StatusOr<std::string> Password(const char* env, const std::string& prompt) {
  const char* value = std::getenv(env);
  if (value != nullptr) return std::string(value);
  return Prompt(prompt, env);
}

// A new password: `env` when set, else asked for twice.
absl::StatusOr<std::string> NewPassword(const char* env, const std::string& whose) {
  const char* value = std::getenv(env);
  if (value != nullptr) return std::string(value);
  ASSIGN_OR_RETURN(std::string first, Prompt(absl::StrCat("New password for ", whose, ": "), env));
  ASSIGN_OR_RETURN(std::string again, Prompt("Repeat it: ", env));
  if (first != again) return absl::InvalidArgumentError("the two passwords differ");
  return first;
}

}  // namespace

absl::StatusOr<std::string> UserPassword(const std::string& prompt) {
  return Password("DET_PASSWORD", prompt);
}

namespace {

std::string When(int64_t ms) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S %Z", absl::FromUnixMillis(ms),
                          absl::LocalTimeZone());
}

absl::Status Login(CliContext& ctx, std::string username) {
  ASSIGN_OR_RETURN(std::string address, ParseMasterAddress(ctx.master));
  ASSIGN_OR_RETURN(std::string path, AuthFilePath());
  if (username.empty()) username = ctx.user;  // det -u alice user login
  if (username.empty()) {
    absl::StatusOr<std::optional<StoredSession>> stored = LoadSession(path, address);
    username = stored.ok() && *stored ? (*stored)->username : "admin";
  }
  ASSIGN_OR_RETURN(std::string password,
                   Password("DET_PASSWORD", absl::StrCat("Password for ", username, ": ")));
  ASSIGN_OR_RETURN(std::unique_ptr<ApiClient> api, ApiClient::Create(address));
  ASSIGN_OR_RETURN(v1::LoginResponse r, api->Login(username, password));
  // Kept under the address that answered (the gRPC port, also when given the web port).
  RETURN_IF_ERROR(SaveSession(path, api->address(), {r.user().username(), r.token()}));
  if (ctx.json) return WriteJson(r.user(), ctx.out);
  ctx.out << "Logged in as " << r.user().username() << " on " << api->address()
          << "; the session ends " << When(r.expires_ms()) << "\n";
  return absl::OkStatus();
}

absl::Status Logout(CliContext& ctx) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  absl::Status ended = api->Logout();
  const std::string address = api->address();
  if (!ended.ok() && ended.code() != absl::StatusCode::kUnauthenticated) return ended;
  ASSIGN_OR_RETURN(std::string path, AuthFilePath());
  if (ctx.user.empty()) {
    RETURN_IF_ERROR(RemoveSession(path, address));
    ctx.out << "Logged out of " << address << "\n";
  } else {
    RETURN_IF_ERROR(RemoveUserSession(path, address, ctx.user));
    ctx.out << "Logged " << ctx.user << " out of " << address << "\n";
  }
  return absl::OkStatus();
}

absl::Status WhoAmI(CliContext& ctx) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::WhoAmIResponse r, api->WhoAmI());
  if (ctx.json) return WriteJson(r, ctx.out);
  ctx.out << r.user().username() << (r.user().admin() ? " (admin)" : "") << " on "
          << api->address() << "; the session ends " << When(r.expires_ms()) << "\n";
  return absl::OkStatus();
}

absl::Status Create(CliContext& ctx, const std::string& username, bool admin) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  v1::CreateUserRequest req;
  req.set_username(username);
  req.set_admin(admin);
  ASSIGN_OR_RETURN(*req.mutable_password(), NewPassword("DET_NEW_PASSWORD", username));
  ASSIGN_OR_RETURN(v1::CreateUserResponse r, api->CreateUser(req));
  if (ctx.json) return WriteJson(r.user(), ctx.out);
  ctx.out << "Created user " << r.user().username() << (r.user().admin() ? " (admin)" : "")
          << "\n";
  return absl::OkStatus();
}

absl::Status List(CliContext& ctx) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::ListUsersResponse r, api->ListUsers());
  if (ctx.json) return WriteJson(r, ctx.out);
  // Determined's columns, with the agent user this det keeps instead of a display name.
  Table table({"Username", "Admin", "Active", "Agent User"});
  for (const auto& u : r.users()) {
    const v1::AgentUserGroup& link = u.agent_user_group();
    std::string agent_user;
    if (!link.agent_user().empty()) {
      agent_user = absl::StrCat(link.agent_user(), " (uid ", link.agent_uid(), "), group ",
                                link.agent_group(), " (gid ", link.agent_gid(), ")");
    }
    table.AddRow({u.username(), u.admin() ? "yes" : "no", u.active() ? "yes" : "no",
                  agent_user});
  }
  table.Render(ctx.out, ctx.width);
  return absl::OkStatus();
}

absl::Status LinkWithAgentUser(CliContext& ctx, const v1::LinkWithAgentUserRequest& req) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  RETURN_IF_ERROR(api->LinkWithAgentUser(req));
  const v1::AgentUserGroup& link = req.agent_user_group();
  ctx.out << "Linked " << req.username() << " with agent user " << link.agent_user() << " (uid "
          << link.agent_uid() << ") and group " << link.agent_group() << " (gid "
          << link.agent_gid() << "): agents run " << req.username()
          << "'s trials as that user\n";
  return absl::OkStatus();
}

absl::Status SetActive(CliContext& ctx, const std::string& username, bool active) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  v1::SetUserActiveRequest req;
  req.set_username(username);
  req.set_active(active);
  ASSIGN_OR_RETURN(v1::SetUserActiveResponse r, api->SetUserActive(req));
  if (active) {
    ctx.out << "Activated " << r.user().username() << ": they can log in again\n";
  } else {
    ctx.out << "Deactivated " << r.user().username()
            << ": they cannot log in and their sessions are refused\n";
  }
  return absl::OkStatus();
}

absl::Status Rename(CliContext& ctx, const std::string& from, const std::string& to) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  v1::RenameUserRequest req;
  req.set_username(from);
  req.set_new_username(to);
  ASSIGN_OR_RETURN(v1::RenameUserResponse r, api->RenameUser(req));
  if (ctx.json) return WriteJson(r.user(), ctx.out);
  ctx.out << "Renamed user " << from << " to " << r.user().username()
          << ": their sessions, experiments, models and templates carry over\n";
  return absl::OkStatus();
}

absl::Status ChangePassword(CliContext& ctx, const std::string& username) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::WhoAmIResponse me, api->WhoAmI());
  v1::ChangePasswordRequest req;
  req.set_username(username.empty() ? me.user().username() : username);
  if (req.username() == me.user().username()) {
    ASSIGN_OR_RETURN(*req.mutable_old_password(),
                     Password("DET_PASSWORD", "Current password: "));
  }
  ASSIGN_OR_RETURN(*req.mutable_new_password(), NewPassword("DET_NEW_PASSWORD", req.username()));
  RETURN_IF_ERROR(api->ChangePassword(req));
  ctx.out << "Changed the password of " << req.username() << "; their other sessions ended\n";
  return absl::OkStatus();
}

}  // namespace

void RegisterUserCommands(CLI::App& app, CliContext& ctx) {
  CLI::App* group = app.add_subcommand("user", "log in and manage users")->alias("u");
  group->require_subcommand(1);

  auto name = std::make_shared<std::string>();
  CLI::App* login = group->add_subcommand(
      "login", "log in (password from the terminal or DET_PASSWORD); the token is kept in "
               "~/.det/auth.json");
  login->add_option("USERNAME", *name, "default: the last user logged in to this master, else admin");
  login->add_flag("--json", ctx.json, "print the user as JSON");
  login->callback([&ctx, name] { ctx.action = [&ctx, name] { return Login(ctx, *name); }; });

  CLI::App* logout = group->add_subcommand("logout", "end the session with this master");
  logout->callback([&ctx] { ctx.action = [&ctx] { return Logout(ctx); }; });

  CLI::App* whoami = group->add_subcommand("whoami", "show who is logged in");
  whoami->add_flag("--json", ctx.json, "print machine-readable JSON");
  whoami->callback([&ctx] { ctx.action = [&ctx] { return WhoAmI(ctx); }; });

  auto admin = std::make_shared<bool>(false);
  CLI::App* create = group->add_subcommand(
      "create", "create a user (admins only; password from the terminal or DET_NEW_PASSWORD)");
  create->add_option("USERNAME", *name, "the new user's name")->required();
  create->add_flag("--admin", *admin, "make the user an admin");
  create->add_flag("--json", ctx.json, "print the user as JSON");
  create->callback(
      [&ctx, name, admin] { ctx.action = [&ctx, name, admin] { return Create(ctx, *name, *admin); }; });

  CLI::App* list = group->add_subcommand("list", "list users");
  list->add_flag("--json", ctx.json, "print machine-readable JSON");
  list->callback([&ctx] { ctx.action = [&ctx] { return List(ctx); }; });

  auto link = std::make_shared<v1::LinkWithAgentUserRequest>();
  CLI::App* link_cmd = group->add_subcommand(
      "link-with-agent-user",
      "run a user's trials on the agents as an OS user and group (admins only; never root)");
  link_cmd->add_option_function<std::string>(
              "USERNAME", [link](const std::string& v) { link->set_username(v); },
              "the det user")
      ->required();
  v1::AgentUserGroup* g = link->mutable_agent_user_group();
  link_cmd->add_option_function<int64_t>(
              "--agent-uid", [g](int64_t v) { g->set_agent_uid(v); }, "the OS user's uid (not 0)")
      ->required();
  link_cmd->add_option_function<int64_t>(
              "--agent-gid", [g](int64_t v) { g->set_agent_gid(v); }, "the OS group's gid (not 0)")
      ->required();
  link_cmd->add_option_function<std::string>(
              "--agent-user", [g](const std::string& v) { g->set_agent_user(v); },
              "the OS user's name")
      ->required();
  link_cmd->add_option_function<std::string>(
              "--agent-group", [g](const std::string& v) { g->set_agent_group(v); },
              "the OS group's name")
      ->required();
  link_cmd->callback(
      [&ctx, link] { ctx.action = [&ctx, link] { return LinkWithAgentUser(ctx, *link); }; });

  for (bool active : {true, false}) {
    CLI::App* cmd = group->add_subcommand(
        active ? "activate" : "deactivate",
        active ? "let a deactivated user log in again (admins only)"
               : "stop a user from logging in and refuse their sessions (admins only)");
    cmd->add_option("USERNAME", *name, "the user")->required();
    cmd->callback([&ctx, name, active] {
      ctx.action = [&ctx, name, active] { return SetActive(ctx, *name, active); };
    });
  }

  auto new_name = std::make_shared<std::string>();
  CLI::App* rename = group->add_subcommand(
      "rename", "change a user's name (admins only); what they own follows the new name");
  rename->add_option("USERNAME", *name, "the user's current name")->required();
  rename->add_option("NEW_USERNAME", *new_name, "the new name")->required();
  rename->add_flag("--json", ctx.json, "print the user as JSON");
  rename->callback([&ctx, name, new_name] {
    ctx.action = [&ctx, name, new_name] { return Rename(ctx, *name, *new_name); };
  });

  CLI::App* change = group->add_subcommand(
      "change-password",
      "change your password (DET_PASSWORD, DET_NEW_PASSWORD), or as an admin another user's");
  change->add_option("USERNAME", *name, "default: yourself");
  change->callback(
      [&ctx, name] { ctx.action = [&ctx, name] { return ChangePassword(ctx, *name); }; });
}

}  // namespace det::cli
