#include "cli/checkpoint_download.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace det::cli {
namespace {

// Directories nested deeper than this (a loop of links to directories, say) are refused.
constexpr int kMaxDepth = 64;
// Links followed to reach one entry.
constexpr int kMaxLinkHops = 40;

// An open file descriptor, closed when it goes.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      if (fd_ >= 0) close(fd_);
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

absl::Status Error(const std::string& path, int err) {
  return absl::FailedPreconditionError(absl::StrCat(path, ": ", strerror(err)));
}

// `path` without a trailing "/" (but "/" itself).
std::string Trimmed(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// Copies a checkpoint's tree reading through descriptors only: every entry is opened with
// openat(O_NOFOLLOW) from its directory's descriptor, so a link, or a rename of an entry
// into a link while it runs, never makes it read outside the checkpoint's directory. A
// link is followed only when its target, resolved the same way component by component,
// lies below the checkpoint's directory (no "..", an absolute target only when it names a
// path inside it).
class TreeCopier {
 public:
  TreeCopier(int root, uid_t owner, std::vector<std::string> root_paths)
      : root_(root), owner_(owner), root_paths_(std::move(root_paths)) {}

  // Copies the entries of directory `dir` (at `path`, for messages) into `out` (at
  // `out_path`).
  absl::Status CopyDir(int dir, const std::string& path, int out, const std::string& out_path,
                       int depth) {
    if (depth > kMaxDepth) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, ": directories nested more than ", kMaxDepth, " deep (a link loop?)"));
    }
    std::vector<std::string> names;
    {
      int listing = dup(dir);
      if (listing < 0) return Error(path, errno);
      DIR* d = fdopendir(listing);
      if (d == nullptr) {
        const int err = errno;
        close(listing);
        return Error(path, err);
      }
      rewinddir(d);
      errno = 0;
      while (dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != "..") names.push_back(name);
      }
      const int err = errno;
      closedir(d);
      if (err != 0) return Error(path, err);
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      const std::string from = absl::StrCat(path, "/", name);
      const std::string to = absl::StrCat(out_path, "/", name);
      absl::StatusOr<Fd> opened = OpenEntry(dir, path, name, 0);
      if (!opened.ok()) return opened.status();
      if (!opened->ok()) continue;  // Not a file to copy (a FIFO, a socket, a device).
      struct stat st;
      if (fstat(opened->get(), &st) != 0) return Error(from, errno);
      if (S_ISDIR(st.st_mode)) {
        if (mkdirat(out, name.c_str(), 0700) != 0) return Error(to, errno);
        Fd sub(openat(out, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!sub.ok()) return Error(to, errno);
        if (absl::Status copied = CopyDir(opened->get(), from, sub.get(), to, depth + 1);
            !copied.ok()) {
          return copied;
        }
        if (fchmod(sub.get(), (st.st_mode & 0777) | 0700) != 0) return Error(to, errno);
      } else if (S_ISREG(st.st_mode)) {
        if (st.st_nlink > 1 && st.st_uid != owner_) {
          return absl::FailedPreconditionError(absl::StrCat(
              from, ": a hard link to a file of uid ", st.st_uid, " in a checkpoint of uid ",
              owner_, "; not copied (nothing was)"));
        }
        if (absl::Status copied = CopyFile(opened->get(), from, out, name, to, st.st_mode & 0777);
            !copied.ok()) {
          return copied;
        }
      }
    }
    return absl::OkStatus();
  }

  const CopiedCheckpoint& copied() const { return copied_; }

 private:
  // Opens entry `name` of directory `dir` (at `path`) for reading, following a link only
  // below the checkpoint's directory. An Fd that is not ok(): an entry to skip.
  absl::StatusOr<Fd> OpenEntry(int dir, const std::string& path, const std::string& name,
                               int hops) {
    const std::string here = absl::StrCat(path, "/", name);
    Fd fd(openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (fd.ok()) {
      struct stat st;
      if (fstat(fd.get(), &st) != 0) return Error(here, errno);
      if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) return Fd();
      return fd;
    }
    if (errno != ELOOP) return Error(here, errno);
    // A symbolic link (O_NOFOLLOW): resolved below the checkpoint's directory, or refused.
    if (++hops > kMaxLinkHops) {
      return absl::FailedPreconditionError(
          absl::StrCat(here, ": more than ", kMaxLinkHops, " symbolic links to follow"));
    }
    char buf[PATH_MAX];
    ssize_t n = readlinkat(dir, name.c_str(), buf, sizeof(buf) - 1);
    // No longer a link (renamed over since): opened again, without following.
    if (n < 0 && errno == EINVAL) return OpenEntry(dir, path, name, hops);
    if (n < 0) return Error(here, errno);
    const std::string target(buf, static_cast<size_t>(n));
    auto outside = [&] {
      return absl::FailedPreconditionError(absl::StrCat(
          here, ": a symbolic link to ", target,
          " outside the checkpoint directory; not copied (nothing was)"));
    };
    int start = dir;
    std::string rest = target;
    if (!target.empty() && target[0] == '/') {
      bool inside = false;
      for (const std::string& root : root_paths_) {
        if (target == root || absl::StartsWith(target, root + "/")) {
          rest = target.substr(root.size());
          inside = true;
          break;
        }
      }
      if (!inside) return outside();
      start = root_;
    }
    std::vector<std::string> parts;
    for (absl::string_view part : absl::StrSplit(rest, '/', absl::SkipEmpty())) {
      if (part == "..") return outside();
      if (part != ".") parts.emplace_back(part);
    }
    Fd cur(dup(start));
    if (!cur.ok()) return Error(here, errno);
    std::string at = start == root_ ? root_paths_[0] : path;
    for (const std::string& part : parts) {
      absl::StatusOr<Fd> next = OpenEntry(cur.get(), at, part, hops);
      if (!next.ok()) return next.status();
      if (!next->ok()) return Fd();
      cur = std::move(*next);
      at = absl::StrCat(at, "/", part);
    }
    return cur;
  }

  absl::Status CopyFile(int in, const std::string& from, int out_dir, const std::string& name,
                        const std::string& to, mode_t mode) {
    Fd out(openat(out_dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  mode));
    if (!out.ok()) return Error(to, errno);
    char buf[1 << 16];
    for (;;) {
      ssize_t n = read(in, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Error(from, errno);
      if (n == 0) break;
      for (ssize_t done = 0; done < n;) {
        ssize_t w = write(out.get(), buf + done, static_cast<size_t>(n - done));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return Error(to, errno);
        done += w;
      }
      copied_.bytes += n;
    }
    ++copied_.files;
    return absl::OkStatus();
  }

  const int root_;
  const uid_t owner_;
  // The checkpoint directory's path as given and as resolved: an absolute link target
  // under one of them names a path inside it.
  const std::vector<std::string> root_paths_;
  CopiedCheckpoint copied_;
};

}  // namespace

