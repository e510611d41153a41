// A real det cluster for integration tests: det-master and det-agent processes on loopback
// (port 0), a temp directory each, and the real det CLI, all from //deploy:bin.
#ifndef DET_TESTS_INTEGRATION_TEST_CLUSTER_H_
#define DET_TESTS_INTEGRATION_TEST_CLUSTER_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"
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

// Polls `condition` every 50 ms until it holds or `timeout` passes.
bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout);

class TestCluster {
 public:
  // A fresh directory under TEST_TMPDIR named `name`.
  explicit TestCluster(const std::string& name);
  // Kills every daemon still running.
  ~TestCluster();

  // Starts the master (again, on the same port after the first start). `extra_yaml` is
  // appended to its master.yaml. After the first start, logs in as admin (token()).
  absl::Status StartMaster(const std::string& extra_yaml = "");
  // Sends `signal` to the master and waits for it to exit.
  void StopMaster(int signal);
  // Starts agent `id` with `slots` CPU slots; waits until the master lists it connected.
  absl::Status StartAgent(const std::string& id, int slots = 1);
  // The agent.yaml StartAgent uses for agent `id`.
  std::string AgentYaml(const std::string& id, int slots = 1) const;
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

  const std::string& dir() const { return dir_; }
  const std::string& address() const { return address_; }
  // host:port of the master's HTTP server (REST API, web page).
  const std::string& http_address() const { return http_address_; }
  // The session token of the admin account, logged in after the first StartMaster; every
  // Det() call sends it (DET_USER_TOKEN).
  const std::string& token() const { return token_; }
  std::string db_path() const { return dir_ + "/master/det.db"; }
  // Writes `text` to dir()/name and returns the path.
  std::string WriteFile(const std::string& name, const std::string& text);
  // The tail of a daemon's log, for failure messages.
  std::string LogTail(const std::string& name);

  static std::string BinDir();

 private:
  std::string dir_;
  std::string address_;
  std::string http_address_;
  std::string token_;
  std::unique_ptr<Subprocess> master_;
  std::map<std::string, std::unique_ptr<Subprocess>> agents_;
};

}  // namespace det::testing

#endif  // DET_TESTS_INTEGRATION_TEST_CLUSTER_H_
