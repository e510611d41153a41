// Strict, typed reading of YAML configuration with errors that name the file, the line,
// the field's path and what was expected:
//   config.yaml:12: resources.slots_per_trial: expected an integer >= 0, got "eight"
// This library and its users in common/config are the only code that includes yaml-cpp.
#ifndef DET_COMMON_CONFIG_YAML_READER_H_
#define DET_COMMON_CONFIG_YAML_READER_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/config/limits.h"
#include "yaml-cpp/yaml.h"

namespace det::config {

// Names the origin of each line of a document assembled from several texts (a config file,
// a template, --config overrides): every text is parsed with its lines shifted past those
// of the texts before it (ParseYaml's `first_line`), so one line number identifies both
// the text and the line in it. Immutable once built; cheap to copy.
class SourceMap {
 public:
  // One text, `filename`, from line 1.
  explicit SourceMap(std::string filename);
  // Lines from `first_line` on come from `name`. `numbered`: located as "NAME:L" with L
  // counted from `first_line`; otherwise just "NAME" (a one-line command-line value).
  // REQUIRES: `first_line` greater than that of every earlier call.
  void Add(int first_line, std::string name, bool numbered);
  // "exp.yaml:12", "template base:3", "--config a.b=1"; the first text's name when
  // `line` <= 0.
  std::string Locate(int line) const;
  // The first text's name.
  const std::string& primary() const { return segments_.front().name; }

 private:
  struct Segment {
    int first_line;
    std::string name;
    bool numbered;
  };
  std::vector<Segment> segments_;
};

// Bounds on a parsed document (aliases expanded), so that crafted input such as a
// self-referencing anchor or "billion laughs" aliases is an error, not a hang.
inline constexpr int kMaxYamlDepth = 64;
inline constexpr int kMaxYamlNodes = 100000;

// Parses one YAML document. Malformed YAML is InvalidArgument "FILE:LINE: malformed YAML:
// ...". An empty document is an empty map. `first_line`: the line number the text's
// first line gets in the returned nodes' marks (see SourceMap); messages still count from
// the text's own line 1. A document nested deeper than kMaxYamlDepth or with more than
// kMaxYamlNodes nodes, longer than kMaxYamlBytes, or not valid UTF-8 is InvalidArgument
// naming `filename` (and the limit).
absl::StatusOr<YAML::Node> ParseYaml(absl::string_view text, absl::string_view filename,
                                     int first_line = 1);
// The same, but an empty document is a null node and any value may be at the top.
absl::StatusOr<YAML::Node> ParseYamlValue(absl::string_view text, absl::string_view filename,
                                          int first_line = 1);

// Reads a whole file and parses it. A missing file is NotFound naming the file.
absl::StatusOr<YAML::Node> LoadYamlFile(const std::string& path);

std::string EmitYaml(const YAML::Node& node);

// YAML -> JSON text (scalars that read as integers, floats or booleans become JSON
// numbers or booleans; everything else strings).
std::string YamlToJson(const YAML::Node& node);

// The closest of `candidates` to `word`, or "" if none is close.
std::string DidYouMean(absl::string_view word, const std::vector<std::string>& candidates);

// Reads the fields of one YAML mapping. Each accessor leaves its output untouched when the
// key is absent (so outputs hold defaults) and records the first error; Finish() reports
// it, or else the first key nobody asked for ("unknown key", with a suggestion).
// Not thread-safe; cheap to create.
class ObjectReader {
 public:
  // `path` is the dotted path of `node` ("" for the document root).
  ObjectReader(const YAML::Node& node, std::string path, std::string filename);
  // The same for a document assembled from several texts: messages name the text and
  // line each node came from.
  ObjectReader(const YAML::Node& node, std::string path, std::shared_ptr<const SourceMap> sources);

  bool Has(const std::string& key) const;

  void String(const std::string& key, std::string* out, bool required = false);
  void Int(const std::string& key, int64_t* out, int64_t min = std::numeric_limits<int64_t>::min(),
           int64_t max = std::numeric_limits<int64_t>::max(), bool required = false);
  void Int(const std::string& key, int* out, int64_t min = std::numeric_limits<int>::min(),
           int64_t max = std::numeric_limits<int>::max(), bool required = false);
  void Double(const std::string& key, double* out, bool required = false);
  void Bool(const std::string& key, bool* out);
  // "30s", "5m", "1h", "250ms" or a plain number of seconds.
  void Duration(const std::string& key, absl::Duration* out);
  // A list of strings, or (when `allow_scalar`) a single string split on whitespace.
  void StringList(const std::string& key, std::vector<std::string>* out, bool allow_scalar = false,
                  bool required = false);
  // A nested mapping; `read` is called only when the key is present.
  void Object(const std::string& key, const std::function<void(ObjectReader&)>& read,
              bool required = false);
  // A list of mappings; `read` is called for each item (path "key[i]") when the key is
  // present.
  void List(const std::string& key, const std::function<void(ObjectReader& item, size_t i)>& read,
            bool required = false);
  // Any value, unchecked (free-form sections such as `data`).
  void Any(const std::string& key, YAML::Node* out);
  // Marks a key as known without reading it.
  void Known(const std::string& key);

  // Records a custom error about `key` (or the object itself when `key` is empty).
  void Fail(const std::string& key, const std::string& message);
  // Records a custom error about `node` (anywhere in the document), named `path`.
  void FailAt(const YAML::Node& node, const std::string& path, const std::string& message);
  bool ok() const { return status_->ok(); }
  const YAML::Node& node() const { return node_; }
  // The dotted path of `key` inside this object.
  std::string PathOf(const std::string& key) const;
  // "FILE:LINE: " for `key` (or the object).
  std::string Where(const std::string& key) const;

  // The first error, or an unknown-key error, or OK.
  absl::Status Finish();

 private:
  ObjectReader(const YAML::Node& node, std::string path,
               std::shared_ptr<const SourceMap> sources, std::shared_ptr<absl::Status> status);
  // The scalar at `key`, or nullptr (after recording an error if it is not a scalar).
  const YAML::Node* Scalar(const std::string& key, const char* expected, YAML::Node* holder,
                           bool required);
  void Error(const std::string& key, const std::string& message);

  YAML::Node node_;
  std::string path_;
  std::shared_ptr<const SourceMap> sources_;
  std::set<std::string> known_;
  // Shared with nested readers so the first error anywhere wins.
  std::shared_ptr<absl::Status> status_;
};

}  // namespace det::config

#endif  // DET_COMMON_CONFIG_YAML_READER_H_
