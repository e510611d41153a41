// det.pytorch's Trial API under a real master and agent: the Fashion-MNIST PyTorchTrial
// example (common/worker/python/examples/fashion_mnist_trial) run from the shipped configs
// (configs/examples/trial-*.yaml, shortened with --config), in Determined's two forms:
// `entrypoint: model_def:FashionTrial` (det.pytorch.run) and the Trainer-API train.py.
// What users see through the det CLI.
#include <sys/stat.h>

#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/fashion_mnist_subset.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A test-only subclass of the example's trial, written into the context directory: it
// prints every batch rank 0 trains ("trained batch N") and, at startup, the batch it starts
// at and the checkpoint it resumes ("trial starts at batch N from checkpoint C"). The
// hyperparameter batch_sleep (seconds, default 0) slows each batch so that a pause lands
// mid-run.
constexpr char kLoggedTrial[] = R"(import time

from det import pytorch

import model_def


class _StartupLog(pytorch.PyTorchCallback):
    def __init__(self, rank):
        self.rank = rank

    def on_trial_startup(self, first_batch_idx, checkpoint_uuid):
        if self.rank == 0:
            print(f"trial starts at batch {first_batch_idx} from checkpoint {checkpoint_uuid}",
                  flush=True)


class LoggedTrial(model_def.FashionTrial):
    def build_callbacks(self):
        return {"startup_log": _StartupLog(self.context.distributed.get_rank())}

    def train_batch(self, batch, epoch_idx, batch_idx):
        time.sleep(self.context.get_hparams().get("batch_sleep", 0))
        metrics = super().train_batch(batch, epoch_idx, batch_idx)
        if self.context.distributed.get_rank() == 0:
            print(f"trained batch {batch_idx}", flush=True)
        return metrics
)";

class PyTorchTrialTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
    // Trials that exit on a stop checkpoint first: more than TestCluster's 3 s between
    // SIGTERM and SIGKILL, should one come on a loaded machine.
    std::string yaml = cluster_.AgentYaml("agent-a", 2);
    size_t grace = yaml.find("kill_grace: 3s");
    ASSERT_NE(grace, std::string::npos) << yaml;
    yaml.replace(grace, 14, "kill_grace: 120s");
    ASSERT_TRUE(cluster_.StartAgentWithYaml("agent-a", yaml).ok()) << cluster_.LogTail("agent-a");
    storage_ = cluster_.dir() + "/checkpoints";
    // The example's files, copied from the runfiles into a context directory, with the
    // test's subclass beside them.
    CopyContext("context", "common/worker/python/examples/fashion_mnist_trial",
                {"model_def.py", "train.py", "data.py"});
    context_ = cluster_.WriteFile("context/logged_trial.py", kLoggedTrial);
    context_ = context_.substr(0, context_.rfind('/'));
    configs_ = Runfiles() + "configs/examples/";
    data_ = cluster_.dir() + "/fashion-mnist";
    ASSERT_EQ(mkdir(data_.c_str(), 0755), 0);
    absl::Status data = WriteFashionMnistSubset(kFashionMnistDir, data_, 10000, 2000);
    ASSERT_TRUE(data.ok()) << data;
  }

  // The example's CNN at an eighth of its shipped width (n_filters 32/64, hidden 128), for
  // the cases whose checks (stops, resumes, the searcher's decisions) do not depend on the
  // model's size: the shipped one's batches and validations are most of their CPU time.
  static std::vector<std::string> SmallCnn(std::vector<std::string> overrides) {
    for (const char* o : {"hyperparameters.n_filters1=8", "hyperparameters.n_filters2=16",
                          "hyperparameters.hidden=32"}) {
      overrides.push_back(o);
    }
    return overrides;
  }

  // Creates an experiment of the shipped config `name` (configs/examples/) with the
  // test's checkpoint storage, its smaller Fashion-MNIST (10,000 training and 2,000 test
  // images: the example's accuracy is not what these cases check) and `overrides`
  // (--config KEY.PATH=VALUE); its id, or -1.
  int64_t Create(const std::string& name, std::vector<std::string> overrides) {
    overrides.insert(overrides.begin(), "data={dir: '" + data_ + "'}");
    return CreateFrom(configs_ + name, context_, overrides);
  }

  // The workspace's root in the test's runfiles, ending in '/'.
  static std::string Runfiles() { return TestCluster::BinDir() + "/../../"; }

  // A context directory `name` under the cluster's directory holding `files` of the
  // runfiles directory `from` (relative to the workspace); its path.
  std::string CopyContext(const std::string& name, const std::string& from,
                          const std::vector<std::string>& files) {
    const std::string runfiles = Runfiles();
    EXPECT_EQ(mkdir((cluster_.dir() + "/" + name).c_str(), 0755), 0) << name;
    std::string path;
    for (const std::string& f : files) {
      std::string text = Slurp(runfiles + from + "/" + f);
      EXPECT_FALSE(text.empty()) << runfiles << from << "/" << f;
      path = cluster_.WriteFile(name + "/" + f, text);
    }
    return path.substr(0, path.rfind('/'));
  }

  // As Create, for the config file `config` and the context directory `context`.
  int64_t CreateFrom(const std::string& config, const std::string& context,
                     const std::vector<std::string>& overrides) {
    std::vector<std::string> args = {"experiment", "create", config, context, "--json",
                                     "--config",
                                     "checkpoint_storage={type: shared_fs, host_path: '" +
                                         storage_ + "'}"};
    for (const std::string& o : overrides) {
      args.push_back("--config");
      args.push_back(o);
    }
    CommandResult r = cluster_.Det(args);
    EXPECT_TRUE(r.exit.ok()) << r.out << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    return j.is_object() ? Int(j["experiment"]["id"]) : -1;
  }

  nlohmann::json Describe(int64_t experiment) {
    return cluster_.DetJson({"experiment", "describe", absl::StrCat(experiment)});
  }

  std::string State(int64_t experiment) {
    nlohmann::json d = Describe(experiment);
    return d.is_object() ? d["experiment"].value("state", "") : "";
  }

  nlohmann::json Trial(int64_t id) {
    nlohmann::json d = cluster_.DetJson({"trial", "describe", absl::StrCat(id)});
    return d.is_object() ? d["trial"] : nlohmann::json();
  }

  std::string Logs(int64_t trial) {
    return cluster_.Det({"trial", "logs", absl::StrCat(trial)}).out;
  }

  // Waits for the experiment to end (det experiment wait); its describe JSON.
  nlohmann::json WaitEnded(int64_t experiment, absl::Duration timeout = absl::Minutes(5)) {
    CommandResult wait = cluster_.Det(
        {"experiment", "wait", absl::StrCat(experiment), "--interval", "0.5"}, timeout);
    nlohmann::json d = Describe(experiment);
    const std::string state = d.is_object() ? d["experiment"].value("state", "") : "";
    EXPECT_TRUE(state == "STATE_COMPLETED" || state == "STATE_ERROR" ||
                state == "STATE_CANCELED")
        << "experiment " << experiment << " still " << state << "\n"
        << wait.out << wait.err << Logs(1) << cluster_.LogTail("agent-a");
    return d;
  }

  // The experiment's checkpoints (det e lc --json), by batch.
  std::map<int64_t, nlohmann::json> Checkpoints(int64_t experiment) {
    std::map<int64_t, nlohmann::json> out;
    nlohmann::json lc = cluster_.DetJson({"experiment", "list-checkpoints",
                                          absl::StrCat(experiment)});
    if (!lc.is_object() || !lc.contains("checkpoints")) return out;
    for (const auto& c : lc["checkpoints"]) out[Int(c["total_batches"])] = c;
    return out;
  }

  // The N of each "trained batch N" line, in order.
  static std::vector<int64_t> TrainedBatches(const std::string& logs) {
    std::vector<int64_t> out;
    for (absl::string_view line : absl::StrSplit(logs, '\n')) {
      size_t at = line.find("trained batch ");
      int64_t n = 0;
      if (at != absl::string_view::npos &&
          absl::SimpleAtoi(line.substr(at + strlen("trained batch ")), &n)) {
        out.push_back(n);
      }
    }
    return out;
  }

  // (batch, checkpoint) of each "trial starts at batch N from checkpoint C" line.
  static std::vector<std::pair<int64_t, std::string>> Starts(const std::string& logs) {
    std::vector<std::pair<int64_t, std::string>> out;
    const std::string marker = "trial starts at batch ";
    for (absl::string_view line : absl::StrSplit(logs, '\n')) {
      size_t at = line.find(marker);
      if (at == absl::string_view::npos) continue;
      std::vector<std::string> words =
          absl::StrSplit(line.substr(at + marker.size()), ' ');  // N from checkpoint C
      int64_t n = -1;
      if (words.size() == 4 && absl::SimpleAtoi(words[0], &n)) out.push_back({n, words[3]});
    }
    return out;
  }

  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
  std::string storage_;
  std::string context_;
  std::string configs_;
  std::string data_;  // The smaller data set of Create's experiments.
};

