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
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_cluster.h"

namespace det {
namespace {

using ::testing::HasSubstr;
using ::det::testing::CommandResult;
using ::det::testing::TestCluster;

mode_t ModeOf(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
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

  // The agent's work_dir where the task user can reach it (the test's own directory lies
  // under /root).
  std::string work_root = "/tmp/det-worker-isolation-XXXXXX";
  ASSERT_NE(mkdtemp(work_root.data()), nullptr);
  ASSERT_EQ(chmod(work_root.c_str(), 0755), 0);
  std::string work_dir = work_root + "/agent";
  std::string yaml = cluster.AgentYaml("a");
  size_t at = yaml.find("\nwork_dir: ");
  ASSERT_NE(at, std::string::npos) << yaml;
  size_t end = yaml.find('\n', at + 1);
  yaml.replace(at, end - at, absl::StrCat("\nwork_dir: ", work_dir));
  // det's Python package where the task user can read it (the runfiles are under /root).
  std::string python = work_root + "/python";
  std::filesystem::copy(
      std::filesystem::canonical(TestCluster::BinDir() + "/det-agent").parent_path() / ".." /
          "python",
      python,
                        std::filesystem::copy_options::recursive);
  absl::StrAppend(&yaml, "worker_python: /usr/bin/python3\npython_path: [", python, "]\n");
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
  std::string script = "#!/bin/sh\nid -u\n";
  for (const std::string& s : secrets) {
    absl::StrAppend(&script, "echo \"try $(ls -d '", s, "' 2>&1)\"; cat '", s,
                    "' 2>&1 | head -c 200; ls '", s, "' 2>&1 | head -c 200\n");
  }
  absl::StrAppend(&script, "echo done reading\n");
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

  std::string logs;
  absl::Time deadline = absl::Now() + absl::Seconds(90);
  while (absl::Now() < deadline) {
    logs = cluster.Det({"trial", "logs", "1"}).out;
    if (logs.find("done reading") != std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  ASSERT_THAT(logs, HasSubstr("done reading")) << cluster.LogTail("agent-a");
  EXPECT_THAT(logs, HasSubstr("65534"));  // nobody
  for (const std::string& s : secrets) {
    // `cat` and `ls` of each path: refused, never its content.
    EXPECT_THAT(logs, HasSubstr(absl::StrCat("cat: ", s, ": Permission denied")))
        << s << "\n" << logs;
    EXPECT_THAT(logs, HasSubstr(absl::StrCat("ls: cannot "))) << s << "\n" << logs;
    EXPECT_THAT(logs, HasSubstr(absl::StrCat(" '", s, "': Permission denied")))
        << s << "\n" << logs;
  }
  EXPECT_THAT(logs, ::testing::Not(HasSubstr("test-secret")));
  EXPECT_THAT(logs, ::testing::Not(HasSubstr("token")));

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
  deadline = absl::Now() + absl::Seconds(120);
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
  std::filesystem::remove_all(work_root);
}

}  // namespace
}  // namespace det
