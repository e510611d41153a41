// A plain PyTorch DDP script that knows nothing of det (common/worker/python/examples/
// torch_ddp/train.py, entrypoint `python3 train.py`) under real det-master and det-agent
// processes: det's torchrun launch contract alone lets `init_process_group("gloo")` form the
// job, on 1, 2 and 4 slots of one agent and across two agents. What each rank printed
// (its RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK, MASTER_ADDR:MASTER_PORT and a hash of its
// final parameters) is read back from the trial's logs.
#include <unistd.h>

#include <map>
#include <regex>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

// Synthetic data: 2048 records in global batches of 64, one epoch.
constexpr int kSteps = 2048 / 64;
constexpr char kTrainArgs[] = "--records 2048 --global-batch-size 64 --epochs 1";

// What one rank printed.
struct RankReport {
  int world_size = -1;
  int local_rank = -1;
  int local_world_size = -1;
  int group_rank = -1;
  int group_world_size = -1;
  std::string master_addr;
  int master_port = -1;
  int steps = -1;
  std::string params_hash;
};

// rank -> report, from a trial's logs.
std::map<int, RankReport> ParseReports(const std::string& logs) {
  std::map<int, RankReport> out;
  static const std::regex place(
      R"(rank (\d+): world_size=(\d+) local_rank=(\d+) local_world_size=(\d+) group_rank=(\d+) )"
      R"(group_world_size=(\d+) master=(\S+):(\d+) pid=\d+)");
  static const std::regex final_line(
      R"(rank (\d+): steps=(\d+) final_loss=\S+ mean_final_loss=\S+ test_accuracy=\S+ )"
      R"(params_sha256=([0-9a-f]+))");
  for (auto it = std::sregex_iterator(logs.begin(), logs.end(), place);
       it != std::sregex_iterator(); ++it) {
    RankReport& r = out[std::stoi((*it)[1])];
    r.world_size = std::stoi((*it)[2]);
    r.local_rank = std::stoi((*it)[3]);
    r.local_world_size = std::stoi((*it)[4]);
    r.group_rank = std::stoi((*it)[5]);
    r.group_world_size = std::stoi((*it)[6]);
    r.master_addr = (*it)[7];
    r.master_port = std::stoi((*it)[8]);
  }
  for (auto it = std::sregex_iterator(logs.begin(), logs.end(), final_line);
       it != std::sregex_iterator(); ++it) {
    RankReport& r = out[std::stoi((*it)[1])];
    r.steps = std::stoi((*it)[2]);
    r.params_hash = (*it)[3];
  }
  return out;
}

// [first, last] of a "FIRST-LAST" chief_port_range line in an agent.yaml.
std::pair<int, int> ChiefPorts(const std::string& agent_yaml) {
  std::smatch m;
  std::regex re(R"re(chief_port_range: "(\d+)-(\d+)")re");
  if (!std::regex_search(agent_yaml, m, re)) return {-1, -1};
  return {std::stoi(m[1]), std::stoi(m[2])};
}

class PytorchDdp : public ::testing::Test {
 protected:
  // A model context directory holding train.py (and `more` files: name -> text).
  std::string Context(const std::map<std::string, std::string>& more = {}) {
    const char* srcdir = std::getenv("TEST_SRCDIR");
    const char* ws = std::getenv("TEST_WORKSPACE");
    std::string script = Slurp(absl::StrCat(srcdir ? srcdir : ".", "/", ws ? ws : "det",
                                            "/common/worker/python/examples/torch_ddp/train.py"));
    EXPECT_THAT(script, HasSubstr("init_process_group"));
    std::string dir = cluster_.dir() + "/context";
    mkdir(dir.c_str(), 0755);
    cluster_.WriteFile("context/train.py", script);
    for (const auto& [name, text] : more) cluster_.WriteFile("context/" + name, text);
    return dir;
  }

  // The experiment: `entrypoint` on `slots` slots, no restarts, `extra_yaml` appended.
  std::string Config(const std::string& name, int slots, const std::string& entrypoint,
                     const std::string& extra_yaml = "") {
    ExampleExperiment exp;
    exp.name = name;
    exp.entrypoint = entrypoint;
    exp.global_batch_size = 64;
    exp.records_per_epoch = 0;
    exp.batches = kSteps;
    exp.max_restarts = 0;
    exp.slots_per_trial = slots;
    exp.data_dir = "";
    exp.extra_yaml = extra_yaml;
    return cluster_.WriteFile(name + ".yaml", exp.Yaml());
  }

