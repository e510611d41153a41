// The det CLI's Determined-style commands against a real cluster (master, agent, example
// workers): a grid search read with list-trials, describe, list-checkpoints --best, logs,
// wait, trial logs --head/--tail/--timestamps, and diagnostic metrics kept out of tables;
// e set max-slots, checkpoint download, e delete, t kill and master logs.
#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
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

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
    ASSERT_TRUE(cluster_.StartAgent("agent-a", 2).ok()) << cluster_.LogTail("agent-a");
  }
  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TEST_F(Cli, DeterminedCommandsOnAGridSearch) {
  // Two trials side by side (one slot each), validated and checkpointed every 10 batches.
  const std::string storage = cluster_.dir() + "/checkpoints";
  std::string config =
      cluster_.WriteFile("grid.yaml", GridYaml("grid", 30, storage, ", save_trial_latest: 3"));
  CommandResult create = cluster_.Det({"e", "create", config});
  ASSERT_TRUE(create.exit.ok()) << create.err;
  ASSERT_THAT(create.out, StartsWith("Created experiment 1\n"));

  CommandResult wait = cluster_.Det({"e", "wait", "1", "--interval", "0.2"}, absl::Seconds(240));
  ASSERT_TRUE(wait.exit.ok()) << wait.out << wait.err << cluster_.LogTail("master");
  EXPECT_EQ(wait.out, "Experiment 1 ended: COMPLETED\n");

  // list-trials (lt): the hyperparameter as a column, the best value of the searcher's
  // metric, the best trial marked; no hashes.
  nlohmann::json d = cluster_.DetJson({"e", "describe", "1"});
  ASSERT_TRUE(d.is_object());
  ASSERT_EQ(d["trials"].size(), 2u);
  std::map<int64_t, double> lr;  // trial id -> learning rate
  std::map<int64_t, double> best_loss;
  for (const auto& t : d["trials"]) {
    ASSERT_TRUE(t["hparams"].is_object()) << t.dump();  // --json: an object
    lr[Int(t["id"])] = t["hparams"]["learning_rate"].get<double>();
    best_loss[Int(t["id"])] = t["validation_summary"]["validation_loss"]["min"].get<double>();
  }
  int64_t best = best_loss.begin()->first;
  for (const auto& [id, loss] : best_loss) {
    if (loss < best_loss[best]) best = id;
  }
  CommandResult lt = cluster_.Det({"e", "lt", "1"});
  ASSERT_TRUE(lt.exit.ok()) << lt.err;
  std::vector<std::string> rows = Lines(lt.out);
  ASSERT_EQ(rows.size(), 4u) << lt.out;
  EXPECT_THAT(rows[0], HasSubstr("| Best |"));
  EXPECT_THAT(rows[0], HasSubstr("| learning_rate |"));
  EXPECT_THAT(rows[0], HasSubstr("| Best validation_loss |"));
  EXPECT_THAT(lt.out, Not(HasSubstr("diag/")));
  EXPECT_THAT(lt.out, Not(HasSubstr("e-0")));  // no raw float noise
  for (size_t i = 2; i < rows.size(); ++i) {
    int64_t id = std::stoll(rows[i]);
    EXPECT_EQ(rows[i].find(" * ") != std::string::npos, id == best) << rows[i];
    EXPECT_THAT(rows[i], HasSubstr(lr[id] == 0.05 ? "| 0.05 " : "| 0.0001 ")) << rows[i];
  }
  CommandResult diag = cluster_.Det({"e", "list-trials", "1", "--diagnostics"});
  EXPECT_THAT(diag.out, HasSubstr("diag/params_hash_hi"));
  EXPECT_THAT(diag.out, HasSubstr("| 0x"));  // hashes in hex, not 2.33515e+09
  EXPECT_THAT(diag.out, Not(HasSubstr("e+0")));

  CommandResult describe = cluster_.Det({"e", "describe", "1"});
  EXPECT_THAT(describe.out, HasSubstr(absl::StrCat("Best trial: ", best, " (validation_loss ")));

  // list-checkpoints (lc) --best 1: the checkpoint with the lowest validation_loss.
  nlohmann::json all = cluster_.DetJson({"e", "lc", "1"});
  ASSERT_TRUE(all.is_object());
  std::string best_uuid;
  double best_value = 1e300;
  for (const auto& c : all["checkpoints"]) {
    if (!c["metrics"].contains("validation_loss") || c["state"] == "STATE_DELETED") continue;
    double v = c["metrics"]["validation_loss"].get<double>();
    if (v < best_value) {
      best_value = v;
      best_uuid = c["uuid"];
    }
  }
  ASSERT_FALSE(best_uuid.empty()) << all.dump(2);
  CommandResult lc = cluster_.Det({"e", "lc", "1", "--best", "1"});
  ASSERT_TRUE(lc.exit.ok()) << lc.err;
  ASSERT_EQ(Lines(lc.out).size(), 3u) << lc.out;
  EXPECT_THAT(Lines(lc.out)[2], StartsWith(" " + best_uuid + " "));
  EXPECT_THAT(lc.out, Not(HasSubstr("diag/")));

  // e logs: every trial's lines, each with its trial.
  CommandResult logs = cluster_.Det({"e", "logs", "1"});
  ASSERT_TRUE(logs.exit.ok()) << logs.err;
  for (const auto& [id, loss] : best_loss) {
    EXPECT_THAT(logs.out, HasSubstr(absl::StrCat("[trial ", id, "] [rank 0] "))) << logs.out;
  }

  // t logs --head/--tail/--timestamps against the whole log.
  const std::string trial = absl::StrCat(best);
  std::vector<std::string> whole = Lines(cluster_.Det({"t", "logs", trial}).out);
  ASSERT_GE(whole.size(), 3u);
  EXPECT_EQ(Lines(cluster_.Det({"t", "logs", trial, "--head", "2"}).out),
            std::vector<std::string>(whole.begin(), whole.begin() + 2));
  EXPECT_EQ(Lines(cluster_.Det({"t", "logs", trial, "--tail", "1"}).out),
            std::vector<std::string>{whole.back()});
  std::vector<std::string> stamped = Lines(cluster_.Det({"t", "logs", trial, "-t"}).out);
  ASSERT_EQ(stamped.size(), whole.size());
  const std::regex stamp(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z )");
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_TRUE(std::regex_search(stamped[i], stamp)) << stamped[i];
    EXPECT_EQ(stamped[i].substr(25), whole[i]);
  }

  // A trial's timings print with units, never as raw exponents.
  CommandResult t = cluster_.Det({"t", "describe", trial});
  ASSERT_TRUE(t.exit.ok()) << t.err;
  EXPECT_THAT(t.out, HasSubstr("train_batch"));
  EXPECT_THAT(t.out, Not(HasSubstr("e-0")));
  EXPECT_THAT(t.out, Not(HasSubstr("diag/")));

  // checkpoint list (ls) and describe.
  CommandResult cls = cluster_.Det({"checkpoint", "ls", "1"});
  ASSERT_TRUE(cls.exit.ok()) << cls.err;
  EXPECT_THAT(cls.out, HasSubstr(best_uuid));
  EXPECT_THAT(cluster_.Det({"checkpoint", "list", "1"}).out, HasSubstr(best_uuid));
  CommandResult cd = cluster_.Det({"checkpoint", "describe", best_uuid});
  ASSERT_TRUE(cd.exit.ok()) << cd.err;
  EXPECT_THAT(cd.out, HasSubstr(best_uuid));
  EXPECT_THAT(cd.out, HasSubstr("Metric validation_loss"));
  EXPECT_THAT(cd.out, ContainsRegex("Experiment: +1\n"));
  CommandResult nock = cluster_.Det({"checkpoint", "describe", "no-such-uuid"});
  EXPECT_FALSE(nock.exit.ok());
  EXPECT_THAT(nock.err, HasSubstr("checkpoint no-such-uuid not found"));

  // set name|description, label add|remove: shown by describe.
  ASSERT_TRUE(cluster_.Det({"e", "set", "name", "1", "grid-renamed"}).exit.ok());
  ASSERT_TRUE(cluster_.Det({"e", "set", "description", "1", "two learning rates"}).exit.ok());
  for (const char* label : {"fashion", "tmp"}) {
    CommandResult add = cluster_.Det({"e", "label", "add", "1", label});
    ASSERT_TRUE(add.exit.ok()) << add.err;
    EXPECT_EQ(add.out, absl::StrCat("Added label '", label, "' to experiment 1\n"));
  }
  ASSERT_TRUE(cluster_.Det({"e", "label", "remove", "1", "tmp"}).exit.ok());
  CommandResult described = cluster_.Det({"e", "describe", "1"});
  EXPECT_THAT(described.out, ContainsRegex("Name: +grid-renamed"));
  EXPECT_THAT(described.out, ContainsRegex("Description: +two learning rates"));
  EXPECT_THAT(described.out, ContainsRegex("Labels: +fashion\n"));
  // set priority of an ended experiment: refused, naming its state.
  CommandResult prio = cluster_.Det({"e", "set", "priority", "1", "10"});
  EXPECT_FALSE(prio.exit.ok());
  EXPECT_THAT(prio.err, HasSubstr("experiment 1 is COMPLETED"));

  // archive: hidden from list unless --all; unarchive shows it again.
  CommandResult archive = cluster_.Det({"e", "archive", "1"});
  ASSERT_TRUE(archive.exit.ok()) << archive.err;
  EXPECT_EQ(archive.out, "Archived experiment 1\n");
  EXPECT_THAT(cluster_.Det({"e", "list"}).out, Not(HasSubstr("grid-renamed")));
  EXPECT_THAT(cluster_.Det({"e", "ls", "--all"}).out, HasSubstr("grid-renamed"));
  ASSERT_TRUE(cluster_.Det({"e", "unarchive", "1"}).exit.ok());
  EXPECT_THAT(cluster_.Det({"e", "list"}).out, HasSubstr("grid-renamed"));

  // set gc-policy: stored in the config (the GC task it queues runs on the agent).
  CommandResult gcp = cluster_.Det({"e", "set", "gc-policy", "1", "--save-trial-latest", "1"});
  ASSERT_TRUE(gcp.exit.ok()) << gcp.err;
  EXPECT_EQ(gcp.out, "Experiment 1: checkpoint GC policy set\n");
  EXPECT_THAT(cluster_.Det({"e", "config", "1"}).out, HasSubstr("save_trial_latest: 1"));
  EXPECT_FALSE(cluster_.Det({"e", "set", "gc-policy", "1"}).exit.ok());

  // checkpoint delete: asks for --yes; then a GC task on the agent deletes it.
  CommandResult unconfirmed = cluster_.Det({"checkpoint", "delete", best_uuid});
  EXPECT_FALSE(unconfirmed.exit.ok());
  EXPECT_THAT(unconfirmed.err, HasSubstr("confirm with --yes"));
  CommandResult deleted = cluster_.Det({"checkpoint", "delete", best_uuid, "--yes"});
  ASSERT_TRUE(deleted.exit.ok()) << deleted.err;
  EXPECT_THAT(deleted.out, StartsWith("Deleting 1 checkpoint(s)"));
  EXPECT_TRUE(WaitUntil(
      [&] {
        return cluster_.DetJson({"checkpoint", "describe", best_uuid})["checkpoint"]["state"] ==
               "STATE_DELETED";
      },
      absl::Seconds(60)))
      << cluster_.LogTail("master");

  // master config: the running master's settings, the cluster secret redacted.
  CommandResult mc = cluster_.Det({"master", "config"});
  ASSERT_TRUE(mc.exit.ok()) << mc.err;
  EXPECT_THAT(mc.out, HasSubstr(absl::StrCat("grpc_listen: ")));
  EXPECT_THAT(mc.out, HasSubstr("resource_pools:"));
  EXPECT_THAT(mc.out, ContainsRegex("cluster_secret: \"(<redacted>)?\"\n"));

  // A mistyped command word is named with the nearest command.
  CommandResult typo = cluster_.Det({"e", "lsit"});
  EXPECT_FALSE(typo.exit.ok());
  EXPECT_THAT(typo.err, HasSubstr("unknown command 'lsit' for 'det experiment'; did you mean "
                                  "'list'?"));
}

