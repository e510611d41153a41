// A real det cluster for integration tests: det-master and det-agent processes on loopback
// (port 0), a temp directory each, and the real det CLI, all from //deploy:bin.
#ifndef DET_TESTS_INTEGRATION_TEST_CLUSTER_H_
#define DET_TESTS_INTEGRATION_TEST_CLUSTER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"
#include "common/testing/wait_until.h"  // IWYU pragma: export
#include "master/store/testing/postgres_server.h"
#include "nlohmann/json.hpp"

namespace det::testing {

struct CommandResult {
  ExitStatus exit;
  std::string out;
  std::string err;
};

// Runs `argv` to completion (killing it after `timeout`), capturing both streams.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         absl::Duration timeout = absl::Seconds(120));
// The same with this process's environment changed by `env` (name -> value).
CommandResult RunCommand(const std::vector<std::string>& argv, absl::Duration timeout,
                         const std::map<std::string, std::string>& env);

// The password of the admin account of every TestCluster's master.
inline constexpr char kTestAdminPassword[] = "test-admin-password";

// A JSON integer; protobuf's JSON writes int64 as a string. -1 when `j` is neither.
int64_t Int(const nlohmann::json& j);

// Runs `query` on the SQLite file `db` with the sqlite3 tool; its output, trimmed.
std::string Sql(const std::string& db, const std::string& query);

// Polls `condition` every 50 ms until it holds or `timeout` passes: common/testing's
// WaitUntil without a description of what is awaited (new code should give one).
bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout);

// The contents of the file at `path` ("" when it cannot be read).
std::string Slurp(const std::string& path);
// Whether `path` exists (stat succeeds).
bool Exists(const std::string& path);
// A TCP port on 127.0.0.1 that was free just now (bound and released); 0 on failure. For
// daemons that take a port number, such as cluster-up's.
int FreeLoopbackPort();
// True while `pid` runs (a zombie has exited), from /proc/<pid>/stat.
bool Running(int pid);
// rank -> pid from the "rank R of N (local rank L, pid P)" lines of a trial's logs.
std::map<int, int> RankPids(const std::string& logs);

// The config of an experiment of the example model (det-fashion-mnist on Fashion-MNIST,
// searcher `single` on validation_loss). Each field is one key; an unset optional, an empty
// string, a 0 (records_per_epoch, batches) or a false leaves its key out, so the master's
// default applies.
// A grid search of the example model over two learning rates, `batches` long; with
// `storage`, validated and checkpointed every 10 batches into it (`save` appended to the
// checkpoint_storage mapping, e.g. ", save_trial_latest: 3").
std::string GridYaml(const std::string& name, int64_t batches, const std::string& storage = "",
                     const std::string& save = "");

struct ExampleExperiment {
  // More keys of a section, after the fields': {key, value as YAML}.
  using Fields = std::vector<std::pair<std::string, std::string>>;

  // Single-quoted: any text.
  std::string name = "example";
  // Written as is: YAML (a command, or a list).
  std::string entrypoint = "det-fashion-mnist";
  // hyperparameters.
  int64_t global_batch_size = 32;
  double learning_rate = 0.05;
  int64_t hidden_size = 16;
  Fields more_hyperparameters;  // e.g. {{"input_noise", "0.05"}}
  int64_t records_per_epoch = 60000;
  // searcher.max_length.batches; 0: no searcher section (give one in extra_yaml).
  int64_t batches = 100;
  std::optional<int64_t> validation_period;  // min_validation_period.batches
  std::optional<int64_t> checkpoint_period;  // min_checkpoint_period.batches
  std::optional<int> scheduling_unit;
  std::optional<int> max_restarts;
  std::optional<int> slots_per_trial;  // resources.slots_per_trial
  // reproducibility.
  std::optional<int64_t> experiment_seed;
  bool deterministic = false;
  // checkpoint_storage: shared_fs at this (single-quoted) path; empty: no
  // checkpoint_storage section, and the save_* fields are not written.
  std::string checkpoint_host_path;
  std::optional<int> save_trial_best;
  std::optional<int> save_trial_latest;
  // data.dir (single-quoted); empty: no dir key (and without more_data, no data section).
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  Fields more_data;  // e.g. {{"num_canonical_nodes", "4"}}
  // Appended verbatim (whole lines): keys no field above covers.
  std::string extra_yaml;

  // The config as YAML, in the order of the fields above.
  std::string Yaml() const;
};

// Where a TestCluster's processes run. Default: all on this machine, on loopback.
struct TestClusterHosts {
  // The host name for det-master and the det CLI (agents are named by their id).
  static constexpr char kMaster[] = "master";
  // The address the master listens on (gRPC and HTTP, both port 0 at first).
  std::string master_address = "127.0.0.1";
  // The argv put before every program started in host `host` (kMaster or an agent's id),
  // e.g. {"ip", "netns", "exec", NAMESPACE}; it must exec the program in place, so that
  // the process started is the program. Unset: none.
  std::function<std::vector<std::string>(const std::string& host)> launch_prefix;
};

// Where a TestCluster's master keeps its state (master.yaml's `db`).
enum class TestClusterDb {
  // The default: one SQLite file, db_path().
  kSqlite,
  // A private PostgreSQL 15 (master/store/testing's PostgresServer: initdb under /tmp, a
  // unix socket only), started by the first StartMaster, database "det"; stopped and
  // removed with the cluster, after the master.
  kPostgres,
};

class TestCluster {
 public:
  // A fresh directory under TEST_TMPDIR named `name`; the master on SQLite.
  explicit TestCluster(const std::string& name, TestClusterHosts hosts = {});
  // The same with the master's state in `db`.
  TestCluster(const std::string& name, TestClusterDb db, TestClusterHosts hosts = {});
  // Kills every daemon still running (then stops the PostgreSQL server, if any).
  ~TestCluster();