  // Runs `config` with the context to its end; the trial's logs.
  std::string RunToEnd(const std::string& config, const std::string& context, int64_t id) {
    CommandResult create =
        cluster_.Det({"experiment", "create", config, context, "-f"}, absl::Seconds(170));
    EXPECT_TRUE(create.exit.ok()) << create.out << create.err << cluster_.LogTail("master")
                                  << AgentLogs();
    ExpectCompleted(id);
    return cluster_.Det({"trial", "logs", absl::StrCat(id)}).out;
  }

  void ExpectCompleted(int64_t trial_id) {
    nlohmann::json t = cluster_.DetJson({"trial", "describe", absl::StrCat(trial_id)});
    ASSERT_TRUE(t.is_object());
    EXPECT_EQ(t["trial"]["state"], "STATE_COMPLETED")
        << t.dump(2) << cluster_.Det({"trial", "logs", absl::StrCat(trial_id)}).out;
  }

  // rank -> agent id of trial `id`'s allocation.
  std::map<int, std::string> RankAgents(int64_t id) {
    std::map<int, std::string> out;
    nlohmann::json t = cluster_.DetJson({"trial", "describe", absl::StrCat(id)});
    if (!t.is_object()) return out;
    for (const auto& r : t["trial"]["allocation"]["ranks"]) {
      out[r.value("rank", 0)] = r.value("agent_id", "");
    }
    return out;
  }

  std::string AgentLogs() {
    std::string out;
    for (const char* id : {"agent-a", "agent-b"}) {
      absl::StrAppend(&out, "\n--- ", id, ":\n", cluster_.LogTail(id));
    }
    return out;
  }

  // Every rank of a `world`-rank job reported, with one MASTER_ADDR:MASTER_PORT (the
  // chief's `chief_address` and a port of `chief_ports`), all the steps and one final
  // parameter hash.
  void ExpectOneJob(const std::map<int, RankReport>& reports, int world,
                    const std::string& chief_address, std::pair<int, int> chief_ports,
                    const std::string& logs) {
    ASSERT_EQ(reports.size(), static_cast<size_t>(world)) << logs;
    const RankReport& chief = reports.at(0);
    EXPECT_EQ(chief.master_addr, chief_address) << logs;
    EXPECT_GE(chief.master_port, chief_ports.first) << logs;
    EXPECT_LE(chief.master_port, chief_ports.second) << logs;
    EXPECT_EQ(chief.params_hash.size(), 16u) << logs;
    for (const auto& [rank, r] : reports) {
      SCOPED_TRACE(absl::StrCat("rank ", rank));
      EXPECT_GE(rank, 0);
      EXPECT_LT(rank, world);
      EXPECT_EQ(r.world_size, world);
      EXPECT_EQ(r.master_addr, chief.master_addr);
      EXPECT_EQ(r.master_port, chief.master_port);
      EXPECT_EQ(r.steps, kSteps);
      EXPECT_EQ(r.params_hash, chief.params_hash);
    }
  }

  // Named after the test ("Name/Param" for a parameterized one: "Name_Param").
  TestCluster cluster_{absl::StrReplaceAll(
      ::testing::UnitTest::GetInstance()->current_test_info()->name(), {{"/", "_"}})};
};

class PytorchDdpOneAgent : public PytorchDdp, public ::testing::WithParamInterface<int> {};

