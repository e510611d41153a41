#include "cli/auth_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace det::cli {
namespace {

using json = nlohmann::json;

std::string Dir(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// The whole file as JSON; an empty object when it does not exist.
absl::StatusOr<json> ReadAll(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return json::object();
    return absl::PermissionDeniedError(
        absl::StrCat("cannot read '", path, "': ", std::strerror(errno)));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "'%s' holds session tokens but other users may read it (mode %04o); run `chmod 600 %s`",
        path, st.st_mode & 07777, path));
  }
  std::ifstream in(path);
  if (!in) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot read '", path, "': ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::DataLossError(absl::StrCat(
        "'", path, "' is not a det auth file (JSON object); remove it and log in again"));
  }
  return j;
}

absl::Status WriteAll(const std::string& path, const json& j) {
  const std::string dir = Dir(path);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create directory '", dir, "': ", std::strerror(errno)));
  }
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write '", tmp, "': ", std::strerror(errno)));
  }
  const std::string text = j.dump(2) + "\n";
  bool ok = ::fchmod(fd, 0600) == 0;
  for (size_t done = 0; ok && done < text.size();) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  ok = ::fsync(fd) == 0 && ok;
  ok = ::close(fd) == 0 && ok;
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return absl::PermissionDeniedError(absl::StrCat("cannot write '", path, "': ", why));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> AuthFilePath() {
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') {
    return absl::InvalidArgumentError(
        "HOME is not set: cannot find ~/.det/auth.json (set DET_USER_TOKEN instead)");
  }
  return absl::StrCat(home, "/.det/auth.json");
}

absl::StatusOr<std::optional<StoredSession>> LoadSession(const std::string& path,
                                                         const std::string& address) {
  absl::StatusOr<json> all = ReadAll(path);
  if (!all.ok()) return all.status();
  const json& masters = (*all)["masters"];
  if (!masters.is_object() || !masters.contains(address)) return std::nullopt;
  const json& entry = masters[address];
  if (!entry.is_object() || !entry.value("token", json()).is_string()) return std::nullopt;
  StoredSession s;
  s.username = entry.value("username", "");
  s.token = entry.value("token", "");
  return s;
}

// The entry of `address` in `j`, made an object when it is not one.
json& Entry(json& j, const std::string& address) {
  if (!j["masters"].is_object()) j["masters"] = json::object();
  json& entry = j["masters"][address];
  if (!entry.is_object()) entry = json::object();
  return entry;
}

// The file's JSON to be rewritten: what it holds, or a fresh object when it is not a det
// auth file.
absl::StatusOr<json> ReadForWrite(const std::string& path) {
  absl::StatusOr<json> all = ReadAll(path);
  if (!all.ok() && all.status().code() != absl::StatusCode::kDataLoss) return all.status();
  return all.ok() ? *all : json::object();
}

void SetUserToken(json& entry, const StoredSession& session) {
  if (!entry["users"].is_object()) entry["users"] = json::object();
  entry["users"][session.username] = session.token;
}

absl::Status SaveSession(const std::string& path, const std::string& address,
                         const StoredSession& session) {
  absl::StatusOr<json> j = ReadForWrite(path);
  if (!j.ok()) return j.status();
  json& entry = Entry(*j, address);
  entry["username"] = session.username;
  entry["token"] = session.token;
  SetUserToken(entry, session);
  return WriteAll(path, *j);
}

absl::Status SaveUserSession(const std::string& path, const std::string& address,
                             const StoredSession& session) {
  absl::StatusOr<json> j = ReadForWrite(path);
  if (!j.ok()) return j.status();
  json& entry = Entry(*j, address);
  SetUserToken(entry, session);
  if (entry.value("username", "") == session.username) entry["token"] = session.token;
  return WriteAll(path, *j);
}

absl::StatusOr<std::optional<std::string>> LoadUserToken(const std::string& path,
                                                         const std::string& address,
                                                         const std::string& username) {
  absl::StatusOr<json> all = ReadAll(path);
  if (!all.ok()) return all.status();
  const json& masters = (*all)["masters"];
  if (!masters.is_object() || !masters.contains(address)) return std::nullopt;
  const json& entry = masters[address];
  if (!entry.is_object()) return std::nullopt;
  if (entry.value("username", "") == username && entry.value("token", json()).is_string()) {
    return entry["token"].get<std::string>();
  }
  const json users = entry.value("users", json());
  if (users.is_object() && users.contains(username) && users[username].is_string()) {
    return users[username].get<std::string>();
  }
  return std::nullopt;
}

absl::Status RemoveSession(const std::string& path, const std::string& address) {
  absl::StatusOr<json> all = ReadAll(path);
  if (!all.ok()) return all.status();
  if (!(*all)["masters"].is_object() || !(*all)["masters"].contains(address)) {
    return absl::OkStatus();
  }
  (*all)["masters"].erase(address);
  return WriteAll(path, *all);
}

absl::Status RemoveUserSession(const std::string& path, const std::string& address,
                               const std::string& username) {
  absl::StatusOr<json> all = ReadAll(path);
  if (!all.ok()) return all.status();
  if (!(*all)["masters"].is_object() || !(*all)["masters"].contains(address)) {
    return absl::OkStatus();
  }
  json& entry = (*all)["masters"][address];
  if (!entry.is_object()) return absl::OkStatus();
  if (entry["users"].is_object()) entry["users"].erase(username);
  if (entry.value("username", "") == username) {
    entry.erase("username");
    entry.erase("token");
  }
  return WriteAll(path, *all);
}

absl::StatusOr<std::string> ResolveToken(const std::string& address) {
  const char* env = std::getenv("DET_USER_TOKEN");
  if (env != nullptr && *env != '\0') return std::string(env);
  absl::StatusOr<std::string> path = AuthFilePath();
  if (!path.ok()) return std::string();  // No HOME: not logged in.
  absl::StatusOr<std::optional<StoredSession>> s = LoadSession(*path, address);
  if (!s.ok()) return s.status();
  return *s ? (*s)->token : std::string();
}

}  // namespace det::cli
