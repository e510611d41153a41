#include "common/config/experiment_config.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/config/config_merge.h"
#include "common/config/yaml_reader.h"

namespace det::config {
namespace {

constexpr int64_t kMaxSeed = 2147483647;
// Bounds of `int` hyperparameters: exactly representable as doubles and in JSON.
constexpr int64_t kMaxIntHyperparameter = int64_t{1} << 53;
constexpr int kMaxTrials = 100000;
constexpr int kMaxRungs = 32;
constexpr int kMaxTensorFusionMb = 1 << 20;

const std::vector<std::string>& SearcherNames() {
  static const auto* names =
      new std::vector<std::string>{"single", "grid", "random", "adaptive_asha"};
  return *names;
}

// Which searchers accept each searcher-specific key.
const std::map<std::string, std::set<std::string>>& SearcherKeys() {
  static const auto* keys = new std::map<std::string, std::set<std::string>>{
      {"max_trials", {"random", "adaptive_asha"}},
      {"max_concurrent_trials", {"grid", "random", "adaptive_asha"}},
      {"divisor", {"adaptive_asha"}},
      {"max_rungs", {"adaptive_asha"}},
      {"mode", {"adaptive_asha"}},
      {"stop_once", {"adaptive_asha"}},
  };
  return *keys;
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

bool IsAbsolute(const std::string& path) { return !path.empty() && path[0] == '/'; }

// Reads the experiment schema from one document. `partial` (templates): required keys may
// be missing and cross-field checks are skipped.
class SchemaReader {
 public:
  SchemaReader(ExperimentConfig* c, bool partial) : c_(*c), partial_(partial) {}

  void Read(ObjectReader& r) {
    // The searcher first: which hyperparameter keys are needed depends on it.
    r.Object("searcher", [&](ObjectReader& s) { ReadSearcher(s); }, Req());
    r.String("name", &c_.name);
    r.String("description", &c_.description);
    r.StringList("entrypoint", &c_.entrypoint, /*allow_scalar=*/true, Req());
    if (r.ok() && !partial_ && c_.entrypoint.empty()) {
      r.Fail("entrypoint", "must name a program to run");
    }
    r.Object("hyperparameters",
             [&](ObjectReader& h) { ReadGroup(h, &c_.hyperparameters); });
    r.Object("resources", [&](ObjectReader& res) { ReadResources(res); });
    ReadLength(r, "min_validation_period", &c_.min_validation_period, false);
    ReadLength(r, "min_checkpoint_period", &c_.min_checkpoint_period, false);
    r.Int("max_restarts", &c_.max_restarts, 0, 1000000);
    if (r.Has("stop_grace_period")) {
      absl::Duration grace = absl::ZeroDuration();
      r.Duration("stop_grace_period", &grace);
      c_.stop_grace_period = grace;
    }
    r.Int("records_per_epoch", &c_.records_per_epoch, 0, kMaxRecordsPerEpoch);
    r.Int("scheduling_unit", &c_.scheduling_unit, 1, 1 << 30);
    r.Object("reproducibility", [&](ObjectReader& rep) {
      rep.Int("experiment_seed", &c_.experiment_seed, 0, kMaxSeed);
      rep.Bool("deterministic", &c_.deterministic);
    });
    r.Object("environment", [&](ObjectReader& env) { ReadEnvironment(env); });
    r.StringList("labels", &c_.labels);
    r.List("bind_mounts", [&](ObjectReader& m, size_t) { ReadBindMount(m); });
    CheckContainerPaths(r, "bind_mounts");
    r.Object("checkpoint_storage", [&](ObjectReader& cs) { ReadCheckpointStorage(cs); });
    r.String("checkpoint_policy", &c_.checkpoint_policy);
    if (r.ok() && c_.checkpoint_policy != "best" && c_.checkpoint_policy != "all" &&
        c_.checkpoint_policy != "none") {
      r.Fail("checkpoint_policy", absl::StrCat("expected best, all or none, got \"",
                                               c_.checkpoint_policy, "\""));
    }
    r.Object("optimizations", [&](ObjectReader& o) {
      o.Int("aggregation_frequency", &c_.optimizations.aggregation_frequency, 1, 1000000);
      o.Bool("average_training_metrics", &c_.optimizations.average_training_metrics);
      double& mb = c_.optimizations.tensor_fusion_threshold;
      o.Double("tensor_fusion_threshold", &mb);
      if (o.ok() && !(mb > 0 && mb <= kMaxTensorFusionMb)) {
        o.Fail("tensor_fusion_threshold",
               absl::StrCat("expected a number of MB in (0, ", kMaxTensorFusionMb, "], got ", mb));
      }
    });
    // Free-form sections: stored and handed to workers as written.
    YAML::Node data, profiling;
    r.Any("data", &data);
    if (r.ok() && data && !data.IsNull()) {
      if (!data.IsMap()) {
        r.Fail("data", "expected a mapping");
      } else {
        c_.data_json = YamlToJson(data);
      }
    }
    r.Any("profiling", &profiling);
    if (!partial_) {
      CrossChecks(r);
      ContainerWarnings();
    }
  }

  std::vector<std::string> warnings;

 private:
  bool Req(bool required = true) const { return required && !partial_; }

  void ReadLength(ObjectReader& parent, const std::string& key, Length* out, bool required) {
    parent.Object(
        key,
        [&](ObjectReader& r) {
          bool batches = r.Has("batches"), epochs = r.Has("epochs");
          if (batches && epochs) {
            r.Fail("", "expected exactly one of 'batches' or 'epochs', got both");
            return;
          }
          if (!batches && !epochs) {
            if (!partial_) r.Fail("", "expected exactly one of 'batches' or 'epochs'");
            r.Known("batches");
            r.Known("epochs");
            return;
          }
          out->unit = batches ? Length::Unit::kBatches : Length::Unit::kEpochs;
          r.Int(batches ? "batches" : "epochs", &out->value, 0, kMaxLengthBatches);
          r.Known(batches ? "epochs" : "batches");
        },
        Req(required));
  }

  void ReadSearcher(ObjectReader& s) {
    SearcherConfig& sc = c_.searcher;
    const bool named = s.Has("name");
    s.String("name", &sc.name, Req());
    if (!s.ok()) return;
    if (named && std::find(SearcherNames().begin(), SearcherNames().end(), sc.name) ==
                     SearcherNames().end()) {
      s.Fail("name", absl::StrCat("expected one of ", absl::StrJoin(SearcherNames(), ", "),
                                  ", got \"", sc.name, "\""));
      return;
    }
    for (const auto& [key, searchers] : SearcherKeys()) {
      if (named && s.Has(key) && !searchers.count(sc.name)) {
        s.Fail(key, absl::StrCat("not a setting of the ", sc.name, " searcher (only of ",
                                 absl::StrJoin(searchers, ", "), ")"));
        return;
      }
    }
    s.String("metric", &sc.metric, Req());
    s.Bool("smaller_is_better", &sc.smaller_is_better);
    ReadLength(s, "max_length", &sc.max_length, true);
    const bool needs_max_trials = sc.name == "random" || sc.name == "adaptive_asha";
    s.Int("max_trials", &sc.max_trials, 1, kMaxTrials, Req(needs_max_trials));
    s.Int("max_concurrent_trials", &sc.max_concurrent_trials, 0, kMaxTrials);
    if (s.Has("divisor")) {
      s.Double("divisor", &sc.divisor);
      if (s.ok() && !(sc.divisor > 1 && sc.divisor <= 1000)) {
        s.Fail("divisor", absl::StrCat("expected a number in (1, 1000], got \"",
                                       s.node()["divisor"].Scalar(), "\""));
      }
    }
    s.Int("max_rungs", &sc.max_rungs, 1, kMaxRungs);
    s.String("mode", &sc.mode);
    if (s.ok() && sc.mode != "aggressive" && sc.mode != "standard" && sc.mode != "conservative") {
      s.Fail("mode", absl::StrCat("expected aggressive, standard or conservative, got \"",
                                  sc.mode, "\""));
    }
    bool stop_once = true;
    s.Bool("stop_once", &stop_once);
    if (s.ok() && !stop_once) {
      s.Fail("stop_once",
             "det's adaptive_asha stops trials and never resumes them; only true is supported");
    }
    s.Known("source_trial_id");
    s.Known("source_checkpoint_uuid");
  }

  // Reads the members of a hyperparameter group (the `hyperparameters` section or a nested
  // mapping without `type`).
  void ReadGroup(ObjectReader& h, Hyperparameter* group) {
    group->type = Hyperparameter::Type::kObject;
    for (const auto& kv : h.node()) {
      if (!h.ok()) return;
      if (!kv.first.IsScalar()) {
        h.Fail("", "expected hyperparameter names (strings) as keys");
        return;
      }
      const std::string name = kv.first.Scalar();
      Hyperparameter hp;
      hp.name = name;
      const YAML::Node value = kv.second;
      if (value.IsMap() && value["type"]) {
        h.Object(name, [&](ObjectReader& r) { ReadDefinition(r, &hp); });
      } else if (value.IsMap()) {
        h.Object(name, [&](ObjectReader& r) { ReadGroup(r, &hp); });
      } else {
        h.Known(name);
        hp.type = Hyperparameter::Type::kConst;
        hp.value_json = YamlToJson(value);
      }
      group->fields.push_back(std::move(hp));
    }
    std::sort(group->fields.begin(), group->fields.end(),
              [](const Hyperparameter& a, const Hyperparameter& b) { return a.name < b.name; });
  }

  void ReadDefinition(ObjectReader& r, Hyperparameter* hp) {
    std::string type;
    r.String("type", &type, true);
    if (!r.ok()) return;
    if (type == "const") {
      hp->type = Hyperparameter::Type::kConst;
      YAML::Node val;
      const bool present = r.node()["val"].IsDefined();
      r.Any("val", &val);
      if (!present && !partial_) r.Fail("", "a const hyperparameter needs 'val'");
      hp->value_json = YamlToJson(val);
    } else if (type == "int") {
      hp->type = Hyperparameter::Type::kInt;
      int64_t lo = 0, hi = 0;
      r.Int("minval", &lo, -kMaxIntHyperparameter, kMaxIntHyperparameter, Req());
      r.Int("maxval", &hi, -kMaxIntHyperparameter, kMaxIntHyperparameter, Req());
      hp->minval = static_cast<double>(lo);
      hp->maxval = static_cast<double>(hi);
      ReadCount(r, hp);
    } else if (type == "double" || type == "log") {
      hp->type = type == "double" ? Hyperparameter::Type::kDouble : Hyperparameter::Type::kLog;
      r.Double("minval", &hp->minval, Req());
      r.Double("maxval", &hp->maxval, Req());
      if (r.ok() && !std::isfinite(hp->maxval - hp->minval)) {
        r.Fail("maxval", "maxval - minval must be a finite number");
      }
      if (type == "log") {
        r.Double("base", &hp->base);
        if (r.ok() && !(hp->base > 0) ) {
          r.Fail("base", absl::StrCat("expected a number > 0, got \"",
                                      r.node()["base"].Scalar(), "\""));
        }
        if (r.ok() && (!std::isfinite(std::pow(hp->base, hp->minval)) ||
                       !std::isfinite(std::pow(hp->base, hp->maxval)))) {
          r.Fail("maxval", "base^minval and base^maxval must be finite numbers");
        }
      }
      ReadCount(r, hp);
    } else if (type == "categorical") {
      hp->type = Hyperparameter::Type::kCategorical;
      YAML::Node vals;
      const bool present = r.node()["vals"].IsDefined();
      r.Any("vals", &vals);
      if (!present && partial_) return;
      if (!vals.IsSequence() || vals.size() == 0) {
        r.Fail(present ? "vals" : "", "expected a non-empty list 'vals'");
        return;
      }
      for (const auto& v : vals) hp->vals_json.push_back(YamlToJson(v));
    } else {
      r.Fail("type", absl::StrCat(
                         "expected one of const, int, double, log, categorical, got \"", type, "\""));
    }
  }

  void ReadCount(ObjectReader& r, Hyperparameter* hp) {
    if (r.ok() && hp->minval > hp->maxval) r.Fail("maxval", "must be >= minval");
    r.Int("count", &hp->count, 1, kMaxGridTrials);
    if (r.ok() && !partial_ && c_.searcher.name == "grid" && hp->count == 0) {
      r.Fail("", "the grid searcher needs 'count' (the number of points on this axis)");
    }
  }

  void ReadResources(ObjectReader& res) {
    ResourcesConfig& rc = c_.resources;
    res.Int("slots_per_trial", &rc.slots_per_trial, 0);
    res.Int("priority", &rc.priority, 1, 99);
    res.String("resource_pool", &rc.resource_pool);
    res.Int("max_slots", &rc.max_slots, 0);
    res.List("devices", [&](ObjectReader& d, size_t) {
      Device dev;
      d.String("host_path", &dev.host_path, Req());
      d.String("container_path", &dev.container_path, Req());
      d.String("mode", &dev.mode);
      if (d.ok() && (dev.mode.empty() || dev.mode.find_first_not_of("rwm") != std::string::npos)) {
        d.Fail("mode", absl::StrCat("expected some of the letters r, w and m, got \"", dev.mode,
                                    "\""));
      }
      rc.devices.push_back(std::move(dev));
    });
    CheckContainerPaths(res, "devices");
  }

  void ReadBindMount(ObjectReader& m) {
    BindMount b;
    m.String("host_path", &b.host_path, Req());
    m.String("container_path", &b.container_path, Req());
    m.Bool("read_only", &b.read_only);
    m.String("propagation", &b.propagation);
    if (m.ok() && m.Has("host_path") && !IsAbsolute(b.host_path)) {
      m.Fail("host_path", absl::StrCat("expected an absolute path, got \"", b.host_path, "\""));
    }
    static const std::set<std::string> kPropagations = {"rprivate", "private", "rshared",
                                                       "shared",   "rslave",  "slave"};
    if (m.ok() && !kPropagations.count(b.propagation)) {
      m.Fail("propagation",
             absl::StrCat("expected one of ", absl::StrJoin(kPropagations, ", "), ", got \"",
                          b.propagation, "\""));
    }
    c_.bind_mounts.push_back(std::move(b));
  }

  // Two items of the list `key` of `parent` with one container_path is an error.
  void CheckContainerPaths(ObjectReader& parent, const std::string& key) {
    if (!parent.ok() || !parent.Has(key)) return;
    const YAML::Node list = parent.node()[key];
    std::map<std::string, size_t> first;
    for (size_t i = 0; i < list.size(); ++i) {
      const YAML::Node p = list[i]["container_path"];
      if (!p || !p.IsScalar()) continue;
      auto [it, inserted] = first.emplace(p.Scalar(), i);
      if (!inserted) {
        const std::string path = parent.PathOf(key);
        parent.FailAt(p, absl::StrCat(path, "[", i, "].container_path"),
                      absl::StrCat("\"", p.Scalar(), "\" is already the container_path of ",
                                   path, "[", it->second, "]"));
        return;
      }
    }
  }

  void ReadCheckpointStorage(ObjectReader& cs) {
    CheckpointStorageConfig s;
    ReadCheckpointStorageConfig(cs, Req(), &s);
    c_.checkpoint_storage = s;
  }

  // Keys that Determined applies to a container. det runs workers as processes on the
  // agent's host, so it accepts them (configs move over unchanged) and says at submit
  // that they do nothing, instead of silently ignoring them.
  void ContainerWarnings() {
    const char* kNoContainer = "det runs workers as processes on the agent's host, not in "
                               "containers";
    if (has_image_) {
      warnings.push_back(absl::StrCat("environment.image is not applied: ", kNoContainer,
                                      "; the worker uses the agent's environment and its "
                                      "worker_python"));
    }
    if (!c_.bind_mounts.empty()) {
      warnings.push_back(absl::StrCat(
          "bind_mounts is not applied (", c_.bind_mounts.size(), " mount",
          c_.bind_mounts.size() == 1 ? "" : "s", "): ", kNoContainer,
          "; host paths are visible to the worker at their host path"));
    }
    if (!c_.resources.devices.empty()) {
      warnings.push_back(absl::StrCat("resources.devices is not applied (",
                                      c_.resources.devices.size(), " device",
                                      c_.resources.devices.size() == 1 ? "" : "s", "): ",
                                      kNoContainer));
    }
  }

  void ReadEnvironment(ObjectReader& env) {
    YAML::Node image;
    env.Any("image", &image);  // Accepted for Determined configs; det runs no containers.
    has_image_ = image && !image.IsNull();
    env.String("python", &c_.python);
    if (env.ok() && env.Has("python") &&
        (c_.python.empty() || c_.python[0] != '/')) {
      env.Fail("python", absl::StrCat("expected the absolute path of a Python interpreter on the "
                                      "agents (e.g. /opt/venv/bin/python3), got \"",
                                      c_.python, "\""));
      return;
    }
    env.Known("environment_variables");
    YAML::Node vars = env.node()["environment_variables"];
    if (!vars || vars.IsNull()) return;
    if (vars.IsMap()) {
      for (const auto& kv : vars) {
        if (!kv.second.IsScalar()) {
          env.Fail("environment_variables",
                   absl::StrCat("expected NAME: VALUE strings, got a ",
                                kv.second.IsMap() ? "mapping" : "list", " for ", kv.first.Scalar()));
          return;
        }
        c_.environment_variables[kv.first.Scalar()] = kv.second.Scalar();
      }
    } else if (vars.IsSequence()) {
      for (const auto& v : vars) {
        std::string item = v.IsScalar() ? v.Scalar() : "";
        auto eq = item.find('=');
        if (eq == std::string::npos || eq == 0) {
          env.Fail("environment_variables",
                   absl::StrCat("expected NAME=VALUE items, got \"", item, "\""));
          return;
        }
        c_.environment_variables[item.substr(0, eq)] = item.substr(eq + 1);
      }
    } else {
      env.Fail("environment_variables", "expected a list of NAME=VALUE or a mapping");
    }
  }

  void CrossChecks(ObjectReader& r) {
    if (!r.ok()) return;
    // global_batch_size comes from the hyperparameters, as in Determined.
    if (const Hyperparameter* gbs = c_.hyperparameters.Find("global_batch_size")) {
      int64_t v = 0;
      if (gbs->type != Hyperparameter::Type::kConst || !absl::SimpleAtoi(gbs->value_json, &v) ||
          v <= 0) {
        r.FailAt(r.node()["hyperparameters"]["global_batch_size"],
                 "hyperparameters.global_batch_size", "expected a positive integer constant");
        return;
      }
      c_.global_batch_size = v;
    }
    for (const auto& [path, length] :
         {std::pair<std::string, const Length*>{"searcher.max_length", &c_.searcher.max_length},
          {"min_validation_period", &c_.min_validation_period},
          {"min_checkpoint_period", &c_.min_checkpoint_period}}) {
      if (length->unit != Length::Unit::kEpochs) continue;
      YAML::Node node = path == "searcher.max_length" ? r.node()["searcher"]["max_length"]
                                                      : r.node()[path];
      const int64_t per_epoch = c_.BatchesPerEpoch();
      if (per_epoch == 0) {
        r.FailAt(node, path,
                 "a length in epochs needs records_per_epoch and hyperparameters.global_batch_size");
        return;
      }
      if (length->value > kMaxLengthBatches / per_epoch) {
        r.FailAt(node, path,
                 absl::StrCat(length->value, " epochs of ", per_epoch, " batches is more than ",
                              kMaxLengthBatches, " batches, the longest length accepted"));
        return;
      }
    }
    const SearcherConfig& s = c_.searcher;
    if (s.name == "adaptive_asha" && s.max_length.Batches(c_.BatchesPerEpoch()) < 1) {
      r.FailAt(r.node()["searcher"]["max_length"], "searcher.max_length",
               "adaptive_asha needs a max_length of at least 1 batch");
      return;
    }
    if (s.name == "grid") {
      int64_t points = GridSize(c_.hyperparameters);
      if (points > kMaxGridTrials) {
        r.Fail(r.Has("hyperparameters") ? "hyperparameters" : "searcher",
               absl::StrCat("the grid has more than ", kMaxGridTrials,
                            " points (one trial each); lower the counts"));
        return;
      }
    }
    if (c_.global_batch_size > 0 && c_.resources.slots_per_trial > 1 &&
        c_.global_batch_size % c_.resources.slots_per_trial != 0) {
      int64_t slots = c_.resources.slots_per_trial;
      int64_t per_slot = c_.global_batch_size / slots;
      warnings.push_back(absl::StrCat(
          "global_batch_size ", c_.global_batch_size, " is not divisible by slots_per_trial ",
          slots, ": each slot trains on ", per_slot, " records per batch (", per_slot * slots,
          " per global batch; ", c_.global_batch_size - per_slot * slots, " dropped)"));
    }
  }

  // Points on the grid (saturating above kMaxGridTrials).
  static int64_t GridSize(const Hyperparameter& hp) {
    switch (hp.type) {
      case Hyperparameter::Type::kConst:
        return 1;
      case Hyperparameter::Type::kCategorical:
        return static_cast<int64_t>(hp.vals_json.size());
      case Hyperparameter::Type::kInt:
        return std::min<int64_t>(hp.count, static_cast<int64_t>(hp.maxval - hp.minval) + 1);
      case Hyperparameter::Type::kDouble:
      case Hyperparameter::Type::kLog:
        return hp.count;
      case Hyperparameter::Type::kObject: {
        int64_t n = 1;
        for (const auto& f : hp.fields) {
          n *= std::max<int64_t>(1, GridSize(f));
          if (n > kMaxGridTrials) return kMaxGridTrials + 1;
        }
        return n;
      }
    }
    return 1;
  }

  ExperimentConfig& c_;
  bool partial_;
  // environment.image was given (see ContainerWarnings).
  bool has_image_ = false;
};

// Writes the defaults of `c` into `root`, the effective config.
void FillDefaults(const ExperimentConfig& c, YAML::Node root) {
  Default(root, "name", c.name);
  Default(root, "description", "");
  Default(root, "max_restarts", c.max_restarts);
  Default(root, "scheduling_unit", c.scheduling_unit);
  YAML::Node res = Child(root, "resources");
  Default(res, "slots_per_trial", c.resources.slots_per_trial);
  Default(res, "priority", c.resources.priority);
  Default(res, "resource_pool", c.resources.resource_pool);
  if (res["devices"].IsSequence()) {
    for (YAML::Node d : res["devices"]) Default(d, "mode", std::string("mrw"));
  }
  YAML::Node searcher = root["searcher"];
  const SearcherConfig& s = c.searcher;
  Default(searcher, "smaller_is_better", s.smaller_is_better);
  if (s.name == "random" || s.name == "grid" || s.name == "adaptive_asha") {
    Default(searcher, "max_concurrent_trials", s.max_concurrent_trials);
  }
  if (s.name == "adaptive_asha") {
    Default(searcher, "divisor", s.divisor);
    Default(searcher, "max_rungs", s.max_rungs);
    Default(searcher, "mode", s.mode);
    Default(searcher, "stop_once", true);
  }
  if (root["bind_mounts"].IsSequence()) {
    for (YAML::Node m : root["bind_mounts"]) {
      Default(m, "read_only", false);
      Default(m, "propagation", std::string("rprivate"));
    }
  }
  if (c.checkpoint_storage) {
    YAML::Node cs = root["checkpoint_storage"];
    Default(cs, "save_experiment_best", c.checkpoint_storage->save_experiment_best);
    Default(cs, "save_trial_best", c.checkpoint_storage->save_trial_best);
    Default(cs, "save_trial_latest", c.checkpoint_storage->save_trial_latest);
  }
  YAML::Node opt = Child(root, "optimizations");
  Default(opt, "aggregation_frequency", c.optimizations.aggregation_frequency);
  Default(opt, "average_training_metrics", c.optimizations.average_training_metrics);
  Child(root, "reproducibility")["experiment_seed"] = c.experiment_seed;
}

}  // namespace

void ReadCheckpointStorageConfig(ObjectReader& cs, bool required, CheckpointStorageConfig* out) {
  CheckpointStorageConfig& s = *out;
  const bool typed = cs.Has("type");
  cs.String("type", &s.type, required);
  if (cs.ok() && typed && s.type != "shared_fs") {
    cs.Fail("type", absl::StrCat("expected shared_fs (the only checkpoint storage det "
                                 "supports), got \"", s.type, "\""));
    return;
  }
  cs.String("host_path", &s.host_path, required);
  if (cs.ok() && cs.Has("host_path") && !IsAbsolute(s.host_path)) {
    cs.Fail("host_path", absl::StrCat("expected an absolute path, got \"", s.host_path, "\""));
  }
  cs.String("storage_path", &s.storage_path);
  if (cs.ok() && !s.storage_path.empty()) {
    std::vector<std::string> parts = absl::StrSplit(s.storage_path, '/');
    bool climbs = std::find(parts.begin(), parts.end(), "..") != parts.end();
    std::string base = s.host_path;
    while (base.size() > 1 && base.back() == '/') base.pop_back();
    bool outside = IsAbsolute(s.storage_path) && !s.host_path.empty() &&
                   s.storage_path != base && s.storage_path.rfind(base + "/", 0) != 0;
    if (climbs || outside) {
      cs.Fail("storage_path",
              absl::StrCat("expected a path inside host_path \"", s.host_path, "\", got \"",
                           s.storage_path, "\""));
    }
  }
  cs.Int("save_experiment_best", &s.save_experiment_best, 0, 1000000);
  cs.Int("save_trial_best", &s.save_trial_best, 0, 1000000);
  cs.Int("save_trial_latest", &s.save_trial_latest, 0, 1000000);
}

bool operator==(const Length& a, const Length& b) {
  return std::tie(a.unit, a.value) == std::tie(b.unit, b.value);
}
bool operator==(const Hyperparameter& a, const Hyperparameter& b) {
  return std::tie(a.name, a.type, a.value_json, a.vals_json, a.minval, a.maxval, a.base,
                  a.count, a.fields) == std::tie(b.name, b.type, b.value_json, b.vals_json,
                                                 b.minval, b.maxval, b.base, b.count, b.fields);
}
bool operator==(const SearcherConfig& a, const SearcherConfig& b) {
  return std::tie(a.name, a.metric, a.smaller_is_better, a.max_length, a.max_trials,
                  a.max_concurrent_trials, a.divisor, a.max_rungs, a.mode) ==
         std::tie(b.name, b.metric, b.smaller_is_better, b.max_length, b.max_trials,
                  b.max_concurrent_trials, b.divisor, b.max_rungs, b.mode);
}
bool operator==(const Device& a, const Device& b) {
  return std::tie(a.host_path, a.container_path, a.mode) ==
         std::tie(b.host_path, b.container_path, b.mode);
}
bool operator==(const ResourcesConfig& a, const ResourcesConfig& b) {
  return std::tie(a.slots_per_trial, a.priority, a.resource_pool, a.max_slots, a.devices) ==
         std::tie(b.slots_per_trial, b.priority, b.resource_pool, b.max_slots, b.devices);
}
bool operator==(const BindMount& a, const BindMount& b) {
  return std::tie(a.host_path, a.container_path, a.read_only, a.propagation) ==
         std::tie(b.host_path, b.container_path, b.read_only, b.propagation);
}
bool operator==(const CheckpointStorageConfig& a, const CheckpointStorageConfig& b) {
  return std::tie(a.type, a.host_path, a.storage_path, a.save_experiment_best,
                  a.save_trial_best, a.save_trial_latest) ==
         std::tie(b.type, b.host_path, b.storage_path, b.save_experiment_best,
                  b.save_trial_best, b.save_trial_latest);
}
bool operator==(const OptimizationsConfig& a, const OptimizationsConfig& b) {
  return std::tie(a.aggregation_frequency, a.average_training_metrics,
                  a.tensor_fusion_threshold) == std::tie(b.aggregation_frequency,
                                                         b.average_training_metrics,
                                                         b.tensor_fusion_threshold);
}
bool operator==(const ExperimentConfig& a, const ExperimentConfig& b) {
  return std::tie(a.name, a.description, a.entrypoint, a.hyperparameters, a.searcher,
                  a.resources, a.min_validation_period, a.min_checkpoint_period,
                  a.max_restarts, a.records_per_epoch, a.scheduling_unit, a.experiment_seed,
                  a.deterministic, a.environment_variables, a.labels, a.bind_mounts,
                  a.checkpoint_storage, a.checkpoint_policy, a.optimizations, a.data_json,
                  a.global_batch_size) ==
         std::tie(b.name, b.description, b.entrypoint, b.hyperparameters, b.searcher,
                  b.resources, b.min_validation_period, b.min_checkpoint_period,
                  b.max_restarts, b.records_per_epoch, b.scheduling_unit, b.experiment_seed,
                  b.deterministic, b.environment_variables, b.labels, b.bind_mounts,
                  b.checkpoint_storage, b.checkpoint_policy, b.optimizations, b.data_json,
                  b.global_batch_size);
}

std::string CheckpointDirectory(const ExperimentConfig& config) {
  if (!config.checkpoint_storage) return "";
  const CheckpointStorageConfig& cs = *config.checkpoint_storage;
  if (cs.storage_path.empty()) return cs.host_path;
  if (IsAbsolute(cs.storage_path)) return cs.storage_path;
  return absl::StrCat(cs.host_path, "/", cs.storage_path);
}

absl::StatusOr<std::string> EffectiveConfigJson(absl::string_view effective_yaml,
                                                absl::string_view source) {
  absl::StatusOr<YAML::Node> root = ParseYaml(effective_yaml, source);
  if (!root.ok()) return root.status();
  return YamlToJson(*root);
}

const Hyperparameter* Hyperparameter::Find(absl::string_view member) const {
  for (const auto& f : fields) {
    if (f.name == member) return &f;
  }
  return nullptr;
}

absl::StatusOr<ParsedExperiment> ParseExperimentConfig(const ConfigInput& input,
                                                       const TemplateLookup& lookup,
                                                       uint32_t seed_if_unset) {
  absl::StatusOr<AssembledConfig> assembled = AssembleConfig(input, lookup);
  if (!assembled.ok()) return assembled.status();
  YAML::Node root = assembled->root;
  ParsedExperiment out;
  out.template_name = assembled->template_name;
  ExperimentConfig& c = out.config;

  ObjectReader r(root, "", assembled->sources);
  SchemaReader schema(&c, /*partial=*/false);
  schema.Read(r);
  absl::Status st = r.Finish();
  if (!st.ok()) return st;
  out.warnings = std::move(schema.warnings);

  if (c.experiment_seed < 0) c.experiment_seed = seed_if_unset & kMaxSeed;
  if (c.name.empty()) c.name = "Experiment";
  if (c.resources.resource_pool.empty()) c.resources.resource_pool = "default";
  if (c.searcher.name == "single" || c.searcher.name == "grid") c.searcher.max_trials = 1;
  FillDefaults(c, root);
  out.effective_yaml = EmitYaml(root);
  return out;
}

absl::StatusOr<ParsedExperiment> ParseExperimentConfig(absl::string_view text,
                                                       absl::string_view filename,
                                                       uint32_t seed_if_unset) {
  ConfigInput input;
  input.config_yaml = std::string(text);
  input.config_path = std::string(filename);
  return ParseExperimentConfig(
      input,
      [](const std::string& name) -> absl::StatusOr<std::string> {
        return absl::NotFoundError(absl::StrCat("template '", name, "' does not exist"));
      },
      seed_if_unset);
}

absl::Status ValidateTemplate(absl::string_view yaml, const std::string& source) {
  absl::StatusOr<YAML::Node> node = ParseTemplate(yaml, source);
  if (!node.ok()) return node.status();
  ExperimentConfig c;
  ObjectReader r(*node, "", source);
  SchemaReader schema(&c, /*partial=*/true);
  schema.Read(r);
  return r.Finish();
}

}  // namespace det::config
