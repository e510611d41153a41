// The Determined commands issue 28 found missing, and its oddities, with the real CLI
// against a real master and agent: det version / --version, det -u USER, template
// create/update-config/ls and set saying created or replaced, slot enable/disable and a
// draining agent told from a disabled one, experiment fork and download-model-def, trial
// download, trial logs --level/--source/--stdtype/--agent-id, a failed experiment's
// reasons in describe and list-trials, tables wrapped to $COLUMNS, and e list --all's
// Archived column.
#include <sys/stat.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/ascii.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class DeterminedCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
    ASSERT_TRUE(cluster_.StartAgent("agent-a", 2).ok()) << cluster_.LogTail("agent-a");
  }

  // det with HOME `home` (its ~/.det/auth.json), no DET_USER_TOKEN, and `env` on top.
  CommandResult DetAt(const std::string& home, const std::vector<std::string>& args,
                      std::map<std::string, std::string> env = {}) {
    mkdir(home.c_str(), 0700);
    std::vector<std::string> argv = {TestCluster::BinDir() + "/det", "-m", cluster_.address()};
    argv.insert(argv.end(), args.begin(), args.end());
    env["HOME"] = home;
    env["DET_USER_TOKEN"] = "";
    env.emplace("DET_PASSWORD", "");
    return RunCommand(argv, absl::Seconds(60), env);
  }

  // Waits for experiment `id` to end; its state.
  std::string Wait(int64_t id) {
    CommandResult wait =
        cluster_.Det({"e", "wait", absl::StrCat(id), "--interval", "0.2"}, absl::Seconds(240));
    return wait.out;
  }

  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TEST_F(DeterminedCli, VersionAndUserFlag) {
  const std::string home = cluster_.dir() + "/home";
  // Without a session the master still tells its version.
  for (const char* flag : {"version", "--version"}) {
    CommandResult v = DetAt(home, {flag});
    ASSERT_TRUE(v.exit.ok()) << v.err;
    EXPECT_THAT(v.out, StartsWith("client:\n  version: 0.1.0\nmaster:\n  version: 0.1.0\n"));
    EXPECT_THAT(v.out, HasSubstr(absl::StrCat("master_address: ", cluster_.address())));
    EXPECT_EQ(v.err, "");
  }
  nlohmann::json vj = nlohmann::json::parse(DetAt(home, {"version", "--json"}).out, nullptr, false);
  ASSERT_TRUE(vj.is_object());
  EXPECT_EQ(vj["client"]["version"], "0.1.0");
  EXPECT_EQ(vj["master"]["version"], "0.1.0");
  // No master there: the client's version and a warning, not a failure.
  CommandResult none = RunCommand({TestCluster::BinDir() + "/det", "-m", "127.0.0.1:1", "version"});
  ASSERT_TRUE(none.exit.ok()) << none.err;
  EXPECT_THAT(none.out, StartsWith("client:\n  version: 0.1.0\nmaster:\n  version: \"\"\n"));
  EXPECT_THAT(none.err, HasSubstr("master not found at 127.0.0.1:1"));
  // Nothing at all: the commands there are.
  CommandResult bare = DetAt(home, {});
  EXPECT_FALSE(bare.exit.ok());
  EXPECT_THAT(bare.err, HasSubstr("'det' needs a command: "));
  EXPECT_THAT(bare.err, HasSubstr("version"));

  // det -u: alice's session is made (password from DET_PASSWORD) and kept beside admin's
  // active one; neither replaces the other.
  CommandResult made = RunCommand(
      {TestCluster::BinDir() + "/det", "-m", cluster_.address(), "user", "create", "alice"},
      absl::Seconds(60), {{"DET_USER_TOKEN", cluster_.token()}, {"DET_NEW_PASSWORD", "alice-pass-1"}});
  ASSERT_TRUE(made.exit.ok()) << made.err;
  CommandResult admin = DetAt(home, {"user", "login", "admin"}, {{"DET_PASSWORD", kTestAdminPassword}});
  ASSERT_TRUE(admin.exit.ok()) << admin.err;
  CommandResult as_alice = DetAt(home, {"-u", "alice", "user", "whoami"},
                                 {{"DET_PASSWORD", "alice-pass-1"}});
  ASSERT_TRUE(as_alice.exit.ok()) << as_alice.err;
  EXPECT_THAT(as_alice.out, StartsWith("alice on "));
  // Kept: no password needed the second time; the active session is still admin's.
  CommandResult again = DetAt(home, {"-u", "alice", "user", "whoami"});
  ASSERT_TRUE(again.exit.ok()) << again.err;
  EXPECT_THAT(again.out, StartsWith("alice on "));
  CommandResult active = DetAt(home, {"user", "whoami"});
  ASSERT_TRUE(active.exit.ok()) << active.err;
  EXPECT_THAT(active.out, StartsWith("admin (admin) on "));
  // -u also after the command words' options, and DET_USER: as Determined.
  EXPECT_THAT(DetAt(home, {"user", "whoami"}, {{"DET_USER", "alice"}}).out, StartsWith("alice on "));
  // Acting as alice: she may not disable agents.
  CommandResult refused = DetAt(home, {"-u", "alice", "agent", "disable", "agent-a"});
  EXPECT_FALSE(refused.exit.ok());
  EXPECT_THAT(refused.err, HasSubstr("only an admin may disable agents"));
  // A wrong password for a user with no kept session fails, naming nothing secret.
  CommandResult bad = DetAt(home, {"-u", "admin2", "user", "whoami"}, {{"DET_PASSWORD", "nope-nope"}});
  EXPECT_FALSE(bad.exit.ok());
  // det -u alice user logout forgets alice only.
  ASSERT_TRUE(DetAt(home, {"-u", "alice", "user", "logout"}).exit.ok());
  EXPECT_THAT(DetAt(home, {"user", "whoami"}).out, StartsWith("admin (admin) on "));
  EXPECT_THAT(Slurp(home + "/.det/auth.json"), Not(HasSubstr("\"alice\"")));
}