// trial-const.yaml: `entrypoint: model_def:FashionTrial` on one slot trains to the
// searcher's length, validates every min_validation_period and checkpoints (policy best:
// after each better validation, and at the end).
TEST_F(PyTorchTrialTest, TrialClassEntrypointCompletesWithValidationsAndCheckpoints) {
  int64_t id = Create("trial-const.yaml", {"searcher.max_length={batches: 40}",
                                           "min_validation_period={batches: 20}"});
  ASSERT_EQ(id, 1);
  nlohmann::json d = WaitEnded(id);
  ASSERT_EQ(d["experiment"]["state"], "STATE_COMPLETED") << Logs(1);
  ASSERT_EQ(d["trials"].size(), 1u);
  const nlohmann::json& listed = d["trials"][0];
  EXPECT_EQ(Int(listed["total_batches"]), 40);
  EXPECT_TRUE(listed["validation_summary"].contains("validation_loss")) << listed.dump();
  const nlohmann::json t = Trial(1);
  EXPECT_EQ(t["state"], "STATE_COMPLETED");
  EXPECT_EQ(Int(t["validation_summary"]["validation_loss"]["count"]), 2) << t.dump();
  EXPECT_EQ(Int(t["validation_summary"]["accuracy"]["count"]), 2) << t.dump();
  // Better than chance (0.1) after 40 batches of 64.
  EXPECT_GT(t["validation_summary"]["accuracy"]["last"].get<double>(), 0.3) << t.dump();
  EXPECT_TRUE(t["training_summary"].contains("loss")) << t.dump();

  std::map<int64_t, nlohmann::json> checkpoints = Checkpoints(1);
  ASSERT_TRUE(checkpoints.count(40)) << cluster_.Det({"e", "lc", "1"}).out;
  const nlohmann::json& last = checkpoints[40];
  for (const char* file : {"state_dict.pth", "trial_state.pkl", "load_data.json"}) {
    EXPECT_TRUE(last["resources"].contains(file)) << file << " in " << last.dump();
    EXPECT_TRUE(Exists(last["storage_path"].get<std::string>() + "/" + file)) << file;
  }
  EXPECT_TRUE(last.contains("metrics") && last["metrics"].contains("validation_loss"))
      << last.dump();
  // det e lc --best ranks them by the searcher metric.
  nlohmann::json best = cluster_.DetJson({"experiment", "list-checkpoints", "1", "--best", "1"});
  ASSERT_TRUE(best.is_object() && best["checkpoints"].size() == 1) << best.dump();
  EXPECT_TRUE(best["checkpoints"][0]["metrics"].contains("validation_loss")) << best.dump();
}

// trial-trainer.yaml: the Trainer-API script (python3 train.py) on two slots.
TEST_F(PyTorchTrialTest, TrainerApiScriptCompletesOnTwoSlots) {
  int64_t id = Create("trial-trainer.yaml",
                      {"entrypoint=python3 train.py --batches 40 --validation-batches 20",
                       "hyperparameters.global_batch_size=32"});
  ASSERT_EQ(id, 1);
  nlohmann::json d = WaitEnded(id);
  ASSERT_EQ(d["experiment"]["state"], "STATE_COMPLETED") << Logs(1);
  const nlohmann::json t = Trial(1);
  EXPECT_EQ(Int(t["total_batches"]), 40) << t.dump();
  EXPECT_EQ(Int(t["validation_summary"]["validation_loss"]["count"]), 2) << t.dump();
  EXPECT_GT(t["validation_summary"]["accuracy"]["last"].get<double>(), 0.3) << t.dump();
  EXPECT_TRUE(Checkpoints(1).count(40)) << cluster_.Det({"e", "lc", "1"}).out;
  std::string logs = Logs(1);
  EXPECT_THAT(logs, HasSubstr("rank 1 exited: exit code 0")) << logs;
}

