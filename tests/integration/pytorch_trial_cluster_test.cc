// det.pytorch's Trial API across agents, under a real master and two real agents of 2 CPU
// slots each (Issue 23):
// - deterministic mode (reproducibility.deterministic): a PyTorchTrial paused mid-epoch and
//   resized 2 -> 1 -> 2 slots trains every batch once, with the same records, and its
//   per-step training losses and final parameters equal an uninterrupted 2-slot run's, bit
//   for bit (what rank 0 printed, read back from `det trial logs`);
// - Determined 0.38's Trainer-API mnist_pytorch (det's version, its distributed.yaml) on 4
//   slots spanning both agents completes with its validations and checkpoints.
#include <sys/stat.h>

#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

// The test's PyTorchTrial (model_def.py of its context directory). Each micro-batch that
// train_batch sees prints "rank R batch B samples I,J,..."; after each training report (one
// per batch: scheduling_unit 1) rank 0 prints "step N loss <float.hex>"; after batch N in
// hyperparameters wait_first / wait_second (when not resuming there) every rank waits until
// should_preempt() says stop, so that the test pauses the trial at a known batch; the final
// validation prints "params sha256 <hex>" of the parameters' bytes.
constexpr char kTrial[] = R"(import hashlib
import time

import torch
import torch.nn.functional as F

from det import pytorch

FEATURES, CLASSES = 16, 10


class Data(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, FEATURES, generator=g)
        w = torch.randn(FEATURES, CLASSES, generator=g)
        self.y = (self.x @ w).argmax(dim=1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i], i


class StepLog(pytorch.PyTorchCallback):
    def __init__(self, trial):
        self.trial = trial

    def on_trial_startup(self, first_batch_idx, checkpoint_uuid):
        d = self.trial.context.distributed
        print(f"rank {d.get_rank()} of {d.get_size()} starts at batch {first_batch_idx}",
              flush=True)

    def on_training_workload_end(self, avg_metrics, batch_metrics):
        ctx = self.trial.context
        batches = ctx.current_train_batch() + 1
        if ctx.distributed.get_rank() == 0:
            print(f"step {batches} loss {float.hex(avg_metrics['loss'])}", flush=True)
        hp = ctx.get_hparams()
        if batches in (hp.get("wait_first"), hp.get("wait_second")):
            if ctx.distributed.get_rank() == 0:
                print(f"waiting for preemption at batch {batches}", flush=True)
            while not ctx._core.preempt.should_preempt():
                time.sleep(0.05)  # A collective per call: poll gently.

    def on_validation_end(self, metrics):
        if self.trial.context.distributed.get_rank() == 0:
            h = hashlib.sha256()
            for p in self.trial.model.parameters():
                h.update(p.detach().numpy().tobytes())
            print(f"params sha256 {h.hexdigest()}", flush=True)


class DeterministicTrial(pytorch.PyTorchTrial):
    def __init__(self, context):
        self.context = context
        torch.manual_seed(0)
        self.model = context.wrap_model(torch.nn.Sequential(
            torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1),
            torch.nn.Linear(32, CLASSES)))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.05,
                                                          momentum=0.9))

    def build_callbacks(self):
        return {"step_log": StepLog(self)}

    def build_training_data_loader(self):
        return pytorch.DataLoader(Data(512, 1234), shuffle=True,
                                  batch_size=self.context.get_per_slot_batch_size())

    def build_validation_data_loader(self):
        return pytorch.DataLoader(Data(64, 99), batch_size=8)

    def train_batch(self, batch, epoch_idx, batch_idx):
        x, y, ids = batch
        rank = self.context.distributed.get_rank()
        print(f"rank {rank} batch {batch_idx} samples {','.join(str(int(i)) for i in ids)}",
              flush=True)
        loss = F.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch, batch_idx):
        x, y, _ = batch
        return {"validation_loss": F.cross_entropy(self.model(x), y)}
)";

// 512 records, global batch 32: an epoch is 16 batches; the pauses (after batches 5 and 11)
// are mid-epoch and the run crosses into the second epoch.
constexpr int kBatches = 24;
constexpr int kWaitFirst = 5;
constexpr int kWaitSecond = 11;
constexpr int kMicroBatches = 32 / 4;

