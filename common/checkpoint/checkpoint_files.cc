#include "common/checkpoint/checkpoint_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status/status_macros.h"

namespace det {

absl::Status CheckReportedCheckpoint(const v1::Checkpoint& c, const std::string& directory) {
  const std::string& uuid = c.uuid();
  if (uuid.empty() || uuid == "." || uuid == ".." || absl::StrContains(uuid, "/")) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint.uuid: '", uuid, "' is not a plain name"));
  }
  if (directory.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", uuid, ": the experiment has no checkpoint_storage"));
  }
  const std::string expected = absl::StrCat(directory, "/", uuid);
  if (c.storage_path() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint.storage_path: '", c.storage_path(),
                                                   "' is not this experiment's checkpoint directory '",
                                                   expected, "'"));
  }
  return absl::OkStatus();
}

absl::Status CheckCheckpointPath(const v1::Checkpoint& c) {
  const std::string& path = c.storage_path();
  if (c.uuid().empty() || path.empty() || path[0] != '/' || !absl::EndsWith(path, "/" + c.uuid()) ||
      absl::StrContains(path, "/../")) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", c.uuid(),
                                                   ": refusing to delete storage path '", path,
                                                   "' (not an absolute path ending in the uuid)"));
  }
  return absl::OkStatus();
}

namespace {

// The components of `path` ("" and a trailing "/" dropped); nullopt when one is "." or "..".
std::optional<std::vector<std::string>> Components(const std::string& path) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == "." || part == "..") return std::nullopt;
    out.emplace_back(part);
  }
  return out;
}

// Whether `path`'s components begin with all of `root`'s; `rest` gets the others.
bool Beneath(const std::vector<std::string>& path, const std::vector<std::string>& root,
             std::vector<std::string>* rest) {
  if (path.size() < root.size() || !std::equal(root.begin(), root.end(), path.begin())) {
    return false;
  }
  if (rest != nullptr) rest->assign(path.begin() + root.size(), path.end());
  return true;
}

// An open file descriptor, closed when it goes.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      if (fd_ >= 0) close(fd_);
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::Status RemoveError(const v1::Checkpoint& c, const std::string& path, int err) {
  return absl::PermissionDeniedError(
      absl::StrCat("checkpoint ", c.uuid(), ": cannot delete '", path, "': ", strerror(err)));
}

// Removes entry `name` of the directory `dir` (at `path`), a directory tree removed through
// descriptors opened with O_NOFOLLOW; a link is unlinked, never followed.
absl::Status RemoveBeneath(const v1::Checkpoint& c, int dir, const std::string& path,
                           const std::string& name, int depth) {
  const std::string here = absl::StrCat(path, "/", name);
  if (depth > 4096) return RemoveError(c, here, ELOOP);
  struct stat st;
  if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? absl::OkStatus() : RemoveError(c, here, errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (unlinkat(dir, name.c_str(), 0) != 0 && errno != ENOENT) return RemoveError(c, here, errno);
    return absl::OkStatus();
  }
  int fd = openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return RemoveError(c, here, errno);
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    const int err = errno;
    close(fd);
    return RemoveError(c, here, err);
  }
  std::vector<std::string> children;
  while (dirent* e = readdir(d)) {
    const std::string child = e->d_name;
    if (child != "." && child != "..") children.push_back(child);
  }
  absl::Status st_children;
  for (const std::string& child : children) {
    st_children = RemoveBeneath(c, dirfd(d), here, child, depth + 1);
    if (!st_children.ok()) break;
  }
  closedir(d);
  RETURN_IF_ERROR(st_children);
  if (unlinkat(dir, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return RemoveError(c, here, errno);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> CheckpointStorageRoot(const std::string& directory,
                                                  const std::vector<std::string>& roots) {
  std::optional<std::vector<std::string>> dir = Components(directory);
  if (directory.empty() || directory[0] != '/' || !dir) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", directory, "' is not an absolute path without '.' or '..' components"));
  }
  if (roots.empty()) return directory;
  for (const std::string& root : roots) {
    std::optional<std::vector<std::string>> r = Components(root);
    if (r && Beneath(*dir, *r, nullptr)) return root;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "'", directory, "' is not under a checkpoint storage root this cluster allows (",
      absl::StrJoin(roots, ", "),
      "; master.yaml checkpoint_storage_allowed_roots and checkpoint_storage.host_path)"));
}

absl::Status DeleteCheckpointFiles(const v1::Checkpoint& c, const std::string& root) {
  RETURN_IF_ERROR(CheckCheckpointPath(c));
  std::optional<std::vector<std::string>> path = Components(c.storage_path());
  std::optional<std::vector<std::string>> base = Components(root);
  std::vector<std::string> rest;
  if (root.empty() || root[0] != '/' || !path || !base || !Beneath(*path, *base, &rest) ||
      rest.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint ", c.uuid(), ": refusing to delete '", c.storage_path(),
        "': not inside the checkpoint storage root '", root, "'"));
  }
  // O_PATH: a root its user may add to but not list (cluster-up's 01733) is still a base
  // for the *at() calls below.
  Fd dir(open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) {
    if (errno == ENOENT) return absl::OkStatus();  // Its storage, and so it, is gone.
    return RemoveError(c, root, errno);
  }
  std::string at = root;
  for (size_t i = 0; i + 1 < rest.size(); ++i) {
    const std::string next = absl::StrCat(at, "/", rest[i]);
    Fd sub(openat(dir.get(), rest[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (sub.get() < 0) {
      const int err = errno;
      if (err == ENOENT) return absl::OkStatus();
      struct stat st;
      if (fstatat(dir.get(), rest[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISLNK(st.st_mode)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint ", c.uuid(), ": refusing to delete '", c.storage_path(), "': '", next,
            "' is a symbolic link, and deletion follows none below the checkpoint storage root '",
            root, "' (nothing was deleted)"));
      }
      return RemoveError(c, next, err);
    }
    dir = std::move(sub);
    at = next;
  }
  return RemoveBeneath(c, dir.get(), at, rest.back(), 0);
}

}  // namespace det
