// Checkpoint GC on a `det deploy local cluster-up` cluster started as root (issue 25.5), the
// layout the quick start and the review attack: trials and their GC run as the task user
// nobody, the binaries lie under /root (bazel's output tree), where nobody cannot reach.
// - cluster-up allows its checkpoint root only: a config naming another path is refused;
// - the GC task (det-agent's own binary, run as nobody) deletes the trial's checkpoints
//   from the default storage: cluster-up runs copies of the binaries that nobody reaches;
// - a checkpoint that is a link the trial placed in the storage, to a directory of nobody's
//   outside it: the same GC removes the link and leaves the directory.
// Needs root (CI runs as root).
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr uid_t kNobody = 65534;

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// A context directory `dir` holding the script `file`.
std::string Context(const std::string& dir, const std::string& file, const std::string& text) {
  fs::create_directories(dir);
  chmod(dir.c_str(), 0755);
  std::ofstream(dir + "/" + file) << text;
  chmod((dir + "/" + file).c_str(), 0755);
  return dir;
}

TEST(ClusterUpGc, GcRunsAsTheTaskUserAndStaysInTheClustersCheckpointRoot) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "cluster-up runs trials as a task user only as root; uid " << geteuid();
  }
  // Under /tmp: the data dir must be reachable by nobody.
  std::string work = "/tmp/det-cluster-up-gc-XXXXXX";
  ASSERT_NE(mkdtemp(work.data()), nullptr);
  ASSERT_EQ(chmod(work.c_str(), 0755), 0);
  const std::string data = work + "/data";
  const std::string home = work + "/home";
  ASSERT_EQ(mkdir(home.c_str(), 0700), 0);
  const int grpc_port = FreeLoopbackPort();
  int http_port = FreeLoopbackPort();
  while (http_port == grpc_port) http_port = FreeLoopbackPort();
  ASSERT_GT(grpc_port, 0);
  const std::string det = TestCluster::BinDir() + "/det";
  const std::string master = absl::StrCat("127.0.0.1:", grpc_port);
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), det);
    return RunCommand(args, absl::Seconds(120), {{"HOME", home}, {"DET_USER_TOKEN", ""}});
  };
  CommandResult up = run({"deploy", "local", "cluster-up", "--data-dir", data, "--master-port",
                          absl::StrCat(grpc_port), "--http-port", absl::StrCat(http_port),
                          "--bin-dir", TestCluster::BinDir()});
  struct Down {
    std::function<void()> fn;
    ~Down() { fn(); }
  } down{[&] {
    run({"deploy", "local", "cluster-down", "--data-dir", data});
    fs::remove_all(work);
  }};
  ASSERT_TRUE(up.exit.ok()) << up.out << up.err << Slurp(data + "/logs/agent-0.log");
  EXPECT_THAT(up.out, HasSubstr("Trials run as the OS user nobody (uid 65534)"));
  EXPECT_THAT(up.out, HasSubstr(absl::StrCat("Copied det-agent and det-fashion-mnist into ",
                                             data, "/bin")))
      << up.out;
  const std::string root = data + "/checkpoints";
  EXPECT_THAT(Slurp(data + "/master.yaml"),
              HasSubstr(absl::StrCat("checkpoint_storage_allowed_roots:\n  - \"", root, "\"\n")));

  auto trial_state = [&](int trial) {
    nlohmann::json t = nlohmann::json::parse(
        run({"-m", master, "trial", "describe", absl::StrCat(trial), "--json"}).out, nullptr,
        false);
    return t.is_object() && t.contains("trial") ? t["trial"].value("state", "") : "";
  };
  auto logs = [&](int trial) { return run({"-m", master, "trial", "logs", absl::StrCat(trial)}).out; };
  // Trial `trial`'s logs once they hold `needle` (up to 120 s); as they last were otherwise.
  auto wait_logs = [&](int trial, const std::string& needle) {
    std::string text;
    WaitUntil([&] { return (text = logs(trial)).find(needle) != std::string::npos; },
              absl::Seconds(120));
    return text;
  };
  // The example (det-fashion-mnist, run from D/bin) checkpoints every 10 batches into the
  // default storage as nobody; every checkpoint is deleted once the trial ends (save_*: 0).
  ExampleExperiment exp;
  exp.name = "gc";
  exp.batches = 30;
  exp.checkpoint_period = 10;
  exp.max_restarts = 0;
  exp.checkpoint_host_path = root;
  exp.save_trial_best = 0;
  exp.save_trial_latest = 0;
  const std::string config = work + "/exp.yaml";
  std::ofstream(config) << exp.Yaml();

  // Another path is refused at submit, naming the cluster's root.
  const std::string elsewhere = work + "/elsewhere";
  exp.checkpoint_host_path = elsewhere;
  const std::string outside_config = work + "/outside.yaml";
  std::ofstream(outside_config) << exp.Yaml();
  CommandResult refused = run({"-m", master, "experiment", "create", outside_config});
  EXPECT_EQ(refused.exit.exit_code, 1) << refused.out;
  EXPECT_THAT(refused.err, HasSubstr(absl::StrCat("checkpoint_storage.host_path: '", elsewhere,
                                                  "' is not under a checkpoint storage root "
                                                  "this cluster allows (",
                                                  root)))
      << refused.err;

  CommandResult created = run({"-m", master, "experiment", "create", config});
  ASSERT_TRUE(created.exit.ok()) << created.out << created.err;
  std::string state;
  WaitUntil(
      [&] {
        state = trial_state(1);
        return state == "STATE_COMPLETED" || state == "STATE_ERROR";
      },
      absl::Seconds(120));
  ASSERT_EQ(state, "STATE_COMPLETED") << logs(1) << Slurp(data + "/logs/agent-0.log");
  std::string text = wait_logs(1, "checkpoint garbage collection gc-1.0 completed on local-agent-0");
  EXPECT_THAT(text, HasSubstr("checkpoint garbage collection gc-1.0 completed on local-agent-0"))
      << text << Slurp(data + "/logs/agent-0.log");
  std::set<std::string> uuids;  // The master's line and the worker's name each.
  static const std::regex kCheckpoint("checkpoint ([0-9a-f-]{36}) at batch");
  for (std::sregex_iterator it(text.begin(), text.end(), kCheckpoint), end; it != end; ++it) {
    uuids.insert((*it)[1].str());
  }
  EXPECT_EQ(uuids.size(), 3u) << text;
  for (const std::string& uuid : uuids) {
    EXPECT_FALSE(Exists(root + "/" + uuid)) << "GC left " << root << "/" << uuid;
  }

  // A checkpoint that is a link the trial placed in the storage, to a directory of nobody's
  // outside it: the GC removes the link and follows it nowhere; the directory stays.
  const std::string outside = work + "/outside";
  ASSERT_TRUE(fs::create_directories(outside + "/victim"));
  std::ofstream(outside + "/victim/keep") << "kept";
  for (const std::string& p : {outside, outside + "/victim", outside + "/victim/keep"}) {
    ASSERT_EQ(chown(p.c_str(), kNobody, kNobody), 0) << p;
  }
  const std::string attacker = Context(
      work + "/ctx-attack", "train.py",
      absl::StrCat("import os\nimport det\n"
                   "with det.core.init() as core:\n"
                   "    host = core.checkpoint._require_storage('attack')\n"
                   "    os.symlink('", outside, "/victim', os.path.join(host, 'victim'))\n"
                   "    core.checkpoint._client.report_checkpoint('victim', host + '/victim', "
                   "1, {}, '{}')\n"
                   "    print('registered victim', flush=True)\n"
                   "    core.train.report_training_metrics(steps_completed=1, metrics={'loss': 1.0})\n"
                   "    for op in core.searcher.operations():\n"
                   "        op.report_completed(1.0)\n"));
  const std::string attack_config = work + "/attack.yaml";
  std::ofstream(attack_config) << "name: attack\nentrypoint: python3 train.py\n"
                                  "searcher: {name: single, metric: loss, max_length: {batches: 1}}\n"
                                  "max_restarts: 0\n"
                                  "checkpoint_storage: {type: shared_fs, host_path: '"
                               << root << "', save_trial_best: 0, save_trial_latest: 0}\n";
  created = run({"-m", master, "experiment", "create", attack_config, attacker});
  ASSERT_TRUE(created.exit.ok()) << created.out << created.err;
  text = wait_logs(2, "checkpoint garbage collection gc-2.0 completed on local-agent-0");
  EXPECT_THAT(text, HasSubstr("registered victim")) << text;
  EXPECT_THAT(text, HasSubstr("checkpoint garbage collection gc-2.0 completed on local-agent-0"))
      << text;
  EXPECT_FALSE(Exists(root + "/victim"));
  EXPECT_EQ(Slurp(outside + "/victim/keep"), "kept");
}

}  // namespace
}  // namespace det::testing