std::string DeterministicConfig(const std::string& storage, bool pauses) {
  return absl::StrCat(R"(name: deterministic-trial
entrypoint: model_def:DeterministicTrial
hyperparameters:
  global_batch_size: 32
  micro_batch_size: 4
  wait_first: )", pauses ? kWaitFirst : 0, R"(
  wait_second: )", pauses ? kWaitSecond : 0, R"(
records_per_epoch: 512
scheduling_unit: 1
reproducibility: {deterministic: true, experiment_seed: 7}
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length: {batches: )", kBatches, R"(}
resources: {slots_per_trial: 2}
checkpoint_storage: {type: shared_fs, host_path: ')", storage, R"('}
)");
}

// What a run printed.
struct Printed {
  std::map<int, std::string> losses;                 // step -> loss (float.hex)
  std::map<int, std::multiset<int>> samples;         // batch -> every rank's records
  std::map<int, std::multiset<int>> ranks;           // batch -> rank of each micro-batch
  std::string params;
};

Printed Parse(const std::string& logs) {
  Printed run;
  static const std::regex step(R"(step (\d+) loss (\S+))");
  for (auto it = std::sregex_iterator(logs.begin(), logs.end(), step);
       it != std::sregex_iterator(); ++it) {
    auto [at, inserted] = run.losses.emplace(std::stoi((*it)[1]), (*it)[2]);
    EXPECT_TRUE(inserted) << "step " << (*it)[1] << " reported twice";
  }
  static const std::regex micro(R"(rank (\d+) batch (\d+) samples ([0-9,]+))");
  for (auto it = std::sregex_iterator(logs.begin(), logs.end(), micro);
       it != std::sregex_iterator(); ++it) {
    const int batch = std::stoi((*it)[2]);
    run.ranks[batch].insert(std::stoi((*it)[1]));
    const std::string ids = (*it)[3];
    static const std::regex number(R"(\d+)");
    for (auto n = std::sregex_iterator(ids.begin(), ids.end(), number);
         n != std::sregex_iterator(); ++n) {
      run.samples[batch].insert(std::stoi(n->str()));
    }
  }
  std::smatch m;
  static const std::regex params(R"(params sha256 ([0-9a-f]+))");
  if (std::regex_search(logs, m, params)) run.params = m[1];
  return run;
}

class PyTorchTrialClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
    // Workers checkpoint at a batch boundary when stopped: more than TestCluster's 3 s
    // before SIGKILL, should a signal come on a loaded machine.
    for (const char* agent : {"agent-a", "agent-b"}) {
      std::string yaml = cluster_.AgentYaml(agent, 2);
      size_t grace = yaml.find("kill_grace: 3s");
      ASSERT_NE(grace, std::string::npos) << yaml;
      yaml.replace(grace, 14, "kill_grace: 120s");
      ASSERT_TRUE(cluster_.StartAgentWithYaml(agent, yaml).ok()) << cluster_.LogTail(agent);
    }
    storage_ = cluster_.dir() + "/checkpoints";
  }

  // The workspace's root in the test's runfiles, ending in '/'.
  static std::string Runfiles() { return TestCluster::BinDir() + "/../../"; }

  // Runs `det experiment create CONFIG CONTEXT --json` and then `extra` (e.g. --config
  // KEY=VALUE); the experiment's id or -1.
  int64_t Create(const std::string& config, const std::string& context,
                 std::vector<std::string> extra = {}) {
    extra.insert(extra.begin(), {"experiment", "create", config, context, "--json"});
    CommandResult r = cluster_.Det(extra);
    EXPECT_TRUE(r.exit.ok()) << r.out << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    return j.is_object() ? Int(j["experiment"]["id"]) : -1;
  }

  nlohmann::json Describe(int64_t experiment) {
    return cluster_.DetJson({"experiment", "describe", absl::StrCat(experiment)});
  }

  int64_t TrialOf(int64_t experiment) {
    nlohmann::json d = Describe(experiment);
    return d.is_object() && !d["trials"].empty() ? Int(d["trials"][0]["id"]) : -1;
  }

  std::string Logs(int64_t experiment) {
    int64_t trial = TrialOf(experiment);
    return trial > 0 ? cluster_.Det({"trial", "logs", absl::StrCat(trial)}).out : "";
  }

  // Waits for the experiment to end; asserts it COMPLETED.
  void WaitCompleted(int64_t experiment, absl::Duration timeout = absl::Minutes(6)) {
    CommandResult wait = cluster_.Det(
        {"experiment", "wait", absl::StrCat(experiment), "--interval", "0.5"}, timeout);
    EXPECT_EQ(cluster_.ExperimentState(experiment), "STATE_COMPLETED")
        << wait.out << wait.err << Logs(experiment) << cluster_.LogTail("agent-a")
        << cluster_.LogTail("agent-b");
  }

  // Waits for rank 0's "waiting for preemption at batch N", pauses, resizes to `slots`
  // (refused while the trial is still stopping) and activates.
  void PauseResizeActivate(int64_t experiment, int batch, int slots) {
    const std::string id = absl::StrCat(experiment);
    ASSERT_TRUE(WaitUntil([&] {
      return Logs(experiment).find(absl::StrCat("waiting for preemption at batch ", batch)) !=
             std::string::npos;
    }, absl::Minutes(5))) << Logs(experiment) << cluster_.LogTail("agent-a");
    CommandResult pause = cluster_.Det({"experiment", "pause", id});
    ASSERT_TRUE(pause.exit.ok()) << pause.err;
    ASSERT_TRUE(WaitUntil([&] {
      return cluster_.Det({"experiment", "set", "slots", id, absl::StrCat(slots)}).exit.ok();
    }, absl::Minutes(2))) << Logs(experiment);
    EXPECT_EQ(cluster_.ExperimentState(experiment), "STATE_PAUSED");
    CommandResult activate = cluster_.Det({"experiment", "activate", id});
    ASSERT_TRUE(activate.exit.ok()) << activate.err;
  }

  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
  std::string storage_;
};

TEST_F(PyTorchTrialClusterTest, DeterministicTrialResized2To1To2EqualsAnUninterruptedRun) {
  ASSERT_EQ(mkdir((cluster_.dir() + "/context").c_str(), 0755), 0);
  std::string context = cluster_.WriteFile("context/model_def.py", kTrial);
  context = context.substr(0, context.rfind('/'));
  const int64_t whole =
      Create(cluster_.WriteFile("whole.yaml", DeterministicConfig(storage_, false)), context);
  const int64_t resized =
      Create(cluster_.WriteFile("resized.yaml", DeterministicConfig(storage_, true)), context);
  ASSERT_GT(whole, 0);
  ASSERT_GT(resized, 0);
  PauseResizeActivate(resized, kWaitFirst, 1);
  PauseResizeActivate(resized, kWaitSecond, 2);
  WaitCompleted(whole);
  WaitCompleted(resized);

  const std::string whole_logs = Logs(whole);
  const Printed reference = Parse(whole_logs);
  ASSERT_EQ(reference.losses.size(), static_cast<size_t>(kBatches)) << whole_logs;
  ASSERT_FALSE(reference.params.empty()) << whole_logs;
  const std::string logs = Logs(resized);
  const Printed run = Parse(logs);
  EXPECT_EQ(run.losses, reference.losses) << logs;
  EXPECT_EQ(run.params, reference.params) << logs;
  // Every batch trained once, with the same records as the uninterrupted run: 8
  // micro-batches of 4, split between the ranks the run had then.
  ASSERT_EQ(run.samples.size(), static_cast<size_t>(kBatches)) << logs;
  for (int b = 0; b < kBatches; ++b) {
    SCOPED_TRACE(absl::StrCat("batch ", b));
    ASSERT_EQ(run.samples.count(b), 1u);
    EXPECT_EQ(run.samples.at(b).size(), 32u);
    EXPECT_EQ(run.samples.at(b), reference.samples.at(b));
    EXPECT_EQ(std::set<int>(run.samples.at(b).begin(), run.samples.at(b).end()).size(), 32u);
    const bool one_slot = b >= kWaitFirst && b < kWaitSecond;
    // 8 micro-batches: all on rank 0 of one slot, or 4 on each rank of two.
    std::multiset<int> ranks;
    for (int m = 0; m < kMicroBatches; ++m) ranks.insert(one_slot ? 0 : m / (kMicroBatches / 2));
    EXPECT_EQ(run.ranks.at(b), ranks);
  }
  // The first epoch's 16 batches held 512 different records.
  std::set<int> epoch;
  for (int b = 0; b < 16; ++b) epoch.insert(run.samples.at(b).begin(), run.samples.at(b).end());
  EXPECT_EQ(epoch.size(), 512u);
  EXPECT_THAT(logs, HasSubstr("rank 1 of 2 starts at batch 0"));
  EXPECT_THAT(logs, HasSubstr(absl::StrCat("rank 0 of 1 starts at batch ", kWaitFirst)));
  EXPECT_THAT(logs, HasSubstr(absl::StrCat("rank 1 of 2 starts at batch ", kWaitSecond)));
}