// One agent with 4 slots and no advertise_address: MASTER_ADDR is the address of the
// interface that routes to the master (loopback here).
TEST_P(PytorchDdpOneAgent, PlainScriptTrainsOnEverySlotCount) {
  const int slots = GetParam();
  ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
  const std::string agent_yaml =
      cluster_.AgentYaml("agent-a", 4, "worker_python: /usr/bin/python3\n");
  ASSERT_TRUE(cluster_.StartAgentWithYaml("agent-a", agent_yaml).ok())
      << cluster_.LogTail("agent-a");
  std::string logs = RunToEnd(
      Config(absl::StrCat("ddp-", slots), slots, absl::StrCat("python3 train.py ", kTrainArgs)),
      Context(), 1);
  std::map<int, RankReport> reports = ParseReports(logs);
  ExpectOneJob(reports, slots, "127.0.0.1", ChiefPorts(agent_yaml), logs);
  for (const auto& [rank, r] : reports) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    EXPECT_EQ(r.local_rank, rank);
    EXPECT_EQ(r.local_world_size, slots);
    EXPECT_EQ(r.group_rank, 0);
    EXPECT_EQ(r.group_world_size, 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Slots, PytorchDdpOneAgent, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return absl::StrCat(info.param, "Slots"); });

// 2 + 2 ranks on two agents advertising different addresses: every rank dials the chief's
// (rank 0's) agent; GROUP_RANK is the agent's place in the job.
TEST_F(PytorchDdp, PlainScriptTrainsAcrossTwoAgents) {
  ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
  std::map<std::string, std::string> address = {{"agent-a", "127.0.0.2"},
                                                {"agent-b", "127.0.0.3"}};
  std::map<std::string, std::string> yaml;
  for (const auto& [id, addr] : address) {
    yaml[id] = cluster_.AgentYaml(id, 2, absl::StrCat("advertise_address: ", addr, "\n"));
    ASSERT_TRUE(cluster_.StartAgentWithYaml(id, yaml[id]).ok()) << cluster_.LogTail(id);
  }
  std::string logs = RunToEnd(
      Config("ddp-two-agents", 4, absl::StrCat("python3 train.py ", kTrainArgs)), Context(), 1);
  std::map<int, std::string> agent_of = RankAgents(1);
  ASSERT_EQ(agent_of.size(), 4u);
  const std::string chief = agent_of[0];
  ASSERT_TRUE(address.count(chief)) << chief;
  std::map<int, RankReport> reports = ParseReports(logs);
  ExpectOneJob(reports, 4, address[chief], ChiefPorts(yaml[chief]), logs);
  std::map<std::string, std::set<int>> ranks_of;
  for (const auto& [rank, r] : reports) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    ranks_of[agent_of[rank]].insert(rank);
    EXPECT_EQ(r.local_world_size, 2);
    EXPECT_EQ(r.group_world_size, 2);
    // The chief's agent is group 0; LOCAL_RANK counts the ranks of one agent.
    EXPECT_EQ(r.group_rank, agent_of[rank] == chief ? 0 : 1);
    EXPECT_EQ(r.local_rank, rank - 2 * r.group_rank);
  }
  EXPECT_EQ(ranks_of.size(), 2u);
  for (const auto& [agent, ranks] : ranks_of) EXPECT_EQ(ranks.size(), 2u) << agent;
}

