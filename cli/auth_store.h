// The det CLI's session tokens: one per master address in $HOME/.det/auth.json, a file
// only its owner may read (mode 0600, in a 0700 directory):
//   {"masters": {"127.0.0.1:8080": {"username": "admin", "token": "...",
//                                    "users": {"admin": "...", "alice": "..."}}}}
// "username"/"token" are the master's active session (det user login); "users" keeps the
// token of every user logged in there, for det -u USER. DET_USER_TOKEN in the environment
// overrides the active session (not -u).
#ifndef DET_CLI_AUTH_STORE_H_
#define DET_CLI_AUTH_STORE_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace det::cli {

struct StoredSession {
  std::string username;
  std::string token;
};

// $HOME/.det/auth.json; InvalidArgument when HOME is not set.
absl::StatusOr<std::string> AuthFilePath();

// The session kept in `path` for `address` (host:port); nullopt when the file or the
// entry does not exist. Fails when the file cannot be parsed or others may read it.
absl::StatusOr<std::optional<StoredSession>> LoadSession(const std::string& path,
                                                         const std::string& address);
// Makes `session` the active one of `address` (and keeps its token among the users'),
// creating the directory (0700) and the file (0600); written to a temporary file and
// renamed, so readers see old or new.
absl::Status SaveSession(const std::string& path, const std::string& address,
                         const StoredSession& session);
// Keeps `session`'s token for det -u, leaving the active session as it is (its token is
// replaced when it is the same user's).
absl::Status SaveUserSession(const std::string& path, const std::string& address,
                             const StoredSession& session);
// The token kept for `username` on `address`; nullopt when none.
absl::StatusOr<std::optional<std::string>> LoadUserToken(const std::string& path,
                                                         const std::string& address,
                                                         const std::string& username);
// Removes the entry of `address` (no error when absent).
absl::Status RemoveSession(const std::string& path, const std::string& address);
// Forgets `username`'s token on `address` (and the active session when it is theirs).
absl::Status RemoveUserSession(const std::string& path, const std::string& address,
                               const std::string& username);

// The token to send to `address`: DET_USER_TOKEN when set and not empty, else the
// stored one, else "".
absl::StatusOr<std::string> ResolveToken(const std::string& address);

}  // namespace det::cli

#endif  // DET_CLI_AUTH_STORE_H_
