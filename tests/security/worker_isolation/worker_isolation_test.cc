// A real master and a real det-agent run as root with `--task-user nobody`; a trial's
// entrypoint tries to read the master's database and data dir, the admin's session
// (~/.det/auth.json), the agent's yaml (which holds the cluster secret), the agent's run
// dir (records and every allocation's output) and a listing of the agent's work_dir. Each
// attempt must be "Permission denied" in the trial's logs. Needs root (CI runs as root).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_cluster.h"

namespace det {
namespace {

using ::testing::HasSubstr;
using ::det::testing::CommandResult;
using ::det::testing::RunCommand;
using ::det::testing::Slurp;
using ::det::testing::TestCluster;
using ::det::testing::WaitUntil;

mode_t ModeOf(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

// Trial `trial`'s logs once they hold `needle` (polled for up to 90 s); the logs as they
// last were otherwise.
std::string WaitForLogs(TestCluster& cluster, int trial, const std::string& needle) {
  std::string logs;
  WaitUntil(
      [&] {
        logs = cluster.Det({"trial", "logs", absl::StrCat(trial)}).out;
        return logs.find(needle) != std::string::npos;
      },
      absl::Seconds(90));
  return logs;
}

// Shell lines that try to `cat` and `ls` each of `paths`.
std::string ReadEach(const std::vector<std::string>& paths) {
  std::string script;
  for (const std::string& s : paths) {
    absl::StrAppend(&script, "echo \"try $(ls -d '", s, "' 2>&1)\"; cat '", s,
                    "' 2>&1 | head -c 200; ls '", s, "' 2>&1 | head -c 200\n");
  }
  return script;
}

// ReadEach's attempts in `logs`: each refused, no secret or token shown.
void ExpectEveryReadDenied(const std::string& logs, const std::vector<std::string>& paths) {
  for (const std::string& s : paths) {
    EXPECT_THAT(logs, HasSubstr(absl::StrCat("cat: ", s, ": Permission denied")))
        << s << "\n" << logs;
    EXPECT_THAT(logs, HasSubstr(absl::StrCat("ls: cannot "))) << s << "\n" << logs;
    EXPECT_THAT(logs, HasSubstr(absl::StrCat(" '", s, "': Permission denied")))
        << s << "\n" << logs;
  }
  EXPECT_THAT(logs, ::testing::Not(HasSubstr("test-secret")));
  EXPECT_THAT(logs, ::testing::Not(HasSubstr("token")));
}

// A fresh directory under /tmp (0755) for the agent's work_dir and what workers read: the
// test's own directory lies under /root, which task users cannot reach.
std::string MakeWorkRoot() {
  std::string work_root = "/tmp/det-worker-isolation-XXXXXX";
  if (mkdtemp(work_root.data()) == nullptr || chmod(work_root.c_str(), 0755) != 0) return "";
  return work_root;
}

// Removes `work_root`. The agent may still be removing a finished trial's work dir under it
// (remove_all then fails on an entry that vanished mid-walk), so it retries until the tree
// is gone; the agent never creates anything there once its trials are over.
void RemoveWorkRoot(const std::string& work_root) {
  std::error_code error;
  EXPECT_TRUE(WaitUntil(
      [&] {
        std::filesystem::remove_all(work_root, error);
        return !std::filesystem::exists(work_root);
      },
      absl::Seconds(30)))
      << work_root << ": " << error.message();
}

// agent-a's yaml with `slots` slots, its work_dir at `work_root`/agent and det's Python
// package copied to `work_root`/python (the runfiles are under /root). "" on failure.
std::string AgentYamlUnder(TestCluster& cluster, const std::string& work_root, int slots) {
  std::string yaml = cluster.AgentYaml("a", slots);
  size_t at = yaml.find("\nwork_dir: ");
  EXPECT_NE(at, std::string::npos) << yaml;
  if (work_root.empty() || at == std::string::npos) return "";
  size_t end = yaml.find('\n', at + 1);
  yaml.replace(at, end - at, absl::StrCat("\nwork_dir: ", work_root, "/agent"));
  std::string python = work_root + "/python";
  std::filesystem::copy(
      std::filesystem::canonical(TestCluster::BinDir() + "/det-agent").parent_path() / ".." /
          "python",
      python, std::filesystem::copy_options::recursive);
  absl::StrAppend(&yaml, "worker_python: /usr/bin/python3\npython_path: [", python, "]\n");
  return yaml;
}

TEST(WorkerIsolation, AWorkerCannotReadTheClustersSecrets) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "the agent must run as root to run workers as another user; this test "
                    "runs as uid "
                 << geteuid();
  }
  TestCluster cluster("worker_isolation");
  ASSERT_TRUE(cluster.StartMaster().ok()) << cluster.LogTail("master");
  // The master keeps its data to itself.
  EXPECT_EQ(ModeOf(cluster.dir() + "/master"), 0700u);
  EXPECT_EQ(ModeOf(cluster.db_path()), 0600u);