TEST_F(DeterminedCli, TemplatesSaySetCreatedOrReplaced) {
  std::string tpl = cluster_.WriteFile("tpl.yaml", "resources:\n  slots_per_trial: 1\n");
  CommandResult created = cluster_.Det({"tpl", "create", "team", tpl});
  ASSERT_TRUE(created.exit.ok()) << created.err;
  EXPECT_EQ(created.out, "Created template team\n");
  CommandResult twice = cluster_.Det({"tpl", "create", "team", tpl});
  EXPECT_FALSE(twice.exit.ok());
  EXPECT_THAT(twice.err, HasSubstr("template 'team' already exists"));
  EXPECT_EQ(cluster_.Det({"tpl", "set", "team", tpl}).out, "Replaced template team\n");
  EXPECT_EQ(cluster_.Det({"tpl", "set", "other", tpl}).out, "Created template other\n");
  EXPECT_EQ(cluster_.Det({"tpl", "update-config", "team", tpl}).out, "Replaced template team\n");
  CommandResult missing = cluster_.Det({"tpl", "update-config", "nope", tpl});
  EXPECT_FALSE(missing.exit.ok());
  EXPECT_THAT(missing.err, HasSubstr("template 'nope' does not exist"));
  CommandResult ls = cluster_.Det({"tpl", "ls"});
  ASSERT_TRUE(ls.exit.ok()) << ls.err;
  EXPECT_THAT(ls.out, ContainsRegex("\n team +\\|"));
  EXPECT_THAT(ls.out, ContainsRegex("\n other +\\|"));
}

