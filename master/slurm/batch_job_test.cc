#include "master/slurm/batch_job.h"

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::master::slurm {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(BatchJobTest, JobNamesRoundTrip) {
  const std::string prefix = JobNamePrefix("0123456789abcdef");
  EXPECT_EQ(prefix, "det-01234567-");
  EXPECT_EQ(AllocationOfJob(prefix, prefix + "12.3"), "12.3");
  EXPECT_EQ(AllocationOfJob(prefix, "det-other000-12.3"), "");
  EXPECT_EQ(AllocationOfJob(prefix, prefix), "");
}

TEST(BatchJobTest, Shapes) {
  config::SlurmConfig c;
  struct Row {
    int slots;
    int per_node;
    int nodes;
    int tasks_per_node;
  };
  for (const Row& r : std::vector<Row>{{0, 0, 1, 1}, {1, 0, 1, 1}, {4, 0, 1, 4}, {4, 2, 2, 2},
                                       {8, 4, 2, 4}, {3, 4, 1, 3}}) {
    c.slots_per_node = r.per_node;
    auto shape = ShapeOf(r.slots, c);
    ASSERT_TRUE(shape.ok()) << r.slots;
    EXPECT_EQ(shape->nodes, r.nodes) << r.slots << "/" << r.per_node;
    EXPECT_EQ(shape->tasks_per_node, r.tasks_per_node) << r.slots << "/" << r.per_node;
  }
  c.slots_per_node = 4;
  auto bad = ShapeOf(6, c);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("slots_per_trial 6"));
  EXPECT_THAT(bad.status().message(), HasSubstr("slots_per_node 4"));
}

TEST(BatchJobTest, ScriptHoldsTheLaunchAsBase64AndSettingsQuoted) {
  config::SlurmConfig c;
  c.partition = "gpu";
  c.account = "lab";
  c.slot_type = "cuda";
  c.gpu_type = "a100";
  c.sbatch_options = {"--time=01:00:00", "--job-name=theirs"};
  // User text with everything a shell would act on, inside the launch.
  const std::string launch = std::string("$(rm -rf /)'\"`\n;&|") + std::string(200000, 'x');
  auto job = MakeBatchJob(c, {2, 4}, "det-01234567-5.0",
                          {"10.0.0.1:8080", "slurm-trial-5", "abc123", "/opt/det/bin/det-slurm-launcher"},
                          launch);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->sbatch_args, Contains("--nodes=2"));
  EXPECT_THAT(job->sbatch_args, Contains("--ntasks-per-node=4"));
  EXPECT_THAT(job->sbatch_args, Contains("--gres=gpu:a100:4"));
  EXPECT_THAT(job->sbatch_args, Contains("--partition=gpu"));
  EXPECT_THAT(job->sbatch_args, Contains("--account=lab"));
  EXPECT_THAT(job->sbatch_args, Contains("--export=NONE"));
  EXPECT_THAT(job->sbatch_args, Contains("--time=01:00:00"));
  // det's job name comes after the site's, so it wins.
  auto theirs = std::find(job->sbatch_args.begin(), job->sbatch_args.end(), "--job-name=theirs");
  auto ours = std::find(job->sbatch_args.begin(), job->sbatch_args.end(), "--job-name=det-01234567-5.0");
  ASSERT_NE(ours, job->sbatch_args.end());
  EXPECT_LT(theirs, ours);
  // The user's bytes are only in base64, in pieces small enough for the environment.
  EXPECT_THAT(job->script, Not(HasSubstr("rm -rf")));
  std::string encoded;
  int chunks = 0;
  for (absl::string_view line : absl::StrSplit(job->script, '\n')) {
    const std::string prefix = absl::StrCat("export ", kLaunchChunkEnvPrefix, chunks, "='");
    if (absl::StartsWith(line, prefix)) {
      absl::string_view value = line.substr(prefix.size());
      ASSERT_TRUE(absl::EndsWith(value, "'"));
      value.remove_suffix(1);
      EXPECT_LE(value.size(), kLaunchChunkBytes);
      encoded += std::string(value);
      ++chunks;
    }
  }
  EXPECT_EQ(chunks, 5);
  EXPECT_THAT(job->script, HasSubstr(absl::StrCat("export ", kLaunchChunksEnv, "='5'")));
  std::string decoded;
  ASSERT_TRUE(absl::Base64Unescape(encoded, &decoded));
  EXPECT_EQ(decoded, launch);
  EXPECT_THAT(job->script, HasSubstr("export DET_MASTER='10.0.0.1:8080'\n"));
  EXPECT_THAT(job->script,
              HasSubstr("exec srun --export=ALL --ntasks-per-node=4 '/opt/det/bin/det-slurm-launcher'\n"));
}

