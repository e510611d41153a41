// Checkpoints under attack (issue 25.5, the review's N6 and N7), on a real det-master and
// det-agent with real Python workers:
// - an experiment's checkpoint_storage must lie under master.yaml's
//   checkpoint_storage_allowed_roots, and its checkpoint GC deletes nothing outside them,
//   even through a link placed in the allowed root;
// - `det checkpoint download` run 600 times while the trial keeps swapping a checkpoint
//   file with a link to a root-only file copies the file or refuses, never the link's
//   target;
// - a trial writes its checkpoint 0700/0600 as its OS user: another user's trial reads
//   none of it, the owner's next trial and the owner's GC still can.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
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
using ::testing::Not;

struct Mode {
  uid_t uid = 0;
  mode_t mode = 0;
};
Mode ModeOf(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return {static_cast<uid_t>(-1), 0};
  return {st.st_uid, st.st_mode & 07777};
}

// An experiment config running `entrypoint` once, with checkpoint_storage at `host_path`
// (`save` appended to its mapping) and TEST_DIR in the workers' environment.
std::string Config(const std::string& name, const std::string& entrypoint,
                   const std::string& host_path, const std::string& test_dir,
                   const std::string& save = "") {
  return absl::StrCat("name: ", name, "\nentrypoint: ", entrypoint,
                      "\nsearcher: {name: single, metric: loss, max_length: {batches: 1}}\n"
                      "max_restarts: 0\nenvironment:\n  environment_variables:\n    - TEST_DIR=",
                      test_dir, "\ncheckpoint_storage: {type: shared_fs, host_path: '", host_path,
                      "'", save, "}\n");
}

// A context directory `dir` holding `file` (mode 0755).
std::string Context(const std::string& dir, const std::string& file, const std::string& text) {
  fs::create_directories(dir);
  chmod(dir.c_str(), 0755);
  std::ofstream(dir + "/" + file) << text;
  chmod((dir + "/" + file).c_str(), 0755);
  return dir;
}

// A Python trial that writes one checkpoint (file `weights` holding `weights`), prints
// "checkpoint UUID", then runs `then` (Python, indented 4) and completes.
std::string CheckpointingTrial(const std::string& weights, const std::string& then = "") {
  return absl::StrCat(
      "import os, sys\nimport det\n"
      "with det.core.init() as core:\n"
      "    with core.checkpoint.store_path({'steps_completed': 1}) as (path, sid):\n"
      "        with open(os.path.join(path, 'weights'), 'w') as f:\n"
      "            f.write('", weights, "')\n"
      "    print('checkpoint', sid, flush=True)\n", then,
      "    core.train.report_training_metrics(steps_completed=1, metrics={'loss': 1.0})\n"
      "    for op in core.searcher.operations():\n"
      "        op.report_completed(1.0)\n");
}

std::string TrialState(TestCluster& cluster, int64_t trial) {
  nlohmann::json t = cluster.DetJson({"trial", "describe", absl::StrCat(trial)});
  return t.is_object() && t.contains("trial") ? t["trial"].value("state", "") : "";
}
bool Ended(const std::string& state) {
  return state == "STATE_COMPLETED" || state == "STATE_ERROR" || state == "STATE_CANCELED";
}
// Waits for trial `trial` to end; its final state.
std::string WaitEnded(TestCluster& cluster, int64_t trial) {
  std::string state;
  WaitUntil([&] { return Ended(state = TrialState(cluster, trial)); }, absl::Seconds(120));
  return state;
}
std::string Logs(TestCluster& cluster, int64_t trial) {
  return cluster.Det({"trial", "logs", absl::StrCat(trial)}).out;
}
// The uuid the trial printed as "checkpoint UUID" ("" when none).
std::string CheckpointUuid(const std::string& logs) {
  std::smatch m;
  static const std::regex kLine("checkpoint ([0-9a-f-]{36})");
  return std::regex_search(logs, m, kLine) ? m[1].str() : "";
}

