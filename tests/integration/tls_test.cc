// TLS on the master's gRPC port: the CLI, the agent and the workers verify the master
// against the CA named by DET_MASTER_CERT_FILE; a client without it gets a clear error.
#include <cstdlib>

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

}  // namespace
}  // namespace det::testing