TEST_F(DeterminedCli, SlotDisableAndDrainingAgent) {
  // A disabled slot takes no work: a 2-slot trial waits on the 2-slot agent until it is
  // enabled again.
  CommandResult off = cluster_.Det({"slot", "disable", "agent-a", "1"});
  ASSERT_TRUE(off.exit.ok()) << off.err;
  EXPECT_THAT(off.out, StartsWith("Disabled slot 1 of agent agent-a"));
  CommandResult unknown = cluster_.Det({"slot", "disable", "agent-a", "7"});
  EXPECT_FALSE(unknown.exit.ok());
  EXPECT_THAT(unknown.err, HasSubstr("agent agent-a has no slot '7' (its slots: 0, 1)"));
  CommandResult slots = cluster_.Det({"slot", "list"});
  EXPECT_THAT(slots.out, ContainsRegex("agent-a +\\| 1 +\\|[^\n]*\\| no +\\| no"));
  EXPECT_THAT(cluster_.Det({"agent", "list"}).out, HasSubstr("2 (1 disabled)"));

  std::string config = cluster_.WriteFile(
      "two.yaml", ExampleExperiment{.batches = 20, .slots_per_trial = 2}.Yaml());
  ASSERT_TRUE(cluster_.Det({"e", "create", config}).exit.ok());
  ASSERT_TRUE(WaitUntil(
      [&] {
        nlohmann::json d = cluster_.DetJson({"e", "describe", "1"});
        return d.is_object() && !d["trials"].empty() &&
               !d["trials"][0].value("pending_reason", "").empty();
      },
      absl::Seconds(30)));
  nlohmann::json d = cluster_.DetJson({"e", "describe", "1"});
  EXPECT_EQ(d["trials"][0]["state"], "STATE_QUEUED") << d.dump(2);
  ASSERT_TRUE(cluster_.Det({"slot", "enable", "agent-a", "1"}).exit.ok());
  EXPECT_EQ(Wait(1), "Experiment 1 ended: COMPLETED\n");

  // Draining and disabled agents differ in agent list and slot list.
  ASSERT_TRUE(cluster_.Det({"agent", "disable", "--drain", "agent-a"}).exit.ok());
  nlohmann::json agents = cluster_.DetJson({"agent", "list"});
  EXPECT_EQ(agents["agents"][0]["enabled"], false);
  EXPECT_EQ(agents["agents"][0]["draining"], true);
  std::vector<std::string> rows = Lines(cluster_.Det({"agent", "list"}).out);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_THAT(rows[0], HasSubstr("| Enabled | Draining |"));
  EXPECT_THAT(rows[2], ContainsRegex("\\| no +\\| yes +\\|"));
  ASSERT_TRUE(cluster_.Det({"agent", "disable", "agent-a"}).exit.ok());
  EXPECT_THAT(Lines(cluster_.Det({"agent", "list"}).out)[2], ContainsRegex("\\| no +\\| no +\\|"));
  ASSERT_TRUE(cluster_.Det({"agent", "enable", "agent-a"}).exit.ok());
  EXPECT_THAT(Lines(cluster_.Det({"agent", "list"}).out)[2], ContainsRegex("\\| yes +\\| no +\\|"));
}

