#include "tests/integration/test_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace det::testing {
namespace {

// `text` as a single-quoted YAML scalar.
std::string Quoted(const std::string& text) {
  return absl::StrCat("'", absl::StrReplaceAll(text, {{"'", "''"}}), "'");
}

void AppendFields(std::string* yaml, const ExampleExperiment::Fields& fields) {
  for (const auto& [key, value] : fields) absl::StrAppend(yaml, "  ", key, ": ", value, "\n");
}

}  // namespace

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

bool Running(int pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return false;
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

std::map<int, int> RankPids(const std::string& logs) {
  std::map<int, int> pids;
  std::regex re(R"(rank (\d+) of \d+ \(local rank \d+, pid (\d+)\))");
  for (auto it = std::sregex_iterator(logs.begin(), logs.end(), re); it != std::sregex_iterator();
       ++it) {
    pids[std::stoi((*it)[1])] = std::stoi((*it)[2]);
  }
  return pids;
}

std::string ExampleExperiment::Yaml() const {
  std::string y = absl::StrCat("name: ", Quoted(name), "\nentrypoint: ", entrypoint,
                               "\nhyperparameters:\n  global_batch_size: ", global_batch_size,
                               "\n  learning_rate: ", learning_rate,
                               "\n  hidden_size: ", hidden_size, "\n");
  AppendFields(&y, more_hyperparameters);
  if (records_per_epoch > 0) absl::StrAppend(&y, "records_per_epoch: ", records_per_epoch, "\n");
  if (batches > 0) {
    absl::StrAppend(&y, "searcher:\n  name: single\n  metric: validation_loss\n  max_length:\n",
                    "    batches: ", batches, "\n");
  }
  if (validation_period) {
    absl::StrAppend(&y, "min_validation_period:\n  batches: ", *validation_period, "\n");
  }
  if (checkpoint_period) {
    absl::StrAppend(&y, "min_checkpoint_period:\n  batches: ", *checkpoint_period, "\n");
  }
  if (scheduling_unit) absl::StrAppend(&y, "scheduling_unit: ", *scheduling_unit, "\n");
  if (max_restarts) absl::StrAppend(&y, "max_restarts: ", *max_restarts, "\n");
  if (slots_per_trial) {
    absl::StrAppend(&y, "resources:\n  slots_per_trial: ", *slots_per_trial, "\n");
  }
  if (experiment_seed || deterministic) {
    absl::StrAppend(&y, "reproducibility:\n");
    if (experiment_seed) absl::StrAppend(&y, "  experiment_seed: ", *experiment_seed, "\n");
    if (deterministic) absl::StrAppend(&y, "  deterministic: true\n");
  }
  if (!checkpoint_host_path.empty()) {
    absl::StrAppend(&y, "checkpoint_storage:\n  type: shared_fs\n  host_path: ",
                    Quoted(checkpoint_host_path), "\n");
    if (save_trial_best) absl::StrAppend(&y, "  save_trial_best: ", *save_trial_best, "\n");
    if (save_trial_latest) absl::StrAppend(&y, "  save_trial_latest: ", *save_trial_latest, "\n");
  }
  if (!data_dir.empty() || !more_data.empty()) {
    absl::StrAppend(&y, "data:\n");
    if (!data_dir.empty()) absl::StrAppend(&y, "  dir: ", Quoted(data_dir), "\n");
    AppendFields(&y, more_data);
  }
  return y + extra_yaml;
}

std::string TestCluster::BinDir() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir ? srcdir : ".", "/", workspace ? workspace : "det", "/deploy/bin");
}

CommandResult RunCommand(const std::vector<std::string>& argv, absl::Duration timeout) {
  return RunCommand(argv, timeout, {});
}

