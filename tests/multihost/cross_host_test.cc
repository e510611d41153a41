// Trials across hosts (network namespaces, tests/multihost/virtual_network.h): det-master on
// one host, an agent on each of two others, no advertise_address anywhere. The C++ example
// (det-fashion-mnist) on 2 agents x 2 slots all-reduces over Gloo between the hosts; a plain
// PyTorch DDP script on 2 agents finds rank 0 at MASTER_ADDR, the chief's host address.
// Checked: ranks, cross ranks, and the addresses every rank's TCP connections really use
// (`ss` in each host), none of them 127.0.0.1.
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"
#include "tests/multihost/multihost_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

// `address` as `ss` prints it, without brackets and the IPv4-mapped prefix.
std::string Plain(std::string address) {
  if (address.size() > 2 && address.front() == '[' && address.back() == ']') {
    address = address.substr(1, address.size() - 2);
  }
  if (absl::StartsWith(address, "::ffff:")) address = address.substr(7);
  return address;
}

// One established TCP connection of a process.
struct Connection {
  std::string local;  // address, without the port
  std::string peer;
};

// pid -> its established TCP connections, from `ss -tnp` run in host `host`.
std::map<int, std::vector<Connection>> Connections(MultiHostCluster& cluster,
                                                   const std::string& host) {
  std::map<int, std::vector<Connection>> out;
  CommandResult ss = RunCommand(
      cluster.net().InHost(host, {"/usr/bin/ss", "-H", "-t", "-n", "-p", "state", "established"}));
  static const std::regex line_re(R"((\S+):\d+\s+(\S+):\d+\s+users:\((.*)\))");
  static const std::regex pid_re(R"(pid=(\d+))");
  for (absl::string_view l : absl::StrSplit(ss.out, '\n', absl::SkipEmpty())) {
    std::string line(l);
    std::smatch m;
    if (!std::regex_search(line, m, line_re)) continue;
    Connection c{Plain(m[1]), Plain(m[2])};
    std::string users = m[3];
    for (auto it = std::sregex_iterator(users.begin(), users.end(), pid_re);
         it != std::sregex_iterator(); ++it) {
      out[std::stoi((*it)[1])].push_back(c);
    }
  }
  return out;
}

// NAME=VALUE pairs of /proc/<pid>/environ.
std::map<std::string, std::string> Environ(int pid) {
  std::map<std::string, std::string> env;
  std::string text = Slurp(absl::StrCat("/proc/", pid, "/environ"));
  for (absl::string_view kv : absl::StrSplit(text, '\0', absl::SkipEmpty())) {
    size_t eq = kv.find('=');
    if (eq != absl::string_view::npos) env[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
  }
  return env;
}

class CrossHost : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<MultiHostCluster>> c = MultiHostCluster::Create(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    if (absl::IsFailedPrecondition(c.status())) GTEST_SKIP() << c.status().message();
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    ASSERT_TRUE(cluster_->StartMaster().ok()) << cluster_->Diagnostics();
  }

  void DdpAcrossHosts(const std::string& extra_yaml);

  std::unique_ptr<MultiHostCluster> cluster_;
};

