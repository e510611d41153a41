// The experiment config schema: every section, its defaults, and each validation message.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/experiment_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::config {
namespace {

using ::testing::HasSubstr;

constexpr char kMinimal[] = R"(entrypoint: train
searcher:
  name: single
  metric: loss
  max_length:
    batches: 10
)";

std::string Error(const std::string& yaml) {
  auto parsed = ParseExperimentConfig(yaml, "exp.yaml", 7);
  if (parsed.ok()) return "(no error)";
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(parsed.status().message());
}

std::string Searcher(const std::string& searcher, const std::string& rest = "") {
  return "entrypoint: x\nsearcher: " + searcher + "\n" + rest;
}

struct ErrorCase {
  std::string yaml;
  std::string message;
};

TEST(ExperimentConfig, ValidationErrors) {
  const std::string m = kMinimal;  // 6 lines: what is appended starts at line 7.
  auto non_finite = [](const std::string& where, const std::string& value) {
    return absl::StrCat("exp.yaml:", where, ": '", value,
                        "' is not a finite number, and workers get this section as JSON, which "
                        "has none; write a finite number, or a string your code converts");
  };
  const std::vector<ErrorCase> cases = {
      // Types, ranges, unknown and repeated keys.
      {m + "resources:\n  slots_per_trial: eight\n",
       "exp.yaml:8: resources.slots_per_trial: expected an integer >= 0, got \"eight\""},
      {m + "resources: {priority: 100}\n",
       "exp.yaml:7: resources.priority: expected an integer in [1, 99], got \"100\""},
      {m + "max_restart: 3\n", "exp.yaml:7: max_restart: unknown key (did you mean 'max_restarts'?)"},
      // Worker settings, validated here once (the harnesses read them from the TrialSpec).
      {m + "checkpoint_policy: sometimes\n",
       "exp.yaml:7: checkpoint_policy: expected best, all or none, got \"sometimes\""},
      {m + "optimizations:\n  tensor_fusion_threshold: 0\n",
       "exp.yaml:8: optimizations.tensor_fusion_threshold: expected a number of MB in (0, "
       "1048576], got 0"},
      {m + "optimizations: {aggregation_frequency: 0}\n",
       "exp.yaml:7: optimizations.aggregation_frequency: expected an integer in [1, 1000000], "
       "got \"0\""},
      {m + "data: [1, 2]\n", "exp.yaml:7: data: expected a mapping"},
      {m + "max_restarts: 1\nmax_restarts: 2\n", "exp.yaml:8: max_restarts: the key appears twice"},
      {"[1, 2]\n", "exp.yaml:1: (top level): expected a mapping, got a list"},
      {"entrypoint: []\nsearcher: {name: single, metric: m, max_length: {batches: 1}}\n",
       "exp.yaml:1: entrypoint: must name a program to run"},
      {m + "min_validation_period: {epochs: 1}\n",
       "exp.yaml:7: min_validation_period: a length in epochs needs records_per_epoch and "
       "hyperparameters.global_batch_size"},
      // Limits: lengths whose conversion to batches would overflow, strings and documents
      // too long (messages never echo a long value back), text that is not UTF-8.
      {m + "records_per_epoch: 1000000000000000\nhyperparameters: {global_batch_size: 1}\n"
           "min_validation_period: {epochs: 10000}\n",
       "exp.yaml:9: min_validation_period: 10000 epochs of 1000000000000000 batches is more "
       "than 1000000000000 batches, the longest length accepted"},
      {m + "records_per_epoch: 9999999999999999999\n",
       "exp.yaml:7: records_per_epoch: expected an integer in [0, 1000000000000000], got "
       "\"9999999999999999999\""},
      {m + "min_checkpoint_period: {batches: 1000000000001}\n",
       "exp.yaml:7: min_checkpoint_period.batches: expected an integer in [0, 1000000000000], "
       "got \"1000000000001\""},
      {m + "description: " + std::string(70000, 'x') + "\n",
       "exp.yaml:7: description: a string of 70000 bytes; at most 64 KiB is accepted"},
      {m + "labels: [a, " + std::string(70000, 'y') + "]\n",
       "exp.yaml:7: labels: item 1: a string of 70000 bytes; at most 64 KiB is accepted"},
      {m + "max_restarts: " + std::string(100, '9') + "\n",
       "exp.yaml:7: max_restarts: expected an integer in [0, 1000000], got \"" +
           std::string(80, '9') + "...\" (100 bytes)"},
      {m + "description: " + std::string(2 << 20, 'x') + "\n",
       "exp.yaml: the document is 2.0 MiB; at most 1024 KiB is accepted"},
      {m + "name: caf\xc3\xa9\ndescription: \"\xff\"\n",
       "exp.yaml: not valid UTF-8 at line 8, byte offset " + std::to_string(m.size() + 26) +
           " (0xff); save the file as UTF-8"},
      {m + "environment:\n  environment_variables: [FOO]\n",
       "exp.yaml:8: environment.environment_variables: expected NAME=VALUE items, got \"FOO\""},
      // Hyperparameters.
      // YAML's infinities and NaN have no JSON form (workers get hyperparameters and data as
      // JSON): refused, never turned into the strings ".inf" / ".nan".
      {m + "hyperparameters:\n  x: .inf\n", non_finite("8: hyperparameters.x", ".inf")},
      {m + "hyperparameters:\n  g:\n    y: -.Inf\n", non_finite("9: hyperparameters.g.y", "-.Inf")},
      {m + "hyperparameters:\n  z: {type: const, val: {a: [1, .nan]}}\n",
       non_finite("8: hyperparameters.z.val.a[1]", ".nan")},
      {m + "hyperparameters:\n  c: {type: categorical, vals: [1, .inf]}\n",
       non_finite("8: hyperparameters.c.vals[1]", ".inf")},
      {m + "data:\n  limit: .inf\n", non_finite("8: data.limit", ".inf")},
      {m + "hyperparameters:\n  lr: {type: loga, minval: 1, maxval: 2}\n",
       "exp.yaml:8: hyperparameters.lr.type: expected one of const, int, double, log, "
       "categorical, got \"loga\""},
      {m + "hyperparameters:\n  n: {type: int, minval: 1.5, maxval: 3}\n",
       "exp.yaml:8: hyperparameters.n.minval: expected an integer, got \"1.5\""},
      {m + "hyperparameters:\n  n: {type: int, minval: 5, maxval: 3}\n",
       "exp.yaml:8: hyperparameters.n.maxval: must be >= minval"},
      {m + "hyperparameters:\n  lr: {type: log, minval: -4, maxval: -1, base: 0}\n",
       "exp.yaml:8: hyperparameters.lr.base: expected a number > 0, got \"0\""},
      {m + "hyperparameters:\n  lr: {type: log, minval: 1, maxval: 400}\n",
       "exp.yaml:8: hyperparameters.lr.maxval: base^minval and base^maxval must be finite numbers"},
      {m + "hyperparameters:\n  c: {type: categorical, vals: []}\n",
       "exp.yaml:8: hyperparameters.c.vals: expected a non-empty list 'vals'"},
      {m + "hyperparameters:\n  c: {type: const}\n",
       "exp.yaml:8: hyperparameters.c: a const hyperparameter needs 'val'"},
      {m + "hyperparameters:\n  c: {type: categorical, vals: [1], count: 2}\n",
       "exp.yaml:8: hyperparameters.c.count: unknown key"},
      {m + "hyperparameters:\n  opt:\n    lr: {type: double, minval: 1}\n",
       "exp.yaml:9: hyperparameters.opt.lr.maxval: is required (a number)"},
      {m + "hyperparameters:\n  global_batch_size: 0\n",
       "exp.yaml:8: hyperparameters.global_batch_size: expected a positive integer, or an int or "
       "categorical hyperparameter whose values are all positive integers, got 0"},
      // Searchers.
      {"entrypoint: x\nsearcher: {name: adaptive, metric: m, max_length: {batches: 1}}\n",
       "exp.yaml:2: searcher.name: expected one of single, grid, random, adaptive_asha, got "
       "\"adaptive\""},
      {Searcher("{name: random, metric: m, max_length: {batches: 8}}"),
       "exp.yaml:2: searcher.max_trials: is required (an integer in [1, 100000])"},
      {Searcher("{name: random, metric: m, max_length: {batches: 8}, max_trials: 2, divisor: 3}"),
       "exp.yaml:2: searcher.divisor: not a setting of the random searcher (only of adaptive_asha)"},
      {Searcher("{name: single, metric: m, max_length: {batches: 8}, max_trials: 2}"),
       "exp.yaml:2: searcher.max_trials: not a setting of the single searcher (only of "
       "adaptive_asha, random)"},
      {Searcher("{name: adaptive_asha, metric: m, max_length: {batches: 8}, max_trials: 2, divisor: 1}"),
       "exp.yaml:2: searcher.divisor: expected a number in (1, 1000], got \"1\""},
      {Searcher("{name: adaptive_asha, metric: m, max_length: {batches: 8}, max_trials: 2, mode: fast}"),
       "exp.yaml:2: searcher.mode: expected aggressive, standard or conservative, got \"fast\""},
      {Searcher("{name: adaptive_asha, metric: m, max_length: {batches: 8}, max_trials: 2, max_rungs: 0}"),
       "exp.yaml:2: searcher.max_rungs: expected an integer in [1, 32], got \"0\""},
      {Searcher("{name: adaptive_asha, metric: m, max_length: {batches: 8}, max_trials: 2, stop_once: false}"),
       "exp.yaml:2: searcher.stop_once: det's adaptive_asha stops trials and never resumes them; "
       "only true is supported"},
      {Searcher("{name: adaptive_asha, metric: m, max_length: {batches: 0}, max_trials: 2}"),
       "exp.yaml:2: searcher.max_length: adaptive_asha needs a max_length of at least 1 batch"},
      {Searcher("{name: single, metric: m, max_length: {batches: 1, epochs: 2}}"),
       "exp.yaml:2: searcher.max_length: expected exactly one of 'batches', 'epochs' or 'records', "
       "got batches and epochs"},
      {Searcher("{name: grid, metric: m, max_length: {batches: 8}}",
                "hyperparameters:\n  lr: {type: double, minval: 0, maxval: 1}\n"),
       "exp.yaml:4: hyperparameters.lr: the grid searcher needs 'count' (the number of points on "
       "this axis)"},
      {Searcher("{name: grid, metric: m, max_length: {batches: 8}}",
                "hyperparameters:\n  a: {type: double, minval: 0, maxval: 1, count: 100}\n"
                "  b: {type: double, minval: 0, maxval: 1, count: 100}\n"
                "  c: {type: categorical, vals: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]}\n"),
       "exp.yaml:4: hyperparameters: the grid has more than 100000 points (one trial each); lower "
       "the counts"},
      // bind_mounts and resources.devices.
      {m + "bind_mounts:\n  - host_path: data\n    container_path: /data\n",
       "exp.yaml:8: bind_mounts[0].host_path: expected an absolute path, got \"data\""},
      {m + "bind_mounts:\n  - container_path: /data\n",
       "exp.yaml:8: bind_mounts[0].host_path: is required (a string)"},
      {m + "bind_mounts:\n  - {host_path: /a, container_path: /data}\n  - {host_path: /b, container_path: /data}\n",
       "exp.yaml:9: bind_mounts[1].container_path: \"/data\" is already the container_path of "
       "bind_mounts[0]"},
      {m + "bind_mounts:\n  - {host_path: /a, container_path: /b, read_only: maybe}\n",
       "exp.yaml:8: bind_mounts[0].read_only: expected true or false, got \"maybe\""},
      {m + "bind_mounts:\n  - {host_path: /a, container_path: /b, propagation: up}\n",
       "exp.yaml:8: bind_mounts[0].propagation: expected one of private, rprivate, rshared, rslave, "
       "shared, slave, got \"up\""},
      {m + "bind_mounts: /a:/b\n", "exp.yaml:7: bind_mounts: expected a list, got \"/a:/b\""},
      {m + "bind_mounts: [x]\n", "exp.yaml:7: bind_mounts[0]: expected a mapping, got \"x\""},
      {m + "resources:\n  devices:\n    - {host_path: /dev/a, container_path: /dev/x, mode: rwx}\n",
       "exp.yaml:9: resources.devices[0].mode: expected some of the letters r, w and m, got \"rwx\""},
      {m + "resources:\n  devices:\n    - {host_path: /dev/a, container_path: /dev/x}\n"
           "    - {host_path: /dev/b, container_path: /dev/x}\n",
       "exp.yaml:10: resources.devices[1].container_path: \"/dev/x\" is already the container_path "
       "of resources.devices[0]"},
      // checkpoint_storage and optimizations.
      {m + "checkpoint_storage:\n  type: s3\n  bucket: b\n",
       "exp.yaml:8: checkpoint_storage.type: expected shared_fs or directory (the checkpoint "
       "storage det supports: a directory every agent mounts), got \"s3\""},
      {m + "checkpoint_storage:\n  type: directory\n  host_path: /x\n",
       "exp.yaml:8: checkpoint_storage.container_path: is required (a string)"},
      {m + "checkpoint_storage:\n  type: directory\n  container_path: /c\n  host_path: /x\n",
       "exp.yaml:10: checkpoint_storage.host_path: unknown key"},
      {m + "checkpoint_storage: {type: directory, container_path: rel}\n",
       "exp.yaml:7: checkpoint_storage.container_path: expected an absolute path, got \"rel\""},
      {m + "preemption_timeout: soon\n",
       "exp.yaml:7: preemption_timeout: expected an integer in [0, 604800], got \"soon\""},
      {m + "checkpoint_storage:\n  type: shared_fs\n",
       "exp.yaml:8: checkpoint_storage.host_path: is required (a string)"},
      {m + "checkpoint_storage: {type: shared_fs, host_path: /ckpt, storage_path: /other}\n",
       "exp.yaml:7: checkpoint_storage.storage_path: expected a path inside host_path \"/ckpt\", "
       "got \"/other\""},
      {m + "checkpoint_storage: {type: shared_fs, host_path: /ckpt, storage_path: a/../../b}\n",
       "exp.yaml:7: checkpoint_storage.storage_path: expected a path inside host_path \"/ckpt\", "
       "got \"a/../../b\""},
      {m + "checkpoint_storage: {type: shared_fs, host_path: /ckpt, save_trial_best: -1}\n",
       "exp.yaml:7: checkpoint_storage.save_trial_best: expected an integer in [0, 1000000], got "
       "\"-1\""},
      {m + "optimizations:\n  aggregation_frequency: 0\n",
       "exp.yaml:8: optimizations.aggregation_frequency: expected an integer in [1, 1000000], got "
       "\"0\""},
      {m + "optimizations:\n  average_training_metric: true\n",
       "exp.yaml:8: optimizations.average_training_metric: unknown key (did you mean "
       "'average_training_metrics'?)"},
      // Documents built to exhaust the parser's consumers.
      {m + "a: &x [*x]\n",
       "exp.yaml: the document is nested more than 64 levels deep or has more than 100000 values "
       "(counting each use of an alias)"},
      {m + "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
           "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
           "e: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n",
       "exp.yaml: the document is nested more than 64 levels deep or has more than 100000 values "
       "(counting each use of an alias)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.yaml);
    EXPECT_EQ(Error(c.yaml), c.message);
  }
}

TEST(ExperimentConfig, EverySectionAndItsDefaults) {
  auto parsed = ParseExperimentConfig(R"(name: full
entrypoint: [det-fashion-mnist, --fast]
hyperparameters:
  global_batch_size: 64
  optimizer:
    lr: {type: log, minval: -4, maxval: -1, base: 10}
    momentum: 0.9
records_per_epoch: 6400
searcher:
  name: adaptive_asha
  metric: accuracy
  smaller_is_better: false
  max_length: {epochs: 2}
  max_trials: 8
resources:
  slots_per_trial: 3
  max_slots: 6
  devices:
    - {host_path: /dev/fuse, container_path: /dev/fuse}
bind_mounts:
  - {host_path: /data, container_path: /data, read_only: true}
checkpoint_storage:
  type: shared_fs
  host_path: /ckpt
  storage_path: det
optimizations:
  aggregation_frequency: 4
environment:
  environment_variables: {A: "1"}
  image: ignored
data: {anything: [goes]}
profiling: {enabled: true}
labels: [x]
)", "exp.yaml", 99);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const ExperimentConfig& c = parsed->config;
  EXPECT_EQ(c.searcher.name, "adaptive_asha");
  EXPECT_EQ(c.searcher.max_trials, 8);
  EXPECT_EQ(c.searcher.max_concurrent_trials, 16);
  EXPECT_EQ(c.searcher.divisor, 4);
  EXPECT_EQ(c.searcher.max_rungs, 5);
  EXPECT_EQ(c.searcher.mode, "standard");
  EXPECT_FALSE(c.searcher.smaller_is_better);
  ASSERT_TRUE(c.searcher.max_length.has_value());
  EXPECT_EQ(c.searcher.max_length->Batches(c.global_batch_size, c.records_per_epoch), 200);
  EXPECT_EQ(c.resources.max_slots, 6);
  ASSERT_EQ(c.resources.devices.size(), 1u);
  EXPECT_EQ(c.resources.devices[0].mode, "mrw");
  ASSERT_EQ(c.bind_mounts.size(), 1u);
  EXPECT_TRUE(c.bind_mounts[0].read_only);
  EXPECT_EQ(c.bind_mounts[0].propagation, "rprivate");
  ASSERT_TRUE(c.checkpoint_storage.has_value());
  EXPECT_EQ(c.checkpoint_storage->storage_path, "det");
  EXPECT_EQ(c.checkpoint_storage->save_trial_best, 1);
  EXPECT_EQ(c.optimizations.aggregation_frequency, 4);
  EXPECT_TRUE(c.optimizations.average_training_metrics);
  EXPECT_EQ(c.environment_variables.at("A"), "1");
  // Nested hyperparameters, members sorted by name.
  const Hyperparameter* opt = c.hyperparameters.Find("optimizer");
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->type, Hyperparameter::Type::kObject);
  ASSERT_EQ(opt->fields.size(), 2u);
  EXPECT_EQ(opt->fields[0].name, "lr");
  EXPECT_EQ(opt->fields[0].type, Hyperparameter::Type::kLog);
  EXPECT_EQ(opt->fields[1].value_json, "0.9");
  // 64 on 3 slots: 21 each, 1 dropped. Container-only keys are accepted and named as
  // doing nothing.
  ASSERT_EQ(parsed->warnings.size(), 4u);
  EXPECT_THAT(parsed->warnings[0], HasSubstr("21 records per batch (63 per global batch; 1 dropped)"));
  EXPECT_THAT(parsed->warnings[1], HasSubstr("environment.image is not applied: det runs workers "
                                             "as processes on the agent's host"));
  EXPECT_THAT(parsed->warnings[2], HasSubstr("bind_mounts is not applied (1 mount)"));
  EXPECT_THAT(parsed->warnings[3], HasSubstr("resources.devices is not applied (1 device)"));
  for (const char* line :
       {"max_concurrent_trials: 16", "divisor: 4", "max_rungs: 5", "mode: standard",
        "stop_once: true", "mode: mrw", "propagation: rprivate", "save_experiment_best: 0",
        "save_trial_best: 1", "save_trial_latest: 1", "aggregation_frequency: 4",
        "average_training_metrics: true", "experiment_seed: 99", "priority: 42"}) {
    EXPECT_THAT(parsed->effective_yaml, HasSubstr(line));
  }
  auto again = ParseExperimentConfig(parsed->effective_yaml, "effective", 1);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->effective_yaml, parsed->effective_yaml);
}