CommandResult RunCommand(const std::vector<std::string>& argv, absl::Duration timeout,
                         const std::map<std::string, std::string>& env) {
  CommandResult r;
  SpawnOptions opts;
  opts.argv = argv;
  opts.env = CurrentEnvironment();
  std::map<std::string, std::string> missing = env;
  for (auto& [name, value] : opts.env) {
    auto it = missing.find(name);
    if (it == missing.end()) continue;
    value = it->second;
    missing.erase(it);
  }
  opts.env.insert(opts.env.end(), missing.begin(), missing.end());
  auto proc = Subprocess::Spawn(opts);
  if (!proc.ok()) {
    r.exit.exit_code = 127;
    r.err = std::string(proc.status().message());
    return r;
  }
  Subprocess& p = **proc;
  pollfd fds[2] = {{p.stdout_fd(), POLLIN, 0}, {p.stderr_fd(), POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  absl::Time deadline = absl::Now() + timeout;
  char buf[65536];
  while ((fds[0].fd >= 0 || fds[1].fd >= 0) && absl::Now() < deadline) {
    ::poll(fds, 2, 100);
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, n);
      } else {
        fds[i].fd = -1;
      }
    }
  }
  auto st = absl::Now() < deadline ? p.Wait() : p.Terminate(absl::Seconds(1));
  if (st.ok()) r.exit = *st;
  return r;
}

int64_t Int(const nlohmann::json& j) {
  if (j.is_number()) return j.get<int64_t>();
  int64_t v = -1;
  if (j.is_string() && absl::SimpleAtoi(j.get<std::string>(), &v)) return v;
  return -1;
}

std::string Sql(const std::string& db, const std::string& query) {
  return std::string(absl::StripAsciiWhitespace(RunCommand({"sqlite3", db, query}).out));
}

bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout) {
  return static_cast<bool>(
      WaitUntil("a condition", condition, timeout, /*poll=*/absl::Milliseconds(50)));
}

TestCluster::TestCluster(const std::string& name, TestClusterHosts hosts)
    : TestCluster(name, TestClusterDb::kSqlite, std::move(hosts)) {}

TestCluster::TestCluster(const std::string& name, TestClusterDb db, TestClusterHosts hosts)
    : hosts_(std::move(hosts)), db_(db) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  dir_ = absl::StrCat(tmp ? tmp : "/tmp", "/", name);
  std::string cmd = absl::StrCat("rm -rf '", dir_, "'");
  if (std::system(cmd.c_str()) != 0) return;
  mkdir(dir_.c_str(), 0755);
}

TestCluster::~TestCluster() {
  for (auto& [id, a] : agents_) a->Terminate(absl::Seconds(5)).IgnoreError();
  if (master_) master_->Terminate(absl::Seconds(5)).IgnoreError();
  if (chief_port_lock_ >= 0) close(chief_port_lock_);  // releases the block
}