TEST_F(Cli, WaitFailsForAKilledExperiment) {
  std::string config = cluster_.WriteFile("long.yaml", ExampleExperiment{.batches = 100000}.Yaml());
  ASSERT_TRUE(cluster_.Det({"e", "create", config}).exit.ok());
  ASSERT_TRUE(cluster_.Det({"e", "kill", "1"}).exit.ok());
  CommandResult wait = cluster_.Det({"e", "wait", "1", "--interval", "0.2"}, absl::Seconds(120));
  EXPECT_FALSE(wait.exit.ok());
  EXPECT_EQ(wait.out, "Experiment 1 ended: CANCELED\n");
  EXPECT_THAT(wait.err, HasSubstr("experiment 1 ended in CANCELED"));

  // create --paused: nothing runs until activated; a running experiment is not archived.
  CommandResult paused = cluster_.Det({"e", "create", config, "--paused"});
  ASSERT_TRUE(paused.exit.ok()) << paused.err;
  EXPECT_THAT(paused.out, StartsWith("Created experiment 2\n"));
  nlohmann::json d = cluster_.DetJson({"e", "describe", "2"});
  ASSERT_TRUE(d.is_object());
  EXPECT_EQ(d["experiment"]["state"], "STATE_PAUSED");
  EXPECT_EQ(d["trials"][0]["state"], "STATE_PAUSED");
  CommandResult archive = cluster_.Det({"e", "archive", "2"});
  EXPECT_FALSE(archive.exit.ok());
  EXPECT_THAT(archive.err, HasSubstr("experiment 2 is PAUSED: only an ended experiment"));
  ASSERT_TRUE(cluster_.Det({"e", "kill", "2"}).exit.ok());
  EXPECT_TRUE(cluster_.Det({"e", "archive", "2"}).exit.ok());
}