TEST(ExperimentConfig, BareValuesAreConstants) {
  auto parsed = ParseExperimentConfig(std::string(kMinimal) + "hyperparameters:\n  a: [1, 2]\n  b: null\n  c: {type: const, val: {x: 1}}\n", "exp.yaml", 1);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const auto& f = parsed->config.hyperparameters.fields;
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].value_json, "[1,2]");
  EXPECT_EQ(f[1].value_json, "null");
  EXPECT_EQ(f[2].value_json, R"({"x":1})");
}

TEST(Templates, ValidationIsPartial) {
  // Required keys may be missing from a template; types and keys are still checked.
  EXPECT_TRUE(ValidateTemplate("resources: {slots_per_trial: 2}\nsearcher: {max_trials: 4}\n"
                               "hyperparameters: {lr: {type: double}}\n",
                               "t.yaml").ok());
  EXPECT_EQ(ValidateTemplate("searcher: {max_length: {batches: 1, epochs: 1}}\n", "t.yaml").message(),
            "t.yaml:1: searcher.max_length: expected exactly one of 'batches', 'epochs' or 'records', "
            "got batches and epochs");
  EXPECT_EQ(ValidateTemplate("bind_mounts: [{host_path: rel}]\n", "template t").message(),
            "template t:1: bind_mounts[0].host_path: expected an absolute path, got \"rel\"");
}

