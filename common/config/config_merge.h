// Assembling an experiment config from its file, a stored template and --config overrides
// (reference "Configuration Templates", "Merge Behavior"). Pure functions over YAML nodes;
// private to common/config (and its tests and fuzz target), since they expose yaml-cpp.
#ifndef DET_COMMON_CONFIG_CONFIG_MERGE_H_
#define DET_COMMON_CONFIG_CONFIG_MERGE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/config/config_input.h"
#include "common/config/yaml_reader.h"
#include "yaml-cpp/yaml.h"

namespace det::config {

// Merges template `tmpl` under `config`:
//   - a key in only one of them keeps that one's value;
//   - both scalars (or values of different kinds): the config's value;
//   - both mappings: merged recursively, key by key;
//   - both lists: the template's items, then the config's; except in `bind_mounts` and
//     `resources.devices`, where a template item whose `container_path` is also the
//     `container_path` of one of the config's items is dropped.
// A null value (a key written with nothing after it) counts as absent. Neither input is
// modified; the result shares their nodes, so their line marks survive. Keys come in the
// config's order, then the template's other keys in its order.
YAML::Node MergeTemplate(const YAML::Node& tmpl, const YAML::Node& config);

// Sets the dotted `key_path` ("resources.slots_per_trial") of mapping `root` to `value`,
// creating mappings on the way. InvalidArgument "<what>: ..." when a key on the path is
// empty or names something other than a mapping.
absl::Status SetPath(YAML::Node root, const std::string& key_path, const YAML::Node& value,
                     const std::string& what);

// The assembled document: MergeTemplate(template, config), then every override, without
// the `template` key. `sources` names the file, template or override each node came from.
struct AssembledConfig {
  YAML::Node root;
  std::shared_ptr<const SourceMap> sources;
  // The template merged in, or "".
  std::string template_name;
};

// Errors, all naming what they are about:
//   - malformed YAML in the config, the template or an override value;
//   - `template` key that is not a string, or that differs from input.template_name;
//   - a template named but missing: NotFound "template 'NAME' does not exist";
//   - a template that is not a mapping or itself names a template ("a template cannot
//     use another template");
//   - an override not of the form KEY.PATH=VALUE, or whose path crosses a non-mapping.
absl::StatusOr<AssembledConfig> AssembleConfig(const ConfigInput& input,
                                               const TemplateLookup& lookup);

// Parses a template: a YAML mapping without a `template` key. Messages are
// "SOURCE:LINE: ..." (SOURCE such as "template base" or a file name). Schema checks are
// ValidateTemplate's (experiment_config.h).
absl::StatusOr<YAML::Node> ParseTemplate(absl::string_view yaml, const std::string& source,
                                         int first_line = 1);

}  // namespace det::config

#endif  // DET_COMMON_CONFIG_CONFIG_MERGE_H_