// GC of a path outside the allowed root: refused at submit when the config names it, and
// refused by the agent's GC when a link inside the allowed root leads there.
TEST(CheckpointPrivacy, GcRefusesAPathOutsideTheAllowedRoot) {
  TestCluster cluster("gc_outside_root");
  const std::string root = cluster.dir() + "/storage";
  const std::string outside = cluster.dir() + "/outside";
  ASSERT_TRUE(fs::create_directories(root));
  ASSERT_TRUE(fs::create_directories(outside + "/victim"));
  chmod((outside + "/victim").c_str(), 0700);
  std::ofstream(outside + "/victim/keep") << "root's";
  ASSERT_TRUE(cluster.StartMaster(absl::StrCat("checkpoint_storage_allowed_roots: ['", root,
                                               "']\n"))
                  .ok())
      << cluster.LogTail("master");
  ASSERT_TRUE(cluster.StartAgent("a", 1).ok()) << cluster.LogTail("agent-a");

  // The trial registers a "checkpoint" named after the victim directory, GC deletes every
  // checkpoint once it ends (save_*: 0).
  const std::string ctx = Context(
      cluster.dir() + "/ctx", "attack.py",
      "import os\nimport det\n"
      "with det.core.init() as core:\n"
      "    host = core.checkpoint._require_storage('attack')\n"
      "    core.checkpoint._client.report_checkpoint('victim', host + '/victim', 1, {}, '{}')\n"
      "    print('registered victim', flush=True)\n"
      "    core.train.report_training_metrics(steps_completed=1, metrics={'loss': 1.0})\n"
      "    for op in core.searcher.operations():\n"
      "        op.report_completed(1.0)\n");
  const std::string save = ", save_trial_best: 0, save_trial_latest: 0";

  // Named outright: refused at submit, naming the key and the allowed root.
  std::string config = cluster.WriteFile(
      "outside.yaml", Config("outside", "python3 attack.py", outside, cluster.dir(), save));
  CommandResult created = cluster.Det({"experiment", "create", config, ctx});
  EXPECT_EQ(created.exit.exit_code, 1) << created.out;
  EXPECT_THAT(created.err,
              HasSubstr(absl::StrCat("checkpoint_storage.host_path: '", outside,
                                     "' is not under a checkpoint storage root this cluster "
                                     "allows (",
                                     root)))
      << created.err;

  // Through a link in the allowed root: accepted (the path is inside, by its name), the
  // checkpoint registered, and its GC refuses to follow the link.
  ASSERT_EQ(symlink(outside.c_str(), (root + "/link").c_str()), 0);
  config = cluster.WriteFile(
      "link.yaml", Config("link", "python3 attack.py", root + "/link", cluster.dir(), save));
  created = cluster.Det({"experiment", "create", config, ctx});
  ASSERT_TRUE(created.exit.ok()) << created.out << created.err;
  EXPECT_EQ(WaitEnded(cluster, 1), "STATE_COMPLETED") << Logs(cluster, 1);
  std::string logs;
  WaitUntil(
      [&] {
        logs = Logs(cluster, 1);
        return logs.find("checkpoint garbage collection gc-1.0 failed") != std::string::npos;
      },
      absl::Seconds(90));
  EXPECT_THAT(logs, HasSubstr("registered victim"));
  EXPECT_THAT(logs, HasSubstr(absl::StrCat("checkpoint victim: refusing to delete '", root,
                                           "/link/victim': '", root,
                                           "/link' is a symbolic link, and deletion follows "
                                           "none below the checkpoint storage root '",
                                           root, "'")))
      << logs;
  EXPECT_THAT(logs, HasSubstr("checkpoint garbage collection gc-1.0 failed")) << logs;
  EXPECT_EQ(Slurp(outside + "/victim/keep"), "root's");
}

