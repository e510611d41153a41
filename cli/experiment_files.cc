#include "cli/experiment_files.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
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

// det's rules before a .detignore's (see ContextIgnore).
constexpr absl::string_view kDefaultIgnore = ".git\n__pycache__/\n*.py[co]\n";

// Whether `c` is in the bracket expression that starts at glob[open] ('['); sets `*close` to
// the index after its ']'. False without a closing ']' (the '[' is then a literal).
bool InClass(absl::string_view glob, size_t open, char c, size_t* close, bool* in) {
  size_t i = open + 1;
  bool negate = i < glob.size() && (glob[i] == '!' || glob[i] == '^');
  if (negate) ++i;
  bool found = false;
  for (bool first = true; i < glob.size(); first = false) {
    char lo = glob[i];
    if (lo == ']' && !first) {
      *close = i + 1;
      *in = found != negate;
      return true;
    }
    if (lo == '\\' && i + 1 < glob.size()) lo = glob[++i];
    char hi = lo;
    if (i + 2 < glob.size() && glob[i + 1] == '-' && glob[i + 2] != ']') {
      hi = glob[i + 2];
      i += 2;
    }
    if (lo <= c && c <= hi) found = true;
    ++i;
  }
  return false;
}

// Whether `text` matches the gitignore glob `glob` (see ContextIgnore).
bool GlobMatch(absl::string_view glob, absl::string_view text) {
  size_t g = 0;
  size_t t = 0;
  while (g < glob.size()) {
    char c = glob[g];
    if (c == '*') {
      size_t end = g;
      while (end < glob.size() && glob[end] == '*') ++end;
      bool any_depth = end - g >= 2 && (g == 0 || glob[g - 1] == '/') &&
                       (end == glob.size() || glob[end] == '/');
      if (any_depth) {
        if (end == glob.size()) return true;
        absl::string_view rest = glob.substr(end + 1);
        for (size_t k = t;;) {
          if (GlobMatch(rest, text.substr(k))) return true;
          size_t slash = text.find('/', k);
          if (slash == absl::string_view::npos) return false;
          k = slash + 1;
        }
      }
      absl::string_view rest = glob.substr(end);
      for (size_t k = t;; ++k) {
        if (GlobMatch(rest, text.substr(k))) return true;
        if (k == text.size() || text[k] == '/') return false;
      }
    }
    if (t == text.size()) return false;
    if (c == '?') {
      if (text[t] == '/') return false;
      ++g;
      ++t;
      continue;
    }
    size_t close;
    bool in;
    if (c == '[' && InClass(glob, g, text[t], &close, &in)) {
      if (!in || text[t] == '/') return false;
      g = close;
      ++t;
      continue;
    }
    if (c == '\\' && g + 1 < glob.size()) c = glob[++g];
    if (text[t] != c) return false;
    ++g;
    ++t;
  }
  return t == text.size();
}

absl::Status InvalidContext(const std::string& dir, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("context directory '", dir, "': ", what));
}

// Lists the files to upload under `root`, not entering what the rules leave out.
class ContextWalk {
 public:
  ContextWalk(const std::string& dir, std::string canonical_root, const ContextIgnore& ignore,
              uint64_t max_files)
      : dir_(dir), root_(std::move(canonical_root)), ignore_(ignore), max_files_(max_files) {}

  // Adds the files under `path` (the directory `relative`; "" for the root).
  absl::Status Walk(const fs::path& path, const std::string& relative) {
    std::error_code ec;
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      std::string name = it->path().filename().string();
      std::string rel = relative.empty() ? name : absl::StrCat(relative, "/", name);
      if (absl::Status st = Add(it->path(), rel); !st.ok()) return st;
    }
    if (ec) {
      return absl::UnknownError(
          absl::StrCat("cannot list context directory '", path.string(), "': ", ec.message()));
    }
    return absl::OkStatus();
  }

  std::vector<Entry>& entries() { return entries_; }
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  absl::Status Add(const fs::path& path, const std::string& rel) {
    struct stat link_stat;
    if (::lstat(path.c_str(), &link_stat) != 0) {
      return absl::UnknownError(
          absl::StrCat("cannot read '", path.string(), "': ", std::strerror(errno)));
    }
    struct stat target_stat = link_stat;
    bool is_link = S_ISLNK(link_stat.st_mode);
    if (is_link && ::stat(path.c_str(), &target_stat) != 0) return absl::OkStatus();  // dangling
    bool is_dir = S_ISDIR(target_stat.st_mode);
    if (ignore_.Ignored(rel, is_dir)) return absl::OkStatus();
    if (!is_dir && path.filename() == ".detignore") return absl::OkStatus();
    if (!is_link && is_dir) return Walk(path, rel);
    std::string absolute = path.string();
    if (is_link) {
      std::error_code ec;
      fs::path target = fs::canonical(path, ec);
      if (ec) return absl::OkStatus();  // dangling after all
      absolute = target.string();
      bool inside = absolute == root_ || (absl::StartsWith(absolute, root_) &&
                                          (root_.back() == '/' || absolute[root_.size()] == '/'));
      if (!inside) {
        return InvalidContext(dir_, absl::StrCat("symbolic link '", rel, "' points to '", absolute,
                                                 "', outside the directory; det does not follow "
                                                 "links out of a context: copy what it needs "
                                                 "into the directory or list the link in "
                                                 ".detignore"));
      }
      if (is_dir) {
        return InvalidContext(
            dir_, absl::StrCat("symbolic link '", rel, "' points to a directory ('", absolute,
                               "'); det does not follow directory links: "
                               "list the link in .detignore"));
      }
    }
    if (!S_ISREG(target_stat.st_mode)) return absl::OkStatus();  // sockets, FIFOs, devices
    if (entries_.size() == max_files_) {
      return InvalidContext(dir_, absl::StrCat("holds more than ", max_files_,
                                               " files to upload, over the limit of ", max_files_,
                                               " files; list what the experiment does not need "
                                               "in .detignore"));
    }
    Entry& entry = entries_.emplace_back();
    entry.relative = rel;
    entry.absolute = std::move(absolute);
    entry.size = static_cast<uint64_t>(target_stat.st_size);
    entry.mode = target_stat.st_mode & 07777;
    total_bytes_ += entry.size;
    return absl::OkStatus();
  }

  const std::string& dir_;
  const std::string root_;
  const ContextIgnore& ignore_;
  const uint64_t max_files_;
  std::vector<Entry> entries_;
  uint64_t total_bytes_ = 0;
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
    return absl::InvalidArgumentError(absl::StrCat("config file '", path, "' is a directory"));
  }
  if (st.st_size > config::kMaxYamlBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "config file '%s' is %.1f MiB; a config may be at most %d KiB", path,
        static_cast<double>(st.st_size) / (1 << 20), config::kMaxYamlBytes >> 10));
  }
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(), absl::StrCat("cannot read config file '", path,
                                                           "': ", text.status().message()));
  }
  if (std::string where = config::FindInvalidUtf8(*text); !where.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("config file '", path,
                                                   "' is not valid UTF-8 at ", where,
                                                   "; save it as UTF-8"));
  }
  return text;
}