// Determined 0.38's Trainer-API mnist_pytorch (det's version: imports and data changed) from
// its distributed.yaml (4 slots), the length shortened: the 4 ranks span both agents.
TEST_F(PyTorchTrialClusterTest, TrainerApiMnistOnFourSlotsAcrossTwoAgentsCompletes) {
  const std::string dir = "common/worker/python/examples/determined/mnist_pytorch/";
  ASSERT_EQ(mkdir((cluster_.dir() + "/mnist").c_str(), 0755), 0);
  for (const char* f : {"train.py", "model.py", "data.py", "const.yaml"}) {
    std::string text = Slurp(Runfiles() + dir + f);
    ASSERT_FALSE(text.empty()) << dir << f;
    cluster_.WriteFile(absl::StrCat("mnist/", f), text);
  }
  const int64_t id =
      Create(Runfiles() + dir + "distributed.yaml", cluster_.dir() + "/mnist",
             {"--config", "entrypoint=python3 train.py --batches 30", "--config",
              "checkpoint_storage={type: shared_fs, host_path: '" + storage_ + "'}"});
  ASSERT_GT(id, 0);
  WaitCompleted(id);
  const int64_t trial = TrialOf(id);
  nlohmann::json t = cluster_.DetJson({"trial", "describe", absl::StrCat(trial)});
  ASSERT_TRUE(t.is_object()) << Logs(id);
  t = t["trial"];
  EXPECT_EQ(Int(t["total_batches"]), 30) << t.dump();
  EXPECT_EQ(Int(t["validation_summary"]["validation_loss"]["count"]), 1) << t.dump();
  EXPECT_GT(t["validation_summary"]["accuracy"]["last"].get<double>(), 0.3) << t.dump();
  // det experiment describe shows the validation too.
  nlohmann::json d = Describe(id);
  EXPECT_TRUE(d["trials"][0]["validation_summary"].contains("validation_loss")) << d.dump();
  nlohmann::json lc = cluster_.DetJson({"experiment", "list-checkpoints", absl::StrCat(id)});
  ASSERT_TRUE(lc.is_object() && lc.contains("checkpoints")) << lc.dump();
  bool last = false;
  for (const auto& c : lc["checkpoints"]) last = last || Int(c["total_batches"]) == 30;
  EXPECT_TRUE(last) << lc.dump();
  // Four ranks, two on each agent.
  const std::string logs = Logs(id);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(logs, HasSubstr(absl::StrCat("rank ", rank, " exited: exit code 0"))) << logs;
  }
  // Each agent ran workers of the trial: its log lines are there.
  for (const char* agent : {"agent-a", "agent-b"}) {
    CommandResult by_agent =
        cluster_.Det({"trial", "logs", absl::StrCat(trial), "--agent-id", agent});
    EXPECT_TRUE(by_agent.exit.ok()) << by_agent.err;
    EXPECT_FALSE(by_agent.out.empty()) << agent << "\n" << logs;
  }
}

}  // namespace
}  // namespace det::testing
