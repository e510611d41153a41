#include "common/config/limits.h"

#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace det::config {

std::string FindInvalidUtf8(absl::string_view text) {
  int line = 1;
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    size_t length = 0;
    uint32_t min = 0;
    if (c < 0x80) {
      if (c == '\n') ++line;
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      length = 2;
      min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      length = 3;
      min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      length = 4;
      min = 0x10000;
    }
    bool valid = length > 0 && i + length <= text.size();
    uint32_t code = valid ? (c & (0x7F >> length)) : 0;
    for (size_t k = 1; valid && k < length; ++k) {
      const unsigned char next = static_cast<unsigned char>(text[i + k]);
      valid = (next & 0xC0) == 0x80;
      code = (code << 6) | (next & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and values past U+10FFFF are not UTF-8 either.
    if (!valid || code < min || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
      return absl::StrCat("line ", line, ", byte offset ", i, " (0x",
                          absl::Hex(c, absl::kZeroPad2), ")");
    }
    i += length;
  }
  return "";
}

absl::Status CheckContext(const std::vector<ContextEntry>& files) {
  if (static_cast<int64_t>(files.size()) > kMaxContextFiles) {
    return absl::InvalidArgumentError(absl::StrCat("model context: ", files.size(),
                                                   " files; at most ", kMaxContextFiles,
                                                   " are accepted"));
  }
  int64_t total = 0;
  std::set<std::string> paths;
  for (const ContextEntry& file : files) {
    const std::string& path = file.path;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("model context: file '", absl::CHexEscape(path.substr(0, 200)), "'",
                       path.size() > 200 ? "..." : "", ": ", why));
    };
    if (path.empty()) return bad("an empty path");
    if (static_cast<int64_t>(path.size()) > kMaxContextPathBytes) {
      return bad(absl::StrCat("a path of ", path.size(), " bytes; at most ",
                              kMaxContextPathBytes, " are accepted"));
    }
    if (std::string where = FindInvalidUtf8(path); !where.empty()) {
      return bad("the path is not valid UTF-8");
    }
    for (unsigned char c : path) {
      if (c < 0x20 || c == 0x7F) return bad("the path contains a control character");
    }
    if (path.front() == '/') return bad("an absolute path; context paths are relative");
    for (absl::string_view part : absl::StrSplit(path, '/')) {
      if (part.empty()) return bad("an empty path component ('//' or a trailing '/')");
      if (part == "." || part == "..") {
        return bad(absl::StrCat("a '", part, "' component; paths stay inside the context"));
      }
    }
    if (!paths.insert(path).second) return bad("appears twice");
    if (file.bytes < 0) return bad("a negative size");
    total += file.bytes;
    if (total > kMaxContextBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model context: more than %d MiB in all (%.1f MiB up to '%s'); at most %d MiB are "
          "accepted",
          kMaxContextBytes >> 20, static_cast<double>(total) / (1 << 20), path,
          kMaxContextBytes >> 20));
    }
  }
  // A path that is also the directory of another: "a" sorts right before "a/...".
  for (auto it = paths.begin(); it != paths.end(); ++it) {
    auto next = paths.lower_bound(*it + "/");
    if (next != paths.end() && next->rfind(*it + "/", 0) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("model context: '", *it, "' is a file and also the directory of '",
                       *next, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace det::config
