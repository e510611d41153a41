// Template merge and --config overrides (reference "Configuration Templates").
#include "common/config/config_merge.h"

#include <map>
#include <string>
#include <vector>

#include "common/config/experiment_config.h"
#include "common/config/yaml_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::config {
namespace {

using ::testing::HasSubstr;

YAML::Node Yaml(const std::string& text) {
  auto node = ParseYaml(text, "test");
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? *node : YAML::Node();
}

struct MergeCase {
  std::string what;
  std::string tmpl;
  std::string config;
  // The merged document as JSON (keys in merge order: the config's, then the template's).
  std::string merged;
};

TEST(MergeTemplate, Rules) {
  const std::vector<MergeCase> cases = {
      {"scalars: the config wins; other keys from either side",
       "{a: 1, b: 2}", "{b: 3, c: 4}", R"({"b":3,"c":4,"a":1})"},
      {"nested objects merge key by key",
       "{resources: {slots_per_trial: 2, priority: 10}}", "{resources: {priority: 5}}",
       R"({"resources":{"priority":5,"slots_per_trial":2}})"},
      {"deeper objects too",
       "{data: {a: {x: 1, y: 2}, b: t}}", "{data: {a: {y: 3, z: 4}}}",
       R"({"data":{"a":{"y":3,"z":4,"x":1},"b":"t"}})"},
      {"lists: the template's items, then the config's",
       "{labels: [a, b]}", "{labels: [c, a]}", R"({"labels":["a","b","c","a"]})"},
      {"lists nested in objects",
       "{data: {files: [x]}}", "{data: {files: [y]}}", R"({"data":{"files":["x","y"]}})"},
      {"bind_mounts: a template mount on a container_path the config uses is dropped",
       "{bind_mounts: [{host_path: /t/data, container_path: /data}, {host_path: /t/cache, container_path: /cache}]}",
       "{bind_mounts: [{host_path: /c/data, container_path: /data}]}",
       R"({"bind_mounts":[{"host_path":"/t/cache","container_path":"/cache"},{"host_path":"/c/data","container_path":"/data"}]})"},
      {"resources.devices: the same",
       "{resources: {devices: [{host_path: /dev/a, container_path: /dev/x}, {host_path: /dev/b, container_path: /dev/y}]}}",
       "{resources: {devices: [{host_path: /dev/c, container_path: /dev/y}]}}",
       R"({"resources":{"devices":[{"host_path":"/dev/a","container_path":"/dev/x"},{"host_path":"/dev/c","container_path":"/dev/y"}]}})"},
      {"the exception holds only for those two paths",
       "{data: {bind_mounts: [{container_path: /d}]}, devices: [{container_path: /x}]}",
       "{data: {bind_mounts: [{container_path: /d}]}, devices: [{container_path: /x}]}",
       R"({"data":{"bind_mounts":[{"container_path":"/d"},{"container_path":"/d"}]},"devices":[{"container_path":"/x"},{"container_path":"/x"}]})"},
      {"bind mounts without a container_path are kept",
       "{bind_mounts: [{host_path: /a}]}", "{bind_mounts: [{host_path: /b}]}",
       R"({"bind_mounts":[{"host_path":"/a"},{"host_path":"/b"}]})"},
      {"values of different kinds: the config's",
       "{a: [1], b: {x: 1}, c: 5}", "{a: 2, b: [y], c: {z: 1}}", R"({"a":2,"b":["y"],"c":{"z":1}})"},
      {"a key with no value in the config counts as absent",
       "{resources: {slots_per_trial: 2}, description: t}", "{resources: , description: }",
       R"({"resources":{"slots_per_trial":2},"description":"t"})"},
      {"an empty template changes nothing", "{}", "{a: 1, b: }", R"({"a":1,"b":null})"},
      {"an empty config takes the template", "{a: {b: [1]}}", "{}", R"({"a":{"b":[1]}})"},
  };
  for (const auto& tc : cases) {
    SCOPED_TRACE(tc.what);
    YAML::Node tmpl = Yaml(tc.tmpl), config = Yaml(tc.config);
    std::string tmpl_before = YamlToJson(tmpl), config_before = YamlToJson(config);
    EXPECT_EQ(YamlToJson(MergeTemplate(tmpl, config)), tc.merged);
    // The inputs are left as they were.
    EXPECT_EQ(YamlToJson(tmpl), tmpl_before);
    EXPECT_EQ(YamlToJson(config), config_before);
  }
}

// A store of templates for AssembleConfig.
TemplateLookup Store(std::map<std::string, std::string> templates) {
  return [templates](const std::string& name) -> absl::StatusOr<std::string> {
    auto it = templates.find(name);
    if (it == templates.end()) return absl::NotFoundError("no such template");
    return it->second;
  };
}

ConfigInput Input(const std::string& config, const std::string& tmpl = "",
                  std::vector<std::string> overrides = {}) {
  ConfigInput in;
  in.config_yaml = config;
  in.config_path = "exp.yaml";
  in.template_name = tmpl;
  in.overrides = std::move(overrides);
  return in;
}

struct AssembleCase {
  std::string what;
  ConfigInput input;
  // JSON of the result, or the error message (starting with "error: ").
  std::string want;
};

TEST(AssembleConfig, TemplatesAndOverrides) {
  auto templates = Store({
      {"base", "resources: {slots_per_trial: 2}\nlabels: [t]\n"},
      {"nested", "description: x\ntemplate: other\n"},
      {"list", "- a\n- b\n"},
  });
  const std::vector<AssembleCase> cases = {
      {"--template merges", Input("labels: [c]\n", "base"),
       R"({"labels":["t","c"],"resources":{"slots_per_trial":2}})"},
      {"the config's own template key, removed from the result", Input("template: base\nname: e\n"),
       R"({"name":"e","resources":{"slots_per_trial":2},"labels":["t"]})"},
      {"both, naming the same template", Input("template: base\n", "base"),
       R"({"resources":{"slots_per_trial":2},"labels":["t"]})"},
      {"both, naming different templates", Input("name: e\ntemplate: other\n", "base"),
       "error: exp.yaml:2: template: the config names template 'other' but --template names "
       "'base'; an experiment uses at most one template"},
      {"a template naming a template", Input("name: e\n", "nested"),
       "error: template nested:2: template: a template cannot use another template (it names "
       "'other')"},
      {"a missing template", Input("name: e\n", "nope"),
       "error: template 'nope' does not exist (det template list shows the stored templates)"},
      {"a missing template named by the config", Input("template: nope\n"),
       "error: template 'nope' does not exist (det template list shows the stored templates)"},
      {"a template that is not a mapping", Input("name: e\n", "list"),
       "error: template list:1: template list must be a mapping of keys to values"},
      {"a template key that is not a name", Input("template: [a]\n"),
       "error: exp.yaml:1: template: expected the name of a template"},
      {"overrides after the template, creating mappings on the way",
       Input("resources: {priority: 3}\n", "base",
             {"resources.slots_per_trial=4", "data.dir=/d", "labels=[x, y]", "name=8"}),
       R"({"resources":{"priority":3,"slots_per_trial":4},"labels":["x","y"],"data":{"dir":"/d"},"name":8})"},
      {"an empty override value is an empty string", Input("{}\n", "", {"description="}),
       R"({"description":""})"},
      {"an override value that is a mapping replaces", Input("data: {a: 1}\n", "", {"data={b: 2}"}),
       R"({"data":{"b":2}})"},
      {"an override without '='", Input("{}\n", "", {"resources.slots_per_trial"}),
       "error: --config resources.slots_per_trial: expected KEY.PATH=VALUE"},
      {"an override with an empty key", Input("{}\n", "", {"a..b=1"}),
       "error: --config a..b=1: expected KEY.PATH=VALUE, got an empty key in 'a..b'"},
      {"an override through a non-mapping", Input("name: e\n", "", {"name.first=x"}),
       "error: --config name.first=x: name is not a mapping, so it has no key 'first'"},
      {"an override of the template", Input("{}\n", "", {"template=base"}),
       "error: --config template=base: choose the template with --template, not --config"},
      {"malformed YAML in an override", Input("{}\n", "", {"a=[1"}),
       "error: --config a=[1: malformed YAML: end of sequence flow not found"},
  };
  for (const auto& tc : cases) {
    SCOPED_TRACE(tc.what);
    auto out = AssembleConfig(tc.input, templates);
    if (tc.want.rfind("error: ", 0) == 0) {
      ASSERT_FALSE(out.ok());
      EXPECT_EQ(std::string(out.status().message()), tc.want.substr(7));
    } else {
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(YamlToJson(out->root), tc.want);
    }
  }
}

TEST(AssembleConfig, ErrorsNameWhereTheValueCameFrom) {
  auto templates = Store({{"base", "description: t\nresources:\n  slots_per_trial: eight\n"},
                          {"typo", "descripton: t\n"},
                          {"good", "description: t\n"}});
  const std::string config =
      "entrypoint: x\nsearcher: {name: single, metric: m, max_length: {batches: 1}}\n";
  struct Case {
    ConfigInput input;
    std::string message;
  };
  const std::vector<Case> cases = {
      {Input(config, "base"),
       "template base:3: resources.slots_per_trial: expected an integer >= 0, got \"eight\""},
      {Input(config, "typo"), "template typo:1: descripton: unknown key (did you mean 'description'?)"},
      {Input(config, "good", {"resources.slots_per_trial=eight"}),
       "--config resources.slots_per_trial=eight: resources.slots_per_trial: expected an integer "
       ">= 0, got \"eight\""},
      {Input(config + "max_restarts: -1\n", "good"),
       "exp.yaml:3: max_restarts: expected an integer in [0, 1000000], got \"-1\""},
      {Input(config, "good", {"resources.slot_per_trial=2"}),
       "--config resources.slot_per_trial=2: resources.slot_per_trial: unknown key (did you mean "
       "'slots_per_trial'?)"},
  };
  for (const auto& c : cases) {
    auto parsed = ParseExperimentConfig(c.input, templates, 1);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(std::string(parsed.status().message()), c.message);
  }
}

TEST(AssembleConfig, StoredConfigIsMergedAndIndependentOfTheTemplate) {
  std::map<std::string, std::string> stored = {{"base", "resources: {priority: 7}\n"}};
  TemplateLookup lookup = [&stored](const std::string& name) -> absl::StatusOr<std::string> {
    return stored.at(name);
  };
  ConfigInput in = Input("entrypoint: x\nsearcher: {name: single, metric: m, max_length: {batches: 1}}\n", "base");
  auto first = ParseExperimentConfig(in, lookup, 1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->config.resources.priority, 7);
  EXPECT_EQ(first->template_name, "base");
  EXPECT_EQ(first->effective_yaml.find("template"), std::string::npos);
  stored["base"] = "resources: {priority: 9}\n";
  // The stored effective config parses to the same config on its own, whatever the
  // template has become.
  auto again = ParseExperimentConfig(first->effective_yaml, "stored", 2);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->config.resources.priority, 7);
  EXPECT_EQ(again->effective_yaml, first->effective_yaml);
}

}  // namespace
}  // namespace det::config