// Determined 0.38's config forms, accepted with its meaning (docs/configuration.md).

// Parses `yaml`, which must be accepted, and checks that its effective config parses back
// to the same config and the same YAML.
ExperimentConfig Accepted(const std::string& yaml) {
  auto parsed = ParseExperimentConfig(yaml, "exp.yaml", 7);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) return {};
  auto again = ParseExperimentConfig(parsed->effective_yaml, "effective", 99);
  EXPECT_TRUE(again.ok()) << again.status();
  if (again.ok()) {
    EXPECT_TRUE(again->config == parsed->config) << parsed->effective_yaml;
    EXPECT_EQ(again->effective_yaml, parsed->effective_yaml);
  }
  return parsed->config;
}

// The length `l` in batches for a trial of `config` with global batch size `batch`.
int64_t InBatches(const ExperimentConfig& config, const Length& l, int64_t batch) {
  return l.Batches(batch, config.records_per_epoch);
}

TEST(Determined038, SearchersWithoutALength) {
  // single, random and grid need no max_length: the script decides the length.
  for (const std::string& searcher :
       {"{name: single, metric: loss}", "{name: random, metric: loss, max_trials: 3}",
        "{name: grid, metric: loss}"}) {
    SCOPED_TRACE(searcher);
    ExperimentConfig c = Accepted(Searcher(searcher, "hyperparameters: {a: 1}\n"));
    EXPECT_FALSE(c.searcher.max_length.has_value());
    EXPECT_EQ(c.searcher.time_metric, "");
  }
  // adaptive_asha needs one, in either form.
  EXPECT_EQ(Error(Searcher("{name: adaptive_asha, metric: loss, max_trials: 4}")),
            "exp.yaml:2: searcher.max_time: is required: adaptive_asha needs a length, max_time "
            "in time_metric (batches or epochs) or max_length");
}

