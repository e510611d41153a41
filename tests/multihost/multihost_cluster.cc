#include "tests/multihost/multihost_cluster.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace det::testing {

absl::StatusOr<std::unique_ptr<MultiHostCluster>> MultiHostCluster::Create(
    const std::string& name) {
  absl::StatusOr<std::unique_ptr<VirtualNetwork>> net = VirtualNetwork::Create();
  if (!net.ok()) return net.status();
  if (absl::StatusOr<std::string> m = (*net)->AddHost(kMasterHost); !m.ok()) return m.status();
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/", name);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!std::filesystem::create_directories(dir, ec) && ec) {
    return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  }
  return std::unique_ptr<MultiHostCluster>(new MultiHostCluster(std::move(*net), dir));
}

MultiHostCluster::MultiHostCluster(std::unique_ptr<VirtualNetwork> net, std::string dir)
    : net_(std::move(net)), dir_(std::move(dir)) {}

MultiHostCluster::~MultiHostCluster() {
  for (auto& [id, a] : agents_) a->Terminate(absl::Seconds(5)).IgnoreError();
  agents_.clear();
  if (master_) master_->Terminate(absl::Seconds(5)).IgnoreError();
  master_.reset();
  // net_ goes last: it kills what is left in the hosts and deletes them.
}