// A pause mid-run: the trial stops at a batch boundary through should_preempt(),
// checkpoints there, and after activate resumes at the next batch: every batch is trained
// exactly once.
TEST_F(PyTorchTrialTest, PauseAndActivateContinueWithoutRepeatingABatch) {
  // The pause comes after batch 10; the rest (7 s of batch_sleep alone) is the margin for
  // it to land before the end.
  constexpr int kLength = 80;
  int64_t id = Create("trial-const.yaml",
                      SmallCnn({"entrypoint=logged_trial:LoggedTrial",
                                absl::StrCat("searcher.max_length={batches: ", kLength, "}"),
                                "min_validation_period={batches: 1000}",
                                "hyperparameters.global_batch_size=16",
                                "hyperparameters.batch_sleep=0.1"}));
  ASSERT_EQ(id, 1);
  ASSERT_TRUE(WaitUntil([&] { return TrainedBatches(Logs(1)).size() >= 10; }, absl::Minutes(3)))
      << Logs(1);
  CommandResult pause = cluster_.Det({"experiment", "pause", "1"});
  ASSERT_TRUE(pause.exit.ok()) << pause.out << pause.err;
  // The trial checkpoints and exits by itself (no signal).
  ASSERT_TRUE(WaitUntil([&] { return Logs(1).find("rank 0 exited: exit code 0") !=
                                     std::string::npos; },
                        absl::Minutes(2)))
      << Logs(1);
  std::string paused_logs = Logs(1);
  EXPECT_THAT(paused_logs, HasSubstr("through should_preempt()"));
  EXPECT_THAT(paused_logs, Not(HasSubstr("did not exit within")));
  std::vector<int64_t> before = TrainedBatches(paused_logs);
  ASSERT_FALSE(before.empty());
  const int64_t stopped_at = before.back() + 1;
  EXPECT_LT(stopped_at, kLength) << "the pause came after the end; make the trial longer";
  EXPECT_EQ(State(1), "STATE_PAUSED");
  // The stop's checkpoint is the trial's latest.
  ASSERT_TRUE(WaitUntil([&] { return Checkpoints(1).count(stopped_at) > 0; }, absl::Seconds(30)))
      << cluster_.Det({"e", "lc", "1"}).out;
  const std::string checkpoint = Checkpoints(1)[stopped_at]["uuid"];

  ASSERT_TRUE(WaitUntil([&] { return cluster_.Det({"experiment", "activate", "1"}).exit.ok(); },
                        absl::Minutes(1)))
      << cluster_.Det({"experiment", "activate", "1"}).err;
  nlohmann::json d = WaitEnded(1);
  ASSERT_EQ(d["experiment"]["state"], "STATE_COMPLETED") << Logs(1);
  EXPECT_EQ(Int(Trial(1)["total_batches"]), kLength);

  std::string logs = Logs(1);
  std::vector<int64_t> batches = TrainedBatches(logs);
  ASSERT_EQ(batches.size(), static_cast<size_t>(kLength)) << logs;
  for (int64_t i = 0; i < kLength; ++i) EXPECT_EQ(batches[i], i) << logs;
  std::vector<std::pair<int64_t, std::string>> starts = Starts(logs);
  ASSERT_EQ(starts.size(), 2u) << logs;
  EXPECT_EQ(starts[0], std::make_pair(int64_t{0}, std::string("None")));
  EXPECT_EQ(starts[1], std::make_pair(stopped_at, checkpoint)) << logs;
}