TEST_F(DeterminedCli, ForkDownloadModelDefAndTrialDownload) {
  const std::string context = cluster_.dir() + "/context";
  mkdir(context.c_str(), 0755);
  mkdir((context + "/sub").c_str(), 0755);
  cluster_.WriteFile("context/notes.txt", "first model\n");
  cluster_.WriteFile("context/sub/helper.py", "X = 1\n");
  const std::string storage = cluster_.dir() + "/checkpoints";
  std::string config = cluster_.WriteFile(
      "exp.yaml", ExampleExperiment{.name = "parent",
                                    .batches = 20,
                                    .validation_period = 10,
                                    .checkpoint_period = 10,
                                    .checkpoint_host_path = storage}
                      .Yaml());
  ASSERT_TRUE(cluster_.Det({"e", "create", config, context}).exit.ok());
  ASSERT_EQ(Wait(1), "Experiment 1 ended: COMPLETED\n");

  // download-model-def: experiment_1_model_def.tgz in the working directory, as Determined.
  const std::string out_dir = cluster_.dir() + "/out";
  mkdir(out_dir.c_str(), 0755);
  const std::string tgz = out_dir + "/experiment_1_model_def.tgz";
  CommandResult def = cluster_.Det({"e", "download-model-def", "1", "-o", tgz});
  ASSERT_TRUE(def.exit.ok()) << def.err;
  EXPECT_EQ(def.out, absl::StrCat("Wrote the model definition of experiment 1 (2 files, 18 "
                                  "bytes) to ", tgz, "\n"));
  CommandResult untar = RunCommand({"/bin/tar", "-xzf", tgz, "-C", out_dir});
  ASSERT_TRUE(untar.exit.ok()) << untar.err;
  EXPECT_EQ(Slurp(out_dir + "/model_def/notes.txt"), "first model\n");
  EXPECT_EQ(Slurp(out_dir + "/model_def/sub/helper.py"), "X = 1\n");
  CommandResult exists = cluster_.Det({"e", "download-model-def", "1", "-o", tgz});
  EXPECT_FALSE(exists.exit.ok());
  EXPECT_THAT(exists.err, HasSubstr("exists"));
  EXPECT_FALSE(cluster_.Det({"e", "download-model-def", "99"}).exit.ok());

  // fork: the parent's config with an override, and the parent's model definition.
  CommandResult fork = cluster_.Det({"e", "fork", "1", "--config", "name=child"});
  ASSERT_TRUE(fork.exit.ok()) << fork.err;
  EXPECT_EQ(fork.out, "Created experiment 2 (forked from experiment 1)\n");
  EXPECT_THAT(cluster_.Det({"e", "config", "2"}).out, HasSubstr("name: child"));
  ASSERT_EQ(Wait(2), "Experiment 2 ended: COMPLETED\n");
  const std::string tgz2 = out_dir + "/child.tgz";
  ASSERT_TRUE(cluster_.Det({"e", "download-model-def", "2", "-o", tgz2}).exit.ok());
  const std::string out2 = out_dir + "/child";
  mkdir(out2.c_str(), 0755);
  ASSERT_TRUE(RunCommand({"/bin/tar", "-xzf", tgz2, "-C", out2}).exit.ok());
  EXPECT_EQ(Slurp(out2 + "/model_def/notes.txt"), "first model\n");
  // -c FILE: another config, the same model definition.
  std::string other = cluster_.WriteFile(
      "other.yaml", ExampleExperiment{.name = "from-file", .batches = 10}.Yaml());
  CommandResult forked_file = cluster_.Det({"e", "fork", "1", "-c", other, "--paused"});
  ASSERT_TRUE(forked_file.exit.ok()) << forked_file.err;
  EXPECT_THAT(forked_file.out, StartsWith("Created experiment 3 (forked from experiment 1)\n"));
  EXPECT_THAT(cluster_.Det({"e", "config", "3"}).out, HasSubstr("name: from-file"));

  // trial download --latest / --best / --uuid: the checkpoint's files.
  nlohmann::json d = cluster_.DetJson({"e", "describe", "1"});
  const std::string trial = absl::StrCat(Int(d["trials"][0]["id"]));
  nlohmann::json cps = cluster_.DetJson({"checkpoint", "list", "1"});
  ASSERT_GE(cps["checkpoints"].size(), 1u) << cps.dump(2);
  std::string latest_uuid;
  int64_t latest_batches = -1;
  for (const auto& c : cps["checkpoints"]) {
    if (Int(c["total_batches"]) > latest_batches && c["state"] != "STATE_DELETED") {
      latest_batches = Int(c["total_batches"]);
      latest_uuid = c["uuid"];
    }
  }
  CommandResult latest =
      cluster_.Det({"t", "download", trial, "--latest", "-o", out_dir + "/latest", "-q"});
  ASSERT_TRUE(latest.exit.ok()) << latest.err;
  EXPECT_EQ(latest.out, out_dir + "/latest\n");
  CommandResult by_uuid = cluster_.Det({"t", "download", trial, "--uuid", latest_uuid, "-o",
                                        out_dir + "/by-uuid"});
  ASSERT_TRUE(by_uuid.exit.ok()) << by_uuid.err;
  EXPECT_THAT(by_uuid.out, StartsWith(absl::StrCat("Downloaded checkpoint ", latest_uuid)));
  CommandResult best = cluster_.Det({"t", "download", trial, "--best", "-o", out_dir + "/best"});
  ASSERT_TRUE(best.exit.ok()) << best.err;
  CommandResult neither = cluster_.Det({"t", "download", trial});
  EXPECT_FALSE(neither.exit.ok());
  EXPECT_THAT(neither.err, HasSubstr("give exactly one of --best, --latest and --uuid"));
  CommandResult sort_alone =
      cluster_.Det({"t", "download", trial, "--best", "--sort-by", "validation_loss"});
  EXPECT_THAT(sort_alone.err, HasSubstr("--sort-by needs --smaller-is-better"));
}