TEST(BatchJobTest, RefusesSettingsThatWouldBreakTheScript) {
  config::SlurmConfig c;
  auto job = MakeBatchJob(c, {}, "det-x-1.0", {"m:1", "a", "s", "/bin/it's"}, "launch");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("resource_manager.launcher"));
}

TEST(BatchJobTest, ParsesSqueue) {
  auto jobs = ParseSqueue("12|det-01234567-5.0|PENDING|Resources|\n"
                          "13|other|RUNNING|None|n[1-2]\n"
                          "garbage\n");
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].id, "12");
  EXPECT_EQ(jobs[0].reason, "Resources");
  EXPECT_EQ(jobs[1].nodes, "n[1-2]");
}

TEST(BatchJobTest, States) {
  for (const char* s : {"PENDING", "CONFIGURING", "REQUEUED"}) {
    EXPECT_FALSE(Ended(s)) << s;
    EXPECT_FALSE(Started(s)) << s;
  }
  for (const char* s : {"RUNNING", "COMPLETING", "SUSPENDED"}) {
    EXPECT_FALSE(Ended(s)) << s;
    EXPECT_TRUE(Started(s)) << s;
  }
  for (const char* s : {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                        "OUT_OF_MEMORY", "BOOT_FAIL"}) {
    EXPECT_TRUE(Ended(s)) << s;
  }
}

TEST(BatchJobTest, GresGpus) {
  EXPECT_EQ(GresGpus("(null)"), 0);
  EXPECT_EQ(GresGpus(""), 0);
  EXPECT_EQ(GresGpus("gpu:2"), 2);
  EXPECT_EQ(GresGpus("gpu:a100:4(S:0-1)"), 4);
  EXPECT_EQ(GresGpus("gpu:a100:4(S:0,1),gpu:v100:2,shard:8"), 6);
  EXPECT_EQ(GresGpus("mps:100"), 0);
}

TEST(BatchJobTest, ParseSinfoMergesPartitions) {
  std::vector<NodeInfo> nodes = ParseSinfo(
      "n1|idle|16|(null)|debug*\n"
      "n2|mixed|32|gpu:a100:4(S:0-1)|debug*\n"
      "n2|mixed|32|gpu:a100:4(S:0-1)|gpu\n"
      "garbage line\n"
      "n3|down*|8|(null)|gpu\n");
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0].name, "n1");
  EXPECT_EQ(nodes[0].state, "idle");
  EXPECT_EQ(nodes[0].cpus, 16);
  EXPECT_EQ(nodes[0].gpus, 0);
  EXPECT_EQ(nodes[0].partitions, std::vector<std::string>{"debug"});
  EXPECT_EQ(nodes[1].name, "n2");
  EXPECT_EQ(nodes[1].gpus, 4);
  EXPECT_EQ(nodes[1].partitions, (std::vector<std::string>{"debug", "gpu"}));
  EXPECT_EQ(nodes[2].state, "down*");
}

TEST(BatchJobTest, ChiefPortIsInRange) {
  EXPECT_EQ(ChiefPort(0, 29500, 29999), 29500);
  EXPECT_EQ(ChiefPort(501, 29500, 29999), 29501);
  EXPECT_EQ(ChiefPort(7, 40000, 40000), 40000);
}

}  // namespace
}  // namespace det::master::slurm