// Two live allocations whose chiefs run on the same agent hold different MASTER_PORTs, and
// both train: each rank writes its MASTER_PORT and waits until the test has seen all four.
// The ranks also import `det` from the agent's default python_path.
TEST_F(PytorchDdp, ConcurrentJobsOnOneAgentGetDifferentMasterPorts) {
  ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
  const std::string agent_yaml = cluster_.AgentYaml("agent-a", 4);
  ASSERT_TRUE(cluster_.StartAgentWithYaml("agent-a", agent_yaml).ok())
      << cluster_.LogTail("agent-a");
  const std::string hold_dir = cluster_.dir() + "/hold";
  mkdir(hold_dir.c_str(), 0755);
  std::string context = Context({{"hold.py", R"py(
# Records MASTER_PORT, the interpreter and where `det` imports from as JSON in
# HOLD_DIR/<HOLD_TAG>-<RANK>, waits for HOLD_DIR/release, then runs train.py with this
# script's arguments.
import json, os, runpy, sys, time
import det
d, name = os.environ["HOLD_DIR"], "%s-%s" % (os.environ["HOLD_TAG"], os.environ["RANK"])
with open(os.path.join(d, name + ".tmp"), "w") as f:
    json.dump({"port": os.environ.get("MASTER_PORT", ""), "python": sys.executable,
               "det_python": os.environ.get("DET_PYTHON", ""), "det": det.__file__}, f)
os.rename(os.path.join(d, name + ".tmp"), os.path.join(d, name))
while not os.path.exists(os.path.join(d, "release")):
    time.sleep(0.05)
sys.argv = ["train.py"] + sys.argv[1:]
runpy.run_path("train.py", run_name="__main__")
)py"}});
  for (const char* tag : {"a", "b"}) {
    std::string config = Config(
        absl::StrCat("hold-", tag), 2, absl::StrCat("python3 hold.py ", kTrainArgs),
        absl::StrCat("environment:\n  environment_variables:\n    HOLD_DIR: '", hold_dir,
                     "'\n    HOLD_TAG: ", tag, "\n"));
    CommandResult create = cluster_.Det({"experiment", "create", config, context});
    ASSERT_TRUE(create.exit.ok()) << create.out << create.err;
  }
  std::map<std::string, int> port;
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const char* name : {"a-0", "a-1", "b-0", "b-1"}) {
          if (!Exists(hold_dir + "/" + name)) return false;
        }
        return true;
      },
      absl::Seconds(90)))
      << cluster_.Det({"trial", "logs", "1"}).out << cluster_.Det({"trial", "logs", "2"}).out
      << cluster_.LogTail("master") << AgentLogs();
  for (const char* name : {"a-0", "a-1", "b-0", "b-1"}) {
    SCOPED_TRACE(name);
    std::string text = Slurp(hold_dir + "/" + name);
    nlohmann::json held = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(held.is_object()) << text;
    ASSERT_TRUE(absl::SimpleAtoi(held.value("port", ""), &port[name])) << text;
    // `python3` ran the agent's worker_python (the first python3 on PATH may be another),
    // and `import det` found the bundle beside det-agent (the default python_path).
    EXPECT_EQ(held["python"], "/usr/bin/python3");
    EXPECT_EQ(held["det_python"], "/usr/bin/python3");
    EXPECT_THAT(held.value("det", ""), ::testing::EndsWith("/deploy/python/det/__init__.py"));
  }
  // The agent has no worker_python: it found /usr/bin/python3 (the first python3 with torch
  // on the tests' PATH) and registered it with torch's version.
  {
    CommandResult agents = cluster_.Det({"agent", "list", "--json"});
    ASSERT_TRUE(agents.exit.ok()) << agents.out << agents.err;
    nlohmann::json list = nlohmann::json::parse(agents.out, nullptr, false);
    ASSERT_TRUE(list.is_object() && list["agents"].size() == 1) << agents.out;
    EXPECT_EQ(list["agents"][0].value("worker_python", ""), "/usr/bin/python3") << agents.out;
    EXPECT_FALSE(list["agents"][0].value("worker_torch_version", "").empty()) << agents.out;
    EXPECT_THAT(Slurp(cluster_.dir() + "/agent-a.log"),
                ::testing::HasSubstr("worker_python: /usr/bin/python3 (found in PATH, torch "));
  }
  // Both allocations are live now (all four ranks wait): their chief ports differ.
  EXPECT_EQ(port["a-0"], port["a-1"]);
  EXPECT_EQ(port["b-0"], port["b-1"]);
  EXPECT_NE(port["a-0"], port["b-0"]);
  cluster_.WriteFile("hold/release", "");
  for (int64_t id : {1, 2}) {
    ASSERT_TRUE(WaitUntil(
        [&] {
          nlohmann::json e = cluster_.DetJson({"experiment", "describe", absl::StrCat(id)});
          return e.is_object() && e["experiment"]["state"] != "STATE_ACTIVE";
        },
        absl::Seconds(120)))
        << cluster_.Det({"trial", "logs", absl::StrCat(id)}).out;
    ExpectCompleted(id);
    std::string logs = cluster_.Det({"trial", "logs", absl::StrCat(id)}).out;
    std::map<int, RankReport> reports = ParseReports(logs);
    ExpectOneJob(reports, 2, "127.0.0.1", ChiefPorts(agent_yaml), logs);
    // Each job formed on the port its ranks recorded.
    std::string tag = id == 1 ? "a" : "b";
    if (!reports.empty()) {
      EXPECT_EQ(reports[0].master_port, port[tag + "-0"]) << logs;
    }
  }
}

}  // namespace
}  // namespace det::testing