  std::string work_root = MakeWorkRoot();
  std::string work_dir = work_root + "/agent";
  std::string yaml = AgentYamlUnder(cluster, work_root, 1);
  ASSERT_FALSE(yaml.empty());
  std::string agent_yaml = cluster.WriteFile("agent-a.yaml", yaml);
  ASSERT_TRUE(cluster.StartAgentWithYaml("a", yaml, {"--task-user", "nobody"}).ok())
      << cluster.LogTail("agent-a");

  const std::vector<std::string> secrets = {
      cluster.db_path(),
      cluster.dir() + "/master",
      cluster.dir() + "/home/.det/auth.json",
      agent_yaml,
      work_dir + "/run",
      work_dir,
  };
  std::string script = absl::StrCat("#!/bin/sh\nid -u\n", ReadEach(secrets),
                                    "echo done reading\n");
  std::string context = work_root + "/ctx";
  ASSERT_EQ(mkdir(context.c_str(), 0755), 0);
  std::ofstream(context + "/train.sh") << script;
  ASSERT_EQ(chmod((context + "/train.sh").c_str(), 0755), 0);
  std::string config = cluster.WriteFile(
      "attack.yaml",
      "name: attack\nentrypoint: [\"./train.sh\"]\nsearcher:\n  name: single\n  metric: loss\n"
      "  max_length:\n    batches: 1\nresources:\n  slots_per_trial: 1\nmax_restarts: 0\n");
  CommandResult created = cluster.Det({"experiment", "create", config, context});
  ASSERT_TRUE(created.exit.ok()) << created.out << created.err;

  std::string logs = WaitForLogs(cluster, 1, "done reading");
  ASSERT_THAT(logs, HasSubstr("done reading")) << cluster.LogTail("agent-a");
  EXPECT_THAT(logs, HasSubstr("65534"));  // nobody
  ExpectEveryReadDenied(logs, secrets);

