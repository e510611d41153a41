// TLS on the master's gRPC port: the CLI, the agent and the workers verify the master
// against the CA named by DET_MASTER_CERT_FILE; a client without it gets a clear error.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

// A CA and a certificate for 127.0.0.1 signed by it, under `dir`.
void MakeCertificates(const std::string& dir) {
  std::string script = absl::StrCat(
      "set -e; cd '", dir, "';",
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 "
      "  -subj /CN=det-test-ca 2>/dev/null;",
      "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr "
      "  -subj /CN=127.0.0.1 2>/dev/null;",
      "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > ext.cnf;",
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
      "  -out server.pem -days 2 -extfile ext.cnf 2>/dev/null;",
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other-ca.pem -days 2 "
      "  -subj /CN=someone-else 2>/dev/null");
  CommandResult r = RunCommand({"sh", "-c", script});
  ASSERT_TRUE(r.exit.ok()) << r.err;
}

TEST(Tls, EveryClientOfTheMasterSpeaksTlsAndChecksItsCertificate) {
  TestCluster cluster("tls");
  MakeCertificates(cluster.dir());
  std::string ca = cluster.dir() + "/ca.pem";
  // The CLI run by the fixture, the agent and (through the agent) the workers inherit it.
  setenv("DET_MASTER_CERT_FILE", ca.c_str(), 1);
  ASSERT_TRUE(cluster
                  .StartMaster(absl::StrCat("grpc_tls: {cert_file: ", cluster.dir(),
                                            "/server.pem, key_file: ", cluster.dir(), "/server.key}\n"))
                  .ok())
      << cluster.LogTail("master");
  ASSERT_TRUE(cluster.StartAgent("a1").ok()) << cluster.LogTail("a1");
  ExampleExperiment exp;
  exp.name = "tls";
  exp.batches = 100;
  exp.scheduling_unit = 50;
  exp.max_restarts = 0;
  std::string config = cluster.WriteFile("exp.yaml", exp.Yaml());
  CommandResult create = cluster.Det({"experiment", "create", config, "-f"});
  ASSERT_TRUE(create.exit.ok()) << create.out << create.err << cluster.LogTail("master");
  nlohmann::json t = cluster.DetJson({"trial", "describe", "1"});
  ASSERT_TRUE(t.is_object());
  EXPECT_EQ(Int(t["trial"]["training_summary"]["loss"]["count"]), 2);  // Workers reported over TLS.

  // Without the CA, or with another one, the CLI cannot talk to the master.
  CommandResult plain = RunCommand({"env", "-u", "DET_MASTER_CERT_FILE", TestCluster::BinDir() + "/det",
                                    "-m", cluster.address(), "master", "info"},
                                   absl::Seconds(60));
  EXPECT_FALSE(plain.exit.ok());
  EXPECT_THAT(plain.err, HasSubstr(cluster.address()));
  CommandResult wrong = RunCommand({"env", "DET_MASTER_CERT_FILE=" + cluster.dir() + "/other-ca.pem",
                                    TestCluster::BinDir() + "/det", "-m", cluster.address(), "master",
                                    "info"},
                                   absl::Seconds(60));
  EXPECT_FALSE(wrong.exit.ok());
  EXPECT_THAT(wrong.err, HasSubstr(cluster.address()));
  CommandResult missing = RunCommand({"env", "DET_MASTER_CERT_FILE=/nonexistent/ca.pem",
                                      TestCluster::BinDir() + "/det", "-m", cluster.address(),
                                      "master", "info"});
  EXPECT_FALSE(missing.exit.ok());
  EXPECT_THAT(missing.err, HasSubstr("DET_MASTER_CERT_FILE: cannot read '/nonexistent/ca.pem'"));
  unsetenv("DET_MASTER_CERT_FILE");
}