std::string TestCluster::WriteFile(const std::string& name, const std::string& text) {
  std::string path = dir_ + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string TestCluster::LogTail(const std::string& name) {
  std::string text = Slurp(dir_ + "/" + name + ".log");
  return text.size() > 4000 ? text.substr(text.size() - 4000) : text;
}

std::vector<std::string> TestCluster::InHost(const std::string& host,
                                             std::vector<std::string> argv) const {
  if (!hosts_.launch_prefix) return argv;
  std::vector<std::string> out = hosts_.launch_prefix(host);
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::vector<std::string> TestCluster::AgentIds() const {
  std::vector<std::string> ids;
  for (const auto& [id, a] : agents_) ids.push_back(id);
  return ids;
}

absl::Status TestCluster::StartPostgres() {
  if (postgres_) return absl::OkStatus();
  auto server = master::testing::PostgresServer::Start();
  if (!server.ok()) return server.status();
  auto url = (*server)->CreateDatabase("det");
  if (!url.ok()) return url.status();
  postgres_ = std::move(*server);
  postgres_url_ = *url;
  return absl::OkStatus();
}

std::string TestCluster::DbQuery(const std::string& query) {
  CommandResult r = db_ == TestClusterDb::kPostgres
                        ? RunCommand({"psql", "-X", "--no-align", "--tuples-only", "-d",
                                      postgres_url_, "-c", query})
                        : RunCommand({"sqlite3", db_path(), query});
  return std::string(absl::StripAsciiWhitespace(r.exit.ok() && r.err.empty() ? r.out : r.err));
}

absl::Status TestCluster::StartMaster(const std::string& extra_yaml) {
  std::string db_yaml;
  if (db_ == TestClusterDb::kPostgres) {
    if (absl::Status st = StartPostgres(); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("the cluster's PostgreSQL: ", st.message()));
    }
    // The server trusts its socket's connections: no password.
    db_yaml = absl::StrCat("db:\n  type: postgres\n  url: \"", postgres_url_, "\"\n");
  }
  const std::string any_port = hosts_.master_address + ":0";
  std::string listen = address_.empty() ? any_port : address_;
  std::string addr_file = dir_ + "/master.addr";
  unlink(addr_file.c_str());
  std::string http_listen = http_address_.empty() ? any_port : http_address_;
  std::string http_addr_file = dir_ + "/master.http_addr";
  unlink(http_addr_file.c_str());
  std::string config = WriteFile(
      "master.yaml", absl::StrCat("grpc_listen: \"", listen, "\"\ndata_dir: ", dir_,
                                  "/master\naddress_file: ", addr_file,
                                  "\ncluster_secret: test-secret\n",
                                  "http_listen: \"", http_listen, "\"\nhttp_address_file: ",
                                  http_addr_file, "\n",
                                  // A default only: a key may appear once.
                                  extra_yaml.find("agent_reconnect_wait:") == std::string::npos
                                      ? "agent_reconnect_wait: 30s\n"
                                      : "",
                                  db_yaml, extra_yaml));
  SpawnOptions opts;
  opts.argv = InHost(TestClusterHosts::kMaster, {BinDir() + "/det-master", "--config", config});
  opts.env = CurrentEnvironment();
  opts.env.emplace_back("DET_ADMIN_PASSWORD", kTestAdminPassword);  // Used on first start.
  opts.stdout_mode = opts.stderr_mode = SpawnOptions::Output::kFile;
  opts.stdout_path = opts.stderr_path = dir_ + "/master.log";
  auto proc = Subprocess::Spawn(opts);
  if (!proc.ok()) return proc.status();
  master_ = std::move(*proc);
  bool up = WaitUntil(
      [&] { return access(addr_file.c_str(), R_OK) == 0 || master_->TryWait().has_value(); },
      absl::Seconds(30));
  if (!up || access(addr_file.c_str(), R_OK) != 0) {
    return absl::UnavailableError(absl::StrCat("master did not start:\n", LogTail("master")));
  }
  address_ = std::string(absl::StripAsciiWhitespace(Slurp(addr_file)));
  // The HTTP server starts right after gRPC.
  if (!WaitUntil([&] { return access(http_addr_file.c_str(), R_OK) == 0; }, absl::Seconds(10))) {
    return absl::UnavailableError(absl::StrCat("master's HTTP server did not start:\n",
                                               LogTail("master")));
  }
  http_address_ = std::string(absl::StripAsciiWhitespace(Slurp(http_addr_file)));
  if (token_.empty()) {
    // The real `det user login`, into a HOME of the cluster's own; the token it kept is
    // then sent by every Det() call.
    std::string home = dir_ + "/home";
    mkdir(home.c_str(), 0700);
    CommandResult login = RunCommand(InHost(TestClusterHosts::kMaster,
                                            {BinDir() + "/det", "-m", address_, "user", "login",
                                             "admin"}),
                                     absl::Seconds(60),
                                     {{"HOME", home},
                                      {"DET_PASSWORD", kTestAdminPassword},
                                      {"DET_USER_TOKEN", ""}});
    nlohmann::json auth = nlohmann::json::parse(Slurp(home + "/.det/auth.json"), nullptr,
                                                /*allow_exceptions=*/false);
    if (!login.exit.ok() || !auth.is_object()) {
      return absl::UnauthenticatedError(absl::StrCat("det user login failed: ", login.err,
                                                     "\n", LogTail("master")));
    }
    token_ = auth["masters"][address_].value("token", "");
  }
  return absl::OkStatus();
}

void TestCluster::StopMaster(int signal) {
  if (!master_) return;
  master_->SignalGroup(signal).IgnoreError();
  master_->Wait().IgnoreError();
  master_.reset();
}

absl::Status TestCluster::StartAgent(const std::string& id, int slots,
                                     const std::string& extra_yaml) {
  return StartAgentWithYaml(id, AgentYaml(id, slots, extra_yaml));
}

std::string TestCluster::AgentYaml(const std::string& id, int slots,
                                   const std::string& extra_yaml) const {
  return absl::StrCat("master: \"", address_, "\"\nagent_id: ", id, "\nslot_type: cpu\nslots: ",
                      slots, "\nwork_dir: ", dir_, "/", id, "\nworker_path: [", BinDir(),
                      "]\ncluster_secret: test-secret\nheartbeat_interval: 1s\nkill_grace: 3s\n",
                      "chief_port_range: \"", ChiefPortRange(id), "\"\n", extra_yaml);
}

std::string TestCluster::ChiefPortRange(const std::string& id) const {
  // Blocks of kChiefPortBlock ports from 20000 up to 29000 (below the ephemeral ports that
  // outgoing connections take); a cluster holds one while its lock file is locked.
  constexpr int kFirstPort = 20000;
  constexpr int kAgentsPerBlock = 8;  // a 9th agent shares the 1st one's ports
  constexpr int kChiefPortBlock = kAgentsPerBlock * kChiefPortsPerAgent;
  constexpr int kBlocks = 9000 / kChiefPortBlock;
  if (chief_port_lock_ < 0) {
    const std::string locks = "/tmp/det-test-chief-ports";
    mkdir(locks.c_str(), 0777);
    for (int i = 0; i < kBlocks && chief_port_lock_ < 0; ++i) {
      int block = (getpid() + i) % kBlocks;
      std::string path = absl::StrCat(locks, "/", block, ".lock");
      int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
      if (fd < 0) continue;
      if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        continue;
      }
      chief_port_lock_ = fd;
      chief_port_base_ = kFirstPort + block * kChiefPortBlock;
    }
    // Every block held (hundreds of clusters at once): share one rather than fail here.
    if (chief_port_lock_ < 0) chief_port_base_ = kFirstPort + getpid() % kBlocks * kChiefPortBlock;
  }
  auto [it, added] = chief_port_slot_.emplace(id, static_cast<int>(chief_port_slot_.size()));
  int first = chief_port_base_ + (it->second % kAgentsPerBlock) * kChiefPortsPerAgent;
  return absl::StrCat(first, "-", first + kChiefPortsPerAgent - 1);
}

