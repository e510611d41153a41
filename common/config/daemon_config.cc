#include "common/config/daemon_config.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/config/yaml_reader.h"

namespace det::config {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("config file '", path, "' does not exist or cannot be read"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string SecretFromEnv() {
  const char* s = std::getenv("DET_CLUSTER_SECRET");
  return s ? s : "";
}

// "FIRST-LAST", both ports in [1024, 65535], FIRST <= LAST.
absl::Status ParsePortRange(const std::string& text, int* first, int* last) {
  std::vector<std::string> parts = absl::StrSplit(text, '-');
  int ports[2] = {0, 0};
  bool numbers = parts.size() == 2;
  for (size_t i = 0; numbers && i < 2; ++i) {
    std::string part(absl::StripAsciiWhitespace(parts[i]));
    numbers = !part.empty() && part.size() <= 5 &&
              std::all_of(part.begin(), part.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) &&
              absl::SimpleAtoi(part, &ports[i]);
  }
  if (!numbers) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a port range such as \"29500-29999\", got \"", text, "\""));
  }
  for (int port : ports) {
    if (port < 1024 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          "port ", port, " is outside 1024..65535 (in \"", text, "\")"));
    }
  }
  if (ports[0] > ports[1]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the first port ", ports[0], " is above the last ", ports[1], " (in \"", text, "\")"));
  }
  *first = ports[0];
  *last = ports[1];
  return absl::OkStatus();
}

// Values the master writes into a Slurm batch script (single-quoted there): no quote, no
// control character.
bool ScriptSafe(const std::string& s) {
  return std::none_of(s.begin(), s.end(), [](char ch) {
    return ch == '\'' || static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f;
  });
}

void ReadResourceManager(ObjectReader& rm, MasterConfig* c) {
  std::string type = "agent";
  rm.String("type", &type);
  if (rm.ok() && type != "agent" && type != "slurm") {
    rm.Fail("type", absl::StrCat("expected agent or slurm, got \"", type, "\""));
  }
  if (!rm.ok() || type != "slurm") return;
  SlurmConfig s;
  rm.String("partition", &s.partition);
  rm.String("account", &s.account);
  rm.String("qos", &s.qos);
  rm.String("slot_type", &s.slot_type);
  if (rm.ok() && s.slot_type != "cpu" && s.slot_type != "cuda") {
    rm.Fail("slot_type", absl::StrCat("expected cpu or cuda, got \"", s.slot_type, "\""));
  }
  rm.String("gpu_type", &s.gpu_type);
  rm.Int("cpus_per_slot", &s.cpus_per_slot, 1, 1024);
  rm.Int("slots_per_node", &s.slots_per_node, 0, 1024);
  rm.StringList("sbatch_options", &s.sbatch_options);
  for (const std::string& option : s.sbatch_options) {
    if (rm.ok() && (option.size() < 3 || option.rfind("--", 0) != 0 || !ScriptSafe(option))) {
      rm.Fail("sbatch_options",
              absl::StrCat("expected options such as \"--time=04:00:00\" (each one word "
                           "starting with \"--\", no quote or control character), got \"",
                           option, "\""));
    }
  }
  rm.String("master_address", &s.master_address);
  rm.String("launcher", &s.launcher);
  rm.String("work_dir", &s.work_dir);
  rm.String("worker_python", &s.worker_python);
  rm.StringList("worker_path", &s.worker_path);
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"partition", s.partition},
                                                        {"account", s.account},
                                                        {"qos", s.qos},
                                                        {"gpu_type", s.gpu_type},
                                                        {"master_address", s.master_address}}) {
    if (rm.ok() && (!ScriptSafe(value) || value.find_first_of(" ,=") != std::string::npos)) {
      rm.Fail(key, absl::StrCat("expected a name without spaces, commas, '=' or quotes, got \"",
                                value, "\""));
    }
  }
  std::vector<std::pair<std::string, std::string>> paths = {{"launcher", s.launcher},
                                                            {"work_dir", s.work_dir},
                                                            {"worker_python", s.worker_python}};
  for (const std::string& p : s.worker_path) paths.emplace_back("worker_path", p);
  for (const auto& [key, value] : paths) {
    if (rm.ok() && !value.empty() && (value[0] != '/' || !ScriptSafe(value))) {
      rm.Fail(key, absl::StrCat("expected an absolute path without quotes or control "
                                "characters, got \"", value, "\""));
    }
  }
  std::string ports;
  rm.String("chief_port_range", &ports);
  if (rm.ok() && !ports.empty()) {
    absl::Status st = ParsePortRange(ports, &s.chief_port_first, &s.chief_port_last);
    if (!st.ok()) rm.Fail("chief_port_range", std::string(st.message()));
  }
  rm.Duration("poll_interval", &s.poll_interval);
  if (rm.ok() && (s.poll_interval < absl::Milliseconds(100) || s.poll_interval > absl::Minutes(5))) {
    rm.Fail("poll_interval", "expected between 100ms and 5m");
  }
  rm.Duration("kill_grace", &s.kill_grace);
  if (rm.ok() && s.kill_grace < absl::ZeroDuration()) rm.Fail("kill_grace", "must not be negative");
  c->slurm = std::move(s);
}

}  // namespace