// A free TCP port on 127.0.0.1 (bound to port 0, then released).
mode_t ModeOf(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

// `det deploy local cluster-up --tls`: a private CA and a certificate for the master, both
// ports over TLS, the agent and its workers trusting the CA, the CLI logged in over
// https; a short example runs through `det -m https://...`, and a plaintext client is
// refused.
TEST(Tls, ClusterUpWithTlsRunsAnExperimentOverHttps) {
  TestCluster scratch("tls_cluster_up");  // Its directory only.
  const std::string data = scratch.dir() + "/cluster";
  const std::string home = scratch.dir() + "/home";
  ASSERT_EQ(mkdir(home.c_str(), 0700), 0);
  const int grpc_port = FreeLoopbackPort();
  int http_port = FreeLoopbackPort();
  while (http_port == grpc_port) http_port = FreeLoopbackPort();
  ASSERT_GT(grpc_port, 0);
  const std::string det = TestCluster::BinDir() + "/det";
  const std::string ca = data + "/tls/ca.crt";
  const std::string https = absl::StrCat("https://127.0.0.1:", grpc_port);
  auto run = [&](std::vector<std::string> argv, std::map<std::string, std::string> env) {
    env["HOME"] = home;
    env.emplace("DET_USER_TOKEN", "");
    return RunCommand(argv, absl::Seconds(180), env);
  };
  // --no-task-user: the workers run as this (root) test, since the binaries and det's Python
  // package lie under /root, where no task user reaches.
  CommandResult up = run({det, "deploy", "local", "cluster-up", "--tls", "--data-dir", data,
                          "--master-port", absl::StrCat(grpc_port), "--http-port",
                          absl::StrCat(http_port), "--bin-dir", TestCluster::BinDir(),
                          "--no-task-user"},
                         {});
  struct Down {
    std::function<void()> fn;
    ~Down() { fn(); }
  } down{[&] {
    run({det, "deploy", "local", "cluster-down", "--data-dir", data}, {});
  }};
  ASSERT_TRUE(up.exit.ok()) << up.out << up.err << Slurp(data + "/logs/master.log")
                            << Slurp(data + "/logs/openssl.log");
  EXPECT_THAT(up.out, HasSubstr("Master: " + https));
  EXPECT_THAT(up.out, HasSubstr("DET_MASTER_CERT_FILE=" + ca));
  EXPECT_EQ(ModeOf(data + "/tls/ca.key"), 0600u);
  EXPECT_EQ(ModeOf(data + "/tls/master.key"), 0600u);
  EXPECT_THAT(Slurp(data + "/master.yaml"), HasSubstr("grpc_tls:"));
  EXPECT_THAT(Slurp(data + "/master.yaml"), HasSubstr("http_tls:"));

  // The short example, through the session cluster-up kept, over https with the CA.
  ExampleExperiment exp;
  exp.name = "tls-cluster-up";
  exp.batches = 100;
  exp.scheduling_unit = 50;
  exp.max_restarts = 0;
  const std::string config = scratch.WriteFile("exp.yaml", exp.Yaml());
  CommandResult create =
      run({det, "-m", https, "experiment", "create", config, "-f"}, {{"DET_MASTER_CERT_FILE", ca}});
  ASSERT_TRUE(create.exit.ok()) << create.out << create.err << Slurp(data + "/logs/agent-0.log");
  CommandResult trial =
      run({det, "-m", https, "trial", "describe", "1", "--json"}, {{"DET_MASTER_CERT_FILE", ca}});
  ASSERT_TRUE(trial.exit.ok()) << trial.err;
  nlohmann::json t = nlohmann::json::parse(trial.out, nullptr, false);
  EXPECT_EQ(t["trial"].value("state", ""), "STATE_COMPLETED") << trial.out;
  EXPECT_EQ(Int(t["trial"]["training_summary"]["loss"]["count"]), 2) << trial.out;

  // The PyTorch (Core API) example: its workers report, checkpoint (into the cluster's
  // default storage, DATA_DIR/checkpoints, the only root cluster-up allows) and ask
  // should_preempt() over TLS, trusting the CA the agent passes on (DET_MASTER_CERT_FILE).
  const std::string examples =
      TestCluster::BinDir() + "/../../common/worker/python/examples/fashion_mnist_cnn/";
  ASSERT_EQ(mkdir((scratch.dir() + "/context").c_str(), 0755), 0);
  std::string context;
  for (const char* f : {"train.py", "model.py", "data.py"}) {
    std::string text = Slurp(examples + f);
    ASSERT_FALSE(text.empty()) << examples << f;
    context = scratch.WriteFile(std::string("context/") + f, text);
  }
  context = context.substr(0, context.rfind('/'));
  const std::string torch_config = scratch.WriteFile("torch.yaml", R"(name: tls-torch
entrypoint: python3 train.py
hyperparameters: {global_batch_size: 64, learning_rate: 0.002}
records_per_epoch: 60000
searcher: {name: single, metric: validation_loss, max_length: {batches: 40}}
min_validation_period: {batches: 40}
max_restarts: 0
data: {dir: /usr/share/datasets/fashion-mnist}
)");
  CommandResult torch = run({det, "-m", https, "experiment", "create", torch_config, context, "-f"},
                            {{"DET_MASTER_CERT_FILE", ca}});
  ASSERT_TRUE(torch.exit.ok()) << torch.out << torch.err << Slurp(data + "/logs/agent-0.log");
  CommandResult torch_trial =
      run({det, "-m", https, "trial", "describe", "2", "--json"}, {{"DET_MASTER_CERT_FILE", ca}});
  ASSERT_TRUE(torch_trial.exit.ok()) << torch_trial.err;
  nlohmann::json tt = nlohmann::json::parse(torch_trial.out, nullptr, false);
  EXPECT_EQ(tt["trial"].value("state", ""), "STATE_COMPLETED") << torch_trial.out;
  EXPECT_EQ(Int(tt["trial"]["validation_summary"]["validation_loss"]["count"]), 1) << torch_trial.out;

  // A plaintext client, or one without the CA, is refused.
  CommandResult plain = run({det, "-m", absl::StrCat("127.0.0.1:", grpc_port), "master", "info"}, {});
  EXPECT_FALSE(plain.exit.ok()) << plain.out;
  CommandResult untrusted = run({det, "-m", https, "master", "info"}, {});
  EXPECT_FALSE(untrusted.exit.ok()) << untrusted.out;
  EXPECT_THAT(untrusted.err, HasSubstr(absl::StrCat("127.0.0.1:", grpc_port)));
  CommandResult web = RunCommand({"curl", "-sS", "--max-time", "10", "-o", "/dev/null",
                                  absl::StrCat("http://127.0.0.1:", http_port, "/")});
  EXPECT_FALSE(web.exit.ok()) << "the web port answered plain HTTP";
}

}  // namespace
}  // namespace det::testing
