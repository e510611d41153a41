#include "deploy/local/local_cluster.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/cli_context.h"
#include "common/process/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::deploy {
namespace {

using ::det::cli::CliContext;

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class LocalClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string pattern = std::string(tmp ? tmp : "/tmp") + "/cluster_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    std::filesystem::create_directories(dir_ + "/bin");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void WriteScript(const std::string& name, const std::string& body) {
    std::string path = dir_ + "/bin/" + name;
    std::ofstream(path) << "#!/bin/sh\n" << body;
    ::chmod(path.c_str(), 0755);
  }

  std::string dir_;
  std::ostringstream out_;
  std::ostringstream err_;
  CliContext ctx_{out_, err_};
};

TEST(LocalClusterYamlTest, MasterYaml) {
  LocalClusterLayout layout;
  layout.data_dir = "/d";
  layout.master_port = 9090;
  layout.cluster_secret = "abc";
  EXPECT_EQ(MasterYaml(layout),
            "# Written by `det deploy local cluster-up`.\n"
            "grpc_listen: \"127.0.0.1:9090\"\n"
            "data_dir: \"/d/master\"\n"
            "cluster_secret: \"abc\"\n"
            "# Experiments that name no checkpoint_storage keep their checkpoints here, and no\n"
            "# experiment may keep them (nor its GC delete) anywhere else.\n"
            "checkpoint_storage:\n"
            "  type: shared_fs\n"
            "  host_path: \"/d/checkpoints\"\n"
            "checkpoint_storage_allowed_roots:\n"
            "  - \"/d/checkpoints\"\n");
}

TEST(LocalClusterYamlTest, MasterYamlWithHttp) {
  LocalClusterLayout layout;
  layout.data_dir = "/d";
  layout.master_port = 9090;
  layout.http_port = 9091;
  layout.cluster_secret = "abc";
  EXPECT_THAT(MasterYaml(layout), HasSubstr("grpc_listen: \"127.0.0.1:9090\"\n"
                                            "http_listen: \"127.0.0.1:9091\"\n"));
}

TEST(LocalClusterYamlTest, AgentYaml) {
  LocalClusterLayout layout;
  layout.data_dir = "/d \"x\"";
  layout.master_port = 9090;
  layout.slots_per_agent = 4;
  layout.worker_path = {"/bin dir"};
  layout.cluster_secret = "abc";
  EXPECT_EQ(AgentYaml(layout, 1),
            "# Written by `det deploy local cluster-up`.\n"
            "master: \"127.0.0.1:9090\"\n"
            "agent_id: \"local-agent-1\"\n"
            "slot_type: cpu\n"
            "slots: 4\n"
            "work_dir: \"/d \\\"x\\\"/agent-1\"\n"
            "worker_path:\n"
            "  - \"/bin dir\"\n"
            "cluster_secret: \"abc\"\n");
}

TEST(LocalClusterYamlTest, TlsFilesGoIntoBothYamls) {
  LocalClusterLayout layout;
  layout.data_dir = "/d";
  layout.master_port = 9090;
  layout.http_port = 9091;
  layout.cluster_secret = "abc";
  layout.ca_cert_file = "/d/tls/ca.crt";
  layout.master_cert_file = "/d/tls/master.crt";
  layout.master_key_file = "/d/tls/master.key";
  EXPECT_THAT(MasterYaml(layout),
              HasSubstr("grpc_tls:\n  cert_file: \"/d/tls/master.crt\"\n  key_file: "
                        "\"/d/tls/master.key\"\nhttp_tls:\n  cert_file: \"/d/tls/master.crt\"\n"
                        "  key_file: \"/d/tls/master.key\"\n"));
  EXPECT_THAT(AgentYaml(layout, 0), HasSubstr("master_cert_file: \"/d/tls/ca.crt\"\n"));
  layout.ca_cert_file = layout.master_cert_file = layout.master_key_file = "";
  EXPECT_THAT(MasterYaml(layout), Not(HasSubstr("tls")));
  EXPECT_THAT(AgentYaml(layout, 0), Not(HasSubstr("cert")));
}