TEST(Determined038, AdaptiveAshaTimeMetric) {
  const std::string asha = "{name: adaptive_asha, metric: loss, max_trials: 4, ";
  ExperimentConfig c = Accepted(Searcher(asha + "time_metric: batches, max_time: 1000}"));
  ASSERT_TRUE(c.searcher.max_length.has_value());
  EXPECT_EQ(c.searcher.time_metric, "batches");
  EXPECT_EQ(c.searcher.max_time, 1000);
  EXPECT_EQ(c.searcher.max_length->unit, Length::Unit::kBatches);
  EXPECT_EQ(InBatches(c, *c.searcher.max_length, 0), 1000);
  // The same search as max_length: {batches: 1000}.
  ExperimentConfig legacy = Accepted(Searcher(asha + "max_length: {batches: 1000}}"));
  EXPECT_TRUE(legacy.searcher.max_length == c.searcher.max_length);

  // Epochs convert with records_per_epoch and the global batch size, as max_length's do.
  c = Accepted(Searcher(asha + "time_metric: epochs, max_time: 3}",
                        "records_per_epoch: 6400\nhyperparameters: {global_batch_size: 64}\n"));
  EXPECT_EQ(c.searcher.max_length->unit, Length::Unit::kEpochs);
  EXPECT_EQ(InBatches(c, *c.searcher.max_length, c.global_batch_size), 300);

  const std::vector<ErrorCase> errors = {
      {Searcher(asha + "time_metric: loss, max_time: 10}"),
       "exp.yaml:2: searcher.time_metric: expected batches or epochs, got \"loss\": det's "
       "adaptive_asha measures a trial's time by the batches it trained (epochs converted with "
       "records_per_epoch), not by the value of a reported metric"},
      {Searcher(asha + "time_metric: records, max_time: 10}"),
       "exp.yaml:2: searcher.time_metric: expected batches or epochs, got \"records\": det's "
       "adaptive_asha measures a trial's time by the batches it trained (epochs converted with "
       "records_per_epoch), not by the value of a reported metric"},
      {Searcher(asha + "time_metric: batches}"),
       "exp.yaml:2: searcher.max_time: is required (an integer in [1, 1000000000000])"},
      {Searcher(asha + "max_time: 10}"),
       "exp.yaml:2: searcher.time_metric: is required with max_time (batches or epochs)"},
      {Searcher(asha + "time_metric: batches, max_time: 0}"),
       "exp.yaml:2: searcher.max_time: expected an integer in [1, 1000000000000], got \"0\""},
      {Searcher(asha + "time_metric: batches, max_time: 10, max_length: {batches: 10}}"),
       "exp.yaml:2: searcher.max_length: give either max_length or time_metric and max_time "
       "(Determined 0.38's form), not both"},
      {Searcher(asha + "time_metric: epochs, max_time: 2}"),
       "exp.yaml:2: searcher.max_time: a length in epochs needs records_per_epoch and "
       "hyperparameters.global_batch_size"},
      {Searcher("{name: single, metric: loss, time_metric: batches, max_time: 10}"),
       "exp.yaml:2: searcher.max_time: not a setting of the single searcher (only of "
       "adaptive_asha)"},
  };
  for (const auto& e : errors) {
    SCOPED_TRACE(e.yaml);
    EXPECT_EQ(Error(e.yaml), e.message);
  }
}

