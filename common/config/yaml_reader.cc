#include "common/config/yaml_reader.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/config/json_text.h"

namespace det::config {
namespace {

int Line(const YAML::Node& node) { return node.Mark().is_null() ? 0 : node.Mark().line + 1; }

// A scalar in quotes for an error message, cut after 80 bytes (a message never echoes a
// huge value back).
std::string Quote(const YAML::Node& node) {
  constexpr size_t kShown = 80;
  if (node.IsScalar() && node.Scalar().size() > kShown) {
    return absl::StrCat("\"", node.Scalar().substr(0, kShown), "...\" (", node.Scalar().size(),
                        " bytes)");
  }
  if (node.IsScalar()) return absl::StrCat("\"", node.Scalar(), "\"");
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  return "nothing";
}

std::string TooLong(size_t bytes) {
  return absl::StrFormat("a string of %d bytes; at most %d KiB is accepted", bytes,
                         kMaxStringBytes >> 10);
}

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// True when `s` is a number in JSON's grammar, so it can be written as it is.
bool IsJsonNumber(const std::string& s) {
  size_t i = 0, n = s.size();
  auto digits = [&] {
    size_t start = i;
    while (i < n && isdigit(static_cast<unsigned char>(s[i]))) ++i;
    return i > start;
  };
  if (i < n && s[i] == '-') ++i;
  if (i < n && s[i] == '0') {
    ++i;
  } else if (!digits()) {
    return false;
  }
  if (i < n && s[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == n;
}

void ToJson(const YAML::Node& node, std::string* out) {
  if (node.IsMap()) {
    out->push_back('{');
    bool first = true;
    for (const auto& kv : node) {
      if (!first) out->push_back(',');
      first = false;
      out->append(JsonString(kv.first.Scalar()));
      out->push_back(':');
      ToJson(kv.second, out);
    }
    out->push_back('}');
  } else if (node.IsSequence()) {
    out->push_back('[');
    for (size_t i = 0; i < node.size(); ++i) {
      if (i) out->push_back(',');
      ToJson(node[i], out);
    }
    out->push_back(']');
  } else if (node.IsScalar()) {
    const std::string& s = node.Scalar();
    int64_t i;
    double d;
    if (node.Tag() != "!" && absl::SimpleAtoi(s, &i)) {
      absl::StrAppend(out, i);
    } else if (node.Tag() != "!" && IsJsonNumber(s)) {
      out->append(s);
    } else if (node.Tag() != "!" && absl::SimpleAtod(s, &d) && std::isfinite(d) &&
               s.find_first_of("0123456789") != std::string::npos) {
      std::ostringstream os;
      os.precision(17);
      os << d;
      out->append(os.str());
    } else if (node.Tag() != "!" && (s == "true" || s == "false")) {
      out->append(s);
    } else {
      out->append(JsonString(s));
    }
  } else {
    out->append("null");
  }
}

// False when `node` nests deeper than kMaxYamlDepth or the walk exceeds `budget` nodes.
bool WithinBounds(const YAML::Node& node, int depth, int64_t* budget) {
  if (--*budget < 0 || depth > kMaxYamlDepth) return false;
  if (node.IsMap()) {
    for (const auto& kv : node) {
      if (!WithinBounds(kv.first, depth + 1, budget) || !WithinBounds(kv.second, depth + 1, budget)) {
        return false;
      }
    }
  } else if (node.IsSequence()) {
    for (const auto& item : node) {
      if (!WithinBounds(item, depth + 1, budget)) return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<YAML::Node> ParseYaml(absl::string_view text, absl::string_view filename,
                                     int first_line) {
  absl::StatusOr<YAML::Node> node = ParseYamlValue(text, filename, first_line);
  if (node.ok() && (!node->IsDefined() || node->IsNull())) return YAML::Node(YAML::NodeType::Map);
  return node;
}

absl::StatusOr<YAML::Node> ParseYamlValue(absl::string_view text, absl::string_view filename,
                                          int first_line) {
  if (static_cast<int64_t>(text.size()) > kMaxYamlBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: the document is %.1f MiB; at most %d KiB is accepted", filename,
        static_cast<double>(text.size()) / (1 << 20), kMaxYamlBytes >> 10));
  }
  if (std::string where = FindInvalidUtf8(text); !where.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(filename, ": not valid UTF-8 at ", where, "; save the file as UTF-8"));
  }
  const int shift = std::max(0, first_line - 1);
  YAML::Node node;
  try {
    node = YAML::Load(std::string(shift, '\n') + std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        filename, ":", std::max(1, e.mark.line + 1 - shift), ": malformed YAML: ", e.msg));
  }
  int64_t budget = kMaxYamlNodes;
  if (!WithinBounds(node, 0, &budget)) {
    return absl::InvalidArgumentError(absl::StrCat(
        filename, ": the document is nested more than ", kMaxYamlDepth,
        " levels deep or has more than ", kMaxYamlNodes,
        " values (counting each use of an alias)"));
  }
  return node;
}

SourceMap::SourceMap(std::string filename) { segments_.push_back({1, std::move(filename), true}); }

void SourceMap::Add(int first_line, std::string name, bool numbered) {
  segments_.push_back({first_line, std::move(name), numbered});
}

std::string SourceMap::Locate(int line) const {
  if (line <= 0) return segments_.front().name;
  const Segment* s = &segments_.front();
  for (const auto& seg : segments_) {
    if (seg.first_line <= line) s = &seg;
  }
  if (!s->numbered) return s->name;
  return absl::StrCat(s->name, ":", line - s->first_line + 1);
}

absl::StatusOr<YAML::Node> LoadYamlFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("config file '", path, "' does not exist or cannot be read"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseYaml(ss.str(), path);
}

std::string EmitYaml(const YAML::Node& node) {
  YAML::Emitter out;
  out << node;
  return std::string(out.c_str()) + "\n";
}

std::string YamlToJson(const YAML::Node& node) {
  std::string out;
  ToJson(node, &out);
  return out;
}

std::string DidYouMean(absl::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    size_t d = EditDistance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

ObjectReader::ObjectReader(const YAML::Node& node, std::string path, std::string filename)
    : ObjectReader(node, std::move(path), std::make_shared<const SourceMap>(std::move(filename)),
                   std::make_shared<absl::Status>()) {}

ObjectReader::ObjectReader(const YAML::Node& node, std::string path,
                           std::shared_ptr<const SourceMap> sources)
    : ObjectReader(node, std::move(path), std::move(sources), std::make_shared<absl::Status>()) {}

ObjectReader::ObjectReader(const YAML::Node& node, std::string path,
                           std::shared_ptr<const SourceMap> sources,
                           std::shared_ptr<absl::Status> status)
    : node_(node), path_(std::move(path)), sources_(std::move(sources)),
      status_(std::move(status)) {
  if (!node_.IsMap() && !(node_.IsNull() && path_.empty())) {
    Error("", absl::StrCat("expected a mapping, got ", Quote(node_)));
  }
}

std::string ObjectReader::PathOf(const std::string& key) const {
  if (key.empty()) return path_.empty() ? "(top level)" : path_;
  return path_.empty() ? key : absl::StrCat(path_, ".", key);
}

std::string ObjectReader::Where(const std::string& key) const {
  int line = Line(node_);
  if (!key.empty() && node_.IsMap() && node_[key]) line = Line(node_[key]);
  return absl::StrCat(sources_->Locate(line), ": ");
}

void ObjectReader::Error(const std::string& key, const std::string& message) {
  if (!status_->ok()) return;
  *status_ = absl::InvalidArgumentError(absl::StrCat(Where(key), PathOf(key), ": ", message));
}

void ObjectReader::Fail(const std::string& key, const std::string& message) {
  Error(key, message);
}

void ObjectReader::FailAt(const YAML::Node& node, const std::string& path,
                          const std::string& message) {
  if (!status_->ok()) return;
  *status_ = absl::InvalidArgumentError(
      absl::StrCat(sources_->Locate(Line(node)), ": ", path, ": ", message));
}

bool ObjectReader::Has(const std::string& key) const {
  return node_.IsMap() && node_[key] && !node_[key].IsNull();
}

const YAML::Node* ObjectReader::Scalar(const std::string& key, const char* expected,
                                       YAML::Node* holder, bool required) {
  known_.insert(key);
  if (!Has(key)) {
    if (required) Error(key, absl::StrCat("is required (", expected, ")"));
    return nullptr;
  }
  *holder = node_[key];
  if (!holder->IsScalar()) {
    Error(key, absl::StrCat("expected ", expected, ", got ", Quote(*holder)));
    return nullptr;
  }
  return holder;
}

void ObjectReader::String(const std::string& key, std::string* out, bool required) {
  YAML::Node n;
  auto* v = Scalar(key, "a string", &n, required);
  if (v == nullptr) return;
  if (static_cast<int64_t>(v->Scalar().size()) > kMaxStringBytes) {
    Error(key, TooLong(v->Scalar().size()));
    return;
  }
  *out = v->Scalar();
}

void ObjectReader::Int(const std::string& key, int64_t* out, int64_t min, int64_t max,
                       bool required) {
  std::string expected =
      min == std::numeric_limits<int64_t>::min() || min <= std::numeric_limits<int>::min()
          ? "an integer"
          : (max == std::numeric_limits<int>::max() || max == std::numeric_limits<int64_t>::max()
                 ? absl::StrCat("an integer >= ", min)
                                                    : absl::StrCat("an integer in [", min, ", ", max, "]"));
  YAML::Node n;
  auto* v = Scalar(key, expected.c_str(), &n, required);
  if (!v) return;
  int64_t value;
  if (!absl::SimpleAtoi(v->Scalar(), &value) || value < min || value > max) {
    Error(key, absl::StrCat("expected ", expected, ", got ", Quote(*v)));
    return;
  }
  *out = value;
}

void ObjectReader::Int(const std::string& key, int* out, int64_t min, int64_t max, bool required) {
  int64_t value = *out;
  Int(key, &value, min, max, required);
  *out = static_cast<int>(value);
}

void ObjectReader::Double(const std::string& key, double* out, bool required) {
  YAML::Node n;
  auto* v = Scalar(key, "a number", &n, required);
  if (!v) return;
  double value;
  if (!absl::SimpleAtod(v->Scalar(), &value) || !std::isfinite(value)) {
    Error(key, absl::StrCat("expected a number, got ", Quote(*v)));
    return;
  }
  *out = value;
}

void ObjectReader::Bool(const std::string& key, bool* out) {
  YAML::Node n;
  auto* v = Scalar(key, "true or false", &n, false);
  if (!v) return;
  std::string s = absl::AsciiStrToLower(v->Scalar());
  if (s == "true" || s == "yes" || s == "on") {
    *out = true;
  } else if (s == "false" || s == "no" || s == "off") {
    *out = false;
  } else {
    Error(key, absl::StrCat("expected true or false, got ", Quote(*v)));
  }
}

void ObjectReader::Duration(const std::string& key, absl::Duration* out) {
  YAML::Node n;
  auto* v = Scalar(key, "a duration such as 30s, 5m or 1h", &n, false);
  if (!v) return;
  std::string s = v->Scalar();
  double seconds;
  if (absl::SimpleAtod(s, &seconds) && seconds >= 0) {
    *out = absl::Seconds(seconds);
    return;
  }
  absl::Duration d;
  if (!absl::ParseDuration(s, &d) || d < absl::ZeroDuration()) {
    Error(key, absl::StrCat("expected a duration such as 30s, 5m or 1h, got ", Quote(*v)));
    return;
  }
  *out = d;
}

void ObjectReader::StringList(const std::string& key, std::vector<std::string>* out,
                              bool allow_scalar, bool required) {
  known_.insert(key);
  if (!Has(key)) {
    if (required) Error(key, "is required (a list of strings)");
    return;
  }
  const YAML::Node n = node_[key];
  if (n.IsScalar() && allow_scalar) {
    if (static_cast<int64_t>(n.Scalar().size()) > kMaxStringBytes) {
      Error(key, TooLong(n.Scalar().size()));
      return;
    }
    *out = absl::StrSplit(n.Scalar(), absl::ByAnyChar(" \t"), absl::SkipEmpty());
    return;
  }
  if (!n.IsSequence()) {
    Error(key, absl::StrCat("expected a list of strings, got ", Quote(n)));
    return;
  }
  std::vector<std::string> items;
  for (size_t i = 0; i < n.size(); ++i) {
    if (!n[i].IsScalar()) {
      Error(key, absl::StrCat("item ", i, ": expected a string, got ", Quote(n[i])));
      return;
    }
    if (static_cast<int64_t>(n[i].Scalar().size()) > kMaxStringBytes) {
      Error(key, absl::StrCat("item ", i, ": ", TooLong(n[i].Scalar().size())));
      return;
    }
    items.push_back(n[i].Scalar());
  }
  *out = std::move(items);
}

void ObjectReader::Object(const std::string& key, const std::function<void(ObjectReader&)>& read,
                          bool required) {
  known_.insert(key);
  if (!Has(key)) {
    if (required) Error(key, "is required");
    return;
  }
  ObjectReader child(node_[key], PathOf(key), sources_, status_);
  if (!status_->ok()) return;
  read(child);
  child.Finish().IgnoreError();  // Recorded in the shared status.
}

void ObjectReader::List(const std::string& key,
                        const std::function<void(ObjectReader& item, size_t i)>& read,
                        bool required) {
  known_.insert(key);
  if (!Has(key)) {
    if (required) Error(key, "is required (a list)");
    return;
  }
  const YAML::Node list = node_[key];
  if (!list.IsSequence()) {
    Error(key, absl::StrCat("expected a list, got ", Quote(list)));
    return;
  }
  for (size_t i = 0; i < list.size() && status_->ok(); ++i) {
    ObjectReader item(list[i], absl::StrCat(PathOf(key), "[", i, "]"), sources_, status_);
    if (!status_->ok()) return;
    read(item, i);
    item.Finish().IgnoreError();
  }
}

void ObjectReader::Any(const std::string& key, YAML::Node* out) {
  known_.insert(key);
  if (node_.IsMap() && node_[key]) *out = node_[key];
}

void ObjectReader::Known(const std::string& key) { known_.insert(key); }

absl::Status ObjectReader::Finish() {
  if (status_->ok() && node_.IsMap()) {
    std::set<std::string> seen;
    for (const auto& kv : node_) {
      std::string key = kv.first.Scalar();
      if (!seen.insert(key).second) {
        *status_ = absl::InvalidArgumentError(absl::StrCat(
            sources_->Locate(Line(kv.first)), ": ", PathOf(key), ": the key appears twice"));
        break;
      }
    }
  }
  if (status_->ok() && node_.IsMap()) {
    for (const auto& kv : node_) {
      std::string key = kv.first.Scalar();
      if (known_.count(key)) continue;
      std::vector<std::string> candidates(known_.begin(), known_.end());
      std::string suggestion = DidYouMean(key, candidates);
      std::string message = "unknown key";
      if (!suggestion.empty()) absl::StrAppend(&message, " (did you mean '", suggestion, "'?)");
      Error(key, message);
      break;
    }
  }
  return *status_;
}

}  // namespace det::config