  // A normal trial still works as the task user: it writes a checkpoint into storage that
  // the task user owns, reports, and completes.
  std::string storage = work_root + "/checkpoints";
  ASSERT_EQ(mkdir(storage.c_str(), 0700), 0);
  ASSERT_EQ(chown(storage.c_str(), 65534, 65534), 0);
  std::string good = work_root + "/good";
  ASSERT_EQ(mkdir(good.c_str(), 0755), 0);
  std::ofstream(good + "/train.py")
      << "import os\nimport det\n"
         "with det.core.init() as core:\n"
         "    with core.checkpoint.store_path({'steps_completed': 1}) as (path, storage_id):\n"
         "        with open(os.path.join(path, 'weights'), 'w') as f:\n"
         "            f.write('w')\n"
         "    core.train.report_training_metrics(steps_completed=1, metrics={'loss': 1.0})\n"
         "    for op in core.searcher.operations():\n"
         "        op.report_completed(1.0)\n"
         "    print('checkpoint', storage_id, flush=True)\n";
  std::string good_config = cluster.WriteFile(
      "good.yaml",
      absl::StrCat("name: good\nentrypoint: python3 train.py\nsearcher:\n  name: single\n"
                   "  metric: loss\n  smaller_is_better: true\n  max_length:\n    batches: 1\n"
                   "resources:\n  slots_per_trial: 1\nmax_restarts: 0\ncheckpoint_storage:\n"
                   "  type: shared_fs\n  host_path: ",
                   storage, "\n"));
  created = cluster.Det({"experiment", "create", good_config, good});
  ASSERT_TRUE(created.exit.ok()) << created.out << created.err;
  std::string state;
  absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (absl::Now() < deadline) {
    nlohmann::json t = cluster.DetJson({"trial", "describe", "2"});
    state = t.is_object() && t.contains("trial") ? t["trial"].value("state", "") : "";
    if (state == "STATE_COMPLETED" || state == "STATE_ERROR" || state == "STATE_CANCELED") break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  std::string good_logs = cluster.Det({"trial", "logs", "2"}).out;
  EXPECT_EQ(state, "STATE_COMPLETED") << good_logs << cluster.LogTail("agent-a");
  EXPECT_THAT(good_logs, HasSubstr("checkpoint "));
  int checkpoints = 0;
  for (const auto& entry : std::filesystem::directory_iterator(storage)) {
    struct stat st;
    ASSERT_EQ(stat(entry.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 65534u) << entry.path();
    checkpoints += std::filesystem::exists(entry.path() / "weights");
  }
  EXPECT_EQ(checkpoints, 1);
  RemoveWorkRoot(work_root);
}

// det user link-with-agent-user: bob's trials run as the OS user linked to him (nobody,
// 65534), not the agent's default task user (40001), in a work dir of their own; they
// cannot read the admin's trial's work dir (running as 40001 beside it) nor the cluster's
// secrets. Only an admin links, never to root.
TEST(WorkerIsolation, ALinkedUsersTrialRunsAsItsLinkedUser) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "the agent must run as root to run workers as another user; this test "
                    "runs as uid "
                 << geteuid();
  }
  TestCluster cluster("worker_isolation_linked");
  ASSERT_TRUE(cluster.StartMaster().ok()) << cluster.LogTail("master");
  std::string work_root = MakeWorkRoot();
  std::string work_dir = work_root + "/agent";
  std::string yaml = AgentYamlUnder(cluster, work_root, 2);
  ASSERT_FALSE(yaml.empty());
  std::string agent_yaml = cluster.WriteFile("agent-a.yaml", yaml);
  ASSERT_TRUE(cluster.StartAgentWithYaml("a", yaml, {"--task-user", "40001:40001"}).ok())
      << cluster.LogTail("agent-a");