TEST(Determined038, UnitlessMaxLengthIsBatches) {
  auto parsed = ParseExperimentConfig(Searcher("{name: single, metric: loss, max_length: 100}"),
                                      "exp.yaml", 7);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->effective_yaml, HasSubstr("max_length: 100"));  // As written.
  ExperimentConfig c = Accepted(Searcher("{name: single, metric: loss, max_length: 100}"));
  ASSERT_TRUE(c.searcher.max_length.has_value());
  EXPECT_EQ(c.searcher.max_length->unit, Length::Unit::kBatches);
  EXPECT_EQ(InBatches(c, *c.searcher.max_length, 0), 100);
  c = Accepted(Searcher("{name: adaptive_asha, metric: loss, max_trials: 2, max_length: 64}"));
  EXPECT_EQ(InBatches(c, *c.searcher.max_length, 0), 64);

  EXPECT_EQ(Error(Searcher("{name: single, metric: loss, max_length: lots}")),
            "exp.yaml:2: searcher.max_length: expected a length: a number of batches, or "
            "{batches: N}, {epochs: N} or {records: N}, got \"lots\"");
  EXPECT_EQ(Error(Searcher("{name: single, metric: loss, max_length: -1}")),
            "exp.yaml:2: searcher.max_length: expected an integer in [0, 1000000000000], got "
            "\"-1\"");
  EXPECT_EQ(Error(Searcher("{name: adaptive_asha, metric: loss, max_trials: 2, max_length: 0}")),
            "exp.yaml:2: searcher.max_length: adaptive_asha needs a max_length of at least 1 "
            "batch");
  // Periods keep Determined's mapping form.
  EXPECT_EQ(Error(std::string(kMinimal) + "min_validation_period: 100\n"),
            "exp.yaml:7: min_validation_period: expected a mapping, got \"100\"");
}

