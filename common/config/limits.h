// Limits on what a user submits (a config, its template and overrides, a model context),
// checked at the door by the CLI and again by the master, each refusal naming the limit.
// Nothing here includes YAML or protobuf: plain text and paths.
#ifndef DET_COMMON_CONFIG_LIMITS_H_
#define DET_COMMON_CONFIG_LIMITS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace det::config {

// The largest YAML document (a config, a template, an override): 1 MiB.
inline constexpr int64_t kMaxYamlBytes = int64_t{1} << 20;
// The longest string value in a config (name, description, an entrypoint word): 64 KiB.
inline constexpr int64_t kMaxStringBytes = int64_t{64} << 10;
// A model context: at most 10,000 files of 64 MiB in all, each path at most 4,096 bytes.
inline constexpr int64_t kMaxContextFiles = 10000;
inline constexpr int64_t kMaxContextBytes = int64_t{64} << 20;
inline constexpr int64_t kMaxContextPathBytes = 4096;

// Where `text` first stops being UTF-8 (overlong forms and surrogates included): "line L,
// byte offset O (0xFF)"; "" when it is all valid UTF-8.
std::string FindInvalidUtf8(absl::string_view text);

// One file of a model context: its path relative to the context directory and its size.
struct ContextEntry {
  std::string path;
  int64_t bytes = 0;
};

// InvalidArgument naming the first path (or the total) that breaks a rule: at most
// kMaxContextFiles files and kMaxContextBytes bytes; each path relative, '/'-separated,
// without empty, "." or ".." components, at most kMaxContextPathBytes bytes, valid UTF-8
// without control characters; no path twice; no path that is both a file and a
// directory of another ("a" and "a/b"). What a worker's directory can hold exactly.
absl::Status CheckContext(const std::vector<ContextEntry>& files);

}  // namespace det::config

#endif  // DET_COMMON_CONFIG_LIMITS_H_
