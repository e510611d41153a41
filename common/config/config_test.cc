#include <dirent.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/config/daemon_config.h"
#include "common/config/experiment_config.h"
#include "common/config/yaml_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::Status ParseError(const std::string& yaml) {
  return ParseExperimentConfig(yaml, "exp.yaml", 7).status();
}

constexpr char kMinimal[] = R"(entrypoint: train
searcher:
  name: single
  metric: loss
  max_length:
    batches: 10
)";

TEST(ExperimentConfig, FillsDefaultsAndChoosesSeed) {
  auto parsed = ParseExperimentConfig(kMinimal, "exp.yaml", 1234);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->config.resources.slots_per_trial, 1);
  EXPECT_EQ(parsed->config.resources.priority, 42);
  EXPECT_EQ(parsed->config.max_restarts, 5);
  EXPECT_EQ(parsed->config.experiment_seed, 1234);
  EXPECT_EQ(parsed->config.entrypoint, std::vector<std::string>{"train"});
  EXPECT_THAT(parsed->effective_yaml, HasSubstr("experiment_seed: 1234"));
  EXPECT_THAT(parsed->effective_yaml, HasSubstr("slots_per_trial: 1"));
  // The effective config parses back to the same values.
  auto again = ParseExperimentConfig(parsed->effective_yaml, "effective", 99);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->config.experiment_seed, 1234);
  EXPECT_EQ(again->effective_yaml, parsed->effective_yaml);
}

TEST(ExperimentConfig, EnvironmentPythonIsAnAbsolutePath) {
  auto parsed = ParseExperimentConfig(
      std::string(kMinimal) + "environment:\n  python: /opt/venv/bin/python3\n", "exp.yaml", 1);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->config.python, "/opt/venv/bin/python3");
  auto again = ParseExperimentConfig(parsed->effective_yaml, "effective", 1);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->config.python, "/opt/venv/bin/python3");
  EXPECT_EQ(std::string(ParseError(std::string(kMinimal) + "environment:\n  python: python3\n")
                            .message()),
            "exp.yaml:8: environment.python: expected the absolute path of a Python interpreter "
            "on the agents (e.g. /opt/venv/bin/python3), got \"python3\"");
  EXPECT_THAT(std::string(ParseError(std::string(kMinimal) +
                                     "environment:\n  python: [a]\n").message()),
              HasSubstr("environment.python"));
}

TEST(ExperimentConfig, StopGracePeriodIsADuration) {
  auto parsed = ParseExperimentConfig(std::string(kMinimal) + "stop_grace_period: 90s\n",
                                      "exp.yaml", 1);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->config.stop_grace_period, absl::Seconds(90));
  auto unset = ParseExperimentConfig(kMinimal, "exp.yaml", 1);
  ASSERT_TRUE(unset.ok());
  EXPECT_FALSE(unset->config.stop_grace_period.has_value());
  EXPECT_THAT(std::string(ParseError(std::string(kMinimal) + "stop_grace_period: soon\n").message()),
              HasSubstr("exp.yaml:7: stop_grace_period: expected a duration such as 30s"));
}

TEST(ExperimentConfig, WrongTypeNamesLineFieldAndValue) {
  std::string yaml = std::string(kMinimal) + "resources:\n  slots_per_trial: eight\n";
  absl::Status st = ParseError(yaml);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(st.message()),
            "exp.yaml:8: resources.slots_per_trial: expected an integer >= 0, got \"eight\"");
}

TEST(ExperimentConfig, UnknownKeySuggestsTheClosest) {
  absl::Status st = ParseError(std::string(kMinimal) + "max_restart: 3\n");
  EXPECT_THAT(st.message(), HasSubstr("exp.yaml:7: max_restart: unknown key (did you mean 'max_restarts'?)"));
  st = ParseError(std::string(kMinimal) + "resources:\n  slot_per_trial: 2\n");
  EXPECT_THAT(st.message(), HasSubstr("resources.slot_per_trial: unknown key (did you mean 'slots_per_trial'?)"));
}

TEST(ExperimentConfig, MalformedYamlNamesTheLine) {
  absl::Status st = ParseError("entrypoint: train\nsearcher: [unclosed\n  name: x\n");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("exp.yaml:"));
  EXPECT_THAT(st.message(), HasSubstr("malformed YAML"));
}