// The review's N7: the trial keeps renaming a link to a root-only file over its
// checkpoint's model file and the real file back, while root downloads it 600 times.
TEST(CheckpointPrivacy, ASymlinkSwapLoopDuring600DownloadsCopiesNothingItShouldNot) {
  TestCluster cluster("download_swap");
  const std::string root = cluster.dir() + "/storage";
  ASSERT_TRUE(fs::create_directories(root));
  const std::string secret = cluster.WriteFile("secret", "root-only-password");
  chmod(secret.c_str(), 0600);
  ASSERT_TRUE(cluster.StartMaster(absl::StrCat("checkpoint_storage_allowed_roots: ['", root,
                                               "']\n"))
                  .ok())
      << cluster.LogTail("master");
  ASSERT_TRUE(cluster.StartAgent("a", 1).ok()) << cluster.LogTail("agent-a");
  const std::string swap = absl::StrCat(
      "    d = os.path.join('", root, "', sid)\n"
      "    link, real = '", root, "/.swap-link', '", root, "/.swap-real'\n"
      "    open(os.path.join(os.environ['TEST_DIR'], 'swapping'), 'w').close()\n"
      "    n = 0\n"
      "    while not os.path.exists(os.path.join(os.environ['TEST_DIR'], 'release')):\n"
      "        os.symlink('", secret, "', link)\n"
      "        os.rename(link, os.path.join(d, 'weights'))\n"
      "        with open(real, 'w') as f:\n"
      "            f.write('the-weights')\n"
      "        os.rename(real, os.path.join(d, 'weights'))\n"
      "        n += 1\n"
      "    print('swapped', n, 'times', flush=True)\n");
  const std::string ctx =
      Context(cluster.dir() + "/ctx", "swap.py", CheckpointingTrial("the-weights", swap));
  const std::string config =
      cluster.WriteFile("swap.yaml", Config("swap", "python3 swap.py", root, cluster.dir()));
  CommandResult created = cluster.Det({"experiment", "create", config, ctx});
  ASSERT_TRUE(created.exit.ok()) << created.out << created.err;
  ASSERT_TRUE(WaitUntil([&] { return Exists(cluster.dir() + "/swapping"); }, absl::Seconds(90)))
      << Logs(cluster, 1) << cluster.LogTail("agent-a");
  const std::string uuid = CheckpointUuid(Logs(cluster, 1));
  ASSERT_FALSE(uuid.empty()) << Logs(cluster, 1);

  int copied = 0, refused = 0;
  for (int i = 0; i < 600; ++i) {
    const std::string out = absl::StrCat(cluster.dir(), "/downloads/", i);
    CommandResult r = cluster.Det({"checkpoint", "download", uuid, "-o", out});
    if (r.exit.ok()) {
      ++copied;
      EXPECT_EQ(Slurp(out + "/weights"), "the-weights") << i;
    } else {
      ++refused;
      EXPECT_THAT(r.err, HasSubstr(absl::StrCat("weights: a symbolic link to ", secret,
                                                " outside the checkpoint directory; not "
                                                "copied (nothing was)")))
          << i;
      EXPECT_FALSE(Exists(out)) << i;
    }
    for (const auto& f : fs::recursive_directory_iterator(
             Exists(out) ? out : cluster.dir() + "/ctx")) {
      if (f.is_regular_file()) {
        EXPECT_THAT(Slurp(f.path().string()), Not(HasSubstr("root-only-password")))
            << f.path();
      }
    }
    fs::remove_all(out);
  }
  std::ofstream(cluster.dir() + "/release") << "";
  EXPECT_EQ(WaitEnded(cluster, 1), "STATE_COMPLETED") << Logs(cluster, 1);
  std::cout << "600 downloads during the swap loop: " << copied << " copied the file, "
            << refused << " refused the link" << std::endl;
  EXPECT_EQ(copied + refused, 600);
  // Both outcomes happened: the downloads did race the swaps.
  EXPECT_GT(copied, 0);
  EXPECT_GT(refused, 0);
}

