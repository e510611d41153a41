// The experiment config schema: every section, its defaults, and each validation message.
#include <string>
#include <vector>

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
       "exp.yaml:8: hyperparameters.global_batch_size: expected a positive integer constant"},
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
       "exp.yaml:2: searcher.max_length: expected exactly one of 'batches' or 'epochs', got both"},
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
       "exp.yaml:8: checkpoint_storage.type: expected shared_fs (the only checkpoint storage det "
       "supports), got \"s3\""},
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
  EXPECT_EQ(c.searcher.max_length.Batches(c.BatchesPerEpoch()), 200);
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
            "t.yaml:1: searcher.max_length: expected exactly one of 'batches' or 'epochs', got both");
  EXPECT_EQ(ValidateTemplate("bind_mounts: [{host_path: rel}]\n", "template t").message(),
            "template t:1: bind_mounts[0].host_path: expected an absolute path, got \"rel\"");
}

}  // namespace
}  // namespace det::config