// trial-adaptive.yaml: adaptive_asha in Determined 0.38's form (time_metric: batches,
// max_time) over the Trial: trials that rank low at the first rung are asked to stop,
// checkpoint, and end COMPLETED before max_time.
TEST_F(PyTorchTrialTest, AdaptiveAshaTimeMetricStopsTrialsAtRungs) {
  constexpr int kMaxTime = 40;
  // Rungs at 10 and 40 batches (divisor 4, 2 rungs); at the first a trial goes on only
  // while it ranks first of those that got there. With seed 6 the trials draw learning
  // rates 0.003, 0.003 and 1e-7 (docs/configuration.md, "Seeds"): trial 3 starts once
  // trial 1 or 2 has ended, after both reached the first rung, and ranks behind them there
  // (it has barely trained); of trials 1 and 2 the later to get there goes on only if it
  // is the better.
  int64_t id = Create("trial-adaptive.yaml",
                      SmallCnn({absl::StrCat("searcher.max_time=", kMaxTime),
                                "searcher.max_trials=3", "searcher.max_rungs=2",
                                "searcher.divisor=4", "searcher.mode=aggressive",
                                "searcher.max_concurrent_trials=2",
                                "min_validation_period={batches: 10}",
                                "reproducibility={experiment_seed: 6}",
                                "hyperparameters.learning_rate={type: categorical, vals: [0.003, "
                                "0.0000001]}",
                                "hyperparameters.dropout=0.25"}));
  ASSERT_EQ(id, 1);
  nlohmann::json d = WaitEnded(1, absl::Minutes(8));
  ASSERT_EQ(d["experiment"]["state"], "STATE_COMPLETED") << d.dump(2);
  ASSERT_EQ(d["trials"].size(), 3u) << d.dump(2);
  int stopped = 0;
  for (const auto& t : d["trials"]) {
    SCOPED_TRACE(t.dump());
    EXPECT_EQ(t["state"], "STATE_COMPLETED");
    const int64_t trial = Int(t["id"]);
    const bool early = t.contains("search") && t["search"].value("stopped_early", false);
    const nlohmann::json hparams = nlohmann::json::parse(t.value("hparams_json", "{}"));
    if (hparams.value("learning_rate", 0.0) < 1e-6) {
      EXPECT_TRUE(early) << "the trial that barely trains goes no further than the first rung";
    }
    if (early) {
      ++stopped;
      EXPECT_GE(Int(t["total_batches"]), 10);
      EXPECT_LT(Int(t["total_batches"]), kMaxTime);
      // Asked through should_preempt(), it checkpointed where it stopped and exited.
      EXPECT_THAT(Logs(trial), HasSubstr("through should_preempt()"));
      EXPECT_THAT(Logs(trial), HasSubstr("rank 0 exited: exit code 0"));
      EXPECT_FALSE(Trial(trial).value("latest_checkpoint", "").empty());
    } else {
      EXPECT_EQ(Int(t["total_batches"]), kMaxTime);
    }
  }
  EXPECT_GE(stopped, 1) << d.dump(2);
}

// Determined's published example shapes (common/worker/python/examples/determined, det's
// versions with the import and data lines changed), run from their own configs with the
// length lines shortened. cifar10_pytorch: `entrypoint: model_def:CIFARTrial`,
// records_per_epoch, max_length and min_validation_period in epochs, the old
// evaluate_batch(batch).
TEST_F(PyTorchTrialTest, DeterminedCifar10ExampleCompletes) {
  const std::string dir = "common/worker/python/examples/determined/cifar10_pytorch";
  std::string context = CopyContext("cifar10", dir, {"model_def.py", "data.py"});
  // 160 records of 32: 5 batches an epoch.
  int64_t id = CreateFrom(Runfiles() + dir + "/const.yaml", context,
                          {"records_per_epoch=160", "searcher.max_length={epochs: 2}"});
  ASSERT_EQ(id, 1);
  nlohmann::json d = WaitEnded(id);
  ASSERT_EQ(d["experiment"]["state"], "STATE_COMPLETED") << Logs(1);
  const nlohmann::json t = Trial(1);
  EXPECT_EQ(Int(t["total_batches"]), 10) << t.dump();
  // A validation each epoch, with the example's metrics.
  EXPECT_EQ(Int(t["validation_summary"]["validation_error"]["count"]), 2) << t.dump();
  EXPECT_TRUE(t["validation_summary"].contains("validation_accuracy")) << t.dump();
  EXPECT_TRUE(t["training_summary"].contains("train_accuracy")) << t.dump();
  std::map<int64_t, nlohmann::json> checkpoints = Checkpoints(1);
  ASSERT_TRUE(checkpoints.count(10)) << cluster_.Det({"e", "lc", "1"}).out;
  EXPECT_TRUE(checkpoints[10]["metrics"].contains("validation_error")) << checkpoints[10].dump();
  // The model definition travels with the checkpoint (code/), as in Determined.
  EXPECT_TRUE(Exists(checkpoints[10]["storage_path"].get<std::string>() + "/code/model_def.py"));
}