// Issue 25's done-when: a non-admin trial reads no other user's checkpoints. The agent
// runs the admin's trials as its default task user (40001) and bob's as his linked user
// (nobody); the storage is a shared sticky directory. Each trial's checkpoint is 0700/0600
// and its own; bob's trial reads his earlier checkpoint and none of the admin's, deletes
// his own (as his GC, which runs as his linked user, does) and not the admin's; root
// downloads the admin's. Needs root.
TEST(CheckpointPrivacy, ANonAdminTrialReadsNoOtherUsersCheckpoints) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "the agent must run as root to run trials as other users; uid "
                 << geteuid();
  }
  TestCluster cluster("checkpoint_privacy");
  // Task users cannot reach the test's directory (under /root): what workers read (the
  // agent's work_dir, det's Python package, the storage, contexts) lives under /tmp.
  std::string work = "/tmp/det-checkpoint-privacy-XXXXXX";
  ASSERT_NE(mkdtemp(work.data()), nullptr);
  ASSERT_EQ(chmod(work.c_str(), 0755), 0);
  const std::string storage = work + "/storage";
  ASSERT_EQ(mkdir(storage.c_str(), 0755), 0);
  ASSERT_EQ(chmod(storage.c_str(), 01777), 0);
  fs::copy(fs::canonical(TestCluster::BinDir() + "/det-agent").parent_path() / ".." / "python",
           work + "/python", fs::copy_options::recursive);
  ASSERT_TRUE(cluster.StartMaster(absl::StrCat("checkpoint_storage_allowed_roots: ['", storage,
                                               "']\n"))
                  .ok())
      << cluster.LogTail("master");
  std::string yaml = cluster.AgentYaml("a", 1);
  yaml = std::regex_replace(yaml, std::regex("\nwork_dir: [^\n]*"), "\nwork_dir: " + work + "/agent");
  absl::StrAppend(&yaml, "worker_python: /usr/bin/python3\npython_path: [", work, "/python]\n");
  ASSERT_TRUE(cluster.StartAgentWithYaml("a", yaml, {"--task-user", "40001:40001"}).ok())
      << cluster.LogTail("agent-a");

  // bob, linked to nobody, logged in with a home of his own.
  const std::string det = TestCluster::BinDir() + "/det";
  ASSERT_TRUE(RunCommand({det, "-m", cluster.address(), "user", "create", "bob"},
                         absl::Seconds(60),
                         {{"DET_USER_TOKEN", cluster.token()}, {"DET_NEW_PASSWORD", "bobs-password"}})
                  .exit.ok());
  ASSERT_TRUE(cluster
                  .Det({"user", "link-with-agent-user", "bob", "--agent-uid", "65534",
                        "--agent-gid", "65534", "--agent-user", "nobody", "--agent-group",
                        "nogroup"})
                  .exit.ok());
  const std::string bob_home = cluster.dir() + "/home-bob";
  ASSERT_EQ(mkdir(bob_home.c_str(), 0700), 0);
  auto as_bob = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {det, "-m", cluster.address()});
    return RunCommand(args, absl::Seconds(60),
                      {{"HOME", bob_home}, {"DET_USER_TOKEN", ""}, {"DET_PASSWORD", "bobs-password"}});
  };
  ASSERT_TRUE(as_bob({"user", "login", "bob"}).exit.ok());

  // The admin's trial (uid 40001) and bob's first (nobody) each write a checkpoint.
  const std::string writer = Context(work + "/ctx-admin", "train.py",
                                     CheckpointingTrial("admins-weights"));
  std::string config = cluster.WriteFile(
      "admin.yaml", Config("admin", "python3 train.py", storage, cluster.dir()));
  ASSERT_TRUE(cluster.Det({"experiment", "create", config, writer}).exit.ok());
  ASSERT_EQ(WaitEnded(cluster, 1), "STATE_COMPLETED") << Logs(cluster, 1);
  const std::string admins = CheckpointUuid(Logs(cluster, 1));
  ASSERT_FALSE(admins.empty()) << Logs(cluster, 1);

  const std::string bobs_writer =
      Context(work + "/ctx-bob", "train.py", CheckpointingTrial("bobs-weights"));
  config = cluster.WriteFile("bob.yaml", Config("bob", "python3 train.py", storage, cluster.dir()));
  CommandResult created = as_bob({"experiment", "create", config, bobs_writer});
  ASSERT_TRUE(created.exit.ok()) << created.err;
  ASSERT_EQ(WaitEnded(cluster, 2), "STATE_COMPLETED") << Logs(cluster, 2);
  const std::string bobs = CheckpointUuid(Logs(cluster, 2));
  ASSERT_FALSE(bobs.empty()) << Logs(cluster, 2);

  // Private to the user its trial ran as.
  for (const auto& [uuid, uid] : std::vector<std::pair<std::string, uid_t>>{{admins, 40001},
                                                                          {bobs, 65534}}) {
    const std::string dir = storage + "/" + uuid;
    EXPECT_EQ(ModeOf(dir).uid, uid) << dir;
    EXPECT_EQ(ModeOf(dir).mode, 0700u) << dir;
    for (const std::string file : {"weights", "metadata.json"}) {
      EXPECT_EQ(ModeOf(dir + "/" + file).uid, uid) << file;
      EXPECT_EQ(ModeOf(dir + "/" + file).mode, 0600u) << dir << "/" << file;
    }
  }

  // bob's next trial reads his own checkpoint and none of the admin's.
  const std::string reader = Context(
      work + "/ctx-reader", "read.sh",
      absl::StrCat("#!/bin/sh\necho \"uid $(id -u)\"\n",
                   "echo \"mine: $(cat '", storage, "/", bobs, "/weights' 2>&1)\"\n",
                   "cat '", storage, "/", admins, "/weights' 2>&1\n",
                   "ls '", storage, "/", admins, "' 2>&1\n",
                   "echo done reading\n",
                   "rm -rf '", storage, "/", admins, "' 2>&1\n",
                   "rm -rf '", storage, "/", bobs, "' && echo \"removed mine\"\n",
                   "echo done removing\n"));
  config = cluster.WriteFile("read.yaml",
                             Config("read", "[\"./read.sh\"]", storage, cluster.dir()));
  created = as_bob({"experiment", "create", config, reader});
  ASSERT_TRUE(created.exit.ok()) << created.err;
  std::string logs;
  WaitUntil([&] { return (logs = Logs(cluster, 3)).find("done removing") != std::string::npos; },
            absl::Seconds(90));
  EXPECT_THAT(logs, HasSubstr("uid 65534"));
  EXPECT_THAT(logs, HasSubstr("mine: bobs-weights"));
  EXPECT_THAT(logs, HasSubstr(absl::StrCat("cat: ", storage, "/", admins,
                                           "/weights: Permission denied")));
  EXPECT_THAT(logs, HasSubstr(absl::StrCat("ls: cannot open directory '", storage, "/", admins,
                                           "': Permission denied")));
  EXPECT_THAT(logs, HasSubstr(absl::StrCat("rm: cannot remove '", storage, "/", admins)));
  EXPECT_THAT(logs, Not(HasSubstr("admins-weights")));
  // The owner's OS user (what the owner's GC runs as) deletes the owner's checkpoint.
  EXPECT_THAT(logs, HasSubstr("removed mine"));
  EXPECT_FALSE(Exists(storage + "/" + bobs));
  EXPECT_EQ(Slurp(storage + "/" + admins + "/weights"), "admins-weights");

  // Root downloads the admin's.
  CommandResult downloaded =
      cluster.Det({"checkpoint", "download", admins, "-o", cluster.dir() + "/admins"});
  ASSERT_TRUE(downloaded.exit.ok()) << downloaded.err;
  EXPECT_EQ(Slurp(cluster.dir() + "/admins/weights"), "admins-weights");
  fs::remove_all(work);
}

}  // namespace
}  // namespace det::testing