absl::Status TestCluster::StartAgentWithYaml(const std::string& id, const std::string& yaml,
                                             const std::vector<std::string>& extra_args,
                                             bool wait_joined) {
  // Registration time of an earlier instance of the agent, so that a restart is seen.
  int64_t before = AgentRegisteredMs(id);
  std::string config = WriteFile(id + ".yaml", yaml);
  SpawnOptions opts;
  std::vector<std::string> argv = {BinDir() + "/det-agent", "--config", config};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  opts.argv = InHost(id, std::move(argv));
  opts.env = CurrentEnvironment();
  opts.stdout_mode = opts.stderr_mode = SpawnOptions::Output::kFile;
  opts.stdout_path = opts.stderr_path = dir_ + "/" + id + ".log";
  auto proc = Subprocess::Spawn(opts);
  if (!proc.ok()) return proc.status();
  agents_[id] = std::move(*proc);
  if (!wait_joined) return absl::OkStatus();
  bool joined = WaitUntil([&] { return AgentRegisteredMs(id) > before; }, absl::Seconds(30));
  if (!joined) return absl::UnavailableError(absl::StrCat("agent ", id, " did not join:\n", LogTail(id)));
  return absl::OkStatus();
}

ExitStatus TestCluster::StopAgent(const std::string& id, int signal) {
  auto it = agents_.find(id);
  if (it == agents_.end()) return {};
  // The agent alone: its workers lead process groups of their own.
  kill(it->second->pid(), signal);
  absl::StatusOr<ExitStatus> st = it->second->WaitFor(absl::Seconds(60));
  ExitStatus exit = st.ok() ? *st : ExitStatus{-1, 0};
  agents_.erase(it);
  return exit;
}

