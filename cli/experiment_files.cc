#include "cli/experiment_files.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "cli/format.h"

namespace det::cli {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::UnknownError(std::strerror(errno));
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) return absl::DataLossError(std::strerror(errno));
  return content.str();
}

struct Entry {
  std::string relative;
  std::string absolute;
  uint64_t size = 0;
  uint32_t mode = 0;
};

}  // namespace

absl::StatusOr<std::string> ReadConfigFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat("config file '", path, "' does not exist"));
    }
    return absl::PermissionDeniedError(
        absl::StrCat("cannot read config file '", path, "': ", std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config file '", path, "' is a directory"));
  }
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("cannot read config file '", path,
                                     "': ", text.status().message()));
  }
  return text;
}

absl::StatusOr<std::vector<v1::ContextFile>> ReadContextDir(const std::string& dir,
                                                            uint64_t max_bytes) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("context directory '", dir, "' does not exist"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("context directory '", dir, "' is not a directory"));
  }

  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  const fs::path root(dir);
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::path& path = it->path();
    if (path.filename() == ".git") {
      std::error_code type_ec;
      if (it->is_directory(type_ec)) it.disable_recursion_pending();
      continue;
    }
    struct stat file_stat;
    if (::stat(path.c_str(), &file_stat) != 0 || !S_ISREG(file_stat.st_mode)) {
      continue;  // directories, sockets, dangling links
    }
    Entry entry;
    entry.relative = path.lexically_relative(root).generic_string();
    entry.absolute = path.string();
    entry.size = static_cast<uint64_t>(file_stat.st_size);
    entry.mode = file_stat.st_mode & 07777;
    total += entry.size;
    entries.push_back(std::move(entry));
  }
  if (ec) {
    return absl::UnknownError(
        absl::StrCat("cannot list context directory '", dir, "': ", ec.message()));
  }
  if (total > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "context directory '", dir, "' holds ", FormatBytes(total), " (", total,
        " bytes), over the limit of ", FormatBytes(max_bytes)));
  }

  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.relative < b.relative; });
  std::vector<v1::ContextFile> files;
  files.reserve(entries.size());
  for (Entry& entry : entries) {
    absl::StatusOr<std::string> content = ReadWholeFile(entry.absolute);
    if (!content.ok()) {
      return absl::Status(content.status().code(),
                          absl::StrCat("cannot read '", entry.absolute,
                                       "': ", content.status().message()));
    }
    v1::ContextFile& file = files.emplace_back();
    file.set_path(std::move(entry.relative));
    file.set_content(*std::move(content));
    file.set_mode(entry.mode);
  }
  return files;
}

}  // namespace det::cli
