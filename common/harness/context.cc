#include "common/harness/context.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_files.h"

extern char** environ;

namespace det::harness {
namespace {

absl::Status Missing(const std::string& name, const std::string& why) {
  return absl::FailedPreconditionError(absl::StrCat(
      "environment variable ", name, " ", why, " (is this process running under a det agent?)"));
}

template <typename T>
absl::Status ReadInt(const std::map<std::string, std::string>& env, const std::string& name,
                     T* out, bool required) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) {
    return required ? Missing(name, "is not set") : absl::OkStatus();
  }
  int64_t v;
  if (!absl::SimpleAtoi(it->second, &v)) return Missing(name, absl::StrCat("is not an integer: '", it->second, "'"));
  *out = static_cast<T>(v);
  return absl::OkStatus();
}

absl::Status ReadJson(const std::map<std::string, std::string>& env, const std::string& name,
                      nlohmann::json* out) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return absl::OkStatus();
  auto j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Missing(name, "is not a JSON object");
  *out = std::move(j);
  return absl::OkStatus();
}

int64_t LengthInBatches(const nlohmann::json& length, int64_t batches_per_epoch) {
  if (!length.is_object()) return 0;
  if (length.contains("batches") && length["batches"].is_number()) return length["batches"].get<int64_t>();
  if (length.contains("epochs") && length["epochs"].is_number()) {
    return length["epochs"].get<int64_t>() * batches_per_epoch;
  }
  return 0;
}

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