// mnist_pytorch in both of Determined's forms at once (the agent has two slots): the
// pre-0.38 `entrypoint: model_def:MNistTrial` with max_length in batches, and the 0.38
// Trainer-API script (`python3 train.py`, no searcher length: the script's --batches). Both
// with the CNN's filters at a quarter of the config's (32/64): what is checked does not
// depend on them, and the config's convolutions are most of the runs' CPU time.
TEST_F(PyTorchTrialTest, DeterminedMnistExampleCompletesInBothForms) {
  const std::string dir = "common/worker/python/examples/determined/mnist_pytorch";
  std::string context =
      CopyContext("mnist", dir, {"model_def.py", "train.py", "model.py", "data.py", "const.yaml"});
  const std::string configs = Runfiles() + dir + "/";
  ASSERT_EQ(CreateFrom(configs + "const-legacy.yaml", context,
                       {"searcher.max_length={batches: 30}", "hyperparameters.n_filters1=8",
                        "hyperparameters.n_filters2=16"}),
            1);
  ASSERT_EQ(CreateFrom(configs + "const.yaml", context,
                       {"entrypoint=python3 train.py --batches 30", "hyperparameters.n_filters1=8",
                        "hyperparameters.n_filters2=16"}),
            2);
  for (int64_t id : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("experiment ", id));
    nlohmann::json d = WaitEnded(id);
    ASSERT_EQ(d["experiment"]["state"], "STATE_COMPLETED") << Logs(id);
    const nlohmann::json t = Trial(id);
    EXPECT_EQ(Int(t["total_batches"]), 30) << t.dump();
    EXPECT_EQ(Int(t["validation_summary"]["validation_loss"]["count"]), 1) << t.dump();
    EXPECT_GT(t["validation_summary"]["accuracy"]["last"].get<double>(), 0.3) << t.dump();
    EXPECT_TRUE(Checkpoints(id).count(30)) << cluster_.Det({"e", "lc", absl::StrCat(id)}).out;
  }
}

// A PyTorchTrial that raises det.InvalidHP (Determined's way to say "these hyperparameters
// cannot train") in its first trial, under a random search of 2 trials one at a time: the
// master ends that trial as invalid without a restart, the searcher replaces it, and the
// experiment COMPLETES with 3 trials, the two valid ones trained to the end.
TEST_F(PyTorchTrialTest, InvalidHpTrialIsEndedAndReplaced) {
  cluster_.WriteFile("context/invalid_trial.py", R"(import det

import model_def


class InvalidFirstTrial(model_def.FashionTrial):
    def train_batch(self, batch, epoch_idx, batch_idx):
        if self.context.get_trial_id() == 1 and batch_idx == 2:
            raise det.InvalidHP("trial 1: these hyperparameters cannot train")
        return super().train_batch(batch, epoch_idx, batch_idx)
)");
  int64_t id = Create("trial-const.yaml",
                      SmallCnn({"entrypoint=invalid_trial:InvalidFirstTrial",
                                "searcher.name=random", "searcher.max_trials=2",
                                "searcher.max_concurrent_trials=1",
                                "searcher.max_length={batches: 10}",
                                "min_validation_period={batches: 10}", "max_restarts=2"}));
  ASSERT_EQ(id, 1);
  nlohmann::json d = WaitEnded(1, absl::Minutes(8));
  ASSERT_EQ(d["experiment"]["state"], "STATE_COMPLETED") << d.dump(2) << Logs(1);
  ASSERT_EQ(d["trials"].size(), 3u) << d.dump(2);
  for (const auto& t : d["trials"]) {
    SCOPED_TRACE(t.dump());
    EXPECT_EQ(t["state"], "STATE_COMPLETED");
    const int64_t trial = Int(t["id"]);
    const nlohmann::json described = Trial(trial);
    const bool invalid =
        described.contains("search") && described["search"].value("invalid_hp", false);
    EXPECT_EQ(invalid, trial == 1) << described.dump();
    EXPECT_EQ(described.value("restarts", 0), 0) << described.dump();
    if (trial == 1) {
      EXPECT_LT(Int(t["total_batches"]), 10);
      const std::string logs = Logs(1);
      EXPECT_THAT(logs, HasSubstr("trial 1: these hyperparameters cannot train"));
      EXPECT_THAT(logs, Not(HasSubstr("restart 1 of")));
    } else {
      EXPECT_EQ(Int(t["total_batches"]), 10);
      EXPECT_TRUE(t["validation_summary"].contains("validation_loss"));
    }
  }
}