absl::StatusOr<MasterConfig> ParseMasterConfig(absl::string_view text, absl::string_view filename) {
  auto node = ParseYaml(text, filename);
  if (!node.ok()) return node.status();
  MasterConfig c;
  c.cluster_secret = SecretFromEnv();
  ObjectReader r(*node, "", std::string(filename));
  r.String("grpc_listen", &c.grpc_listen);
  r.String("data_dir", &c.data_dir);
  r.String("db_path", &c.db_path);
  r.Int("db_max_size_mb", &c.db_max_size_mb, 0);
  r.Int("db_read_connections", &c.db_read_connections, 1, 64);
  r.Object("db", [&](ObjectReader& db) {
    db.String("type", &c.db_type);
    if (db.ok() && c.db_type != "sqlite" && c.db_type != "postgres") {
      db.Fail("type", absl::StrCat("expected sqlite or postgres, got \"", c.db_type, "\""));
    }
    db.String("path", &c.db_path);
    db.String("url", &c.db_url, /*required=*/c.db_type == "postgres");
    db.String("password_file", &c.db_password_file);
    db.String("password_env", &c.db_password_env);
    if (db.ok() && !c.db_password_file.empty() && !c.db_password_env.empty()) {
      db.Fail("password_env", "set password_file or password_env, not both");
    }
    // A password in the URI would sit in a file others read, and in logs.
    const size_t scheme = c.db_url.find("://");
    const size_t at = c.db_url.find('@');
    if (db.ok() && ((scheme != std::string::npos && at != std::string::npos && at > scheme &&
                     c.db_url.substr(scheme + 3, at - scheme - 3).find(':') != std::string::npos) ||
                    absl::StrContains(c.db_url, "password="))) {
      db.Fail("url", "holds a password: put it in password_file or password_env");
    }
    if (db.ok() && c.db_type == "sqlite" && !c.db_url.empty()) {
      db.Fail("url", "is for type postgres");
    }
  });
  r.String("address_file", &c.address_file);
  r.String("http_listen", &c.http_listen);
  r.String("http_address_file", &c.http_address_file);
  r.Object("grpc_tls", [&](ObjectReader& tls) {
    tls.String("cert_file", &c.grpc_tls_cert_file, /*required=*/true);
    tls.String("key_file", &c.grpc_tls_key_file, /*required=*/true);
  });
  r.Object("http_tls", [&](ObjectReader& tls) {
    tls.String("cert_file", &c.http_tls_cert_file, /*required=*/true);
    tls.String("key_file", &c.http_tls_key_file, /*required=*/true);
  });
  r.Duration("session_ttl", &c.session_ttl);
  if (const char* pw = std::getenv("DET_ADMIN_PASSWORD"); pw != nullptr) c.admin_password = pw;
  r.String("cluster_name", &c.cluster_name);
  r.String("cluster_secret", &c.cluster_secret);
  r.Object("checkpoint_storage", [&](ObjectReader& cs) {
    CheckpointStorageConfig storage;
    ReadCheckpointStorageConfig(cs, /*required=*/true, &storage);
    c.checkpoint_storage = storage;
  });
  r.StringList("checkpoint_storage_allowed_roots", &c.checkpoint_storage_allowed_roots);
  for (size_t i = 0; r.ok() && i < c.checkpoint_storage_allowed_roots.size(); ++i) {
    const std::string& root = c.checkpoint_storage_allowed_roots[i];
    std::vector<std::string> parts = absl::StrSplit(root, '/');
    if (root.empty() || root[0] != '/' || root == "/" ||
        std::any_of(parts.begin(), parts.end(),
                    [](const std::string& p) { return p == "." || p == ".."; })) {
      r.Fail("checkpoint_storage_allowed_roots",
             absl::StrCat("expected absolute directories other than / without '.' or '..', got \"",
                          root, "\""));
    }
  }
  r.Object("scheduler", [&](ObjectReader& s) {
    s.String("fitting_policy", &c.scheduler_fit);
    if (s.ok() && c.scheduler_fit != "best_fit" && c.scheduler_fit != "worst_fit") {
      s.Fail("fitting_policy",
             absl::StrCat("expected best_fit or worst_fit, got \"", c.scheduler_fit, "\""));
    }
  });
  YAML::Node pools;
  r.Any("resource_pools", &pools);
  if (r.ok() && pools && !pools.IsNull()) {
    if (!pools.IsSequence()) r.Fail("resource_pools", "expected a list of pools");
    for (size_t i = 0; r.ok() && pools.IsSequence() && i < pools.size(); ++i) {
      ResourcePoolConfig pool;
      ObjectReader p(pools[i], absl::StrCat("resource_pools[", i, "]"), std::string(filename));
      p.String("pool_name", &pool.name, /*required=*/true);
      p.String("description", &pool.description);
      p.Object("preemption", [&](ObjectReader& pre) {
        pre.Bool("enabled", &pool.preemption);
        pre.Duration("timeout", &pool.preemption_timeout);
      });
      absl::Status st = p.Finish();
      if (!st.ok()) return st;
      for (const auto& other : c.resource_pools) {
        if (other.name == pool.name) {
          return absl::InvalidArgumentError(absl::StrCat(
              p.Where("pool_name"), p.PathOf("pool_name"), ": pool '", pool.name, "' is defined twice"));
        }
      }
      c.resource_pools.push_back(std::move(pool));
    }
  }
  r.Duration("agent_timeout", &c.agent_timeout);
  r.Duration("agent_reconnect_wait", &c.agent_reconnect_wait);
  r.Duration("stop_grace_period", &c.stop_grace_period);
  r.String("log_level", &c.log_level);
  r.Object("resource_manager", [&](ObjectReader& rm) { ReadResourceManager(rm, &c); });
  absl::Status st = r.Finish();
  if (!st.ok()) return st;
  if (c.db_path.empty()) c.db_path = c.data_dir + "/det.db";
  if (c.resource_pools.empty()) c.resource_pools.push_back({"default", "", false, absl::Seconds(60)});
  return c;
}