TEST_F(CrossHost, ExampleOnTwoAgentsTimesTwoSlotsAllReducesBetweenTheHosts) {
  for (const char* id : {"a", "b"}) {
    ASSERT_TRUE(cluster_->StartAgent(id, 2).ok()) << cluster_->Diagnostics();
    // The agent found its own address: the one of its interface towards the master.
    EXPECT_THAT(cluster_->LogTail(id),
                HasSubstr(absl::StrCat("advertised as ", cluster_->net().Address(id))));
  }
  ExampleExperiment exp;
  exp.name = "across";
  exp.global_batch_size = 64;
  exp.batches = 400;
  exp.scheduling_unit = 50;
  exp.max_restarts = 0;
  exp.slots_per_trial = 4;
  exp.experiment_seed = 7;
  CommandResult create =
      cluster_->Det({"experiment", "create", cluster_->WriteFile("exp.yaml", exp.Yaml())});
  ASSERT_TRUE(create.exit.ok()) << create.out << create.err << cluster_->Diagnostics();

  // While it trains: every rank's environment and connections.
  std::map<int, int> pids;
  std::map<int, std::string> agents;
  ASSERT_TRUE(WaitUntil(
      [&] {
        pids = RankPids(cluster_->TrialLogs(1));
        agents = cluster_->RankAgents(1);
        return pids.size() == 4 && agents.size() == 4 &&
               cluster_->TrialLogs(1).find("batch 50/") != std::string::npos;
      },
      absl::Seconds(90)))
      << cluster_->TrialLogs(1) << cluster_->Diagnostics();
  std::map<std::string, std::map<int, std::vector<Connection>>> conns;
  for (const char* host : {"a", "b"}) conns[host] = Connections(*cluster_, host);

  // Ranks 0, 1 on one agent and 2, 3 on the other; cross rank = the agent's place.
  const std::string chief_agent = agents[0];
  ASSERT_TRUE(chief_agent == "a" || chief_agent == "b") << chief_agent;
  const std::string other_agent = chief_agent == "a" ? "b" : "a";
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    const std::string& agent = agents[rank];
    EXPECT_EQ(agent, rank < 2 ? chief_agent : other_agent);
    std::map<std::string, std::string> env = Environ(pids[rank]);
    EXPECT_EQ(env["RANK"], absl::StrCat(rank));
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["LOCAL_RANK"], absl::StrCat(rank % 2));
    EXPECT_EQ(env["CROSS_RANK"], absl::StrCat(rank / 2));
    EXPECT_EQ(env["CROSS_SIZE"], "2");
    EXPECT_EQ(env["DET_MASTER"], cluster_->master_address());
    EXPECT_EQ(env["MASTER_ADDR"], cluster_->net().Address(chief_agent));
    // Where the agent is reached: the collective listens there.
    EXPECT_EQ(env["DET_COLLECTIVE_HOST"], cluster_->net().Address(agent));
    EXPECT_EQ(env["GLOO_SOCKET_IFNAME"], "eth0");
    EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "eth0");

    // Every TCP connection of the rank leaves from its host's address; it has Gloo
    // connections to both ranks of the other host, and one to the master.
    const std::string mine = cluster_->net().Address(agent);
    const std::string theirs = cluster_->net().Address(agent == "a" ? "b" : "a");
    const std::vector<Connection>& cs = conns[agent][pids[rank]];
    ASSERT_FALSE(cs.empty()) << "no connections of pid " << pids[rank];
    int to_other_host = 0, to_master = 0;
    for (const Connection& c : cs) {
      EXPECT_EQ(c.local, mine) << c.local << " -> " << c.peer;
      EXPECT_NE(c.peer, "127.0.0.1");
      to_other_host += c.peer == theirs;
      to_master += c.peer == cluster_->net().Address(MultiHostCluster::kMasterHost);
    }
    EXPECT_GE(to_other_host, 2);
    EXPECT_GE(to_master, 1);
  }

  ASSERT_TRUE(WaitUntil([&] { return cluster_->Trial(1)["state"] == "STATE_COMPLETED"; },
                        absl::Seconds(110)))
      << cluster_->Trial(1).dump(2) << cluster_->TrialLogs(1) << cluster_->Diagnostics();
  nlohmann::json t = cluster_->Trial(1);
  EXPECT_EQ(Int(t["total_batches"]), 400);
  EXPECT_EQ(Int(t["restarts"]), 0);
  // The master told every rank where rank 0's agent is.
  EXPECT_THAT(cluster_->LogTail("master"),
              HasSubstr(absl::StrCat("chief ", cluster_->net().Address(chief_agent), ":")));
}

// What one rank of the DDP script printed.
struct DdpRank {
  std::string master_addr;
  int group_rank = -1;
  std::string params_hash;
};