TEST(ResolveDataDirTest, ExpandsHomeAndNormalizes) {
  const std::string home = std::getenv("HOME") ? std::getenv("HOME") : "";
  ::setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(*ResolveDataDir("~/.det-local/"), "/home/someone/.det-local");
  ::setenv("HOME", home.c_str(), 1);
  EXPECT_EQ(*ResolveDataDir("/a/b/../c"), "/a/c");
}

TEST_F(LocalClusterTest, FindBinarySearchesDirsThenPath) {
  WriteScript("det-master", "exit 0\n");
  EXPECT_EQ(*FindBinary("det-master", {"/nonexistent", dir_ + "/bin"}, ""),
            dir_ + "/bin/det-master");
  EXPECT_EQ(*FindBinary("det-master", {}, "/nonexistent:" + dir_ + "/bin"),
            dir_ + "/bin/det-master");
  absl::StatusOr<std::string> missing = FindBinary("det-agent", {dir_ + "/bin"}, "");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot find det-agent"));
  EXPECT_THAT(missing.status().message(), HasSubstr("bazel build //deploy:bin"));
}

// A private CA and the master's certificate for 127.0.0.1 and localhost, made with the
// openssl program once and kept; the keys readable by their owner only.
TEST_F(LocalClusterTest, MakeLocalTlsMakesACaAndAMasterCertificateOnce) {
  if (!std::filesystem::exists("/usr/bin/openssl")) GTEST_SKIP() << "no /usr/bin/openssl";
  LocalClusterLayout layout;
  const std::string tls = dir_ + "/tls";
  ASSERT_TRUE(MakeLocalTls(tls, "/usr/bin/openssl", dir_ + "/openssl.log", &layout).ok())
      << ReadAll(dir_ + "/openssl.log");
  EXPECT_EQ(layout.ca_cert_file, tls + "/ca.crt");
  EXPECT_EQ(layout.master_cert_file, tls + "/master.crt");
  EXPECT_EQ(layout.master_key_file, tls + "/master.key");
  for (auto [file, mode] : {std::pair{"ca.key", 0600}, {"master.key", 0600}, {"ca.crt", 0644},
                            {"master.crt", 0644}}) {
    struct stat st;
    ASSERT_EQ(::stat((tls + "/" + file).c_str(), &st), 0) << file;
    EXPECT_EQ(st.st_mode & 0777, static_cast<mode_t>(mode)) << file;
  }
  det::SpawnOptions verify;
  verify.argv = {"/usr/bin/openssl", "verify", "-CAfile", layout.ca_cert_file, "-verify_ip",
                 "127.0.0.1", layout.master_cert_file};
  verify.stdout_mode = verify.stderr_mode = det::SpawnOptions::Output::kNull;
  auto p = det::Subprocess::Spawn(verify);
  ASSERT_TRUE(p.ok());
  absl::StatusOr<det::ExitStatus> verified = (*p)->Wait();
  ASSERT_TRUE(verified.ok());
  EXPECT_TRUE(verified->ok()) << "openssl verify: the certificate is not for 127.0.0.1";
  const std::string ca = ReadAll(layout.ca_cert_file);
  ASSERT_TRUE(MakeLocalTls(tls, "/usr/bin/openssl", dir_ + "/openssl.log", &layout).ok());
  EXPECT_EQ(ReadAll(layout.ca_cert_file), ca);  // Kept.
  EXPECT_FALSE(MakeLocalTls(dir_ + "/tls2", dir_ + "/no-openssl", dir_ + "/openssl.log", &layout).ok());
}

TEST_F(LocalClusterTest, ClusterDownWithNothingRunning) {
  ASSERT_TRUE(ClusterDown(ctx_, dir_ + "/data").ok());
  EXPECT_EQ(out_.str(), "No local cluster is running in " + dir_ + "/data\n");
}

