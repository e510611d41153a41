#include "common/config/experiment_config.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
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
      {"time_metric", {"adaptive_asha"}},
      {"max_time", {"adaptive_asha"}},
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

// The time metrics det's adaptive_asha accepts (searcher.time_metric).
constexpr char kTimeMetrics[] = "batches or epochs";

// A dotted Python name ("a", "a.b_c"): identifiers of letters, digits (not first) and
// underscores; bytes >= 0x80 count as letters (Python allows non-ASCII identifiers).
bool IsDottedIdentifier(absl::string_view name) {
  if (name.empty()) return false;
  for (absl::string_view part : absl::StrSplit(name, '.')) {
    if (part.empty() || absl::ascii_isdigit(static_cast<unsigned char>(part[0]))) return false;
    for (char ch : part) {
      const unsigned char u = static_cast<unsigned char>(ch);
      if (!(u >= 0x80 || absl::ascii_isalnum(u) || u == '_')) return false;
    }
  }
  return true;
}

// Determined's Trial entrypoint form: one word with a colon and no slash ("model_def:Trial").
// The first plain scalar under `node` that YAML reads as an infinity or NaN (.inf, -.inf,
// .nan, ...), with its path below `node` ("" for `node` itself); nullopt when none. JSON,
// which hyperparameters and `data` reach workers in, has no such numbers.
std::optional<std::pair<YAML::Node, std::string>> FindNonFinite(const YAML::Node& node) {
  if (node.IsScalar()) {
    static const auto* const kNonFinite = new std::set<std::string>(
        {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", ".nan",
         ".NaN", ".NAN"});
    if (node.Tag() != "!" && kNonFinite->count(node.Scalar())) {
      return std::pair{node, std::string()};
    }
    return std::nullopt;
  }
  if (node.IsMap()) {
    for (const auto& kv : node) {
      if (auto found = FindNonFinite(kv.second)) {
        const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
        found->second = found->second.empty()     ? key
                        : found->second[0] == '[' ? absl::StrCat(key, found->second)
                                                  : absl::StrCat(key, ".", found->second);
        return found;
      }
    }
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      if (auto found = FindNonFinite(node[i])) {
        found->second = found->second.empty() ? absl::StrCat("[", i, "]")
                                              : absl::StrCat("[", i, "].", found->second);
        return found;
      }
    }
  }
  return std::nullopt;
}

// Fails `r` at a non-finite number under `value` (found at `key` of `r`): see FindNonFinite.
void RefuseNonFinite(ObjectReader& r, const std::string& key, const YAML::Node& value) {
  std::optional<std::pair<YAML::Node, std::string>> found = FindNonFinite(value);
  if (!found) return;
  std::string path = r.PathOf(key);
  if (!found->second.empty()) {
    absl::StrAppend(&path, found->second[0] == '[' ? "" : ".", found->second);
  }
  r.FailAt(found->first, path,
           absl::StrCat("'", found->first.Scalar(),
                        "' is not a finite number, and workers get this section as JSON, which "
                        "has none; write a finite number, or a string your code converts"));
}

bool LooksLikeTrialClass(const std::vector<std::string>& entrypoint) {
  return entrypoint.size() == 1 && entrypoint[0].find(':') != std::string::npos &&
         entrypoint[0].find('/') == std::string::npos;
}

