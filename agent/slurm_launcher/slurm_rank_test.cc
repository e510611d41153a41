#include "agent/slurm_launcher/slurm_rank.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::testing::HasSubstr;

v1::LaunchCommand LaunchOf(int ranks) {
  v1::LaunchCommand l;
  l.set_allocation_id("5.0");
  for (int i = 0; i < ranks; ++i) {
    v1::RankPlacement* r = l.add_ranks();
    r->set_rank(i);
    r->set_local_rank(i);
    r->set_agent_id("slurm-trial-5");
  }
  return l;
}

std::map<std::string, std::string> Task(int procid, int ntasks, int localid, int nodeid,
                                        int nnodes) {
  return {{"SLURM_PROCID", std::to_string(procid)}, {"SLURM_NTASKS", std::to_string(ntasks)},
          {"SLURM_LOCALID", std::to_string(localid)}, {"SLURM_NODEID", std::to_string(nodeid)},
          {"SLURM_NNODES", std::to_string(nnodes)}, {"SLURM_JOB_ID", "1001"},
          {"SLURM_LAUNCH_NODE_IPADDR", "10.0.0.7"}};
}

TEST(SlurmRankTest, TwoNodesOfTwoTasks) {
  struct Row {
    int procid, localid, nodeid;
  };
  for (const Row& row : std::vector<Row>{{0, 0, 0}, {1, 1, 0}, {2, 0, 1}, {3, 1, 1}}) {
    auto r = RankFromSlurm(LaunchOf(4), Task(row.procid, 4, row.localid, row.nodeid, 2),
                           /*cuda=*/false, 29500, 29999);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->rank.rank(), row.procid);
    EXPECT_EQ(r->rank.local_rank(), row.localid);
    EXPECT_EQ(r->rank.agent_id(), "slurm-trial-5");
    EXPECT_EQ(r->launch.world_size(), 4);
    EXPECT_EQ(r->launch.num_agents(), 2);
    EXPECT_EQ(r->launch.agent_rank(), row.nodeid);
    EXPECT_EQ(r->launch.ranks_size(), 2);  // LOCAL_WORLD_SIZE
    EXPECT_EQ(r->launch.chief_address(), "10.0.0.7");
    EXPECT_EQ(r->launch.chief_port(), 29500 + 1001 % 500);
    EXPECT_TRUE(r->rank.slot_ids().empty());
  }
}

TEST(SlurmRankTest, GpusAreTheTasksShareOfTheNodes) {
  auto env = Task(1, 2, 1, 0, 1);
  env["CUDA_VISIBLE_DEVICES"] = "2,3";
  auto r = RankFromSlurm(LaunchOf(2), env, /*cuda=*/true, 29500, 29999);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->rank.slot_ids_size(), 1);
  EXPECT_EQ(r->rank.slot_ids(0), "3");
  env["CUDA_VISIBLE_DEVICES"] = "2";
  auto few = RankFromSlurm(LaunchOf(2), env, /*cuda=*/true, 29500, 29999);
  EXPECT_EQ(few.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(few.status().message(), HasSubstr("CUDA_VISIBLE_DEVICES"));
}

TEST(SlurmRankTest, ErrorsNameTheVariable) {
  auto env = Task(0, 1, 0, 0, 1);
  env.erase("SLURM_PROCID");
  auto missing = RankFromSlurm(LaunchOf(1), env, false, 29500, 29999);
  EXPECT_THAT(missing.status().message(), HasSubstr("SLURM_PROCID is not set"));
  env = Task(0, 1, 0, 0, 1);
  env["SLURM_NTASKS"] = "x";
  EXPECT_THAT(RankFromSlurm(LaunchOf(1), env, false, 29500, 29999).status().message(),
              HasSubstr("SLURM_NTASKS is not a number"));
  auto shape = RankFromSlurm(LaunchOf(2), Task(0, 3, 0, 0, 1), false, 29500, 29999);
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shape.status().message(), HasSubstr("2 ranks"));
}

}  // namespace
}  // namespace det::agent