absl::StatusOr<CopiedCheckpoint> CopyCheckpointDirectory(const std::string& source,
                                                         const std::string& output) {
  namespace fs = std::filesystem;
  Fd root(open(source.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root.ok()) {
    const int err = errno;
    struct stat st;
    if (err == EACCES && lstat(source.c_str(), &st) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot read the checkpoint's directory ", source, " (", strerror(err),
          "): it belongs to uid ", st.st_uid,
          ", the OS user its trial ran as, and is private to it: download it as that user "
          "(or root)"));
    }
    if (err == ELOOP || (err == ENOTDIR && lstat(source.c_str(), &st) == 0 && S_ISLNK(st.st_mode))) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint's directory ", source, " is a symbolic link; not followed (nothing "
          "was copied)"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot read the checkpoint's directory ", source, " from this machine (",
        strerror(err),
        "): det checkpoint download works where its checkpoint storage (shared_fs host_path) "
        "is mounted at the same path"));
  }
  struct stat root_st;
  if (fstat(root.get(), &root_st) != 0) return Error(source, errno);
  std::vector<std::string> root_paths = {Trimmed(source)};
  if (char* real = realpath(source.c_str(), nullptr); real != nullptr) {
    root_paths.push_back(Trimmed(real));
    free(real);
  }

  std::error_code ec;
  const fs::path out(output);
  const bool existed = fs::exists(out, ec);
  if (existed && !fs::is_empty(out, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--output ", output, ": exists and is not empty; nothing was copied"));
  }
  fs::create_directories(out, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("--output ", output, ": ", ec.message()));
  Fd out_fd(open(output.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!out_fd.ok()) return Error(absl::StrCat("--output ", output), errno);

  TreeCopier copier(root.get(), root_st.st_uid, std::move(root_paths));
  absl::Status st = copier.CopyDir(root.get(), Trimmed(source), out_fd.get(), Trimmed(output), 0);
  if (!st.ok()) {
    // Nothing of a refused or failed copy is kept.
    if (existed) {
      for (const auto& entry : fs::directory_iterator(out, ec)) fs::remove_all(entry.path(), ec);
    } else {
      fs::remove_all(out, ec);
    }
    return st;
  }
  return copier.copied();
}

}  // namespace det::cli
