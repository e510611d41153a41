#include "common/worker/cpp/harness/context.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/config/trial_spec.h"

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

// `text` (from variable `name`) as a JSON object; "" is {}.
absl::Status ReadJsonObject(const std::string& name, const std::string& text, nlohmann::json* out) {
  if (text.empty()) {
    *out = nlohmann::json::object();
    return absl::OkStatus();
  }
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Missing(name, "is not a JSON object");
  *out = std::move(j);
  return absl::OkStatus();
}

// The contents of `path` into *out; FailedPrecondition naming the path and errno's text.
absl::Status ReadWholeFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("names '", path, "', which cannot be read: ", strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  *out = std::move(text).str();
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
  if (c.allocation_id.empty()) return Missing("DET_ALLOCATION_ID", "is not set");
  c.allocation_token = get("DET_ALLOCATION_TOKEN");
  if (c.allocation_token.empty()) return Missing("DET_ALLOCATION_TOKEN", "is not set");
  if (auto st = ReadInt(env, "RANK", &c.rank, true); !st.ok()) return st;
  if (auto st = ReadInt(env, "WORLD_SIZE", &c.world_size, true); !st.ok()) return st;
  if (auto st = ReadInt(env, "LOCAL_RANK", &c.local_rank, false); !st.ok()) return st;
  if (auto st = ReadInt(env, "LOCAL_WORLD_SIZE", &c.local_world_size, false); !st.ok()) return st;
  if (auto st = ReadInt(env, "CROSS_RANK", &c.cross_rank, false); !st.ok()) return st;
  if (auto st = ReadInt(env, "CROSS_SIZE", &c.cross_size, false); !st.ok()) return st;
  if (c.world_size < 1 || c.rank < 0 || c.rank >= c.world_size) {
    return Missing("RANK", absl::StrCat("(", c.rank, ") is outside WORLD_SIZE (", c.world_size, ")"));
  }

  const std::string spec_file = get(config::kTrialSpecFileEnv);
  if (spec_file.empty()) return Missing(config::kTrialSpecFileEnv, "is not set");
  std::string spec_text;
  if (absl::Status read = ReadWholeFile(spec_file, &spec_text); !read.ok()) {
    return Missing(config::kTrialSpecFileEnv, std::string(read.message()));
  }
  absl::StatusOr<v1::TrialSpec> spec = config::DecodeTrialSpec(spec_text);
  if (!spec.ok()) return spec.status();
  c.spec = *std::move(spec);
  const std::string spec_name = config::kTrialSpecEnv;
  if (auto st = ReadJsonObject(spec_name + ".hparams_json", c.spec.hparams_json(), &c.hparams); !st.ok()) {
    return st;
  }
  if (auto st = ReadJsonObject(spec_name + ".data_json", c.spec.data_json(), &c.data); !st.ok()) {
    return st;
  }
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
  if (!data.contains(key) || !data[key].is_string()) return fallback;
  return data[key].get<std::string>();
}

int64_t TrialContext::DataInt(const std::string& key, int64_t fallback) const {
  if (!data.contains(key) || !data[key].is_number_integer()) return fallback;
  return data[key].get<int64_t>();
}

}  // namespace det::harness