TEST_F(LocalClusterTest, MissingDaemonBinaryIsAClearError) {
  ClusterUpOptions options;
  options.data_dir = dir_ + "/data";
  options.bin_dir = dir_ + "/bin";
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", "/nonexistent", 1);
  absl::Status status = ClusterUp(ctx_, options);
  ::setenv("PATH", path.c_str(), 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("cannot find det-master"));
  EXPECT_THAT(status.message(), HasSubstr("bazel build //deploy:bin"));
}

TEST_F(LocalClusterTest, MasterThatExitsShowsItsLogAndConfigIsWritten) {
  WriteScript("det-master", "echo \"cannot parse $2\" >&2\nexit 3\n");
  WriteScript("det-agent", "exit 0\n");
  WriteScript("det-fashion-mnist", "exit 0\n");
  ClusterUpOptions options;
  options.data_dir = dir_ + "/data";
  options.bin_dir = dir_ + "/bin";
  options.agents = 2;
  options.slots_per_agent = 3;
  options.master_port = 1;  // never bound: the fake master exits first
  options.task_user = "";   // dir_ may lie where a task user cannot reach.
  // Port 1 needs root to bind; the free-port check only rejects ports in use.
  absl::Status status = ClusterUp(ctx_, options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_THAT(status.message(), HasSubstr("det-master exited (exit code 3)"));
  const std::string data = dir_ + "/data";
  EXPECT_THAT(err_.str(), HasSubstr("cannot parse " + data + "/master.yaml"));
  EXPECT_THAT(out_.str(), HasSubstr("Started master (pid "));

  EXPECT_THAT(ReadAll(data + "/master.yaml"), HasSubstr("grpc_listen: \"127.0.0.1:1\"\n"));
  std::string agent = ReadAll(data + "/agent-1.yaml");
  EXPECT_THAT(agent, HasSubstr("agent_id: \"local-agent-1\"\n"));
  EXPECT_THAT(agent, HasSubstr("slots: 3\n"));
  EXPECT_THAT(agent, HasSubstr("  - \"" + dir_ + "/bin\"\n"));
  std::string secret = ReadAll(data + "/cluster_secret");
  EXPECT_THAT(secret, MatchesRegex("[0-9a-f]{64}\n"));
  EXPECT_THAT(agent, HasSubstr("cluster_secret: \"" + secret.substr(0, 64) + "\"\n"));
  struct stat st;
  ASSERT_EQ(::stat((data + "/cluster_secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_FALSE(std::filesystem::exists(data + "/run/master.pid"));

  // A second run keeps the secret.
  (void)ClusterUp(ctx_, options);
  EXPECT_EQ(ReadAll(data + "/cluster_secret"), secret);
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

TEST_F(LocalClusterTest, AsRootTrialsRunAsNobodyWhoMustReachTheDataDir) {
  ClusterUpOptions options;
  EXPECT_EQ(EffectiveTaskUser(options, 0), "nobody");
  EXPECT_EQ(EffectiveTaskUser(options, 1000), "");
  options.task_user = "";
  EXPECT_EQ(EffectiveTaskUser(options, 0), "");
  options.task_user = "40001:40001";
  EXPECT_EQ(EffectiveTaskUser(options, 0), "40001:40001");
  if (::geteuid() != 0) {
    absl::Status status = ClusterUp(ctx_, options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr("not root, so its agents cannot switch users"));
    GTEST_SKIP() << "the rest needs root (a task user to switch to)";
  }
  WriteScript("det-master", "exit 3\n");
  WriteScript("det-agent", "exit 0\n");
  WriteScript("det-fashion-mnist", "exit 0\n");
  std::filesystem::create_directories(dir_ + "/python/det");
  std::ofstream(dir_ + "/python/det/__init__.py") << "# det\n";
  options.bin_dir = dir_ + "/bin";
  options.master_port = 1;
  // The agent's check (agent::CheckUserCanReach, which the CLI passes) as this test's
  // layout has it: the task user reaches nothing under the test's private directory.
  std::vector<std::string> checked;
  options.can_reach = [&](const std::string& path, const std::optional<RunAs>& user) {
    checked.push_back(path);
    if (!user || path.rfind(dir_ + "/", 0) != 0) return absl::OkStatus();
    return absl::PermissionDeniedError(
        absl::StrCat("uid ", user->uid, " (the task user) cannot reach '", path, "'"));
  };
  for (const auto& [user, code, message] :
       {std::tuple{"0:0", absl::StatusCode::kInvalidArgument,
                   "--task-user 0:0: uid and gid 0 are root's"},
        std::tuple{"no-such-user-det", absl::StatusCode::kNotFound,
                   "--task-user: no OS user 'no-such-user-det'"}}) {
    options.task_user = user;
    options.data_dir = dir_ + "/data-" + std::to_string(static_cast<int>(code));
    absl::Status status = ClusterUp(ctx_, options);
    EXPECT_EQ(status.code(), code) << status;
    EXPECT_THAT(status.message(), HasSubstr(message));
  }

  // Under a directory nobody may search: refused before anything starts.
  options.task_user.reset();
  ASSERT_EQ(::mkdir((dir_ + "/closed").c_str(), 0700), 0);
  options.data_dir = dir_ + "/closed/data";
  absl::Status status = ClusterUp(ctx_, options);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("trials run as the task user nobody, and uid 65534 (the task user) "
                        "cannot reach '" + dir_ + "/closed/data/checkpoints'"));
  EXPECT_THAT(status.message(), HasSubstr("give a --data-dir under directories every user"));
  EXPECT_THAT(out_.str(), Not(HasSubstr("Started")));

  // Where it can: the data dir is searchable only, what holds secrets private, the
  // checkpoint storage open to every task user's new entries (and nothing more).
  std::string open = "/tmp/det-cluster-up-XXXXXX";
  ASSERT_NE(::mkdtemp(open.data()), nullptr);
  ASSERT_EQ(::chmod(open.c_str(), 0755), 0);
  options.data_dir = open + "/data";
  status = ClusterUp(ctx_, options);
  EXPECT_THAT(status.message(), HasSubstr("det-master exited (exit code 3)"));
  EXPECT_EQ(ModeOf(open + "/data"), 0711u);
  EXPECT_EQ(ModeOf(open + "/data/logs"), 0700u);
  EXPECT_EQ(ModeOf(open + "/data/run"), 0700u);
  EXPECT_EQ(ModeOf(open + "/data/checkpoints"), 01733u);
  for (const char* secret : {"cluster_secret", "admin_password", "master.yaml", "agent-0.yaml"}) {
    EXPECT_EQ(ModeOf(open + "/data/" + secret), 0600u) << secret;
  }
  // The binaries lie where nobody cannot reach them (under the test's private tmp): the
  // agents run copies in D/bin, with det's Python package (../python beside the binaries)
  // in D/python, and the worker path names D/bin.
  EXPECT_THAT(out_.str(), HasSubstr("Copied det-agent and det-fashion-mnist into " + open +
                                    "/data/bin, det's Python package into " + open +
                                    "/data/python: the task user nobody cannot reach " + dir_ +
                                    "/bin/det-agent"));
  for (const char* program : {"det-agent", "det-fashion-mnist"}) {
    EXPECT_EQ(ModeOf(open + "/data/bin/" + program), 0755u) << program;
    EXPECT_EQ(ReadAll(open + "/data/bin/" + program), ReadAll(dir_ + "/bin/" + program));
  }
  EXPECT_EQ(ModeOf(open + "/data/python/det"), 0755u);
  EXPECT_EQ(ModeOf(open + "/data/python/det/__init__.py"), 0644u);
  EXPECT_EQ(ReadAll(open + "/data/python/det/__init__.py"), "# det\n");
  EXPECT_THAT(ReadAll(open + "/data/agent-0.yaml"),
              HasSubstr("worker_path:\n  - \"" + open + "/data/bin\"\n"));
  EXPECT_THAT(checked, ::testing::IsSupersetOf({open + "/data/checkpoints",
                                                open + "/data/agent-0", dir_ + "/bin/det-agent"}));
  std::filesystem::remove_all(open);
}

TEST_F(LocalClusterTest, RefusesToStartTwiceAndClusterDownStops) {
  const std::string data = dir_ + "/data";
  std::filesystem::create_directories(data + "/run");
  WriteScript("det-master", "exit 0\n");
  WriteScript("det-agent", "exit 0\n");
  // A process whose command line names the master's config, as det-master's does.
  SpawnOptions spawn;
  spawn.argv = {"/bin/sh", "-c", "sleep 60; exit 0", data + "/master.yaml"};
  spawn.env = CurrentEnvironment();
  spawn.stdout_mode = spawn.stderr_mode = SpawnOptions::Output::kNull;
  absl::StatusOr<std::unique_ptr<Subprocess>> fake = Subprocess::Spawn(spawn);
  ASSERT_TRUE(fake.ok()) << fake.status();
  const std::string pid = std::to_string((*fake)->pid());
  std::ofstream(data + "/run/master.pid") << pid << "\n";
  std::ofstream(data + "/run/agent-0.pid") << "999999999\n";  // stale

  ClusterUpOptions options;
  options.data_dir = data;
  options.bin_dir = dir_ + "/bin";
  absl::Status status = ClusterUp(ctx_, options);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr("already running in " + data));
  EXPECT_THAT(status.message(), HasSubstr("pid " + pid));
  EXPECT_FALSE(std::filesystem::exists(data + "/run/agent-0.pid"));

  out_.str("");
  ASSERT_TRUE(ClusterDown(ctx_, data).ok());
  EXPECT_EQ(out_.str(), "Stopped master (pid " + pid + ")\n");
  EXPECT_FALSE(std::filesystem::exists(data + "/run/master.pid"));
  absl::StatusOr<ExitStatus> exit = (*fake)->WaitFor(absl::Seconds(5));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->signal, SIGTERM);
}

// An agent a person restarted by hand from the data dir, with a relative config path and
// no pid file, is still one of the cluster's daemons: cluster-down stops it.
TEST_F(LocalClusterTest, ClusterDownStopsAnAgentRestartedByHand) {
  const std::string data = dir_ + "/data";
  std::filesystem::create_directories(data + "/run");
  std::ofstream(data + "/agent-0.yaml") << "id: local-agent-0\n";
  WriteScript("det-agent", "sleep 60\n");
  SpawnOptions spawn;
  spawn.argv = {dir_ + "/bin/det-agent", "--config", "agent-0.yaml"};
  spawn.cwd = data;
  spawn.env = CurrentEnvironment();
  spawn.stdout_mode = spawn.stderr_mode = SpawnOptions::Output::kNull;
  absl::StatusOr<std::unique_ptr<Subprocess>> agent = Subprocess::Spawn(spawn);
  ASSERT_TRUE(agent.ok()) << agent.status();
  // Another data dir's agent with the same relative path is not this cluster's.
  const std::string other = dir_ + "/other";
  std::filesystem::create_directories(other);
  std::ofstream(other + "/agent-0.yaml") << "id: local-agent-0\n";
  spawn.cwd = other;
  absl::StatusOr<std::unique_ptr<Subprocess>> foreign = Subprocess::Spawn(spawn);
  ASSERT_TRUE(foreign.ok()) << foreign.status();
  const std::string pid = std::to_string((*agent)->pid());

  ASSERT_TRUE(ClusterDown(ctx_, data).ok());
  EXPECT_EQ(out_.str(), "Stopped agent local-agent-0 (pid " + pid + ")\n");
  absl::StatusOr<ExitStatus> exit = (*agent)->WaitFor(absl::Seconds(5));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->signal, SIGTERM);
  absl::StatusOr<ExitStatus> still = (*foreign)->WaitFor(absl::Milliseconds(1));
  EXPECT_FALSE(still.ok()) << "the other data dir's agent was stopped too";
  (void)(*foreign)->Terminate(absl::Seconds(5));
}

}  // namespace
}  // namespace det::deploy