// The files under `dir`: relative path -> contents.
std::map<std::string, std::string> Files(const std::string& dir) {
  std::map<std::string, std::string> files;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    files[std::filesystem::relative(it->path(), dir).string()] = Slurp(it->path().string());
  }
  return files;
}

TEST_F(Cli, MaxSlotsDownloadDeleteAndMasterLogs) {
  // A 2-trial grid on a 2-slot agent, limited to 1 slot at a time before it starts.
  const std::string storage = cluster_.dir() + "/checkpoints";
  std::string config = cluster_.WriteFile("grid.yaml", GridYaml("capped", 20, storage));
  ASSERT_TRUE(cluster_.Det({"e", "create", config, "--paused"}).exit.ok());
  CommandResult capped = cluster_.Det({"e", "set", "max-slots", "1", "1"});
  ASSERT_TRUE(capped.exit.ok()) << capped.err;
  EXPECT_EQ(capped.out, "Experiment 1: max_slots = 1\n");
  EXPECT_THAT(cluster_.Det({"e", "config", "1"}).out, HasSubstr("max_slots: 1"));
  CommandResult negative = cluster_.Det({"e", "set", "max-slots", "1", "-1"});
  EXPECT_FALSE(negative.exit.ok());
  ASSERT_TRUE(cluster_.Det({"e", "activate", "1"}).exit.ok());
  CommandResult wait = cluster_.Det({"e", "wait", "1", "--interval", "0.2"}, absl::Seconds(240));
  ASSERT_TRUE(wait.exit.ok()) << wait.out << wait.err << cluster_.LogTail("master");

  // Never two trials at once: the trials' allocations (as the master recorded them) do not
  // overlap, and the one that waited says why.
  nlohmann::json d = cluster_.DetJson({"e", "describe", "1"});
  ASSERT_TRUE(d.is_object());
  ASSERT_EQ(d["trials"].size(), 2u);
  std::vector<std::pair<int64_t, int64_t>> runs;  // [start, end] of each trial's allocation
  for (const auto& t : d["trials"]) {
    const auto& a = t["allocation"];
    runs.push_back({Int(a["start_time_ms"]), Int(a["end_time_ms"])});
    ASSERT_GT(runs.back().first, 0) << t.dump();
    ASSERT_GE(runs.back().second, runs.back().first) << t.dump();
  }
  std::sort(runs.begin(), runs.end());
  EXPECT_GE(runs[1].first, runs[0].second) << d.dump(2);
  std::string trial_logs;
  for (const auto& t : d["trials"])
    trial_logs += cluster_.Det({"t", "logs", absl::StrCat(Int(t["id"]))}).out;
  EXPECT_THAT(trial_logs, HasSubstr("waiting: max_slots 1 of its experiment reached"));
  CommandResult ended = cluster_.Det({"e", "set", "max-slots", "1", "--clear"});
  EXPECT_FALSE(ended.exit.ok());
  EXPECT_THAT(ended.err, HasSubstr("experiment 1 is COMPLETED"));

  // checkpoint download: the same files as in the storage; a second one into the same
  // directory is refused.
  nlohmann::json cps = cluster_.DetJson({"e", "lc", "1"});
  ASSERT_TRUE(cps.is_object());
  std::vector<std::string> dirs;
  for (const auto& c : cps["checkpoints"]) {
    if (c["state"] != "STATE_DELETED") dirs.push_back(c["storage_path"]);
  }
  ASSERT_FALSE(dirs.empty()) << cps.dump(2);
  const std::string uuid = std::filesystem::path(dirs[0]).filename().string();
  const std::string out = cluster_.dir() + "/downloaded";
  CommandResult dl = cluster_.Det({"checkpoint", "download", uuid, "-o", out});
  ASSERT_TRUE(dl.exit.ok()) << dl.err;
  EXPECT_THAT(dl.out, StartsWith(absl::StrCat("Downloaded checkpoint ", uuid, " (")));
  std::map<std::string, std::string> stored = Files(dirs[0]);
  ASSERT_FALSE(stored.empty());
  EXPECT_EQ(Files(out), stored);
  CommandResult again = cluster_.Det({"checkpoint", "download", uuid, "--output", out});
  EXPECT_FALSE(again.exit.ok());
  EXPECT_THAT(again.err, HasSubstr("exists and is not empty"));

  // e delete: refused without --yes (no terminal), and for a running experiment.
  std::string long_config =
      cluster_.WriteFile("long.yaml", ExampleExperiment{.batches = 100000}.Yaml());
  ASSERT_TRUE(cluster_.Det({"e", "create", long_config}).exit.ok());
  CommandResult running = cluster_.Det({"e", "delete", "2", "--yes"});
  EXPECT_FALSE(running.exit.ok());
  EXPECT_THAT(running.err, HasSubstr("experiment 2 is ACTIVE: only an ended experiment"));
  ASSERT_TRUE(cluster_.Det({"e", "kill", "2"}).exit.ok());
  CommandResult unconfirmed = cluster_.Det({"e", "delete", "1"});
  EXPECT_FALSE(unconfirmed.exit.ok());
  EXPECT_THAT(unconfirmed.err, HasSubstr("not confirmed (stdin is not a terminal); pass --yes"));
  EXPECT_TRUE(cluster_.Det({"e", "describe", "1"}).exit.ok());

  CommandResult deleted = cluster_.Det({"e", "delete", "1", "--yes"});
  ASSERT_TRUE(deleted.exit.ok()) << deleted.err;
  EXPECT_THAT(deleted.out, StartsWith(absl::StrCat("Deleting experiment 1: the files of ",
                                                   dirs.size(), " checkpoint(s) first")));
  // Once the GC task ran on the agent: the experiment and its checkpoint directories gone.
  EXPECT_TRUE(WaitUntil(
      [&] {
        CommandResult r = cluster_.Det({"e", "describe", "1"});
        return !r.exit.ok() && r.err.find("experiment 1 not found") != std::string::npos;
      },
      absl::Seconds(60)))
      << cluster_.LogTail("master");
  for (const std::string& dir : dirs) EXPECT_FALSE(Exists(dir)) << dir;
  EXPECT_THAT(cluster_.Det({"e", "list", "--all"}).out, Not(HasSubstr("capped")));
  EXPECT_EQ(Sql(cluster_.db_path(), "SELECT COUNT(*) FROM trials WHERE experiment_id = 1"), "0");
  EXPECT_EQ(Sql(cluster_.db_path(), "SELECT COUNT(*) FROM metrics WHERE trial_id IN (1, 2)"), "0");
  CommandResult twice = cluster_.Det({"e", "delete", "1", "--yes"});
  EXPECT_FALSE(twice.exit.ok());
  EXPECT_THAT(twice.err, HasSubstr("experiment 1 not found"));
  // The killed experiment 2 (deleted at once when it kept no checkpoint).
  ASSERT_TRUE(WaitUntil(
      [&] {
        return cluster_.DetJson({"e", "describe", "2"})["experiment"]["state"] == "STATE_CANCELED";
      },
      absl::Seconds(60)));
  CommandResult second = cluster_.Det({"e", "delete", "2", "-y"});
  ASSERT_TRUE(second.exit.ok()) << second.err;
  EXPECT_THAT(second.out, ContainsRegex("^Delet(ed|ing) experiment 2"));
  EXPECT_TRUE(WaitUntil(
      [&] {
        return !cluster_.Det({"e", "describe", "2"}).exit.ok();
      },
      absl::Seconds(60)));

  // master logs: the master's own lines, the deletion among them.
  CommandResult ml = cluster_.Det({"master", "logs", "--tail", "500"});
  ASSERT_TRUE(ml.exit.ok()) << ml.err;
  EXPECT_THAT(ml.out, HasSubstr("[master] experiment 1 deleted (2 trial(s))"));
  EXPECT_THAT(ml.out, HasSubstr("[master] experiment 2 deleted"));
  EXPECT_LE(Lines(ml.out).size(), 500u);
  nlohmann::json mj = cluster_.DetJson({"master", "logs", "--tail", "1"});
  EXPECT_TRUE(mj.is_object()) << mj.dump();
  EXPECT_EQ(Lines(cluster_.Det({"master", "logs", "--tail", "3"}).out).size(), 3u);
}