TEST(ExperimentConfig, RequiredAndRangeErrors) {
  EXPECT_THAT(ParseError("searcher: {name: single, metric: m, max_length: {batches: 1}}\n").message(),
              HasSubstr("entrypoint: is required"));
  EXPECT_THAT(ParseError("entrypoint: x\n").message(), HasSubstr("searcher: is required"));
  EXPECT_THAT(ParseError(std::string(kMinimal) + "resources: {priority: 100}\n").message(),
              HasSubstr("resources.priority: expected an integer in [1, 99], got \"100\""));
  EXPECT_THAT(ParseError("entrypoint: x\nsearcher: {name: single, metric: m, max_length: {batches: 1, epochs: 2}}\n").message(),
              HasSubstr("searcher.max_length: expected exactly one of 'batches', 'epochs' or 'records', got batches and epochs"));
  EXPECT_THAT(ParseError("entrypoint: x\nsearcher: {name: adaptive, metric: m, max_length: {batches: 1}}\n").message(),
              HasSubstr("searcher.name: expected one of single, grid, random, adaptive_asha, got \"adaptive\""));
}

TEST(ExperimentConfig, EpochsNeedRecordsPerEpoch) {
  EXPECT_THAT(ParseError("entrypoint: x\nsearcher: {name: single, metric: m, max_length: {epochs: 1}}\n").message(),
              HasSubstr("records_per_epoch"));
}

TEST(ExperimentConfig, IndivisibleBatchIsAWarning) {
  auto parsed = ParseExperimentConfig(
      std::string(kMinimal) + "hyperparameters: {global_batch_size: 100}\nresources: {slots_per_trial: 8}\n",
      "exp.yaml", 1);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->warnings.size(), 1u);
  EXPECT_THAT(parsed->warnings[0], HasSubstr("12 records per batch (96 per global batch; 4 dropped)"));
}

TEST(Hyperparameters, EveryTypeParses) {
  auto parsed = ParseExperimentConfig(std::string(kMinimal) + R"(hyperparameters:
  lr: {type: log, minval: -4, maxval: -1}
  layers: {type: int, minval: 1, maxval: 3}
  act: {type: categorical, vals: [relu, tanh]}
  name: fixed
)", "exp.yaml", 1);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const auto& hps = parsed->config.hyperparameters.fields;
  ASSERT_EQ(hps.size(), 4u);
  EXPECT_EQ(hps[0].name, "act");
  EXPECT_EQ(hps[0].vals_json, (std::vector<std::string>{"\"relu\"", "\"tanh\""}));
  EXPECT_EQ(hps[1].type, Hyperparameter::Type::kInt);
  EXPECT_EQ(hps[2].type, Hyperparameter::Type::kLog);
  EXPECT_EQ(hps[2].base, 10);
  EXPECT_EQ(hps[3].value_json, "\"fixed\"");
}