// Reads the searcher, checkpoint and optimizations settings of c->config.
absl::Status ReadTrainingConfig(TrialContext* c) {
  const nlohmann::json& cfg = c->config;
  if (cfg.contains("searcher") && cfg["searcher"].is_object()) {
    const auto& s = cfg["searcher"];
    if (s.contains("metric") && s["metric"].is_string()) c->searcher_metric = s["metric"].get<std::string>();
    if (s.contains("smaller_is_better") && s["smaller_is_better"].is_boolean()) {
      c->smaller_is_better = s["smaller_is_better"].get<bool>();
    }
  }
  if (cfg.contains("checkpoint_policy")) {
    if (!cfg["checkpoint_policy"].is_string()) return Invalid("checkpoint_policy", "expected best, all or none");
    c->checkpoint_policy = cfg["checkpoint_policy"].get<std::string>();
    if (c->checkpoint_policy != "best" && c->checkpoint_policy != "all" && c->checkpoint_policy != "none") {
      return Invalid("checkpoint_policy", absl::StrCat("expected best, all or none, got \"", c->checkpoint_policy, "\""));
    }
  }
  absl::StatusOr<std::string> dir = CheckpointDirectory(cfg);
  if (!dir.ok()) return dir.status();
  c->checkpoint_dir = *dir;
  if (cfg.contains("optimizations") && cfg["optimizations"].is_object()) {
    const auto& o = cfg["optimizations"];
    if (o.contains("aggregation_frequency")) {
      if (!o["aggregation_frequency"].is_number_integer() || o["aggregation_frequency"].get<int64_t>() < 1 ||
          o["aggregation_frequency"].get<int64_t>() > 1000000) {
        return Invalid("optimizations.aggregation_frequency", "must be an integer in [1, 1000000]");
      }
      c->aggregation_frequency = o["aggregation_frequency"].get<int>();
    }
    if (o.contains("average_training_metrics")) {
      if (!o["average_training_metrics"].is_boolean()) {
        return Invalid("optimizations.average_training_metrics", "expected true or false");
      }
      c->average_training_metrics = o["average_training_metrics"].get<bool>();
    }
    if (o.contains("tensor_fusion_threshold")) {
      if (!o["tensor_fusion_threshold"].is_number() || o["tensor_fusion_threshold"].get<double>() <= 0) {
        return Invalid("optimizations.tensor_fusion_threshold", "expected a positive number of MB");
      }
      c->bucket_bytes = static_cast<int64_t>(o["tensor_fusion_threshold"].get<double>() * (1 << 20));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::map<std::string, std::string> ProcessEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

absl::StatusOr<TrialContext> ContextFromEnvironment(const std::map<std::string, std::string>& env) {
  TrialContext c;
  auto get = [&](const std::string& name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  c.master = get("DET_MASTER");
  if (c.master.empty()) return Missing("DET_MASTER", "is not set");
  c.allocation_id = get("DET_ALLOCATION_ID");
  c.allocation_token = get("DET_ALLOCATION_TOKEN");
  c.latest_checkpoint = get("DET_LATEST_CHECKPOINT");
  if (auto st = ReadInt(env, "DET_EXPERIMENT_ID", &c.experiment_id, true); !st.ok()) return st;
  if (auto st = ReadInt(env, "DET_TRIAL_ID", &c.trial_id, true); !st.ok()) return st;
  if (auto st = ReadInt(env, "DET_TRIAL_RUN_ID", &c.run_id, false); !st.ok()) return st;
  if (auto st = ReadInt(env, "DET_TRIAL_SEED", &c.trial_seed, true); !st.ok()) return st;
  if (auto st = ReadInt(env, "DET_TRIAL_TARGET_BATCHES", &c.target_batches, false); !st.ok()) return st;
  if (auto st = ReadInt(env, "RANK", &c.rank, true); !st.ok()) return st;
  if (auto st = ReadInt(env, "WORLD_SIZE", &c.world_size, true); !st.ok()) return st;
  if (auto st = ReadInt(env, "LOCAL_RANK", &c.local_rank, false); !st.ok()) return st;
  if (auto st = ReadInt(env, "LOCAL_WORLD_SIZE", &c.local_world_size, false); !st.ok()) return st;
  if (auto st = ReadInt(env, "CROSS_RANK", &c.cross_rank, false); !st.ok()) return st;
  if (auto st = ReadInt(env, "CROSS_SIZE", &c.cross_size, false); !st.ok()) return st;
  if (c.world_size < 1 || c.rank < 0 || c.rank >= c.world_size) {
    return Missing("RANK", absl::StrCat("(", c.rank, ") is outside WORLD_SIZE (", c.world_size, ")"));
  }
  if (auto st = ReadJson(env, "DET_HPARAMS", &c.hparams); !st.ok()) return st;
  if (auto st = ReadJson(env, "DET_EXPERIMENT_CONFIG", &c.config); !st.ok()) return st;

  if (c.hparams.contains("global_batch_size") && c.hparams["global_batch_size"].is_number_integer()) {
    c.global_batch_size = c.hparams["global_batch_size"].get<int64_t>();
  }
  c.per_slot_batch_size = c.global_batch_size / c.world_size;
  int64_t records = c.config.value("records_per_epoch", int64_t{0});
  c.batches_per_epoch = c.global_batch_size > 0 ? records / c.global_batch_size : 0;
  c.scheduling_unit = c.config.value("scheduling_unit", int64_t{100});
  if (c.config.contains("min_validation_period")) {
    c.validation_period = LengthInBatches(c.config["min_validation_period"], c.batches_per_epoch);
  }
  if (c.config.contains("min_checkpoint_period")) {
    c.checkpoint_period = LengthInBatches(c.config["min_checkpoint_period"], c.batches_per_epoch);
  }
  if (auto st = ReadTrainingConfig(&c); !st.ok()) return st;
  c.collective_host = get("DET_COLLECTIVE_HOST");
  c.collective_iface = get("DET_COLLECTIVE_IFACE");
  if (std::string t = get("DET_COLLECTIVE_PEER_TIMEOUT"); !t.empty()) {
    if (!absl::ParseDuration(t, &c.collective_peer_timeout) ||
        c.collective_peer_timeout < absl::Seconds(1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DET_COLLECTIVE_PEER_TIMEOUT: expected a duration of at least 1s such as \"30s\", got '",
          t, "'"));
    }
  }
  if (std::string t = get("DET_SLOT_TYPE"); !t.empty()) c.slot_type = t;
  if (c.slot_type != "cpu" && c.slot_type != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("DET_SLOT_TYPE: expected cpu or cuda, got '", c.slot_type, "'"));
  }
  return c;
}

absl::StatusOr<double> TrialContext::HparamDouble(const std::string& name, double fallback) const {
  if (!hparams.contains(name)) return fallback;
  if (!hparams[name].is_number()) {
    return absl::InvalidArgumentError(absl::StrCat("hyperparameters.", name, ": expected a number, got ", hparams[name].dump()));
  }
  return hparams[name].get<double>();
}

absl::StatusOr<int64_t> TrialContext::HparamInt(const std::string& name, int64_t fallback) const {
  if (!hparams.contains(name)) return fallback;
  if (!hparams[name].is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat("hyperparameters.", name, ": expected an integer, got ", hparams[name].dump()));
  }
  return hparams[name].get<int64_t>();
}

std::string TrialContext::DataString(const std::string& key, const std::string& fallback) const {
  if (!config.contains("data") || !config["data"].is_object()) return fallback;
  const auto& data = config["data"];
  if (!data.contains(key) || !data[key].is_string()) return fallback;
  return data[key].get<std::string>();
}

}  // namespace det::harness