TEST_F(DeterminedCli, FailedTrialsLogFiltersWrappingAndArchived) {
  // A script that logs at two levels on both streams and exits 3, never restarted.
  std::string config = cluster_.WriteFile(
      "fail.yaml",
      ExampleExperiment{.name = "failing",
                        .entrypoint = "[\"sh\", \"-c\", \"echo 'INFO: hello'; echo 'ERROR: "
                                      "boom' >&2; echo 'WARNING: careful'; echo plain; exit 3\"]",
                        .max_restarts = 0}
          .Yaml());
  ASSERT_TRUE(cluster_.Det({"e", "create", config}).exit.ok());
  ASSERT_EQ(Wait(1), "Experiment 1 ended: ERROR\n");
  nlohmann::json d = cluster_.DetJson({"e", "describe", "1"});
  const std::string trial = absl::StrCat(Int(d["trials"][0]["id"]));

  // describe names each failed trial's reason; list-trials has an Error column.
  CommandResult describe = cluster_.Det({"e", "describe", "1"});
  ASSERT_TRUE(describe.exit.ok()) << describe.err;
  EXPECT_THAT(describe.out, ContainsRegex(absl::StrCat("Failed trials:\n  trial ", trial,
                                                       ": [^\n]*exit code 3")));
  CommandResult lt = cluster_.Det({"e", "lt", "1"});
  EXPECT_THAT(Lines(lt.out)[0], HasSubstr("| Error"));
  EXPECT_THAT(lt.out, HasSubstr("exit code 3"));

  // $COLUMNS: no line wider than it (100), nothing cut off (the reason wraps).
  CommandResult narrow = RunCommand(
      {TestCluster::BinDir() + "/det", "-m", cluster_.address(), "e", "lt", "1"},
      absl::Seconds(60), {{"DET_USER_TOKEN", cluster_.token()}, {"COLUMNS", "100"}});
  ASSERT_TRUE(narrow.exit.ok()) << narrow.err;
  // The Error column (the 5th) of the lines after the header's, joined again.
  std::vector<std::string> narrow_lines = Lines(narrow.out);
  std::string error;
  bool past_header = false;
  for (const std::string& line : narrow_lines) {
    EXPECT_LE(line.size(), 100u) << narrow.out;
    if (line.rfind("---", 0) == 0) {
      past_header = true;
      continue;
    }
    std::vector<std::string> cells = absl::StrSplit(line, '|');
    if (past_header && cells.size() > 4) {
      std::string cell(absl::StripAsciiWhitespace(cells[4]));
      if (!cell.empty()) absl::StrAppend(&error, error.empty() ? "" : " ", cell);
    }
  }
  EXPECT_GT(narrow_lines.size(), Lines(lt.out).size());
  EXPECT_THAT(error, HasSubstr("rank 0 exit code 3"));

  // trial logs filters.
  auto logs = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = {"t", "logs", trial};
    args.insert(args.end(), flags.begin(), flags.end());
    CommandResult r = cluster_.Det(args);
    EXPECT_TRUE(r.exit.ok()) << r.err;
    return r.out;
  };
  const std::string all = logs({});
  EXPECT_THAT(all, HasSubstr("INFO: hello"));
  EXPECT_THAT(all, HasSubstr("[master]"));
  const std::string errors = logs({"--level", "ERROR"});
  EXPECT_THAT(errors, HasSubstr("ERROR: boom"));
  EXPECT_THAT(errors, Not(HasSubstr("INFO: hello")));
  EXPECT_THAT(errors, Not(HasSubstr("plain")));
  const std::string warnings = logs({"--level", "warning"});
  EXPECT_THAT(warnings, HasSubstr("WARNING: careful"));
  EXPECT_THAT(warnings, HasSubstr("ERROR: boom"));
  EXPECT_THAT(warnings, Not(HasSubstr("INFO: hello")));
  for (const std::string& line : Lines(logs({"--source", "master"}))) {
    EXPECT_THAT(line, StartsWith("[master] "));
  }
  const std::string stderr_only = logs({"--stdtype", "stderr"});
  EXPECT_THAT(stderr_only, HasSubstr("[stderr] ERROR: boom"));
  EXPECT_THAT(stderr_only, Not(HasSubstr("hello")));
  EXPECT_THAT(stderr_only, Not(HasSubstr("[master]")));
  const std::string container = logs({"--source", "container"});
  EXPECT_THAT(container, HasSubstr("plain"));
  EXPECT_THAT(container, Not(HasSubstr("[master]")));
  EXPECT_THAT(logs({"--agent-id", "agent-a"}), HasSubstr("plain"));
  EXPECT_EQ(logs({"--agent-id", "elsewhere"}), "");
  CommandResult bad_level = cluster_.Det({"t", "logs", trial, "--level", "LOUD"});
  EXPECT_FALSE(bad_level.exit.ok());
  EXPECT_THAT(bad_level.err, HasSubstr("--level"));

  // e list --all: an Archived column.
  ASSERT_TRUE(cluster_.Det({"e", "archive", "1"}).exit.ok());
  std::vector<std::string> listed = Lines(cluster_.Det({"e", "list", "--all"}).out);
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_THAT(listed[0], HasSubstr("| Archived"));
  EXPECT_THAT(listed[2], ContainsRegex("\\| yes$"));
  EXPECT_THAT(cluster_.Det({"e", "list"}).out, Not(HasSubstr("Archived")));
}