TEST(Determined038, LengthsInRecords) {
  ExperimentConfig c = Accepted(
      Searcher("{name: single, metric: loss, max_length: {records: 1000}}",
               "hyperparameters: {global_batch_size: 64}\nmin_validation_period: {records: 640}\n"
               "min_checkpoint_period: {records: 1}\n"));
  ASSERT_TRUE(c.searcher.max_length.has_value());
  EXPECT_EQ(c.searcher.max_length->unit, Length::Unit::kRecords);
  // N records are ceil(N / global_batch_size) batches.
  EXPECT_EQ(InBatches(c, *c.searcher.max_length, c.global_batch_size), 16);
  EXPECT_EQ(InBatches(c, c.min_validation_period, c.global_batch_size), 10);
  EXPECT_EQ(InBatches(c, c.min_checkpoint_period, c.global_batch_size), 1);
  c = Accepted(Searcher("{name: adaptive_asha, metric: loss, max_trials: 2, "
                        "max_length: {records: 64}}",
                        "hyperparameters: {global_batch_size: 64}\n"));
  EXPECT_EQ(InBatches(c, *c.searcher.max_length, c.global_batch_size), 1);

  const std::vector<ErrorCase> errors = {
      {Searcher("{name: single, metric: loss, max_length: {records: 1000}}"),
       "exp.yaml:2: searcher.max_length: a length in records needs "
       "hyperparameters.global_batch_size (N records are ceil(N / global_batch_size) batches)"},
      {std::string(kMinimal) + "min_checkpoint_period:\n  records: 10\n",
       "exp.yaml:8: min_checkpoint_period: a length in records needs "
       "hyperparameters.global_batch_size (N records are ceil(N / global_batch_size) batches)"},
      {Searcher("{name: single, metric: loss, max_length: {epochs: 1, records: 10}}"),
       "exp.yaml:2: searcher.max_length: expected exactly one of 'batches', 'epochs' or "
       "'records', got epochs and records"},
      {Searcher("{name: single, metric: loss, max_length: {records: 1000000000001}}"),
       "exp.yaml:2: searcher.max_length.records: expected an integer in [0, 1000000000000], got "
       "\"1000000000001\""},
      {Searcher("{name: single, metric: loss, max_length: {recrods: 10}}"),
       "exp.yaml:2: searcher.max_length: expected exactly one of 'batches', 'epochs' or "
       "'records'"},
  };
  for (const auto& e : errors) {
    SCOPED_TRACE(e.yaml);
    EXPECT_EQ(Error(e.yaml), e.message);
  }
}

TEST(Determined038, SearchedGlobalBatchSize) {
  const std::string single = "{name: random, metric: loss, max_trials: 4, max_length: {epochs: 2}}";
  ExperimentConfig c = Accepted(Searcher(
      single, "records_per_epoch: 6400\nhyperparameters:\n  global_batch_size:\n"
              "    type: categorical\n    vals: [32, 64, 128]\n"));
  EXPECT_TRUE(c.SearchesGlobalBatchSize());
  EXPECT_EQ(c.global_batch_size, 0);  // Each trial has its own.
  EXPECT_EQ(GlobalBatchSizeRange(c), (std::pair<int64_t, int64_t>{32, 128}));
  EXPECT_EQ(TrialGlobalBatchSize(c, R"({"global_batch_size":128,"lr":0.1})"), 128);
  EXPECT_EQ(TrialGlobalBatchSize(c, R"({"global_batch_size":32})"), 32);
  EXPECT_EQ(TrialGlobalBatchSize(c, R"({"lr":0.1})"), 0);
  EXPECT_EQ(TrialGlobalBatchSize(c, "not json ["), 0);
  // 2 epochs of 6400 records: 400 batches of 32, 100 of 128.
  EXPECT_EQ(InBatches(c, *c.searcher.max_length, 32), 400);
  EXPECT_EQ(InBatches(c, *c.searcher.max_length, 128), 100);

  c = Accepted(Searcher(single, "records_per_epoch: 6400\nhyperparameters:\n"
                                "  global_batch_size: {type: int, minval: 16, maxval: 256}\n"));
  EXPECT_TRUE(c.SearchesGlobalBatchSize());
  EXPECT_EQ(GlobalBatchSizeRange(c), (std::pair<int64_t, int64_t>{16, 256}));
  EXPECT_EQ(TrialGlobalBatchSize(c, R"({"global_batch_size":100})"), 100);

  // A constant is not searched; its range is itself.
  c = Accepted(Searcher(single, "records_per_epoch: 6400\nhyperparameters:\n"
                                "  global_batch_size: {type: const, val: 64}\n"));
  EXPECT_FALSE(c.SearchesGlobalBatchSize());
  EXPECT_EQ(c.global_batch_size, 64);
  EXPECT_EQ(GlobalBatchSizeRange(c), (std::pair<int64_t, int64_t>{64, 64}));
  EXPECT_EQ(TrialGlobalBatchSize(c, R"({"global_batch_size":64})"), 64);

  // Values that slots_per_trial does not divide are a warning, as for a constant.
  auto warned = ParseExperimentConfig(
      Searcher(single, "records_per_epoch: 6400\nresources: {slots_per_trial: 4}\n"
                       "hyperparameters:\n  global_batch_size: {type: categorical, vals: [32, 50]}\n"),
      "exp.yaml", 1);
  ASSERT_TRUE(warned.ok()) << warned.status();
  ASSERT_EQ(warned->warnings.size(), 1u);
  EXPECT_THAT(warned->warnings[0], HasSubstr("global_batch_size is searched and some of its values "
                                             "(e.g. 50) are not divisible by slots_per_trial 4"));

  const std::string m = std::string(kMinimal) + "hyperparameters:\n  global_batch_size:\n";
  const std::vector<ErrorCase> errors = {
      {m + "    type: int\n    minval: 0\n    maxval: 64\n",
       "exp.yaml:10: hyperparameters.global_batch_size.minval: a searched global_batch_size "
       "needs minval >= 1, got 0"},
      {m + "    type: categorical\n    vals: [32, x]\n",
       "exp.yaml:10: hyperparameters.global_batch_size.vals: every value of a searched "
       "global_batch_size must be a positive integer, got \"x\" (item 1)"},
      {m + "    type: categorical\n    vals: [32, 0.5]\n",
       "exp.yaml:10: hyperparameters.global_batch_size.vals: every value of a searched "
       "global_batch_size must be a positive integer, got 0.5 (item 1)"},
      {m + "    type: log\n    minval: 4\n    maxval: 8\n    base: 2\n",
       "exp.yaml:9: hyperparameters.global_batch_size: expected a positive integer, or an int or "
       "categorical hyperparameter whose values are all positive integers, got a log "
       "hyperparameter (a batch size is a whole number; Determined searches it only as int or "
       "categorical)"},
      {m + "    type: double\n    minval: 16\n    maxval: 64\n",
       "exp.yaml:9: hyperparameters.global_batch_size: expected a positive integer, or an int or "
       "categorical hyperparameter whose values are all positive integers, got a double "
       "hyperparameter (a batch size is a whole number; Determined searches it only as int or "
       "categorical)"},
      {m + "    per_slot: 8\n",
       "exp.yaml:9: hyperparameters.global_batch_size: expected a positive integer, or an int or "
       "categorical hyperparameter whose values are all positive integers, got a group of "
       "hyperparameters"},
      // Every value a trial can get must leave whole batches in an epoch.
      {Searcher("{name: single, metric: loss, max_length: {epochs: 1}}",
                "records_per_epoch: 100\nhyperparameters:\n"
                "  global_batch_size: {type: int, minval: 50, maxval: 128}\n"),
       "exp.yaml:2: searcher.max_length: a length in epochs needs whole batches in an epoch: "
       "records_per_epoch 100 is less than global_batch_size 128"},
  };
  for (const auto& e : errors) {
    SCOPED_TRACE(e.yaml);
    EXPECT_EQ(Error(e.yaml), e.message);
  }
}

