// Issue 29: `det deploy local cluster-up --db postgres` starts a private PostgreSQL 15 for
// the cluster (initdb into DATA/postgres as the OS user postgres, a generated password in
// DATA/db_password, a unix socket only) before the master; the experiment's rows are in
// PostgreSQL; cluster-down stops it (no postgres process is left); a second cluster-up
// reuses the database (no initdb, the experiment still there); trials can read neither the
// password nor the database; `--db mysql` is refused naming the flag. All real processes:
// the det CLI, det-master, det-agent, the example worker, PostgreSQL's own programs.
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_cluster.h"

namespace det {
namespace {

using ::det::testing::CommandResult;
using ::det::testing::ExampleExperiment;
using ::det::testing::FreeLoopbackPort;
using ::det::testing::Int;
using ::det::testing::RunCommand;
using ::det::testing::Running;
using ::det::testing::Slurp;
using ::det::testing::TestCluster;
using ::det::testing::WaitUntil;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kPostgresBin[] = "/usr/lib/postgresql/15/bin";

// Pids of the processes whose command line mentions `needle`.
std::vector<int> ProcessesMentioning(const std::string& needle) {
  std::vector<int> pids;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end;
       it.increment(ec)) {
    int pid = 0;
    if (!absl::SimpleAtoi(it->path().filename().string(), &pid) || pid == getpid()) continue;
    std::string cmdline = Slurp(absl::StrCat("/proc/", pid, "/cmdline"));
    if (cmdline.find(needle) != std::string::npos && Running(pid)) pids.push_back(pid);
  }
  return pids;
}

struct stat StatOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st;
}