// The plain DDP script on 2 agents x 1 slot, `extra_yaml` appended to its config:
// MASTER_ADDR is the chief's host address on every rank, and both finish with one model.
void CrossHost::DdpAcrossHosts(const std::string& extra_yaml) {
  for (const char* id : {"a", "b"}) {
    ASSERT_TRUE(cluster_->StartAgent(id, 1, "worker_python: /usr/bin/python3\n").ok())
        << cluster_->Diagnostics();
  }
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  std::string script = Slurp(absl::StrCat(srcdir ? srcdir : ".", "/", ws ? ws : "det",
                                          "/common/worker/python/examples/torch_ddp/train.py"));
  ASSERT_THAT(script, HasSubstr("init_process_group"));
  std::filesystem::create_directories(cluster_->dir() + "/context");
  cluster_->WriteFile("context/train.py", script);

  ExampleExperiment exp;
  exp.name = "ddp-across";
  exp.entrypoint = "python3 train.py --records 2048 --global-batch-size 64 --epochs 1";
  exp.records_per_epoch = 0;
  exp.batches = 32;
  exp.max_restarts = 0;
  exp.slots_per_trial = 2;
  exp.data_dir = "";
  exp.extra_yaml = extra_yaml;
  CommandResult create = cluster_->Det({"experiment", "create",
                                        cluster_->WriteFile("ddp.yaml", exp.Yaml()),
                                        cluster_->dir() + "/context", "-f"},
                                       absl::Seconds(170));
  std::string logs = cluster_->TrialLogs(1);
  ASSERT_TRUE(create.exit.ok()) << create.out << create.err << logs << cluster_->Diagnostics();
  ASSERT_EQ(cluster_->Trial(1)["state"], "STATE_COMPLETED") << logs;

  std::map<int, std::string> agents = cluster_->RankAgents(1);
  ASSERT_EQ(agents.size(), 2u);
  EXPECT_NE(agents[0], agents[1]);
  std::map<int, DdpRank> ranks;
  static const std::regex place(
      R"(rank (\d+): world_size=2 local_rank=0 local_world_size=1 group_rank=(\d+) )"
      R"(group_world_size=2 master=(\S+):\d+ pid=\d+)");
  static const std::regex final_line(R"(rank (\d+): steps=32 .* params_sha256=([0-9a-f]+))");
  for (auto it = std::sregex_iterator(logs.begin(), logs.end(), place);
       it != std::sregex_iterator(); ++it) {
    ranks[std::stoi((*it)[1])].group_rank = std::stoi((*it)[2]);
    ranks[std::stoi((*it)[1])].master_addr = (*it)[3];
  }
  for (auto it = std::sregex_iterator(logs.begin(), logs.end(), final_line);
       it != std::sregex_iterator(); ++it) {
    ranks[std::stoi((*it)[1])].params_hash = (*it)[2];
  }
  ASSERT_EQ(ranks.size(), 2u) << logs;
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    EXPECT_EQ(ranks[rank].group_rank, rank);
    EXPECT_EQ(ranks[rank].master_addr, cluster_->net().Address(agents[0]));
    EXPECT_FALSE(ranks[rank].params_hash.empty()) << logs;
    EXPECT_EQ(ranks[rank].params_hash, ranks[0].params_hash);
  }
}

// With the interface named (Determined's dtrain_network_interface; here torch's own
// GLOO_SOCKET_IFNAME in the experiment's environment), Gloo listens on the host address.
TEST_F(CrossHost, PlainDdpScriptOnTwoAgentsWithTheInterfaceNamed) {
  DdpAcrossHosts("environment:\n  environment_variables:\n    GLOO_SOCKET_IFNAME: eth0\n");
}

// With nothing set: torch's Gloo would pick its listening address from the host name,
// which resolves to no usable address in the host (on Debian: 127.0.1.1), and rank 1
// would fail with "connect [127.0.0.1]:PORT: Connection refused"; the agent gives workers
// of a trial across agents GLOO_SOCKET_IFNAME, the interface holding its advertised
// address.
TEST_F(CrossHost, PlainDdpScriptOnTwoAgentsWithNothingSet) { DdpAcrossHosts(""); }

}  // namespace
}  // namespace det::testing