TEST(Determined038, TrialClassEntrypoint) {
  const std::string searcher = "searcher: {name: single, metric: loss, max_length: 10}\n";
  struct Case {
    std::string entrypoint;
    std::vector<std::string> argv;
  };
  const std::vector<Case> accepted = {
      // Determined's Trial form runs under det's Trial runner.
      {"model_def:MNistTrial", {"python3", "-m", "det.pytorch.run", "model_def:MNistTrial"}},
      {"[model_def:MNistTrial]", {"python3", "-m", "det.pytorch.run", "model_def:MNistTrial"}},
      {"pkg.model_def:trials.Nested_Trial2",
       {"python3", "-m", "det.pytorch.run", "pkg.model_def:trials.Nested_Trial2"}},
      // What ran before runs as it did.
      {"python3 train.py", {"python3", "train.py"}},
      {"./run.sh", {"./run.sh"}},
      {"[python3, -m, det.launch.torch_distributed, python3, train.py]",
       {"python3", "-m", "det.launch.torch_distributed", "python3", "train.py"}},
      {"python3 -m det.pytorch.run model_def:MNistTrial",
       {"python3", "-m", "det.pytorch.run", "model_def:MNistTrial"}},
      {"./bin/a:b", {"./bin/a:b"}},
      {"[python3, \"\"]", {"python3", ""}},
  };
  for (const Case& c : accepted) {
    SCOPED_TRACE(c.entrypoint);
    const std::string yaml = "entrypoint: " + c.entrypoint + "\n" + searcher;
    EXPECT_EQ(Accepted(yaml).entrypoint, c.argv);
    // The effective config keeps what the user wrote.
    auto parsed = ParseExperimentConfig(yaml, "exp.yaml", 7);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    if (c.entrypoint == "model_def:MNistTrial") {
      EXPECT_THAT(parsed->effective_yaml, HasSubstr("entrypoint: model_def:MNistTrial\n"));
    }
  }
  const std::vector<ErrorCase> refused = {
      {"entrypoint: \"\"\n" + searcher, "exp.yaml:1: entrypoint: must name a program to run"},
      {"entrypoint: \"  \"\n" + searcher, "exp.yaml:1: entrypoint: must name a program to run"},
      {"entrypoint: [\"\"]\n" + searcher,
       "exp.yaml:1: entrypoint: the program to run (its first item) is empty"},
      {"entrypoint: [\" \", train.py]\n" + searcher,
       "exp.yaml:1: entrypoint: the program to run (its first item) is empty"},
      {"entrypoint: model-def:MNistTrial\n" + searcher,
       "exp.yaml:1: entrypoint: expected a Trial class as MODULE:CLASS (dotted Python names around "
       "one colon, e.g. model_def:MNistTrial) or a program to run, got \"model-def:MNistTrial\""},
      {"entrypoint: \"model_def:\"\n" + searcher,
       "exp.yaml:1: entrypoint: expected a Trial class as MODULE:CLASS (dotted Python names around "
       "one colon, e.g. model_def:MNistTrial) or a program to run, got \"model_def:\""},
      {"entrypoint: a:b:C\n" + searcher,
       "exp.yaml:1: entrypoint: expected a Trial class as MODULE:CLASS (dotted Python names around "
       "one colon, e.g. model_def:MNistTrial) or a program to run, got \"a:b:C\""},
      {"entrypoint: 1model:Trial\n" + searcher,
       "exp.yaml:1: entrypoint: expected a Trial class as MODULE:CLASS (dotted Python names around "
       "one colon, e.g. model_def:MNistTrial) or a program to run, got \"1model:Trial\""},
      {"entrypoint: model_def..x:Trial\n" + searcher,
       "exp.yaml:1: entrypoint: expected a Trial class as MODULE:CLASS (dotted Python names around "
       "one colon, e.g. model_def:MNistTrial) or a program to run, got \"model_def..x:Trial\""},
      {"entrypoint: [\"model_def:My Trial\"]\n" + searcher,
       "exp.yaml:1: entrypoint: expected a Trial class as MODULE:CLASS (dotted Python names around "
       "one colon, e.g. model_def:MNistTrial) or a program to run, got \"model_def:My Trial\""},
      {"entrypoint: \":MNistTrial\"\n" + searcher,
       "exp.yaml:1: entrypoint: \":MNistTrial\" names no module: det runs a Trial class as "
       "MODULE:CLASS (e.g. model_def:MNistTrial), not a class of the context directory's "
       "__init__.py"},
  };
  for (const auto& e : refused) {
    SCOPED_TRACE(e.yaml);
    EXPECT_EQ(Error(e.yaml), e.message);
  }
  // The Trial runner trains to the searcher's length: a Trial class needs one.
  EXPECT_EQ(Error("entrypoint: model_def:MNistTrial\nsearcher: {name: single, metric: loss}\n"),
            "exp.yaml:2: searcher.max_length: is required with entrypoint model_def:MNistTrial: "
            "det's Trial runner trains each trial to the searcher's length");
  // A template is checked by the same rules.
  EXPECT_EQ(ValidateTemplate("entrypoint: model-def:T\n", "t.yaml").message(),
            "t.yaml:1: entrypoint: expected a Trial class as MODULE:CLASS (dotted Python names "
            "around one colon, e.g. model_def:MNistTrial) or a program to run, got \"model-def:T\"");
  EXPECT_TRUE(ValidateTemplate("entrypoint: model_def:T\nsearcher: {time_metric: epochs}\n",
                               "t.yaml").ok());
}

