// State shared by the det CLI's commands during one run: where to write, which master
// to talk to, and the seams for time.
#ifndef DET_CLI_CLI_CONTEXT_H_
#define DET_CLI_CLI_CONTEXT_H_

#include <unistd.h>

#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <vector>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/api_client.h"
#include "cli/auth_store.h"

namespace det::cli {

// One per RunDet() call; single-threaded. Commands write results to `out` and
// diagnostics to `err`; neither is owned.
struct CliContext {
  CliContext(std::ostream& out_stream, std::ostream& err_stream)
      : out(out_stream), err(err_stream) {}

  // The client for `master`, created on first use and kept, sending the session token
  // of that master (DET_USER_TOKEN or ~/.det/auth.json), or with -u USER that user's
  // (kept in ~/.det/auth.json, else from `login_user`). Fails on a bad address, an
  // unreadable auth file or a failed login.
  absl::StatusOr<ApiClient*> Api() {
    if (api_ == nullptr) {
      absl::StatusOr<std::string> address = ParseMasterAddress(master);
      if (!address.ok()) return address.status();
      ApiClientOptions options;
      absl::StatusOr<std::string> token = Token(*address);
      if (!token.ok()) return token.status();
      options.token = *token;
      absl::StatusOr<std::unique_ptr<ApiClient>> client = ApiClient::Create(master, options);
      if (!client.ok()) return client.status();
      api_ = *std::move(client);
    }
    return api_.get();
  }

  std::ostream& out;
  std::ostream& err;
  // -m/--master or $DET_MASTER.
  std::string master = "localhost:8080";
  // -u/--user or $DET_USER: act as this user; empty: the active session's.
  std::string user;
  // Logs `user` in to `address` (host:port) and returns the session token; called by
  // Api() when no token is kept for `user`. Unset: such a call fails.
  std::function<absl::StatusOr<std::string>(const std::string& address)> login_user;
  // --json of the command being run.
  bool json = false;
  // Tables wider than this are wrapped (Table::Render); 0: never. Set by RunDet from
  // $COLUMNS, else the terminal's width when `out` is standard output on a terminal.
  size_t width = 0;
  // The command chosen on the command line; set while parsing, run after.
  std::function<absl::Status()> action;
  // Time seams (polling loops, deadlines). Default: the real clock.
  std::function<absl::Time()> now = [] { return absl::Now(); };
  std::function<void(absl::Duration)> sleep = [](absl::Duration d) { absl::SleepFor(d); };
  // Where a confirmation (det e delete without --yes) is read from, and whether it is a
  // terminal: a question is asked only there. Default: stdin.
  std::istream* in = &std::cin;
  std::function<bool()> interactive = [] { return isatty(0) == 1; };

 private:
  // The session kept for `address`, else for the port below it (a master given by its
  // web port: sessions are kept under the gRPC address).
  absl::StatusOr<std::string> Token(const std::string& address) {
    std::vector<std::string> addresses = {address};
    if (std::optional<std::string> below = PortBelow(address)) addresses.push_back(*below);
    if (user.empty()) {
      for (const std::string& a : addresses) {
        absl::StatusOr<std::string> token = ResolveToken(a);
        if (!token.ok() || !token->empty()) return token;
      }
      return std::string();
    }
    absl::StatusOr<std::string> path = AuthFilePath();
    for (const std::string& a : addresses) {
      if (!path.ok()) break;
      absl::StatusOr<std::optional<std::string>> kept = LoadUserToken(*path, a, user);
      if (!kept.ok()) return kept.status();
      if (kept->has_value()) return **kept;
    }
    if (!login_user) {
      return absl::UnauthenticatedError(
          absl::StrCat("not logged in as '", user, "': run `det -u ", user, " user login`"));
    }
    return login_user(address);
  }

  std::unique_ptr<ApiClient> api_;
};

}  // namespace det::cli

#endif  // DET_CLI_CLI_CONTEXT_H_