TEST(DaemonConfig, MasterDefaultsAndErrors) {
  auto c = ParseMasterConfig("data_dir: /tmp/x\n", "master.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->db_path, "/tmp/x/det.db");
  EXPECT_EQ(c->agent_timeout, absl::Seconds(30));
  EXPECT_THAT(ParseMasterConfig("agent_timeout: soon\n", "master.yaml").status().message(),
              HasSubstr("master.yaml:1: agent_timeout: expected a duration"));
  EXPECT_THAT(ParseMasterConfig("scheduler: {fitting_policy: random}\n", "m.yaml").status().message(),
              HasSubstr("scheduler.fitting_policy: expected best_fit or worst_fit"));
  EXPECT_EQ(LoadMasterConfig("/nonexistent/master.yaml").status().code(), absl::StatusCode::kNotFound);
}

// db: SQLite by default; PostgreSQL by URI with the password from a file or a variable,
// never in the URI.
TEST(DaemonConfig, Database) {
  auto sqlite = ParseMasterConfig("data_dir: /x\n", "m.yaml");
  ASSERT_TRUE(sqlite.ok()) << sqlite.status();
  EXPECT_EQ(sqlite->db_type, "sqlite");
  EXPECT_EQ(DatabaseName(*sqlite), "/x/det.db");
  auto path = ParseMasterConfig("db: {type: sqlite, path: /y/state.db}\n", "m.yaml");
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(path->db_path, "/y/state.db");

  auto pg = ParseMasterConfig(
      "db:\n  type: postgres\n  url: postgresql://det@db.example.com:5432/det?sslmode=verify-full\n"
      "  password_file: /etc/det/db-password\n",
      "m.yaml");
  ASSERT_TRUE(pg.ok()) << pg.status();
  EXPECT_EQ(pg->db_type, "postgres");
  EXPECT_EQ(pg->db_url, "postgresql://det@db.example.com:5432/det?sslmode=verify-full");
  EXPECT_EQ(pg->db_password_file, "/etc/det/db-password");
  EXPECT_EQ(DatabaseName(*pg), pg->db_url);
  auto env = ParseMasterConfig(
      "db: {type: postgres, url: 'host=db dbname=det', password_env: DET_DB_PASSWORD}\n", "m.yaml");
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->db_password_env, "DET_DB_PASSWORD");

  EXPECT_THAT(ParseMasterConfig("db: {type: mysql}\n", "m.yaml").status().message(),
              HasSubstr("db.type: expected sqlite or postgres, got \"mysql\""));
  EXPECT_THAT(ParseMasterConfig("db: {type: postgres}\n", "m.yaml").status().message(),
              HasSubstr("db.url"));
  EXPECT_THAT(
      ParseMasterConfig("db: {type: postgres, url: 'postgresql://det:hunter2@db/det'}\n", "m.yaml")
          .status()
          .message(),
      HasSubstr("db.url: holds a password: put it in password_file or password_env"));
  EXPECT_THAT(ParseMasterConfig("db: {type: postgres, url: 'host=db password=hunter2'}\n", "m.yaml")
                  .status()
                  .message(),
              HasSubstr("holds a password"));
  EXPECT_THAT(ParseMasterConfig("db: {type: postgres, url: 'host=db', password_file: /p, "
                                "password_env: P}\n",
                                "m.yaml")
                  .status()
                  .message(),
              HasSubstr("set password_file or password_env, not both"));
}

TEST(DaemonConfig, SlurmResourceManager) {
  auto agents = ParseMasterConfig("resource_manager: {type: agent}\n", "m.yaml");
  ASSERT_TRUE(agents.ok()) << agents.status();
  EXPECT_FALSE(agents->slurm.has_value());
  auto slurm = ParseMasterConfig(
      "resource_manager:\n  type: slurm\n  partition: gpu\n  account: lab\n  qos: normal\n"
      "  slot_type: cuda\n  gpu_type: a100\n  slots_per_node: 8\n"
      "  sbatch_options: [--time=04:00:00, --exclusive]\n  master_address: det.example.com:8080\n"
      "  launcher: /opt/det/bin/det-slurm-launcher\n  work_dir: /scratch/det\n"
      "  worker_python: /opt/venv/bin/python3\n  worker_path: [/opt/det/bin]\n"
      "  chief_port_range: 30000-30099\n  poll_interval: 2s\n  kill_grace: 30s\n",
      "m.yaml");
  ASSERT_TRUE(slurm.ok()) << slurm.status();
  ASSERT_TRUE(slurm->slurm.has_value());
  const SlurmConfig& s = *slurm->slurm;
  EXPECT_EQ(s.partition, "gpu");
  EXPECT_EQ(s.account, "lab");
  EXPECT_EQ(s.qos, "normal");
  EXPECT_EQ(s.slot_type, "cuda");
  EXPECT_EQ(s.gpu_type, "a100");
  EXPECT_EQ(s.slots_per_node, 8);
  EXPECT_EQ(s.sbatch_options, (std::vector<std::string>{"--time=04:00:00", "--exclusive"}));
  EXPECT_EQ(s.master_address, "det.example.com:8080");
  EXPECT_EQ(s.launcher, "/opt/det/bin/det-slurm-launcher");
  EXPECT_EQ(s.chief_port_first, 30000);
  EXPECT_EQ(s.chief_port_last, 30099);
  EXPECT_EQ(s.poll_interval, absl::Seconds(2));
  EXPECT_EQ(s.kill_grace, absl::Seconds(30));

  struct Bad {
    std::string yaml;
    std::string error;
  };
  for (const Bad& b : std::vector<Bad>{
           {"type: pbs", "resource_manager.type: expected agent or slurm, got \"pbs\""},
           {"type: slurm\n  slot_type: tpu", "resource_manager.slot_type: expected cpu or cuda"},
           {"type: slurm\n  sbatch_options: [-t 5]", "resource_manager.sbatch_options: expected options"},
           {"type: slurm\n  sbatch_options: [\"--comment=it's\"]", "resource_manager.sbatch_options"},
           {"type: slurm\n  partition: \"a b\"", "resource_manager.partition: expected a name"},
           {"type: slurm\n  launcher: det-slurm-launcher", "resource_manager.launcher: expected an absolute path"},
           {"type: slurm\n  work_dir: \"/tmp/it's\"", "resource_manager.work_dir: expected an absolute path"},
           {"type: slurm\n  chief_port_range: 10-20", "resource_manager.chief_port_range: port 10"},
           {"type: slurm\n  poll_interval: 10ms", "resource_manager.poll_interval: expected between"},
           {"type: slurm\n  cpus_per_slot: 0", "resource_manager.cpus_per_slot"},
           {"type: slurm\n  partitoin: x", "partitoin"},
       }) {
    auto parsed = ParseMasterConfig("resource_manager:\n  " + b.yaml + "\n", "m.yaml");
    EXPECT_FALSE(parsed.ok()) << b.yaml;
    EXPECT_THAT(parsed.status().message(), HasSubstr(b.error)) << b.yaml;
  }
}

