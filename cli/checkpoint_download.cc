#include "cli/checkpoint_download.h"

#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"

namespace det::cli {
namespace {

namespace fs = std::filesystem;

// Whether `path` (canonical) is `root` (canonical) or lies under it.
bool Inside(const fs::path& path, const fs::path& root) {
  auto r = root.begin();
  auto p = path.begin();
  for (; r != root.end(); ++r, ++p) {
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

struct Entry {
  fs::path from;      // what to read (a link's target when the entry is a link)
  fs::path relative;  // where, under the output
  bool directory = false;
};

// Lists what to copy under `dir` (canonical `root`), following links only into `root`.
absl::Status Walk(const fs::path& dir, const fs::path& relative, const fs::path& root,
                  std::vector<Entry>* entries, int depth) {
  if (depth > 64) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir.string(), ": directories nested more than 64 deep (a link loop?)"));
  }
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat(dir.string(), ": ", ec.message()));
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const fs::path path = it->path();
    const fs::path rel = relative / path.filename();
    fs::file_status st = fs::symlink_status(path, ec);
    if (ec) return absl::FailedPreconditionError(absl::StrCat(path.string(), ": ", ec.message()));
    fs::path target = path;
    if (fs::is_symlink(st)) {
      target = fs::canonical(path, ec);
      if (ec || !Inside(target, root)) {
        return absl::FailedPreconditionError(
            absl::StrCat(path.string(), ": a symbolic link to ",
                         ec ? std::string("a missing file") : target.string(),
                         " outside the checkpoint directory; not copied (nothing was)"));
      }
      st = fs::status(target, ec);
      if (ec) return absl::FailedPreconditionError(absl::StrCat(path.string(), ": ", ec.message()));
    }
    if (fs::is_directory(st)) {
      entries->push_back({target, rel, true});
      if (absl::Status s = Walk(target, rel, root, entries, depth + 1); !s.ok()) return s;
    } else if (fs::is_regular_file(st)) {
      entries->push_back({target, rel, false});
    }
  }
  if (ec) return absl::FailedPreconditionError(absl::StrCat(dir.string(), ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CopiedCheckpoint> CopyCheckpointDirectory(const std::string& source,
                                                         const std::string& output) {
  std::error_code ec;
  const fs::path root = fs::canonical(source, ec);
  if (ec || !fs::is_directory(root)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot read the checkpoint's directory ", source, " from this machine (",
        ec ? ec.message() : "not a directory",
        "): det checkpoint download works where its checkpoint storage (shared_fs host_path) "
        "is mounted at the same path"));
  }
  std::vector<Entry> entries;
  if (absl::Status s = Walk(root, fs::path(), root, &entries, 0); !s.ok()) return s;
  const fs::path out(output);
  if (fs::exists(out, ec) && !fs::is_empty(out, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--output ", output, ": exists and is not empty; nothing was copied"));
  }
  fs::create_directories(out, ec);
  if (ec)
    return absl::FailedPreconditionError(absl::StrCat("--output ", output, ": ", ec.message()));
  CopiedCheckpoint copied;
  for (const Entry& e : entries) {
    const fs::path to = out / e.relative;
    if (e.directory) {
      fs::create_directories(to, ec);
    } else {
      fs::copy_file(e.from, to, fs::copy_options::overwrite_existing, ec);
      if (!ec) {
        ++copied.files;
        copied.bytes += static_cast<int64_t>(fs::file_size(to, ec));
      }
    }
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot copy ", e.from.string(), " to ", to.string(), ": ", ec.message()));
    }
  }
  return copied;
}

}  // namespace det::cli
