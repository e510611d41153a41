#include "common/config/config_merge.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace det::config {
namespace {

constexpr char kTemplateKey[] = "template";

bool Absent(const YAML::Node& n) { return !n.IsDefined() || n.IsNull(); }

int LineCount(absl::string_view text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
}

int LineOf(const YAML::Node& n) { return n.Mark().is_null() ? 0 : n.Mark().line + 1; }

// The `container_path` of a list item, or "" when it has none.
std::string ContainerPath(const YAML::Node& item) {
  if (!item.IsMap()) return "";
  const YAML::Node p = item["container_path"];
  return p.IsDefined() && p.IsScalar() ? p.Scalar() : "";
}

YAML::Node Merge(const YAML::Node& tmpl, const YAML::Node& config, const std::string& path) {
  if (Absent(config)) return tmpl.IsDefined() ? tmpl : config;
  if (Absent(tmpl)) return config;
  if (tmpl.IsMap() && config.IsMap()) {
    YAML::Node out(YAML::NodeType::Map);
    for (const auto& kv : config) {
      const std::string key = kv.first.Scalar();
      const YAML::Node t = tmpl[key];
      out[kv.first] = Merge(t, kv.second, path.empty() ? key : absl::StrCat(path, ".", key));
    }
    for (const auto& kv : tmpl) {
      if (!config[kv.first.Scalar()].IsDefined()) out[kv.first] = kv.second;
    }
    return out;
  }
  if (tmpl.IsSequence() && config.IsSequence()) {
    const bool by_container_path = path == "bind_mounts" || path == "resources.devices";
    std::set<std::string> used;
    if (by_container_path) {
      for (const auto& item : config) {
        std::string p = ContainerPath(item);
        if (!p.empty()) used.insert(p);
      }
    }
    YAML::Node out(YAML::NodeType::Sequence);
    for (const auto& item : tmpl) {
      if (by_container_path && used.count(ContainerPath(item))) continue;
      out.push_back(item);
    }
    for (const auto& item : config) out.push_back(item);
    return out;
  }
  return config;
}

absl::Status NotAMapping(const SourceMap& sources, const YAML::Node& node, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(sources.Locate(LineOf(node)), ": ", what, " must be a mapping of keys to values"));
}

}  // namespace

YAML::Node MergeTemplate(const YAML::Node& tmpl, const YAML::Node& config) {
  return Merge(tmpl, config, "");
}

absl::Status SetPath(YAML::Node root, const std::string& key_path, const YAML::Node& value,
                     const std::string& what) {
  std::vector<std::string> keys = absl::StrSplit(key_path, '.');
  for (const auto& k : keys) {
    if (k.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": expected KEY.PATH=VALUE, got an empty key in '", key_path, "'"));
    }
  }
  YAML::Node cur;
  cur.reset(root);
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    YAML::Node next = cur[keys[i]];
    if (Absent(next)) {
      cur[keys[i]] = YAML::Node(YAML::NodeType::Map);
      next.reset(cur[keys[i]]);
    } else if (!next.IsMap()) {
      std::vector<std::string> prefix(keys.begin(), keys.begin() + i + 1);
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", absl::StrJoin(prefix, "."),
                                                     " is not a mapping, so it has no key '",
                                                     keys[i + 1], "'"));
    }
    cur.reset(next);
  }
  cur[keys.back()] = value;
  return absl::OkStatus();
}

absl::StatusOr<YAML::Node> ParseTemplate(absl::string_view yaml, const std::string& source,
                                         int first_line) {
  absl::StatusOr<YAML::Node> node = ParseYaml(yaml, source, first_line);
  if (!node.ok()) return node.status();
  SourceMap sources(source);
  if (first_line > 1) sources.Add(first_line, source, true);
  if (!node->IsMap()) return NotAMapping(sources, *node, source);
  const YAML::Node nested = (*node)[kTemplateKey];
  if (nested.IsDefined()) {
    return absl::InvalidArgumentError(absl::StrCat(
        sources.Locate(LineOf(nested)), ": template: a template cannot use another template",
        nested.IsScalar() ? absl::StrCat(" (it names '", nested.Scalar(), "')") : ""));
  }
  return node;
}

absl::StatusOr<AssembledConfig> AssembleConfig(const ConfigInput& input,
                                               const TemplateLookup& lookup) {
  auto sources = std::make_shared<SourceMap>(input.config_path);
  absl::StatusOr<YAML::Node> config = ParseYaml(input.config_yaml, input.config_path);
  if (!config.ok()) return config.status();
  int next_line = LineCount(input.config_yaml) + 1;

  AssembledConfig out;
  out.template_name = input.template_name;
  if (config->IsMap()) {
    const YAML::Node named = (*config)[kTemplateKey];
    if (named.IsDefined() && !named.IsNull()) {
      if (!named.IsScalar() || named.Scalar().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            sources->Locate(LineOf(named)), ": template: expected the name of a template"));
      }
      if (!out.template_name.empty() && out.template_name != named.Scalar()) {
        return absl::InvalidArgumentError(absl::StrCat(
            sources->Locate(LineOf(named)), ": template: the config names template '",
            named.Scalar(), "' but --template names '", out.template_name,
            "'; an experiment uses at most one template"));
      }
      out.template_name = named.Scalar();
    }
  }

  YAML::Node root = *config;
  if (!out.template_name.empty()) {
    if (!config->IsMap()) return NotAMapping(*sources, *config, input.config_path);
    absl::StatusOr<std::string> text = lookup(out.template_name);
    if (!text.ok()) {
      if (text.status().code() == absl::StatusCode::kNotFound) {
        return absl::NotFoundError(absl::StrCat("template '", out.template_name,
                                                "' does not exist (det template list shows "
                                                "the stored templates)"));
      }
      return text.status();
    }
    const std::string source = absl::StrCat("template ", out.template_name);
    absl::StatusOr<YAML::Node> tmpl = ParseTemplate(*text, source, next_line);
    if (!tmpl.ok()) return tmpl.status();
    sources->Add(next_line, source, true);
    next_line += LineCount(*text);
    root = MergeTemplate(*tmpl, *config);
  }
  if (root.IsMap()) root.remove(kTemplateKey);

  for (const std::string& item : input.overrides) {
    const std::string what = absl::StrCat("--config ", item);
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": expected KEY.PATH=VALUE"));
    }
    std::string key = item.substr(0, eq);
    std::string value_text = item.substr(eq + 1);
    if (key == kTemplateKey || key.rfind(absl::StrCat(kTemplateKey, "."), 0) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": choose the template with --template, not --config"));
    }
    if (!root.IsMap()) return NotAMapping(*sources, root, input.config_path);
    YAML::Node value;
    if (value_text.find_first_not_of(" \t") == std::string::npos) {
      value = YAML::Node(value_text);
    } else {
      absl::StatusOr<YAML::Node> parsed = ParseYamlValue(value_text, what, next_line);
      if (!parsed.ok()) {
        // "WHAT:1: malformed YAML: ..." without the line of a one-line value.
        std::string message(parsed.status().message());
        size_t at = message.find(": malformed YAML");
        return absl::InvalidArgumentError(
            at == std::string::npos ? message : what + message.substr(at));
      }
      value = *parsed;
    }
    sources->Add(next_line, what, false);
    next_line += LineCount(value_text);
    absl::Status st = SetPath(root, key, value, what);
    if (!st.ok()) return st;
  }
  out.root = root;
  out.sources = std::move(sources);
  return out;
}

}  // namespace det::config