TEST(DeployPostgres, ClusterUpWithPostgresKeepsTheClusterInAPrivateDatabase) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "cluster-up --db postgres runs PostgreSQL as the OS user postgres, which "
                    "needs root; this test runs as uid "
                 << geteuid();
  }
  if (access((std::string(kPostgresBin) + "/initdb").c_str(), X_OK) != 0 ||
      getpwnam("postgres") == nullptr) {
    GTEST_SKIP() << "PostgreSQL 15 is not installed (apt install postgresql-15)";
  }
  const uid_t postgres_uid = getpwnam("postgres")->pw_uid;
  // Under /tmp, searchable by everyone: the server's user and the trials' (nobody) must
  // reach the data directory, and the socket's path must be short.
  std::string work_root = "/tmp/det-deploy-pg-XXXXXX";
  ASSERT_NE(mkdtemp(work_root.data()), nullptr);
  ASSERT_EQ(chmod(work_root.c_str(), 0755), 0);
  const std::string data = work_root + "/data";
  const std::string pg_dir = data + "/postgres";
  const std::string home = work_root + "/home";
  ASSERT_EQ(mkdir(home.c_str(), 0700), 0);
  const int grpc_port = FreeLoopbackPort();
  int http_port = FreeLoopbackPort();
  while (http_port == grpc_port) http_port = FreeLoopbackPort();
  ASSERT_GT(grpc_port, 0);
  const std::string det = TestCluster::BinDir() + "/det";
  const std::string master = absl::StrCat("127.0.0.1:", grpc_port);
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), det);
    return RunCommand(args, absl::Seconds(180), {{"HOME", home}, {"DET_USER_TOKEN", ""}});
  };
  const std::vector<std::string> up_args = {
      "deploy",      "local", "cluster-up", "--data-dir", data, "--master-port",
      absl::StrCat(grpc_port), "--http-port", absl::StrCat(http_port), "--bin-dir",
      TestCluster::BinDir()};
  auto up_with = [&](const std::string& db) {
    std::vector<std::string> args = up_args;
    args.insert(args.end(), {"--db", db});
    return run(args);
  };
  struct Cleanup {
    std::function<void()> fn;
    ~Cleanup() { fn(); }
  } cleanup{[&] {
    run({"deploy", "local", "cluster-down", "--data-dir", data});
    std::error_code ignored;
    std::filesystem::remove_all(work_root, ignored);
  }};

  // A bad --db: refused before anything starts, naming the flag.
  CommandResult bad = up_with("mysql");
  EXPECT_FALSE(bad.exit.ok());
  EXPECT_THAT(bad.out + bad.err, HasSubstr("--db"));
  EXPECT_THAT(bad.out + bad.err, HasSubstr("mysql"));
  EXPECT_FALSE(std::filesystem::exists(pg_dir));
  CommandResult help = run({"deploy", "local", "cluster-up", "--help"});
  EXPECT_THAT(help.out, HasSubstr("--db"));
  EXPECT_THAT(help.out, HasSubstr("postgres"));

  CommandResult up = up_with("postgres");
  ASSERT_TRUE(up.exit.ok()) << up.out << up.err << Slurp(data + "/logs/postgres.log")
                            << Slurp(data + "/logs/initdb.log") << Slurp(data + "/logs/master.log");
  EXPECT_THAT(up.out, HasSubstr("Creating a PostgreSQL 15 database in " + pg_dir));
  EXPECT_THAT(up.out, HasSubstr("Starting PostgreSQL 15 in " + pg_dir + " ... ready in "));
  EXPECT_THAT(up.out, HasSubstr("Cluster is up in " + data));
  const std::string yaml = Slurp(data + "/master.yaml");
  EXPECT_THAT(yaml, HasSubstr("type: postgres"));
  EXPECT_THAT(yaml, HasSubstr("password_file: \"" + data + "/db_password\""));
  // The password: the caller's, 0600, not in master.yaml. The data: the server user's, 0700.
  const std::string password(absl::StripAsciiWhitespace(Slurp(data + "/db_password")));
  ASSERT_EQ(password.size(), 64u);
  EXPECT_THAT(yaml, Not(HasSubstr(password)));
  EXPECT_EQ(StatOf(data + "/db_password").st_mode & 07777, 0600u);
  EXPECT_EQ(StatOf(data + "/db_password").st_uid, 0u);
  EXPECT_EQ(StatOf(pg_dir).st_mode & 07777, 0700u);
  EXPECT_EQ(StatOf(pg_dir).st_uid, postgres_uid);
  const std::string postmaster_pid = Slurp(pg_dir + "/postmaster.pid");
  int server_pid = 0;
  ASSERT_TRUE(absl::SimpleAtoi(postmaster_pid.substr(0, postmaster_pid.find('\n')), &server_pid))
      << postmaster_pid;
  EXPECT_TRUE(Running(server_pid));
  EXPECT_EQ(StatOf(absl::StrCat("/proc/", server_pid)).st_uid, postgres_uid);

  // The short example to COMPLETED (as the task user nobody), its rows in PostgreSQL.
  ExampleExperiment exp;
  exp.name = "on-postgres";
  exp.batches = 100;
  exp.scheduling_unit = 50;
  exp.max_restarts = 0;
  const std::string config = work_root + "/exp.yaml";
  std::ofstream(config) << exp.Yaml();
  CommandResult create = run({"-m", master, "experiment", "create", config, "-f"});
  ASSERT_TRUE(create.exit.ok()) << create.out << create.err << Slurp(data + "/logs/agent-0.log");
  auto trial_json = [&] {
    CommandResult trial = run({"-m", master, "trial", "describe", "1", "--json"});
    EXPECT_TRUE(trial.exit.ok()) << trial.err;
    return nlohmann::json::parse(trial.out, nullptr, false);
  };
  nlohmann::json t = trial_json();
  ASSERT_TRUE(t.is_object()) << t;
  EXPECT_EQ(t["trial"].value("state", ""), "STATE_COMPLETED") << t;
  EXPECT_EQ(Int(t["trial"]["training_summary"]["loss"]["count"]), 2) << t;
  auto psql = [&](const std::string& query) {
    CommandResult r = RunCommand({std::string(kPostgresBin) + "/psql", "-h", pg_dir, "-U", "det",
                                  "-d", "det", "-X", "-A", "-t", "-c", query},
                                 absl::Seconds(30), {{"PGPASSWORD", password}});
    EXPECT_TRUE(r.exit.ok()) << query << ": " << r.err;
    return std::string(absl::StripAsciiWhitespace(r.out));
  };
  EXPECT_EQ(psql("SELECT name FROM experiments"), "on-postgres");
  EXPECT_FALSE(std::filesystem::exists(data + "/master/det.db"));
  // Without the password, the server refuses.
  CommandResult no_password = RunCommand(
      {std::string(kPostgresBin) + "/psql", "-h", pg_dir, "-U", "det", "-d", "det", "-w", "-c",
       "SELECT 1"},
      absl::Seconds(30), {{"PGPASSWORD", "wrong"}});
  EXPECT_FALSE(no_password.exit.ok());
  EXPECT_THAT(no_password.err, HasSubstr("password authentication failed"));

  // A trial (as the task user) reads neither the password nor the database.
  const std::string context = work_root + "/ctx";
  ASSERT_EQ(mkdir(context.c_str(), 0755), 0);
  std::ofstream(context + "/train.sh")
      << "#!/bin/sh\ncat " << data << "/db_password\nls " << pg_dir << "\ncat " << pg_dir
      << "/PG_VERSION\necho done reading\n";
  ASSERT_EQ(chmod((context + "/train.sh").c_str(), 0755), 0);
  const std::string script_yaml = work_root + "/script.yaml";
  std::ofstream(script_yaml) << "name: script\nentrypoint: [\"./train.sh\"]\nsearcher:\n"
                                "  name: single\n  metric: loss\n  max_length:\n    batches: 1\n"
                                "max_restarts: 0\n";
  CommandResult script = run({"-m", master, "experiment", "create", script_yaml, context, "-f"});
  ASSERT_TRUE(script.exit.ok()) << script.out << script.err;
  const std::string logs = run({"-m", master, "trial", "logs", "2"}).out;
  ASSERT_THAT(logs, HasSubstr("done reading")) << Slurp(data + "/logs/agent-0.log");
  EXPECT_THAT(logs, HasSubstr("cat: " + data + "/db_password: Permission denied")) << logs;
  EXPECT_THAT(logs, HasSubstr("'" + pg_dir + "': Permission denied")) << logs;
  EXPECT_THAT(logs, HasSubstr("cat: " + pg_dir + "/PG_VERSION: Permission denied")) << logs;
  EXPECT_THAT(logs, Not(HasSubstr(password)));

  // cluster-down stops PostgreSQL too: no process of it is left.
  CommandResult down = run({"deploy", "local", "cluster-down", "--data-dir", data});
  ASSERT_TRUE(down.exit.ok()) << down.out << down.err;
  EXPECT_THAT(down.out, HasSubstr("Stopping PostgreSQL in " + pg_dir));
  EXPECT_THAT(down.out, HasSubstr("stopped in"));
  EXPECT_FALSE(Running(server_pid));
  EXPECT_THAT(ProcessesMentioning(pg_dir), ::testing::IsEmpty());
  EXPECT_FALSE(std::filesystem::exists(pg_dir + "/postmaster.pid"));

  // A second cluster-up reuses the database: no initdb, the experiment still there.
  const std::string pg_version_before = Slurp(pg_dir + "/PG_VERSION");
  up = up_with("postgres");
  ASSERT_TRUE(up.exit.ok()) << up.out << up.err << Slurp(data + "/logs/postgres.log")
                            << Slurp(data + "/logs/master.log");
  EXPECT_THAT(up.out, Not(HasSubstr("Creating a PostgreSQL")));
  EXPECT_THAT(up.out, HasSubstr("Starting PostgreSQL 15 in " + pg_dir + " ... ready in "));
  EXPECT_EQ(Slurp(pg_dir + "/PG_VERSION"), pg_version_before);
  CommandResult described = run({"-m", master, "experiment", "describe", "1", "--json"});
  ASSERT_TRUE(described.exit.ok()) << described.err;
  EXPECT_THAT(described.out, HasSubstr("on-postgres"));
  EXPECT_THAT(described.out, HasSubstr("STATE_COMPLETED"));
  t = trial_json();
  EXPECT_EQ(Int(t["trial"]["training_summary"]["loss"]["count"]), 2) << t;

  // cluster-up without --db on that directory says the database is not used.
  down = run({"deploy", "local", "cluster-down", "--data-dir", data});
  ASSERT_TRUE(down.exit.ok()) << down.out << down.err;
  EXPECT_THAT(ProcessesMentioning(pg_dir), ::testing::IsEmpty());
  CommandResult sqlite_up = run(up_args);
  ASSERT_TRUE(sqlite_up.exit.ok()) << sqlite_up.out << sqlite_up.err;
  EXPECT_THAT(sqlite_up.err, HasSubstr(pg_dir + " holds the PostgreSQL database"));
  EXPECT_THAT(Slurp(data + "/master.yaml"), Not(HasSubstr("postgres")));
  EXPECT_THAT(ProcessesMentioning(pg_dir), ::testing::IsEmpty());
}

}  // namespace
}  // namespace det