  // bob, logged in with a home of his own.
  const std::string det = TestCluster::BinDir() + "/det";
  CommandResult made = RunCommand({det, "-m", cluster.address(), "user", "create", "bob"},
                                  absl::Seconds(60),
                                  {{"DET_USER_TOKEN", cluster.token()},
                                   {"DET_NEW_PASSWORD", "bobs-password"}});
  ASSERT_TRUE(made.exit.ok()) << made.err;
  const std::string bob_home = cluster.dir() + "/home-bob";
  ASSERT_EQ(mkdir(bob_home.c_str(), 0700), 0);
  auto as_bob = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {det, "-m", cluster.address()});
    return RunCommand(args, absl::Seconds(60),
                      {{"HOME", bob_home}, {"DET_USER_TOKEN", ""}, {"DET_PASSWORD", "bobs-password"}});
  };
  ASSERT_TRUE(as_bob({"user", "login", "bob"}).exit.ok());

  const std::vector<std::string> link = {"user", "link-with-agent-user", "bob", "--agent-uid",
                                         "65534", "--agent-gid", "65534", "--agent-user",
                                         "nobody", "--agent-group", "nogroup"};
  CommandResult refused = as_bob(link);
  EXPECT_EQ(refused.exit.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("only an admin can link users with agent users"));
  std::vector<std::string> root = link;
  root[4] = "0";
  refused = cluster.Det(root);
  EXPECT_EQ(refused.exit.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("agent_uid (--agent-uid): 0 is root's"));
  CommandResult linked = cluster.Det(link);
  ASSERT_TRUE(linked.exit.ok()) << linked.err;
  EXPECT_THAT(cluster.Det({"user", "list"}).out,
              HasSubstr(" bob      | no    | yes    | nobody (uid 65534), group nogroup (gid 65534)"));
  nlohmann::json users = cluster.DetJson({"user", "list"});
  ASSERT_TRUE(users.is_object()) << cluster.Det({"user", "list", "--json"}).err;
  EXPECT_EQ(det::testing::Int(users["users"][1]["agent_user_group"]["agent_uid"]), 65534)
      << users.dump();

  // The admin's trial (the default task user) keeps a private file in its work dir and
  // waits until bob's trial has tried to read it.
  const std::string release = work_root + "/release";
  std::string admins = work_root + "/admins";
  ASSERT_EQ(mkdir(admins.c_str(), 0755), 0);
  std::ofstream(admins + "/train.sh")
      << "#!/bin/sh\necho \"uid $(id -u) gid $(id -g)\"\necho admin-private > private.txt\n"
         "echo \"ready in $PWD\"\nwhile [ ! -e '"
      << release << "' ]; do sleep 0.1; done\n";
  ASSERT_EQ(chmod((admins + "/train.sh").c_str(), 0755), 0);
  std::string config = cluster.WriteFile(
      "script.yaml",
      "name: script\nentrypoint: [\"./train.sh\"]\nsearcher:\n  name: single\n  metric: loss\n"
      "  max_length:\n    batches: 1\nresources:\n  slots_per_trial: 1\nmax_restarts: 0\n");
  CommandResult created = cluster.Det({"experiment", "create", config, admins});
  ASSERT_TRUE(created.exit.ok()) << created.out << created.err;
  std::string admin_logs = WaitForLogs(cluster, 1, "ready in ");
  ASSERT_THAT(admin_logs, HasSubstr("ready in ")) << cluster.LogTail("agent-a");
  EXPECT_THAT(admin_logs, HasSubstr("uid 40001 gid 40001"));
  const std::string admin_dir = work_dir + "/1.0";
  EXPECT_THAT(admin_logs, HasSubstr("ready in " + admin_dir));

  std::vector<std::string> secrets = {cluster.db_path(), cluster.dir() + "/master",
                                      cluster.dir() + "/home/.det/auth.json", agent_yaml,
                                      work_dir + "/run", work_dir, admin_dir,
                                      admin_dir + "/private.txt"};
  std::string bobs = work_root + "/bobs";
  ASSERT_EQ(mkdir(bobs.c_str(), 0755), 0);
  std::ofstream(bobs + "/train.sh")
      << "#!/bin/sh\necho \"uid $(id -u) gid $(id -g)\"\necho \"work dir $(stat -c '%u %a' .)\"\n"
      << ReadEach(secrets) << "echo done reading\n";
  ASSERT_EQ(chmod((bobs + "/train.sh").c_str(), 0755), 0);
  created = as_bob({"experiment", "create", config, bobs});
  ASSERT_TRUE(created.exit.ok()) << created.out << created.err;
  std::string logs = WaitForLogs(cluster, 2, "done reading");
  ASSERT_THAT(logs, HasSubstr("done reading")) << cluster.LogTail("agent-a");
  std::ofstream(release) << "";
  EXPECT_THAT(logs, HasSubstr("uid 65534 gid 65534"));
  EXPECT_THAT(logs, HasSubstr("work dir 65534 700"));  // Its own, closed to others.
  ExpectEveryReadDenied(logs, secrets);
  EXPECT_THAT(logs, ::testing::Not(HasSubstr("admin-private")));
  // Both trials end (the admin's once released) before their work dirs go.
  for (int64_t experiment : {1, 2}) {
    EXPECT_TRUE(WaitUntil(
        [&] {
          std::string state = cluster.ExperimentState(experiment);
          return state == "STATE_COMPLETED" || state == "STATE_ERROR" ||
                 state == "STATE_CANCELED";
        },
        absl::Seconds(60)))
        << "experiment " << experiment << ": " << cluster.ExperimentState(experiment);
  }
  RemoveWorkRoot(work_root);
}