// ceil(a / b) for a length in records and a batch size (a, b >= 0); 0 when b is 0.
int64_t Ceil(int64_t a, int64_t b) { return b > 0 ? a / b + (a % b != 0 ? 1 : 0) : 0; }

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
    ReadEntrypoint(r);
    r.Object("hyperparameters",
             [&](ObjectReader& h) { ReadGroup(h, &c_.hyperparameters); });
    r.Object("resources", [&](ObjectReader& res) { ReadResources(res); });
    ReadLength(r, "min_validation_period", &c_.min_validation_period, /*bare_ok=*/false);
    ReadLength(r, "min_checkpoint_period", &c_.min_checkpoint_period, /*bare_ok=*/false);
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
      for (const char* key : {"average_aggregated_gradients", "gradient_compression",
                              "mixed_precision", "tensor_fusion_cycle_time",
                              "auto_tune_tensor_fusion", "grad_updates_size_file"}) {
        NotApplied(o, key, "a Horovod option; det's workers use torch.distributed");
      }
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
        RefuseNonFinite(r, "data", data);
        c_.data_json = YamlToJson(data);
      }
    }
    r.Any("profiling", &profiling);
    // Determined 0.38 keys with no counterpart here: accepted, each with a warning.
    NotApplied(r, "workspace", "det has no workspaces: experiments belong to their owner");
    NotApplied(r, "project", "det has no projects: use labels to group experiments");
    NotApplied(r, "debug", "det has no debug mode; raise the log level in your code");
    NotApplied(r, "log_policies", "det does not act on log patterns; max_restarts still applies");
    NotApplied(r, "perform_initial_validation",
               "pass Trainer.fit(step_zero_validation=True) in the training script");
    NotApplied(r, "integrations", "det has no integrations (pachyderm, ...)");
    NotApplied(r, "pbs", "det places trials on its own agents");
    NotApplied(r, "slurm", "det places trials on its own agents");
    ReadPreemptionTimeout(r);
    if (!partial_) {
      CrossChecks(r);
      ContainerWarnings();
    }
  }

  std::vector<std::string> warnings;

 private:
  bool Req(bool required = true) const { return required && !partial_; }

  // A Determined key that det accepts and does not apply: known, and a warning when given.
  void NotApplied(ObjectReader& r, const std::string& key, absl::string_view why) {
    r.Known(key);
    if (r.Has(key) && !r.node()[key].IsNull() && !partial_) {
      warnings.push_back(absl::StrCat(r.PathOf(key), " is not applied: ", why));
    }
  }

  // Determined's preemption_timeout (seconds a trial gets to stop by itself once asked to):
  // det's stop_grace_period, which wins when both are given.
  void ReadPreemptionTimeout(ObjectReader& r) {
    if (!r.Has("preemption_timeout")) {
      r.Known("preemption_timeout");
      return;
    }
    int64_t seconds = 0;
    r.Int("preemption_timeout", &seconds, 0, 7 * 24 * 3600);
    if (r.ok() && !r.Has("stop_grace_period")) c_.stop_grace_period = absl::Seconds(seconds);
  }

  // The entrypoint: a list of strings or one string split on whitespace, whose program
  // (first item) is not empty; Determined's `MODULE:CLASS` runs under det.pytorch.run.
  void ReadEntrypoint(ObjectReader& r) {
    r.StringList("entrypoint", &c_.entrypoint, /*allow_scalar=*/true, Req());
    if (!r.ok()) return;
    if (c_.entrypoint.empty()) {
      if (!partial_) r.Fail("entrypoint", "must name a program to run");
      return;
    }
    if (absl::StripAsciiWhitespace(c_.entrypoint[0]).empty()) {
      r.Fail("entrypoint", "the program to run (its first item) is empty");
      return;
    }
    if (!LooksLikeTrialClass(c_.entrypoint)) return;
    const std::string trial = c_.entrypoint[0];
    const size_t colon = trial.find(':');
    const absl::string_view module = absl::string_view(trial).substr(0, colon);
    const absl::string_view cls = absl::string_view(trial).substr(colon + 1);
    if (module.empty() && IsDottedIdentifier(cls)) {
      r.Fail("entrypoint",
             absl::StrCat("\"", trial, "\" names no module: det runs a Trial class as "
                          "MODULE:CLASS (e.g. model_def:", cls, "), not a class of the "
                          "context directory's __init__.py"));
      return;
    }
    if (!IsDottedIdentifier(module) || !IsDottedIdentifier(cls)) {
      r.Fail("entrypoint",
             absl::StrCat("expected a Trial class as MODULE:CLASS (dotted Python names around "
                          "one colon, e.g. model_def:MNistTrial) or a program to run, got \"",
                          trial, "\""));
      return;
    }
    c_.entrypoint = {"python3", "-m", "det.pytorch.run", trial};
    trial_class_ = true;
  }

  // Reads the length `key` of `parent` into `out` when present: a mapping with exactly one
  // of batches, epochs and records; or, when `bare_ok` (searcher.max_length), a bare
  // integer, which counts as batches.
  void ReadLength(ObjectReader& parent, const std::string& key, Length* out, bool bare_ok) {
    if (bare_ok && parent.Has(key) && parent.node()[key].IsScalar()) {
      int64_t value = 0;
      if (!absl::SimpleAtoi(parent.node()[key].Scalar(), &value)) {
        parent.Fail(key, absl::StrCat("expected a length: a number of batches, or {batches: N}, "
                                      "{epochs: N} or {records: N}, got \"",
                                      parent.node()[key].Scalar(), "\""));
        return;
      }
      out->unit = Length::Unit::kBatches;
      parent.Int(key, &out->value, 0, kMaxLengthBatches);
      return;
    }
    parent.Object(key, [&](ObjectReader& r) {
      static const std::vector<std::pair<std::string, Length::Unit>> kUnits = {
          {"batches", Length::Unit::kBatches},
          {"epochs", Length::Unit::kEpochs},
          {"records", Length::Unit::kRecords}};
      std::vector<std::string> given;
      for (const auto& [name, unit] : kUnits) {
        r.Known(name);
        if (r.Has(name)) {
          given.push_back(name);
          out->unit = unit;
        }
      }
      if (given.size() > 1) {
        r.Fail("", absl::StrCat("expected exactly one of 'batches', 'epochs' or 'records', got ",
                                absl::StrJoin(given, " and ")));
        return;
      }
      if (given.empty()) {
        if (!partial_) r.Fail("", "expected exactly one of 'batches', 'epochs' or 'records'");
        return;
      }
      r.Int(given[0], &out->value, 0, kMaxLengthBatches);
    });
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
    ReadSearcherLength(s);
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

  // searcher.max_length, or adaptive_asha's time_metric + max_time (Determined 0.38).
  // Only adaptive_asha needs a length; without one, the other searchers' trials train until
  // their scripts stop.
  void ReadSearcherLength(ObjectReader& s) {
    SearcherConfig& sc = c_.searcher;
    const bool timed = s.Has("time_metric") || s.Has("max_time");
    if (timed && s.Has("max_length")) {
      s.Fail("max_length", "give either max_length or time_metric and max_time (Determined "
                           "0.38's form), not both");
      return;
    }
    if (!timed) {
      if (s.Has("max_length")) {
        Length length;
        ReadLength(s, "max_length", &length, /*bare_ok=*/true);
        sc.max_length = length;
      } else {
        s.Known("max_length");
        if (!partial_ && sc.name == "adaptive_asha") {
          s.Fail("max_time",
                 absl::StrCat("is required: adaptive_asha needs a length, max_time in "
                              "time_metric (", kTimeMetrics, ") or max_length"));
        }
      }
      return;
    }
    s.Known("max_length");
    if (!partial_ && !s.Has("time_metric")) {
      s.Fail("time_metric", absl::StrCat("is required with max_time (", kTimeMetrics, ")"));
      return;
    }
    s.String("time_metric", &sc.time_metric);
    s.Int("max_time", &sc.max_time, 1, kMaxLengthBatches, Req());
    if (!s.ok() || !s.Has("time_metric")) return;
    if (sc.time_metric != "batches" && sc.time_metric != "epochs") {
      s.Fail("time_metric",
             absl::StrCat("expected ", kTimeMetrics, ", got \"", sc.time_metric,
                          "\": det's adaptive_asha measures a trial's time by the batches it "
                          "trained (epochs converted with records_per_epoch), not by the "
                          "value of a reported metric"));
      return;
    }
    if (s.Has("max_time")) {
      sc.max_length = Length{sc.time_metric == "epochs" ? Length::Unit::kEpochs
                                                         : Length::Unit::kBatches,
                             sc.max_time};
    }
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
        RefuseNonFinite(h, name, value);
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
      RefuseNonFinite(r, "val", val);
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
      RefuseNonFinite(r, "vals", vals);
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
    NotApplied(res, "weight", "det's fair share is by priority, not by weight");
    NotApplied(res, "shm_size", "det runs workers as host processes, which share the host's /dev/shm");
    NotApplied(res, "is_single_node",
               "det places a trial on one agent whenever one has slots_per_trial free slots");
    NotApplied(res, "native_parallel", "det starts one process per slot");
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
    for (const char* key : {"force_pull_image", "pod_spec", "registry_auth", "add_capabilities",
                            "drop_capabilities", "proxy_ports"}) {
      NotApplied(env, key, "det runs workers as processes on the agent's host, not in containers");
    }
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
    if (!CheckGlobalBatchSize(r)) return;
    const SearcherConfig& s = c_.searcher;
    const bool timed = !s.time_metric.empty();
    const std::string max_length_path = timed ? "searcher.max_time" : "searcher.max_length";
    const YAML::Node max_length_node = r.node()["searcher"][timed ? "max_time" : "max_length"];
    std::vector<std::tuple<std::string, YAML::Node, const Length*>> lengths = {
        {"min_validation_period", r.node()["min_validation_period"], &c_.min_validation_period},
        {"min_checkpoint_period", r.node()["min_checkpoint_period"], &c_.min_checkpoint_period}};
    if (s.max_length) {
      lengths.insert(lengths.begin(), {max_length_path, max_length_node, &*s.max_length});
    }
    for (const auto& [path, node, length] : lengths) {
      if (!CheckLength(r, path, node, *length)) return;
    }
    if (trial_class_ && !s.max_length) {
      r.FailAt(r.node()["searcher"], "searcher.max_length",
               absl::StrCat("is required with entrypoint ", c_.entrypoint.back(),
                            ": det's Trial runner trains each trial to the searcher's length"));
      return;
    }
    // The shortest a trial's length can be: with the largest global batch size.
    if (s.name == "adaptive_asha" &&
        (!s.max_length || s.max_length->Batches(max_batch_size_, c_.records_per_epoch) < 1)) {
      r.FailAt(max_length_node, max_length_path,
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
    const int64_t slots = c_.resources.slots_per_trial;
    if (c_.global_batch_size > 0 && slots > 1 && c_.global_batch_size % slots != 0) {
      int64_t per_slot = c_.global_batch_size / slots;
      warnings.push_back(absl::StrCat(
          "global_batch_size ", c_.global_batch_size, " is not divisible by slots_per_trial ",
          slots, ": each slot trains on ", per_slot, " records per batch (", per_slot * slots,
          " per global batch; ", c_.global_batch_size - per_slot * slots, " dropped)"));
    }
    if (c_.SearchesGlobalBatchSize() && slots > 1 && !indivisible_example_.empty()) {
      warnings.push_back(absl::StrCat(
          "hyperparameters.global_batch_size is searched and some of its values (e.g. ",
          indivisible_example_, ") are not divisible by slots_per_trial ", slots,
          ": such a trial trains on floor(global_batch_size / ", slots,
          ") records per slot and batch, the rest of each global batch dropped"));
    }
  }

  // hyperparameters.global_batch_size, when present: a positive integer constant, or an int
  // or categorical hyperparameter whose every value is a positive integer (Determined's
  // check-global-batch-size). Sets c_.global_batch_size (constant) and the smallest and
  // largest values a trial can get. False (after recording the error) when invalid.
  bool CheckGlobalBatchSize(ObjectReader& r) {
    const Hyperparameter* gbs = c_.hyperparameters.Find("global_batch_size");
    if (gbs == nullptr) return true;
    const YAML::Node node = r.node()["hyperparameters"]["global_batch_size"];
    const std::string path = "hyperparameters.global_batch_size";
    constexpr char kExpected[] =
        "expected a positive integer, or an int or categorical hyperparameter whose values are "
        "all positive integers";
    auto positive = [](const std::string& json, int64_t* v) {
      return absl::SimpleAtoi(json, v) && *v > 0;
    };
    int64_t v = 0;
    switch (gbs->type) {
      case Hyperparameter::Type::kConst:
        if (!positive(gbs->value_json, &v)) {
          r.FailAt(node, path, absl::StrCat(kExpected, ", got ", gbs->value_json));
          return false;
        }
        c_.global_batch_size = v;
        break;
      case Hyperparameter::Type::kInt: {
        const int64_t lo = static_cast<int64_t>(gbs->minval);
        const int64_t hi = static_cast<int64_t>(gbs->maxval);
        if (lo < 1) {
          r.FailAt(node["minval"], path + ".minval",
                   absl::StrCat("a searched global_batch_size needs minval >= 1, got ", lo));
          return false;
        }
        // A value that is not a multiple of the slots, for the warning.
        const int64_t slots = std::max(1, c_.resources.slots_per_trial);
        for (int64_t x = lo; x <= hi && x < lo + slots; ++x) {
          if (x % slots != 0) {
            indivisible_example_ = absl::StrCat(x);
            break;
          }
        }
        break;
      }
      case Hyperparameter::Type::kCategorical:
        for (size_t i = 0; i < gbs->vals_json.size(); ++i) {
          if (!positive(gbs->vals_json[i], &v)) {
            r.FailAt(node["vals"], path + ".vals",
                     absl::StrCat("every value of a searched global_batch_size must be a "
                                  "positive integer, got ", gbs->vals_json[i], " (item ", i, ")"));
            return false;
          }
          if (indivisible_example_.empty() && c_.resources.slots_per_trial > 1 &&
              v % c_.resources.slots_per_trial != 0) {
            indivisible_example_ = absl::StrCat(v);
          }
        }
        break;
      case Hyperparameter::Type::kDouble:
      case Hyperparameter::Type::kLog:
      case Hyperparameter::Type::kObject: {
        const char* what =
            gbs->type == Hyperparameter::Type::kDouble ? "a double hyperparameter"
            : gbs->type == Hyperparameter::Type::kLog  ? "a log hyperparameter"
                                                       : "a group of hyperparameters";
        r.FailAt(node, path,
                 absl::StrCat(kExpected, ", got ", what,
                              gbs->type == Hyperparameter::Type::kObject
                                  ? ""
                                  : " (a batch size is a whole number; Determined searches "
                                    "it only as int or categorical)"));
        return false;
      }
    }
    std::tie(min_batch_size_, max_batch_size_) = GlobalBatchSizeRange(c_);
    return true;
  }

  // A length in epochs or records needs the sizes that convert it to batches, for every
  // global batch size a trial can get, and must stay within kMaxLengthBatches batches.
  bool CheckLength(ObjectReader& r, const std::string& path, const YAML::Node& node,
                   const Length& length) {
    if (length.unit == Length::Unit::kRecords) {
      if (max_batch_size_ == 0) {
        r.FailAt(node, path,
                 "a length in records needs hyperparameters.global_batch_size (N records are "
                 "ceil(N / global_batch_size) batches)");
        return false;
      }
      return true;  // At most `value` batches.
    }
    if (length.unit != Length::Unit::kEpochs) return true;
    if (c_.records_per_epoch == 0 || max_batch_size_ == 0) {
      r.FailAt(node, path,
               "a length in epochs needs records_per_epoch and hyperparameters.global_batch_size");
      return false;
    }
    if (c_.records_per_epoch / max_batch_size_ == 0) {
      r.FailAt(node, path,
               absl::StrCat("a length in epochs needs whole batches in an epoch: records_per_epoch ",
                            c_.records_per_epoch, " is less than global_batch_size ",
                            max_batch_size_));
      return false;
    }
    const int64_t per_epoch = c_.records_per_epoch / min_batch_size_;
    if (length.value > kMaxLengthBatches / per_epoch) {
      r.FailAt(node, path,
               absl::StrCat(length.value, " epochs of ", per_epoch, " batches is more than ",
                            kMaxLengthBatches, " batches, the longest length accepted"));
      return false;
    }
    return true;
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
  // The smallest and largest global batch size a trial can get (CheckGlobalBatchSize); 0
  // when the config has none.
  int64_t min_batch_size_ = 0;
  int64_t max_batch_size_ = 0;
  // A searched global batch size that slots_per_trial does not divide, or "".
  std::string indivisible_example_;
  // The entrypoint is a Trial class (MODULE:CLASS), run by det.pytorch.run.
  bool trial_class_ = false;
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
  if (cs.ok() && typed && s.type != "shared_fs" && s.type != "directory") {
    cs.Fail("type", absl::StrCat("expected shared_fs or directory (the checkpoint storage det "
                                 "supports: a directory every agent mounts), got \"", s.type,
                                 "\""));
    return;
  }
  // Determined's `directory` storage is a path inside the task's container; det runs no
  // containers, so it is the agents' own path: the same storage as shared_fs.
  const std::string path_key = s.type == "directory" ? "container_path" : "host_path";
  if (s.type == "directory") s.type = "shared_fs";
  cs.String(path_key, &s.host_path, required);
  if (cs.ok() && cs.Has(path_key) && !IsAbsolute(s.host_path)) {
    cs.Fail(path_key, absl::StrCat("expected an absolute path, got \"", s.host_path, "\""));
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

int64_t Length::Batches(int64_t global_batch_size, int64_t records_per_epoch) const {
  switch (unit) {
    case Unit::kBatches:
      return value;
    case Unit::kEpochs:
      return global_batch_size > 0 ? value * (records_per_epoch / global_batch_size) : 0;
    case Unit::kRecords:
      return Ceil(value, global_batch_size);
  }
  return value;
}

bool ExperimentConfig::SearchesGlobalBatchSize() const {
  const Hyperparameter* gbs = hyperparameters.Find("global_batch_size");
  return gbs != nullptr && gbs->type != Hyperparameter::Type::kConst;
}

std::pair<int64_t, int64_t> GlobalBatchSizeRange(const ExperimentConfig& config) {
  const Hyperparameter* gbs = config.hyperparameters.Find("global_batch_size");
  if (gbs == nullptr) return {0, 0};
  switch (gbs->type) {
    case Hyperparameter::Type::kConst:
      return {config.global_batch_size, config.global_batch_size};
    case Hyperparameter::Type::kInt:
      return {static_cast<int64_t>(gbs->minval), static_cast<int64_t>(gbs->maxval)};
    case Hyperparameter::Type::kCategorical: {
      int64_t lo = 0, hi = 0, v = 0;
      for (const std::string& json : gbs->vals_json) {
        if (!absl::SimpleAtoi(json, &v) || v <= 0) continue;
        lo = lo == 0 ? v : std::min(lo, v);
        hi = std::max(hi, v);
      }
      return {lo, hi};
    }
    default:
      return {0, 0};
  }
}

int64_t TrialGlobalBatchSize(const ExperimentConfig& config, absl::string_view hparams_json) {
  if (!config.SearchesGlobalBatchSize()) return config.global_batch_size;
  absl::StatusOr<YAML::Node> hparams = ParseYamlValue(hparams_json, "hyperparameters");
  if (!hparams.ok() || !hparams->IsMap()) return 0;
  const YAML::Node& map = *hparams;
  const YAML::Node value = map["global_batch_size"];
  int64_t v = 0;
  if (!value || !value.IsScalar() || !absl::SimpleAtoi(value.Scalar(), &v) || v <= 0) return 0;
  return v;
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
  return std::tie(a.name, a.metric, a.smaller_is_better, a.max_length, a.time_metric,
                  a.max_time, a.max_trials, a.max_concurrent_trials, a.divisor, a.max_rungs,
                  a.mode) == std::tie(b.name, b.metric, b.smaller_is_better, b.max_length,
                                      b.time_metric, b.max_time, b.max_trials,
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