// cifar10_pytorch's adaptive.yaml: adaptive_asha in the form before 0.38 (searcher.max_length
// in epochs, records_per_epoch, a searched global_batch_size) over a PyTorchTrial, the lengths
// shortened: 4 trials one at a time, rungs at 1 and 2 epochs (divisor 2: every epoch a
// trial trains costs a validation of the example's 1,000 records). A trial that ranks behind
// an earlier one at the first rung is asked to stop through should_preempt(), checkpoints
// where it stopped, and ends COMPLETED short of max_length, its checkpoint listed.
TEST_F(PyTorchTrialTest, DeterminedCifar10AdaptiveMaxLengthFormStopsTrialsAtRungs) {
  constexpr int kEpochs = 2;
  const std::string dir = "common/worker/python/examples/determined/cifar10_pytorch";
  std::string context = CopyContext("cifar10", dir, {"model_def.py", "data.py"});
  // 160 records an epoch: 2 to 10 batches, as the searched batch size (16-64) has it.
  int64_t id = CreateFrom(Runfiles() + dir + "/adaptive.yaml", context,
                          {"records_per_epoch=160",
                           absl::StrCat("searcher.max_length={epochs: ", kEpochs, "}"),
                           "searcher.max_trials=4", "searcher.max_rungs=2", "searcher.divisor=2",
                           "searcher.mode=aggressive", "searcher.max_concurrent_trials=1",
                           "reproducibility={experiment_seed: 17}"});
  ASSERT_EQ(id, 1);
  nlohmann::json d = WaitEnded(1, absl::Minutes(12));
  ASSERT_EQ(d["experiment"]["state"], "STATE_COMPLETED") << d.dump(2);
  ASSERT_EQ(d["trials"].size(), 4u) << d.dump(2);
  int stopped = 0;
  for (const auto& t : d["trials"]) {
    SCOPED_TRACE(t.dump());
    EXPECT_EQ(t["state"], "STATE_COMPLETED");
    const int64_t trial = Int(t["id"]);
    const bool early = t.contains("search") && t["search"].value("stopped_early", false);
    const nlohmann::json hparams = nlohmann::json::parse(t.value("hparams_json", "{}"));
    const int64_t batches_per_epoch = 160 / Int(hparams["global_batch_size"]);
    if (early) {
      ++stopped;
      EXPECT_GE(Int(t["total_batches"]), batches_per_epoch);
      EXPECT_LT(Int(t["total_batches"]), kEpochs * batches_per_epoch);
      EXPECT_THAT(Logs(trial), HasSubstr("through should_preempt()"));
    } else {
      EXPECT_EQ(Int(t["total_batches"]), kEpochs * batches_per_epoch);
    }
    // Stopped or not, the trial's last step has its checkpoint.
    bool found = false;
    const nlohmann::json lc = cluster_.DetJson({"e", "lc", "1"});
    for (const auto& c : lc["checkpoints"]) {
      found |= Int(c["trial_id"]) == trial && Int(c["total_batches"]) == Int(t["total_batches"]);
    }
    EXPECT_TRUE(found) << cluster_.Det({"e", "lc", "1"}).out;
  }
  EXPECT_GE(stopped, 1) << d.dump(2);
}

}  // namespace
}  // namespace det::testing