  // Starts the master (again, on the same port after the first start). `extra_yaml` is
  // appended to its master.yaml. After the first start, logs in as admin (token()).
  absl::Status StartMaster(const std::string& extra_yaml = "");
  // Sends `signal` to the master and waits for it to exit.
  void StopMaster(int signal);
  // Starts agent `id` with `slots` CPU slots and AgentYaml(id, slots, extra_yaml); waits
  // until the master lists it connected.
  absl::Status StartAgent(const std::string& id, int slots = 1,
                          const std::string& extra_yaml = "");
  // The agent.yaml StartAgent uses for agent `id`, `extra_yaml` (whole lines, keys not
  // already there) appended. Each agent of the cluster gets a chief_port_range of
  // kChiefPortsPerAgent ports of its own (up to 8 agents), in a block of ports no other
  // TestCluster on this machine holds while this one lives (a lock file under /tmp), so that concurrent tests'
  // MASTER_PORTs never collide.
  std::string AgentYaml(const std::string& id, int slots = 1,
                        const std::string& extra_yaml = "") const;
  static constexpr int kChiefPortsPerAgent = 16;
  // Starts det-agent `id` with `yaml` and `extra_args`. With `wait_joined`, waits until the
  // master lists it connected with a registration newer than any earlier instance's.
  absl::Status StartAgentWithYaml(const std::string& id, const std::string& yaml,
                                  const std::vector<std::string>& extra_args = {},
                                  bool wait_joined = true);
  // Sends `signal` to agent `id` (its process alone, not its workers) and waits for it to
  // exit; returns how it exited.
  ExitStatus StopAgent(const std::string& id, int signal);
  // Waits up to `timeout` for agent `id` to exit by itself.
  std::optional<ExitStatus> WaitAgentExit(const std::string& id, absl::Duration timeout);

  // Runs the det CLI against this cluster's master, as admin (DET_USER_TOKEN = token()).
  CommandResult Det(const std::vector<std::string>& args,
                    absl::Duration timeout = absl::Seconds(120));
  // Runs det with --json appended and parses stdout (null on failure).
  nlohmann::json DetJson(const std::vector<std::string>& args);
  // The state of experiment `id` in `det experiment describe` ("STATE_COMPLETED", ...; ""
  // when it cannot be described).
  std::string ExperimentState(int64_t id);
  // Creates user `name` with `password` (as admin) and logs it in with the real `det user
  // login` in a HOME of its own (dir()/home-NAME); returns a runner of the det CLI as that
  // user (its stored session), or an error naming the step that failed.
  using DetRunner = std::function<CommandResult(const std::vector<std::string>& args)>;
  absl::StatusOr<DetRunner> DetAsNewUser(const std::string& name, const std::string& password);
  // The registration time (ms) of agent `id` while the master lists it connected (0 when
  // the master gives none), else -1.
  int64_t AgentRegisteredMs(const std::string& id);
  // The ids of the agents started, in id order.
  std::vector<std::string> AgentIds() const;

  const std::string& dir() const { return dir_; }
  const std::string& address() const { return address_; }
  // host:port of the master's HTTP server (REST API, web page).
  const std::string& http_address() const { return http_address_; }
  // The session token of the admin account, logged in after the first StartMaster; every
  // Det() call sends it (DET_USER_TOKEN).
  const std::string& token() const { return token_; }
  // The SQLite file of a kSqlite cluster's master.
  std::string db_path() const { return dir_ + "/master/det.db"; }
  TestClusterDb db() const { return db_; }
  // A kPostgres cluster's server, for tests that stop and restart it (Stop(), Restart());
  // null on SQLite and before the first StartMaster.
  master::testing::PostgresServer* postgres() { return postgres_.get(); }
  // Runs `query` on the master's database, whichever it is (sqlite3 on db_path(), psql on
  // the PostgreSQL database): its output trimmed, one line per row, columns separated by
  // '|'. Errors (the tool's stderr) are returned in place of rows, so that a comparison
  // fails showing them.
  std::string DbQuery(const std::string& query);
  // Writes `text` to dir()/name and returns the path.
  std::string WriteFile(const std::string& name, const std::string& text);
  // The tail of a daemon's log, for failure messages.
  std::string LogTail(const std::string& name);

  static std::string BinDir();

 private:
  // `argv` prefixed with host `host`'s launch prefix.
  std::vector<std::string> InHost(const std::string& host, std::vector<std::string> argv) const;

  // Starts the PostgreSQL server of a kPostgres cluster (once); its URL in postgres_url_.
  absl::Status StartPostgres();

  const TestClusterHosts hosts_;
  const TestClusterDb db_ = TestClusterDb::kSqlite;
  // Declared before master_: destroyed after the master is gone.
  std::unique_ptr<master::testing::PostgresServer> postgres_;
  std::string postgres_url_;
  std::string dir_;
  std::string address_;
  std::string http_address_;
  std::string token_;
  // "FIRST-LAST" of agent `id`'s chief ports (see AgentYaml).
  std::string ChiefPortRange(const std::string& id) const;

  std::unique_ptr<Subprocess> master_;
  std::map<std::string, std::unique_ptr<Subprocess>> agents_;
  // The block of chief ports this cluster holds (its lock file open while it lives; -1:
  // none taken yet), and each agent's slot in it, in the order agents were first named.
  mutable int chief_port_lock_ = -1;
  mutable int chief_port_base_ = 0;
  mutable std::map<std::string, int> chief_port_slot_;
};

// The non-empty lines of a command's output.
std::vector<std::string> Lines(const std::string& text);

}  // namespace det::testing

#endif  // DET_TESTS_INTEGRATION_TEST_CLUSTER_H_