std::string DatabaseName(const MasterConfig& config) {
  return config.db_type == "postgres" ? config.db_url : config.db_path;
}

std::vector<std::string> CheckpointStorageRoots(const MasterConfig& config) {
  std::vector<std::string> roots = config.checkpoint_storage_allowed_roots;
  if (!roots.empty() && config.checkpoint_storage) {
    ExperimentConfig with_default;
    with_default.checkpoint_storage = config.checkpoint_storage;
    std::string dir = CheckpointDirectory(with_default);
    if (std::find(roots.begin(), roots.end(), dir) == roots.end()) roots.push_back(dir);
  }
  return roots;
}

absl::StatusOr<AgentConfig> ParseAgentConfig(absl::string_view text, absl::string_view filename) {
  auto node = ParseYaml(text, filename);
  if (!node.ok()) return node.status();
  AgentConfig c;
  c.cluster_secret = SecretFromEnv();
  ObjectReader r(*node, "", std::string(filename));
  r.String("master", &c.master, /*required=*/true);
  r.String("agent_id", &c.agent_id);
  r.String("slot_type", &c.slot_type);
  if (r.ok() && c.slot_type != "cpu" && c.slot_type != "auto" && c.slot_type != "cuda") {
    r.Fail("slot_type", absl::StrCat("expected cpu, cuda or auto, got \"", c.slot_type, "\""));
  }
  r.Int("slots", &c.slots, 0, 4096);
  r.String("resource_pool", &c.resource_pool);
  r.String("work_dir", &c.work_dir);
  r.StringList("worker_path", &c.worker_path, /*allow_scalar=*/true);
  r.String("advertise_address", &c.advertise_address);
  std::string port_range;
  r.String("chief_port_range", &port_range);
  if (r.ok() && r.Has("chief_port_range")) {
    absl::Status st = ParsePortRange(port_range, &c.chief_port_first, &c.chief_port_last);
    if (!st.ok()) r.Fail("chief_port_range", std::string(st.message()));
  }
  r.String("worker_python", &c.worker_python);
  if (r.ok() && r.Has("worker_python") && c.worker_python.empty()) {
    r.Fail("worker_python", "expected the path of a Python interpreter, got an empty string");
  }
  if (r.Has("python_path")) {
    c.python_path.emplace();
    r.StringList("python_path", &*c.python_path, /*allow_scalar=*/true);
  }
  r.String("cluster_secret", &c.cluster_secret);
  r.String("master_cert_file", &c.master_cert_file);
  r.Duration("heartbeat_interval", &c.heartbeat_interval);
  r.Duration("kill_grace", &c.kill_grace);
  r.Duration("system_metrics_period", &c.system_metrics_period);
  r.String("log_level", &c.log_level);
  absl::Status st = r.Finish();
  if (!st.ok()) return st;
  if (c.agent_id.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    c.agent_id = host;
  }
  return c;
}

absl::StatusOr<MasterConfig> LoadMasterConfig(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseMasterConfig(*text, path);
}

absl::StatusOr<AgentConfig> LoadAgentConfig(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseAgentConfig(*text, path);
}

}  // namespace det::config