TEST(DaemonConfig, CheckpointStorageAllowedRoots) {
  auto none = ParseMasterConfig("data_dir: /x\n", "m.yaml");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(CheckpointStorageRoots(*none).empty());  // Any path.

  auto c = ParseMasterConfig(
      "checkpoint_storage_allowed_roots: [/srv/ckpt, /data/team]\n"
      "checkpoint_storage: {type: shared_fs, host_path: /ckpt, storage_path: default}\n",
      "m.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(CheckpointStorageRoots(*c),
              ::testing::ElementsAre("/srv/ckpt", "/data/team", "/ckpt/default"));
  auto only_default =
      ParseMasterConfig("checkpoint_storage: {type: shared_fs, host_path: /ckpt}\n", "m.yaml");
  ASSERT_TRUE(only_default.ok()) << only_default.status();
  EXPECT_TRUE(CheckpointStorageRoots(*only_default).empty());  // Nothing restricted.
  // cluster-up's layout: the default storage is the allowed root; it is listed once.
  auto same = ParseMasterConfig(
      "checkpoint_storage_allowed_roots: [/d/checkpoints]\n"
      "checkpoint_storage: {type: shared_fs, host_path: /d/checkpoints}\n",
      "m.yaml");
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_THAT(CheckpointStorageRoots(*same), ::testing::ElementsAre("/d/checkpoints"));

  for (const std::string bad : {"rel/dir", "/", "/srv/../etc", "/srv/./x", "''"}) {
    EXPECT_THAT(ParseMasterConfig("checkpoint_storage_allowed_roots: [" + bad + "]\n", "m.yaml")
                    .status().message(),
                HasSubstr("m.yaml:1: checkpoint_storage_allowed_roots: expected absolute "
                          "directories other than / without '.' or '..'"))
        << bad;
  }
}