std::optional<ExitStatus> TestCluster::WaitAgentExit(const std::string& id,
                                                     absl::Duration timeout) {
  auto it = agents_.find(id);
  if (it == agents_.end()) return std::nullopt;
  absl::StatusOr<ExitStatus> st = it->second->WaitFor(timeout);
  if (!st.ok()) return std::nullopt;
  return *st;
}

CommandResult TestCluster::Det(const std::vector<std::string>& args, absl::Duration timeout) {
  std::vector<std::string> argv = {BinDir() + "/det", "-m", address_};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(InHost(TestClusterHosts::kMaster, std::move(argv)), timeout,
                    {{"DET_USER_TOKEN", token_}});
}

absl::StatusOr<TestCluster::DetRunner> TestCluster::DetAsNewUser(const std::string& name,
                                                                  const std::string& password) {
  CommandResult made = RunCommand(
      InHost(TestClusterHosts::kMaster, {BinDir() + "/det", "-m", address_, "user", "create", name}),
      absl::Seconds(60), {{"DET_USER_TOKEN", token_}, {"DET_NEW_PASSWORD", password}});
  if (!made.exit.ok()) return absl::InternalError("det user create " + name + ": " + made.err);
  const std::string home = dir_ + "/home-" + name;
  if (mkdir(home.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError("mkdir " + home);
  }
  DetRunner run = [this, home, password](const std::vector<std::string>& args) {
    std::vector<std::string> argv = {BinDir() + "/det", "-m", address_};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(InHost(TestClusterHosts::kMaster, std::move(argv)), absl::Seconds(60),
                      {{"HOME", home}, {"DET_USER_TOKEN", ""}, {"DET_PASSWORD", password}});
  };
  CommandResult login = run({"user", "login", name});
  if (!login.exit.ok()) return absl::InternalError("det user login " + name + ": " + login.err);
  return run;
}

int64_t TestCluster::AgentRegisteredMs(const std::string& id) {
  nlohmann::json agents = DetJson({"agent", "list"});
  if (!agents.is_object() || !agents.contains("agents")) return -1;
  for (const auto& a : agents["agents"]) {
    if (a.value("id", "") != id || !a.value("connected", false)) continue;
    int64_t ms = Int(a["registered_time_ms"]);
    return ms < 0 ? 0 : ms;
  }
  return -1;
}

nlohmann::json TestCluster::DetJson(const std::vector<std::string>& args) {
  std::vector<std::string> with_json = args;
  with_json.push_back("--json");
  CommandResult r = Det(with_json);
  if (!r.exit.ok()) return nullptr;
  return nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
}

std::string TestCluster::ExperimentState(int64_t id) {
  nlohmann::json d = DetJson({"experiment", "describe", absl::StrCat(id)});
  return d.is_object() && d.contains("experiment") ? d["experiment"].value("state", "") : "";
}

std::string GridYaml(const std::string& name, int64_t batches, const std::string& storage,
                     const std::string& save) {
  std::string yaml = absl::StrCat("name: ", name, R"(
entrypoint: det-fashion-mnist
hyperparameters:
  global_batch_size: 32
  hidden_size: 16
  learning_rate: {type: categorical, vals: [0.05, 0.0001]}
records_per_epoch: 60000
searcher:
  name: grid
  metric: validation_loss
  smaller_is_better: true
  max_length: {batches: )",
                                  batches, R"(}
data: {dir: /usr/share/datasets/fashion-mnist}
)");
  if (!storage.empty()) {
    absl::StrAppend(
        &yaml, "min_validation_period: {batches: 10}\nmin_checkpoint_period: {batches: 10}\n",
        "checkpoint_storage: {type: shared_fs, host_path: '", storage, "'", save, "}\n");
  }
  return yaml;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

}  // namespace det::testing