ContextIgnore::ContextIgnore(absl::string_view detignore) {
  for (absl::string_view text : {kDefaultIgnore, detignore}) {
    for (absl::string_view line : absl::StrSplit(text, '\n')) AddLine(line);
  }
}

void ContextIgnore::AddLine(absl::string_view line) {
  if (absl::EndsWith(line, "\r")) line.remove_suffix(1);
  if (line.empty() || line[0] == '#') return;
  while (absl::EndsWith(line, " ") && !absl::EndsWith(line, "\\ ")) line.remove_suffix(1);
  Rule rule;
  if (absl::ConsumePrefix(&line, "!")) rule.negate = true;
  if (absl::ConsumeSuffix(&line, "/")) rule.dir_only = true;
  rule.anchored = absl::StrContains(line, '/');
  absl::ConsumePrefix(&line, "/");
  if (line.empty()) return;
  rule.glob = std::string(line);
  rules_.push_back(std::move(rule));
}

bool ContextIgnore::Ignored(absl::string_view path, bool is_dir) const {
  size_t slash = path.rfind('/');
  absl::string_view name = slash == absl::string_view::npos ? path : path.substr(slash + 1);
  bool ignored = false;
  for (const Rule& rule : rules_) {
    if (rule.dir_only && !is_dir) continue;
    if (GlobMatch(rule.glob, rule.anchored ? path : name)) ignored = !rule.negate;
  }
  return ignored;
}

absl::StatusOr<std::vector<v1::ContextFile>> ReadContextDir(const std::string& dir,
                                                            uint64_t max_bytes,
                                                            uint64_t max_files) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("context directory '", dir, "' does not exist"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("context directory '", dir, "' is not a directory"));
  }
  std::error_code ec;
  fs::path root = fs::canonical(dir, ec);
  if (ec) {
    return absl::UnknownError(
        absl::StrCat("cannot resolve context directory '", dir, "': ", ec.message()));
  }

  std::string detignore;
  fs::path detignore_path = root / ".detignore";
  struct stat detignore_stat;
  if (::lstat(detignore_path.c_str(), &detignore_stat) == 0) {
    if (!S_ISREG(detignore_stat.st_mode)) {
      return InvalidContext(dir, ".detignore is not a regular file");
    }
    absl::StatusOr<std::string> text = ReadWholeFile(detignore_path.string());
    if (!text.ok()) {
      return absl::Status(
          text.status().code(),
          absl::StrCat("cannot read '", detignore_path.string(), "': ", text.status().message()));
    }
    detignore = *std::move(text);
  }
  ContextIgnore ignore(detignore);
  ContextWalk walk(dir, root.string(), ignore, max_files);
  if (absl::Status st = walk.Walk(root, ""); !st.ok()) return st;
  std::vector<Entry>& entries = walk.entries();
  uint64_t total = walk.total_bytes();
  if (total > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("context directory '", dir, "' holds ", FormatBytes(total), " (", total,
                     " bytes), over the limit of ", FormatBytes(max_bytes),
                     "; list what the experiment does not need in .detignore"));
  }

  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.relative < b.relative; });
  std::vector<v1::ContextFile> files;
  files.reserve(entries.size());
  for (Entry& entry : entries) {
    absl::StatusOr<std::string> content = ReadWholeFile(entry.absolute);
    if (!content.ok()) {
      return absl::Status(content.status().code(), absl::StrCat("cannot read '", entry.absolute,
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