std::string MultiHostCluster::WriteFile(const std::string& name, const std::string& text) {
  std::string path = dir_ + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string MultiHostCluster::LogTail(const std::string& name) {
  std::string text = Slurp(dir_ + "/" + name + ".log");
  return text.size() > 4000 ? text.substr(text.size() - 4000) : text;
}

std::string MultiHostCluster::Diagnostics() {
  std::string out = absl::StrCat("\n--- master:\n", LogTail("master"));
  for (const auto& [id, a] : agents_) absl::StrAppend(&out, "\n--- agent ", id, ":\n", LogTail(id));
  return out;
}

absl::StatusOr<std::unique_ptr<Subprocess>> MultiHostCluster::SpawnIn(
    const std::string& host, const std::vector<std::string>& argv, const std::string& log,
    const EnvironmentVariables& more_env) {
  SpawnOptions opts;
  opts.argv = net_->InHost(host, argv);
  opts.env = CurrentEnvironment();
  opts.env.insert(opts.env.end(), more_env.begin(), more_env.end());
  opts.stdout_mode = opts.stderr_mode = SpawnOptions::Output::kFile;
  opts.stdout_path = opts.stderr_path = dir_ + "/" + log + ".log";
  return Subprocess::Spawn(opts);
}

absl::Status MultiHostCluster::StartMaster(const std::string& extra_yaml) {
  const std::string host = net_->Address(kMasterHost);
  std::string addr_file = dir_ + "/master.addr";
  std::string http_file = dir_ + "/master.http_addr";
  unlink(addr_file.c_str());
  unlink(http_file.c_str());
  std::string listen = address_.empty() ? host + ":0" : address_;
  std::string config = WriteFile(
      "master.yaml",
      absl::StrCat("grpc_listen: \"", listen, "\"\ndata_dir: ", dir_, "/master\naddress_file: ",
                   addr_file, "\ncluster_secret: test-secret\nhttp_listen: \"", host,
                   ":0\"\nhttp_address_file: ", http_file, "\n",
                   extra_yaml.find("agent_reconnect_wait:") == std::string::npos
                       ? "agent_reconnect_wait: 30s\n"
                       : "",
                   extra_yaml));
  absl::StatusOr<std::unique_ptr<Subprocess>> proc =
      SpawnIn(kMasterHost, {TestCluster::BinDir() + "/det-master", "--config", config}, "master",
              {{"DET_ADMIN_PASSWORD", kTestAdminPassword}});
  if (!proc.ok()) return proc.status();
  master_ = std::move(*proc);
  bool up = WaitUntil([&] { return Exists(addr_file) || master_->TryWait().has_value(); },
                      absl::Seconds(30));
  if (!up || !Exists(addr_file)) {
    return absl::UnavailableError(absl::StrCat("master did not start:\n", LogTail("master")));
  }
  address_ = std::string(absl::StripAsciiWhitespace(Slurp(addr_file)));
  if (!token_.empty()) return absl::OkStatus();
  // The real `det user login`, with a HOME of the cluster's own.
  std::string home = dir_ + "/home";
  mkdir(home.c_str(), 0700);
  CommandResult login = RunCommand(
      net_->InHost(kMasterHost, {TestCluster::BinDir() + "/det", "-m", address_, "user", "login",
                                 "admin"}),
      absl::Seconds(60),
      {{"HOME", home}, {"DET_PASSWORD", kTestAdminPassword}, {"DET_USER_TOKEN", ""}});
  nlohmann::json auth = nlohmann::json::parse(Slurp(home + "/.det/auth.json"), nullptr,
                                              /*allow_exceptions=*/false);
  if (!login.exit.ok() || !auth.is_object()) {
    return absl::UnauthenticatedError(
        absl::StrCat("det user login failed: ", login.err, "\n", LogTail("master")));
  }
  token_ = auth["masters"][address_].value("token", "");
  return absl::OkStatus();
}

int64_t MultiHostCluster::RegisteredMs(const std::string& id) {
  nlohmann::json agents = DetJson({"agent", "list"});
  if (!agents.is_object() || !agents.contains("agents")) return -1;
  for (const auto& a : agents["agents"]) {
    if (a.value("id", "") != id || !a.value("connected", false)) continue;
    int64_t ms = Int(a["registered_time_ms"]);
    return ms < 0 ? 0 : ms;
  }
  return -1;
}

bool MultiHostCluster::AgentConnected(const std::string& id) { return RegisteredMs(id) >= 0; }

absl::Status MultiHostCluster::StartAgent(const std::string& id, int slots,
                                          const std::string& extra_yaml) {
  if (net_->Namespace(id).empty()) {
    if (absl::StatusOr<std::string> a = net_->AddHost(id); !a.ok()) return a.status();
  }
  int64_t before = RegisteredMs(id);
  std::string config = WriteFile(
      id + ".yaml",
      absl::StrCat("master: \"", address_, "\"\nagent_id: ", id, "\nslot_type: cpu\nslots: ",
                   slots, "\nwork_dir: ", dir_, "/", id, "\nworker_path: [",
                   TestCluster::BinDir(),
                   "]\ncluster_secret: test-secret\nheartbeat_interval: 1s\nkill_grace: 3s\n",
                   extra_yaml));
  absl::StatusOr<std::unique_ptr<Subprocess>> proc =
      SpawnIn(id, {TestCluster::BinDir() + "/det-agent", "--config", config}, id);
  if (!proc.ok()) return proc.status();
  agents_[id] = std::move(*proc);
  if (!WaitUntil([&] { return RegisteredMs(id) > before; }, absl::Seconds(30))) {
    return absl::UnavailableError(absl::StrCat("agent ", id, " did not join:\n", LogTail(id)));
  }
  return absl::OkStatus();
}

CommandResult MultiHostCluster::Det(const std::vector<std::string>& args,
                                    absl::Duration timeout) {
  std::vector<std::string> argv = {TestCluster::BinDir() + "/det", "-m", address_};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(net_->InHost(kMasterHost, argv), timeout, {{"DET_USER_TOKEN", token_}});
}

nlohmann::json MultiHostCluster::DetJson(const std::vector<std::string>& args) {
  std::vector<std::string> with_json = args;
  with_json.push_back("--json");
  CommandResult r = Det(with_json);
  if (!r.exit.ok()) return nullptr;
  return nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
}

nlohmann::json MultiHostCluster::Trial(int64_t id) {
  nlohmann::json t = DetJson({"trial", "describe", absl::StrCat(id)});
  return t.is_object() && t.contains("trial") ? t["trial"] : nlohmann::json();
}

std::string MultiHostCluster::TrialLogs(int64_t id) {
  return Det({"trial", "logs", absl::StrCat(id)}).out;
}

std::map<int, std::string> MultiHostCluster::RankAgents(int64_t id) {
  std::map<int, std::string> out;
  nlohmann::json t = Trial(id);
  if (!t.is_object() || !t.contains("allocation")) return out;
  for (const auto& r : t["allocation"]["ranks"]) out[r.value("rank", 0)] = r.value("agent_id", "");
  return out;
}

}  // namespace det::testing