TEST(DaemonConfig, MasterCheckpointStorage) {
  auto none = ParseMasterConfig("data_dir: /x\n", "m.yaml");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->checkpoint_storage.has_value());

  auto c = ParseMasterConfig(
      "checkpoint_storage: {type: shared_fs, host_path: /ckpt, save_trial_latest: 2}\n", "m.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->checkpoint_storage.has_value());
  EXPECT_EQ(c->checkpoint_storage->host_path, "/ckpt");
  EXPECT_EQ(c->checkpoint_storage->save_trial_latest, 2);
  EXPECT_EQ(c->checkpoint_storage->save_trial_best, 1);

  // The experiment config's rules, named by the master.yaml key (type and host_path required).
  EXPECT_THAT(ParseMasterConfig("checkpoint_storage: {host_path: /c}\n", "m.yaml").status().message(),
              HasSubstr("checkpoint_storage.type"));
  EXPECT_THAT(ParseMasterConfig("checkpoint_storage: {type: s3, host_path: /c}\n", "m.yaml")
                  .status().message(),
              HasSubstr("m.yaml:1: checkpoint_storage.type: expected shared_fs"));
  EXPECT_THAT(ParseMasterConfig("checkpoint_storage: {type: shared_fs}\n", "m.yaml")
                  .status().message(),
              HasSubstr("checkpoint_storage.host_path"));
  EXPECT_THAT(ParseMasterConfig("checkpoint_storage: {type: shared_fs, host_path: rel}\n", "m.yaml")
                  .status().message(),
              HasSubstr("checkpoint_storage.host_path: expected an absolute path"));
  EXPECT_THAT(ParseMasterConfig("checkpoint_storage: {type: shared_fs, host_path: /c, bogus: 1}\n", "m.yaml")
                  .status().message(),
              HasSubstr("bogus"));
}

TEST(DaemonConfig, ResourcePools) {
  auto c = ParseMasterConfig("data_dir: /x\n", "m.yaml");
  ASSERT_EQ(c->resource_pools.size(), 1u);
  EXPECT_EQ(c->resource_pools[0].name, "default");
  c = ParseMasterConfig(R"(resource_pools:
  - pool_name: default
  - pool_name: gpu
    description: A100 nodes
    preemption: {enabled: true, timeout: 30s}
)", "m.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->resource_pools.size(), 2u);
  EXPECT_TRUE(c->resource_pools[1].preemption);
  EXPECT_EQ(c->resource_pools[1].preemption_timeout, absl::Seconds(30));
  EXPECT_THAT(ParseMasterConfig("resource_pools:\n  - description: x\n", "m.yaml").status().message(),
              HasSubstr("m.yaml:2: resource_pools[0].pool_name: is required"));
  EXPECT_THAT(ParseMasterConfig("resource_pools:\n  - pool_name: a\n  - pool_name: a\n", "m.yaml").status().message(),
              HasSubstr("resource_pools[1].pool_name: pool 'a' is defined twice"));
  EXPECT_THAT(ParseMasterConfig("resource_pools:\n  - pool_name: a\n    preemptoin: {}\n", "m.yaml").status().message(),
              HasSubstr("did you mean 'preemption'"));
}

