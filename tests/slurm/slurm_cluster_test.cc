// The test Slurm itself: two slurmds on this machine come up idle, and a two-node batch job
// runs one task on each and completes.
#include "tests/slurm/slurm_cluster.h"

#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

TEST(SlurmClusterTest, TwoNodesRunABatchJob) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "slurmd must run as root to start jobs; this test runs as uid " << geteuid();
  }
  SlurmCluster slurm;
  ASSERT_TRUE(slurm.Start({.nodes = {"n1", "n2"}}).ok());
  EXPECT_EQ(slurm.NodeState("n1"), "idle");
  EXPECT_EQ(slurm.NodeState("n2"), "idle");

  const std::string script = slurm.dir() + "/job.sh";
  std::ofstream(script) << "#!/bin/sh\nexec srun printenv SLURM_PROCID SLURM_NODEID\n";
  const std::string out = slurm.dir() + "/job.out";
  auto id = slurm.Run({"sbatch", "--parsable", "--job-name=det-harness", "--nodes=2",
                       "--ntasks-per-node=1", "--output=" + out, script});
  ASSERT_TRUE(id.ok()) << id.status();
  const std::string job(absl::StripAsciiWhitespace(*id));
  std::string state;
  ASSERT_TRUE(WaitUntil("the job completed", [&] {
    auto s = slurm.Run({"squeue", "-h", "--states=all", "-j", job, "-o", "%T"});
    state = s.ok() ? std::string(absl::StripAsciiWhitespace(*s)) : "";
    return state == "COMPLETED" || state == "FAILED";
  }, absl::Seconds(60), absl::Milliseconds(200)));
  EXPECT_EQ(state, "COMPLETED");
  const std::string text = Slurp(out);
  // Task 0 on node 0, task 1 on node 1 (printenv prints both values, in order).
  EXPECT_NE(text.find("0\n0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("1\n1\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace det::testing