TEST_F(Cli, KillOneTrialOfASearch) {
  // Two long trials side by side; one is killed, the other goes on.
  std::string config = cluster_.WriteFile("grid.yaml", GridYaml("two", 100000));
  ASSERT_TRUE(cluster_.Det({"e", "create", config}).exit.ok());
  auto trial_state = [&](int64_t id) {
    return cluster_.DetJson({"t", "describe", absl::StrCat(id)})["trial"]["state"];
  };
  ASSERT_TRUE(WaitUntil(
      [&] { return trial_state(1) == "STATE_RUNNING" && trial_state(2) == "STATE_RUNNING"; },
      absl::Seconds(120)))
      << cluster_.LogTail("master");
  CommandResult kill = cluster_.Det({"t", "kill", "1"});
  ASSERT_TRUE(kill.exit.ok()) << kill.err;
  EXPECT_EQ(kill.out, "Killing trial 1 (CANCELED once its workers exited)\n");
  ASSERT_TRUE(WaitUntil([&] { return trial_state(1) == "STATE_CANCELED"; }, absl::Seconds(60)))
      << cluster_.LogTail("master");
  EXPECT_EQ(trial_state(2), "STATE_RUNNING");
  EXPECT_EQ(cluster_.DetJson({"e", "describe", "1"})["experiment"]["state"], "STATE_ACTIVE");
  CommandResult again = cluster_.Det({"t", "kill", "1"});
  EXPECT_FALSE(again.exit.ok());
  EXPECT_THAT(again.err, HasSubstr("trial 1 is CANCELED"));
  CommandResult missing = cluster_.Det({"trial", "kill", "99"});
  EXPECT_FALSE(missing.exit.ok());
  EXPECT_THAT(missing.err, HasSubstr("trial 99 not found"));
  // Killing the other one too ends the experiment CANCELED (no trial failed).
  ASSERT_TRUE(cluster_.Det({"t", "kill", "2"}).exit.ok());
  CommandResult wait = cluster_.Det({"e", "wait", "1", "--interval", "0.2"}, absl::Seconds(120));
  EXPECT_EQ(wait.out, "Experiment 1 ended: CANCELED\n");
}

}  // namespace
}  // namespace det::testing