TEST(DaemonConfig, AgentNeedsMaster) {
  EXPECT_THAT(ParseAgentConfig("slots: 2\n", "agent.yaml").status().message(),
              HasSubstr("master: is required"));
  auto c = ParseAgentConfig("master: h:1\nslots: 3\nworker_path: [/a, /b]\n", "agent.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->slots, 3);
  EXPECT_EQ(c->worker_path.size(), 2u);
  EXPECT_FALSE(c->agent_id.empty());
  EXPECT_EQ(c->system_metrics_period, absl::Seconds(5));
  c = ParseAgentConfig("master: h:1\nsystem_metrics_period: 0s\n", "agent.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->system_metrics_period, absl::ZeroDuration());
  EXPECT_THAT(ParseAgentConfig("master: h:1\nsystem_metrics_period: often\n", "agent.yaml").status().message(),
              HasSubstr("agent.yaml:2: system_metrics_period"));
}

TEST(DaemonConfig, AgentLaunchContractDefaults) {
  auto c = ParseAgentConfig("master: h:1\n", "agent.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->advertise_address, "");
  EXPECT_EQ(c->chief_port_first, 29500);
  EXPECT_EQ(c->chief_port_last, 29999);
  EXPECT_EQ(c->worker_python, "");  // unset: the agent looks for one with torch
  EXPECT_FALSE(c->python_path.has_value());
}

TEST(DaemonConfig, AgentLaunchContractKeys) {
  auto c = ParseAgentConfig(
      "master: h:1\nadvertise_address: 10.1.2.3\nchief_port_range: \"31000-31010\"\n"
      "worker_python: /opt/py/bin/python3\npython_path: [/opt/det/python, /srv/lib]\n",
      "agent.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->advertise_address, "10.1.2.3");
  EXPECT_EQ(c->chief_port_first, 31000);
  EXPECT_EQ(c->chief_port_last, 31010);
  EXPECT_EQ(c->worker_python, "/opt/py/bin/python3");
  ASSERT_TRUE(c->python_path.has_value());
  EXPECT_THAT(*c->python_path, ElementsAre("/opt/det/python", "/srv/lib"));
  // An explicit empty list turns the default off.
  c = ParseAgentConfig("master: h:1\npython_path: []\nchief_port_range: 2000-2000\n",
                       "agent.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->python_path.has_value());
  EXPECT_TRUE(c->python_path->empty());
  EXPECT_EQ(c->chief_port_first, 2000);
  EXPECT_EQ(c->chief_port_last, 2000);
}

TEST(DaemonConfig, AgentChiefPortRangeIsValidated) {
  struct Case {
    const char* range;
    const char* error;
  };
  for (const Case& bad : std::vector<Case>{
           {"29500", "expected a port range such as \"29500-29999\", got \"29500\""},
           {"a-b", "expected a port range"},
           {"29500-", "expected a port range"},
           {"-1-5", "expected a port range"},
           {"1-2-3", "expected a port range"},
           {"100-2000", "port 100 is outside 1024..65535"},
           {"2000-70000", "port 70000 is outside 1024..65535"},
           {"3000-2000", "the first port 3000 is above the last 2000"},
           {"", "expected a port range"},
       }) {
    SCOPED_TRACE(bad.range);
    auto c = ParseAgentConfig(
        absl::StrCat("master: h:1\nchief_port_range: \"", bad.range, "\"\n"), "agent.yaml");
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(), HasSubstr("agent.yaml:2: chief_port_range: "));
    EXPECT_THAT(c.status().message(), HasSubstr(bad.error));
  }
  EXPECT_THAT(ParseAgentConfig("master: h:1\nworker_python: ''\n", "agent.yaml").status().message(),
              HasSubstr("agent.yaml:2: worker_python: expected the path of a Python interpreter"));
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void ListYaml(const std::string& dir, std::vector<std::string>* out) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string path = dir + "/" + name;
    if (e->d_type == DT_DIR) ListYaml(path, out);
    if (absl::EndsWith(name, ".yaml")) out->push_back(path);
  }
  closedir(d);
}

TEST(ShippedConfigs, EveryOneIsValid) {
  std::vector<std::string> files;
  ListYaml("configs", &files);
  ASSERT_GE(files.size(), 4u);
  for (const auto& f : files) {
    SCOPED_TRACE(f);
    absl::Status st;
    if (absl::EndsWith(f, "/master.yaml")) {
      st = LoadMasterConfig(f).status();
    } else if (absl::EndsWith(f, "/agent.yaml")) {
      st = LoadAgentConfig(f).status();
    } else if (absl::StrContains(f, "/templates/")) {
      st = ValidateTemplate(Slurp(f), f);
    } else {
      st = ParseExperimentConfig(Slurp(f), f, 1).status();
    }
    EXPECT_TRUE(st.ok()) << st;
  }
}

// Every experiment config under configs/ round-trips: its effective YAML (what the master
// stores and recovers from) parses back to the same typed config and the same YAML.
TEST(ShippedConfigs, EffectiveConfigRoundTrips) {
  std::vector<std::string> files;
  ListYaml("configs", &files);
  int experiments = 0;
  for (const auto& f : files) {
    if (absl::EndsWith(f, "/master.yaml") || absl::EndsWith(f, "/agent.yaml") ||
        absl::StrContains(f, "/templates/")) {
      continue;
    }
    SCOPED_TRACE(f);
    ++experiments;
    absl::StatusOr<ParsedExperiment> first = ParseExperimentConfig(Slurp(f), f, 17);
    ASSERT_TRUE(first.ok()) << first.status();
    // Another seed_if_unset: the stored config names its seed.
    absl::StatusOr<ParsedExperiment> again =
        ParseExperimentConfig(first->effective_yaml, "effective " + f, 99);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(again->config == first->config);
    EXPECT_EQ(again->effective_yaml, first->effective_yaml);
  }
  EXPECT_GE(experiments, 4);
}

}  // namespace
}  // namespace det::config
