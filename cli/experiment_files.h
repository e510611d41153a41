// Reading what `det experiment create` uploads: the config file and the model context
// directory.
#ifndef DET_CLI_EXPERIMENT_FILES_H_
#define DET_CLI_EXPERIMENT_FILES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config/limits.h"
#include "proto/types.pb.h"

namespace det::cli {

// Largest total size of a context directory's files (64 MiB) and number of files
// (10,000): the master's limits (common/config/limits.h).
inline constexpr uint64_t kMaxContextBytes = config::kMaxContextBytes;
inline constexpr uint64_t kMaxContextFiles = config::kMaxContextFiles;

// The text of the config file at `path`. NotFound "config file 'PATH' does not exist";
// a file over config::kMaxYamlBytes or not UTF-8 is InvalidArgument naming the limit
// (the master would refuse it; it is not sent); other failures name the file too.
absl::StatusOr<std::string> ReadConfigFile(const std::string& path);

// Which paths of a context directory are left out: det's defaults (`.git`, `__pycache__/`,
// `*.py[co]`, as Determined leaves them out) followed by the lines of the directory's
// `.detignore`, in gitignore syntax:
//   - blank lines and lines starting with `#` are no rules (`\#` for a leading `#`);
//     trailing spaces are dropped unless escaped (`\ `);
//   - `*` matches anything but `/`, `?` one character but `/`, `[a-z]`/`[!a-z]` one of (not
//     one of) a set; `\` makes the next character literal;
//   - a pattern with no `/` but a trailing one matches a name at any depth; a pattern with a
//     `/` at its start or in its middle is relative to the directory (a leading `/` only
//     anchors it);
//   - `**/` at the start or between slashes matches zero or more directories, `/**` at the
//     end everything inside;
//   - a trailing `/` matches directories only;
//   - `!` re-includes what an earlier rule left out (`\!` for a leading `!`); the last rule
//     that matches decides. A left-out directory is not entered, so nothing under it can be
//     re-included (as in git).
// Thread-compatible; immutable after construction.
class ContextIgnore {
 public:
  // The defaults and the rules of `detignore` (the text of a .detignore file; may be empty).
  explicit ContextIgnore(absl::string_view detignore = "");

  // Whether `path` is left out. `path` is relative to the context directory, '/'-separated,
  // with no leading or trailing '/'; `is_dir` tells whether it names a directory.
  bool Ignored(absl::string_view path, bool is_dir) const;

 private:
  struct Rule {
    std::string glob;
    bool negate = false;
    bool dir_only = false;
    // Matched against the whole path; otherwise against its last component.
    bool anchored = false;
  };
  void AddLine(absl::string_view line);

  std::vector<Rule> rules_;
};

// The files that `det experiment create` uploads from `dir`: every regular file under it
// (recursively), as paths relative to `dir` with '/' separators, permission bits and
// content, sorted by path, except
//   - what the rules of ContextIgnore, with `dir`/.detignore, leave out;
//   - every file named `.detignore` (read, never uploaded, as Determined does);
//   - sockets, FIFOs, devices, and symbolic links whose target does not exist.
// Symbolic links are never followed out of `dir`: a link (after every link in its target
// is resolved) to a regular file inside `dir` is uploaded as a copy of that file under the
// link's path; a link to anything outside `dir`, or to a directory, fails with
// InvalidArgument naming the link and its target (a link that .detignore leaves out is no
// error). Fails with InvalidArgument naming the directory and the limit when it holds more
// than `max_files` files to upload (found while listing, before reading any), or when they
// add up to more than `max_bytes` (before reading any of them).
absl::StatusOr<std::vector<v1::ContextFile>> ReadContextDir(const std::string& dir,
                                                            uint64_t max_bytes = kMaxContextBytes,
                                                            uint64_t max_files = kMaxContextFiles);

}  // namespace det::cli

#endif  // DET_CLI_EXPERIMENT_FILES_H_
