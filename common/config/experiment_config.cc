#include "common/config/experiment_config.h"

#include <cmath>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/yaml_reader.h"

namespace det::config {
namespace {

constexpr int64_t kMaxSeed = 2147483647;

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

double Uniform01(uint64_t* state) { return (SplitMix64(state) >> 11) * 0x1.0p-53; }

void ReadLength(ObjectReader& parent, const std::string& key, Length* out, bool required) {
  parent.Object(
      key,
      [&](ObjectReader& r) {
        bool batches = r.Has("batches"), epochs = r.Has("epochs");
        if (batches == epochs) {
          r.Fail("", "expected exactly one of 'batches' or 'epochs'");
          return;
        }
        out->unit = batches ? Length::Unit::kBatches : Length::Unit::kEpochs;
        r.Int(batches ? "batches" : "epochs", &out->value, 0);
      },
      required);
}

std::string ScalarJson(const YAML::Node& node) { return YamlToJson(node); }

void ReadHyperparameter(ObjectReader& parent, const std::string& name, Hyperparameter* hp) {
  const YAML::Node node = parent.node()[name];
  if (!node.IsMap()) {
    parent.Known(name);
    hp->type = Hyperparameter::Type::kConst;
    hp->value_json = ScalarJson(node);
    return;
  }
  parent.Object(name, [&](ObjectReader& r) {
    std::string type;
    r.String("type", &type, /*required=*/true);
    if (!r.ok()) return;
    if (type == "const") {
      hp->type = Hyperparameter::Type::kConst;
      YAML::Node val;
      r.Any("val", &val);
      if (!val) r.Fail("", "a const hyperparameter needs 'val'");
      hp->value_json = ScalarJson(val);
    } else if (type == "int" || type == "double" || type == "log") {
      hp->type = type == "int"      ? Hyperparameter::Type::kInt
                 : type == "double" ? Hyperparameter::Type::kDouble
                                    : Hyperparameter::Type::kLog;
      r.Double("minval", &hp->minval, true);
      r.Double("maxval", &hp->maxval, true);
      if (type == "log") r.Double("base", &hp->base);
      r.Known("count");
      if (r.ok() && hp->minval > hp->maxval) r.Fail("maxval", "must be >= minval");
    } else if (type == "categorical") {
      hp->type = Hyperparameter::Type::kCategorical;
      YAML::Node vals;
      r.Any("vals", &vals);
      if (!vals.IsSequence() || vals.size() == 0) {
        r.Fail("vals", "expected a non-empty list");
        return;
      }
      for (const auto& v : vals) hp->vals_json.push_back(ScalarJson(v));
    } else {
      r.Fail("type", absl::StrCat("expected one of const, int, double, log, categorical, got \"",
                                  type, "\""));
    }
  });
}

// Sets `key` of `map` to `value` unless present.
template <typename T>
void Default(YAML::Node map, const std::string& key, const T& value) {
  if (!map[key] || map[key].IsNull()) map[key] = value;
}

YAML::Node Child(YAML::Node map, const std::string& key) {
  if (!map[key] || map[key].IsNull()) map[key] = YAML::Node(YAML::NodeType::Map);
  return map[key];
}

}  // namespace

absl::StatusOr<ParsedExperiment> ParseExperimentConfig(absl::string_view text,
                                                       absl::string_view filename,
                                                       uint32_t seed_if_unset) {
  auto parsed_or = ParseYaml(text, filename);
  if (!parsed_or.ok()) return parsed_or.status();
  YAML::Node root = *parsed_or;  // Not cloned: a clone loses line numbers.
  ParsedExperiment out;
  ExperimentConfig& c = out.config;
  std::string file(filename);

  ObjectReader r(root, "", file);
  r.String("name", &c.name);
  r.String("description", &c.description);
  r.StringList("entrypoint", &c.entrypoint, /*allow_scalar=*/true, /*required=*/true);
  if (r.ok() && c.entrypoint.empty()) r.Fail("entrypoint", "must name a program to run");
  r.Object("hyperparameters", [&](ObjectReader& h) {
    for (const auto& kv : h.node()) {
      std::string name = kv.first.Scalar();
      ReadHyperparameter(h, name, &c.hyperparameters[name]);
    }
  });
  r.Object(
      "searcher",
      [&](ObjectReader& s) {
        s.String("name", &c.searcher.name, true);
        if (s.ok() && c.searcher.name != "single" && c.searcher.name != "random") {
          s.Fail("name", absl::StrCat("expected single or random, got \"", c.searcher.name, "\""));
        }
        s.String("metric", &c.searcher.metric, true);
        s.Bool("smaller_is_better", &c.searcher.smaller_is_better);
        ReadLength(s, "max_length", &c.searcher.max_length, true);
        s.Int("max_trials", &c.searcher.max_trials, 1, 100000);
        s.Known("source_trial_id");
      },
      /*required=*/true);
  r.Object("resources", [&](ObjectReader& res) {
    res.Int("slots_per_trial", &c.resources.slots_per_trial, 0);
    res.Int("priority", &c.resources.priority, 1, 99);
    res.String("resource_pool", &c.resources.resource_pool);
    YAML::Node ignored;
    res.Any("devices", &ignored);
    res.Any("max_slots", &ignored);
  });
  ReadLength(r, "min_validation_period", &c.min_validation_period, false);
  ReadLength(r, "min_checkpoint_period", &c.min_checkpoint_period, false);
  r.Int("max_restarts", &c.max_restarts, 0, 1000000);
  r.Int("records_per_epoch", &c.records_per_epoch, 0);
  r.Int("scheduling_unit", &c.scheduling_unit, 1, 1 << 30);
  r.Object("reproducibility",
           [&](ObjectReader& rep) { rep.Int("experiment_seed", &c.experiment_seed, 0, kMaxSeed); });
  r.Object("environment", [&](ObjectReader& env) {
    env.Known("environment_variables");
    YAML::Node vars = env.node()["environment_variables"];
    if (!vars || vars.IsNull()) return;
    if (vars.IsMap()) {
      for (const auto& kv : vars) c.environment_variables[kv.first.Scalar()] = kv.second.Scalar();
    } else if (vars.IsSequence()) {
      for (const auto& v : vars) {
        std::string item = v.IsScalar() ? v.Scalar() : "";
        auto eq = item.find('=');
        if (eq == std::string::npos || eq == 0) {
          env.Fail("environment_variables",
                   absl::StrCat("expected NAME=VALUE items, got \"", item, "\""));
          return;
        }
        c.environment_variables[item.substr(0, eq)] = item.substr(eq + 1);
      }
    } else {
      env.Fail("environment_variables", "expected a list of NAME=VALUE or a mapping");
    }
  });
  r.StringList("labels", &c.labels);
  // Sections validated by later schema work; accepted and stored as written.
  YAML::Node free_form;
  for (const char* key :
       {"data", "bind_mounts", "checkpoint_storage", "optimizations", "profiling"}) {
    r.Any(key, &free_form);
  }
  absl::Status st = r.Finish();
  if (!st.ok()) return st;

  // global_batch_size comes from the hyperparameters, as in Determined.
  auto gbs = c.hyperparameters.find("global_batch_size");
  if (gbs != c.hyperparameters.end()) {
    int64_t v = 0;
    if (gbs->second.type != Hyperparameter::Type::kConst ||
        !absl::SimpleAtoi(gbs->second.value_json, &v) || v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": hyperparameters.global_batch_size: expected a positive integer constant"));
    }
    c.global_batch_size = v;
  }
  if (c.searcher.max_length.unit == Length::Unit::kEpochs && c.BatchesPerEpoch() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": searcher.max_length: a length in epochs needs records_per_epoch and "
              "hyperparameters.global_batch_size"));
  }
  if (c.global_batch_size > 0 && c.resources.slots_per_trial > 1 &&
      c.global_batch_size % c.resources.slots_per_trial != 0) {
    int64_t per_slot = c.global_batch_size / c.resources.slots_per_trial;
    out.warnings.push_back(absl::StrCat(
        "global_batch_size ", c.global_batch_size, " is not divisible by slots_per_trial ",
        c.resources.slots_per_trial, ": each slot trains on ", per_slot, " records per batch (",
        per_slot * c.resources.slots_per_trial, " per global batch; ",
        c.global_batch_size - per_slot * c.resources.slots_per_trial, " dropped)"));
  }
  if (c.experiment_seed < 0) c.experiment_seed = seed_if_unset & kMaxSeed;

  // The effective configuration: defaults written in.
  if (c.name.empty()) c.name = "Experiment";
  root["name"] = c.name;
  Default(root, "description", "");
  Default(root, "max_restarts", c.max_restarts);
  Default(root, "scheduling_unit", c.scheduling_unit);
  YAML::Node res = Child(root, "resources");
  Default(res, "slots_per_trial", c.resources.slots_per_trial);
  Default(res, "priority", c.resources.priority);
  Default(res, "resource_pool", c.resources.resource_pool.empty() ? "default" : c.resources.resource_pool);
  if (c.resources.resource_pool.empty()) c.resources.resource_pool = "default";
  YAML::Node searcher = root["searcher"];
  Default(searcher, "smaller_is_better", c.searcher.smaller_is_better);
  if (c.searcher.name == "random") Default(searcher, "max_trials", c.searcher.max_trials);
  if (c.searcher.name == "single") c.searcher.max_trials = 1;
  Child(root, "reproducibility")["experiment_seed"] = c.experiment_seed;
  out.effective_yaml = EmitYaml(root);
  out.effective_json = YamlToJson(root);
  return out;
}