TEST(Determined038, KeysWithoutACounterpartAreAcceptedWithAWarning) {
  auto parsed = ParseExperimentConfig(std::string(kMinimal) + R"(workspace: Uncategorized
project: Uncategorized
debug: false
perform_initial_validation: true
log_policies:
  - name: ECC Error
    pattern: ".*uncorrectable ECC error encountered.*"
    action: {type: exclude_node}
resources: {weight: 2, shm_size: 4294967296, is_single_node: true}
environment: {force_pull_image: false, proxy_ports: []}
optimizations: {mixed_precision: O0, average_aggregated_gradients: true}
preemption_timeout: 120
checkpoint_storage: {type: directory, container_path: /mnt/ckpts}
)",
                                      "exp.yaml", 1);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const std::vector<std::string>& w = parsed->warnings;
  for (const char* key : {"workspace", "project", "debug", "perform_initial_validation",
                          "log_policies", "resources.weight", "resources.shm_size",
                          "resources.is_single_node", "environment.force_pull_image",
                          "environment.proxy_ports", "optimizations.mixed_precision",
                          "optimizations.average_aggregated_gradients"}) {
    EXPECT_EQ(std::count_if(w.begin(), w.end(),
                            [&](const std::string& line) {
                              return line.rfind(absl::StrCat(key, " is not applied: "), 0) == 0;
                            }),
              1)
        << key << " in " << absl::StrJoin(w, "\n");
  }
  EXPECT_EQ(w.size(), 12u) << absl::StrJoin(w, "\n");
  // preemption_timeout is det's stop_grace_period; directory storage is a host path here.
  EXPECT_EQ(parsed->config.stop_grace_period, absl::Seconds(120));
  ASSERT_TRUE(parsed->config.checkpoint_storage.has_value());
  EXPECT_EQ(parsed->config.checkpoint_storage->type, "shared_fs");
  EXPECT_EQ(parsed->config.checkpoint_storage->host_path, "/mnt/ckpts");
  // stop_grace_period wins over preemption_timeout.
  auto both = ParseExperimentConfig(
      std::string(kMinimal) + "preemption_timeout: 120\nstop_grace_period: 30s\n", "exp.yaml", 1);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->config.stop_grace_period, absl::Seconds(30));
  // Templates may carry them too (no warning until an experiment uses the template).
  EXPECT_TRUE(ValidateTemplate("workspace: w\nresources: {weight: 1}\n", "t.yaml").ok());
}

TEST(ExperimentConfig, AQuotedInfinityIsAString) {
  auto parsed = ParseExperimentConfig(
      std::string(kMinimal) + "hyperparameters:\n  x: '.inf'\n  y: 1.5e3\n", "exp.yaml", 1);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->config.hyperparameters.fields.size(), 2u);
  EXPECT_EQ(parsed->config.hyperparameters.fields[0].value_json, "\".inf\"");
  EXPECT_EQ(parsed->config.hyperparameters.fields[1].value_json, "1.5e3");
}

}  // namespace
}  // namespace det::config