TEST_F(DeterminedCli, CreateTestModeAndDescribeMetrics) {
  // --test-mode: a search config becomes one short trial, followed to its end.
  std::string grid = cluster_.WriteFile("grid.yaml", GridYaml("grid", 200));
  CommandResult test = cluster_.Det({"e", "create", grid, "--test-mode"}, absl::Seconds(240));
  ASSERT_TRUE(test.exit.ok()) << test.out << test.err;
  EXPECT_THAT(test.out, StartsWith("Created experiment 1 (test mode: one trial, 10 batches)\n"));
  EXPECT_THAT(test.out, HasSubstr("Model definition test succeeded\n"));
  // As Determined's, the test experiment is archived: listed only with --all.
  EXPECT_THAT(test.out, HasSubstr("Archived test experiment 1 (det e list --all shows it)\n"));
  EXPECT_THAT(cluster_.Det({"e", "list"}).out, Not(ContainsRegex("(^|\n) *1 *\\|")));
  EXPECT_THAT(cluster_.Det({"e", "list", "--all"}).out,
              ContainsRegex("(^|\n) *1 *\\|[^\n]*\\| yes(\n|$)"));
  nlohmann::json d = cluster_.DetJson({"e", "describe", "1"});
  ASSERT_EQ(d["trials"].size(), 1u) << d.dump(2);
  EXPECT_EQ(Int(d["trials"][0]["total_batches"]), 10);
  EXPECT_THAT(cluster_.Det({"e", "config", "1"}).out, HasSubstr("max_restarts: 0"));

  // describe --metrics: each trial's metric summaries.
  CommandResult metrics = cluster_.Det({"e", "describe", "1", "--metrics"});
  ASSERT_TRUE(metrics.exit.ok()) << metrics.err;
  EXPECT_THAT(metrics.out, ContainsRegex(absl::StrCat(
                               "Trial ", Int(d["trials"][0]["id"]),
                               " metrics:\n Group +\| Metric +\| Min +\| Max +\| Last +\| Count")));
  EXPECT_THAT(metrics.out, ContainsRegex("\n validation +\| validation_loss +\|"));
  EXPECT_THAT(cluster_.Det({"e", "describe", "1"}).out, Not(HasSubstr("metrics:")));

  // A failing entrypoint fails the test, with its reason.
  std::string failing = cluster_.WriteFile(
      "fail.yaml", ExampleExperiment{.entrypoint = "[\"sh\", \"-c\", \"exit 4\"]"}.Yaml());
  CommandResult failed = cluster_.Det({"e", "create", failing, "--test-mode"}, absl::Seconds(240));
  EXPECT_FALSE(failed.exit.ok());
  EXPECT_THAT(failed.err, HasSubstr("experiment 2 ended in ERROR"));
  EXPECT_THAT(failed.out, Not(HasSubstr("succeeded")));
  // --local: refused, saying what to do instead.
  CommandResult local = cluster_.Det({"e", "create", grid, "--local"});
  EXPECT_FALSE(local.exit.ok());
  EXPECT_THAT(local.err, HasSubstr("--local: det runs trials on agents only"));
}

}  // namespace
}  // namespace det::testing