std::string SampleHyperparameters(const std::map<std::string, Hyperparameter>& hps,
                                  uint64_t seed) {
  uint64_t state = seed;
  std::string json = "{";
  bool first = true;
  for (const auto& [name, hp] : hps) {  // std::map: sorted by name.
    std::string value;
    switch (hp.type) {
      case Hyperparameter::Type::kConst:
        value = hp.value_json;
        break;
      case Hyperparameter::Type::kInt: {
        int64_t lo = static_cast<int64_t>(std::ceil(hp.minval));
        int64_t hi = static_cast<int64_t>(std::floor(hp.maxval));
        value = absl::StrCat(lo + static_cast<int64_t>(SplitMix64(&state) % (hi - lo + 1)));
        break;
      }
      case Hyperparameter::Type::kDouble:
        value = absl::StrCat(hp.minval + (hp.maxval - hp.minval) * Uniform01(&state));
        break;
      case Hyperparameter::Type::kLog:
        value = absl::StrCat(std::pow(hp.base, hp.minval + (hp.maxval - hp.minval) * Uniform01(&state)));
        break;
      case Hyperparameter::Type::kCategorical:
        value = hp.vals_json[SplitMix64(&state) % hp.vals_json.size()];
        break;
    }
    absl::StrAppend(&json, first ? "" : ",", "\"", name, "\":", value);
    first = false;
  }
  return json + "}";
}

uint32_t TrialSeed(uint32_t experiment_seed, int64_t trial_index) {
  uint64_t state = (static_cast<uint64_t>(experiment_seed) << 32) ^ static_cast<uint64_t>(trial_index);
  return static_cast<uint32_t>(SplitMix64(&state) & kMaxSeed);
}

}  // namespace det::config