// Issue 25 item 2: `det deploy local cluster-up` run as root runs trials as nobody and
// keeps every secret of its layout from them. The admin's trial caches a context; then
// non-admin bob's trial tries the cluster secret, the admin password, the yamls, the
// master's database, the admin CLI's session, the agent's credential, run dir and context
// cache, listings of the data and checkpoint dirs, and the daemons' environments. Each
// is refused and no secret's value shows in its log; it still reads its own context,
// writes into the checkpoint storage and its lines reach the log.
TEST(WorkerIsolation, AClusterUpClusterStartedAsRootKeepsItsSecretsFromTrials) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "cluster-up runs trials as a task user only as root; this test runs as uid "
                 << geteuid();
  }
  const std::string work_root = MakeWorkRoot();
  ASSERT_FALSE(work_root.empty());
  const std::string data = work_root + "/data";
  const std::string home = work_root + "/home-admin";
  ASSERT_EQ(mkdir(home.c_str(), 0700), 0);
  const int grpc_port = det::testing::FreeLoopbackPort();
  int http_port = det::testing::FreeLoopbackPort();
  while (http_port == grpc_port) http_port = det::testing::FreeLoopbackPort();
  ASSERT_GT(grpc_port, 0);
  const std::string det = TestCluster::BinDir() + "/det";
  const std::string master = absl::StrCat("127.0.0.1:", grpc_port);
  auto as_admin = [&](std::vector<std::string> args) {
    args.insert(args.begin(), det);
    return RunCommand(args, absl::Seconds(120), {{"HOME", home}, {"DET_USER_TOKEN", ""}});
  };
  CommandResult up = as_admin({"deploy", "local", "cluster-up", "--data-dir", data,
                               "--master-port", absl::StrCat(grpc_port), "--http-port",
                               absl::StrCat(http_port), "--bin-dir", TestCluster::BinDir()});
  struct Down {
    std::function<void()> fn;
    ~Down() { fn(); }
  } down{[&] {
    as_admin({"deploy", "local", "cluster-down", "--data-dir", data});
    RemoveWorkRoot(work_root);
  }};
  ASSERT_TRUE(up.exit.ok()) << up.out << up.err << Slurp(data + "/logs/agent-0.log");
  EXPECT_THAT(up.out, HasSubstr("Trials run as the OS user nobody (uid 65534)"));
  EXPECT_THAT(Slurp(data + "/logs/agent-0.log"), ::testing::Not(HasSubstr("workers run as root")));

  auto wait_state = [&](const std::string& trial) {
    std::string state;
    WaitUntil(
        [&] {
          CommandResult r = as_admin({"-m", master, "trial", "describe", trial, "--json"});
          nlohmann::json t = nlohmann::json::parse(r.out, nullptr, false);
          state = t.is_object() && t.contains("trial") ? t["trial"].value("state", "") : "";
          return state == "STATE_COMPLETED" || state == "STATE_ERROR";
        },
        absl::Seconds(120));
    return state;
  };
  // The admin's experiment: its context goes into the agent's cache.
  const std::string admins = work_root + "/admins";
  ASSERT_EQ(mkdir(admins.c_str(), 0755), 0);
  std::ofstream(admins + "/train.sh") << "#!/bin/sh\necho admin ran\n";
  std::ofstream(admins + "/weights.txt") << "admin-context-secret\n";
  ASSERT_EQ(chmod((admins + "/train.sh").c_str(), 0755), 0);
  const std::string script_yaml = work_root + "/script.yaml";
  std::ofstream(script_yaml)
      << "name: script\nentrypoint: [\"./train.sh\"]\nsearcher:\n  name: single\n"
         "  metric: loss\n  max_length:\n    batches: 1\nmax_restarts: 0\n"
         "environment:\n  environment_variables:\n    - CHECKPOINTS="
      << data << "/checkpoints\n";
  CommandResult created = as_admin({"-m", master, "experiment", "create", script_yaml, admins});
  ASSERT_TRUE(created.exit.ok()) << created.out << created.err;
  ASSERT_EQ(wait_state("1"), "STATE_COMPLETED") << Slurp(data + "/logs/agent-0.log");
  std::vector<std::string> cached;
  for (const auto& e : std::filesystem::directory_iterator(data + "/agent-0/contexts")) {
    cached.push_back(e.path().string());
  }
  ASSERT_FALSE(cached.empty());

  // bob: a user, not an admin, logged in from a home of his own.
  CommandResult made = RunCommand({det, "-m", master, "user", "create", "bob"}, absl::Seconds(60),
                                  {{"HOME", home}, {"DET_USER_TOKEN", ""},
                                   {"DET_NEW_PASSWORD", "bobs-password"}});
  ASSERT_TRUE(made.exit.ok()) << made.err;
  const std::string bob_home = work_root + "/home-bob";
  ASSERT_EQ(mkdir(bob_home.c_str(), 0700), 0);
  auto as_bob = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {det, "-m", master});
    return RunCommand(args, absl::Seconds(60),
                      {{"HOME", bob_home}, {"DET_USER_TOKEN", ""}, {"DET_PASSWORD", "bobs-password"}});
  };
  ASSERT_TRUE(as_bob({"user", "login", "bob"}).exit.ok());

  const std::string master_pid(absl::StripAsciiWhitespace(Slurp(data + "/run/master.pid")));
  const std::string agent_pid(absl::StripAsciiWhitespace(Slurp(data + "/run/agent-0.pid")));
  // Files: each `cat` refused. Directories: each listing refused.
  std::vector<std::string> files = {
      data + "/cluster_secret", data + "/admin_password", data + "/master.yaml",
      data + "/agent-0.yaml", data + "/master/det.db", home + "/.det/auth.json",
      data + "/agent-0/run/agent_credential", "/proc/" + master_pid + "/environ",
      "/proc/" + agent_pid + "/environ"};
  files.insert(files.end(), cached.begin(), cached.end());
  const std::vector<std::string> dirs = {
      data, data + "/master", data + "/logs", data + "/run", data + "/agent-0",
      data + "/agent-0/run", data + "/agent-0/contexts", data + "/agent-0/launch",
      data + "/checkpoints", home + "/.det"};
  std::vector<std::string> paths = files;
  paths.insert(paths.end(), dirs.begin(), dirs.end());
  const std::string bobs = work_root + "/bobs";
  ASSERT_EQ(mkdir(bobs.c_str(), 0755), 0);
  std::ofstream(bobs + "/own.txt") << "bobs own context\n";
  std::ofstream(bobs + "/train.sh")
      << "#!/bin/sh\necho \"uid $(id -u)\"\ncat own.txt\n"
      << "mkdir \"$CHECKPOINTS/bobs-checkpoint\" && echo w > \"$CHECKPOINTS/bobs-checkpoint/w\" "
         "&& echo checkpoint written\n"
      << ReadEach(paths) << "echo done reading\n";
  ASSERT_EQ(chmod((bobs + "/train.sh").c_str(), 0755), 0);
  created = as_bob({"experiment", "create", script_yaml, bobs});
  ASSERT_TRUE(created.exit.ok()) << created.out << created.err;
  EXPECT_EQ(wait_state("2"), "STATE_COMPLETED");
  const std::string logs = as_bob({"trial", "logs", "2"}).out;
  ASSERT_THAT(logs, HasSubstr("done reading")) << Slurp(data + "/logs/agent-0.log");
  EXPECT_THAT(logs, HasSubstr("uid 65534"));
  EXPECT_THAT(logs, HasSubstr("bobs own context"));
  EXPECT_THAT(logs, HasSubstr("checkpoint written"));
  struct stat st;
  ASSERT_EQ(stat((data + "/checkpoints/bobs-checkpoint/w").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  for (const std::string& f : files) {
    EXPECT_THAT(logs, HasSubstr(absl::StrCat("cat: ", f, ": Permission denied"))) << f << logs;
  }
  for (const std::string& d : dirs) {  // "cannot open directory" or "cannot access".
    EXPECT_THAT(logs, HasSubstr(absl::StrCat(" '", d, "': Permission denied"))) << d << logs;
  }
  // No secret's value, wherever it might have come from: the cluster secret, the admin
  // password, the agent credential, the admin's session token, the admin's context.
  const nlohmann::json auth =
      nlohmann::json::parse(Slurp(home + "/.det/auth.json"), nullptr, false);
  ASSERT_TRUE(auth.is_object() && auth["masters"].contains(master))
      << Slurp(home + "/.det/auth.json");
  const std::vector<std::string> values = {
      std::string(absl::StripAsciiWhitespace(Slurp(data + "/cluster_secret"))),
      std::string(absl::StripAsciiWhitespace(Slurp(data + "/admin_password"))),
      std::string(absl::StripAsciiWhitespace(Slurp(data + "/agent-0/run/agent_credential"))),
      auth["masters"][master].value("token", ""), "admin-context-secret"};
  for (const std::string& v : values) {
    ASSERT_FALSE(v.empty());
    EXPECT_THAT(logs, ::testing::Not(HasSubstr(v)));
  }
}

}  // namespace
}  // namespace det
