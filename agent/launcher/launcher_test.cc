#include "agent/launcher/launcher.h"

#include <fstream>
#include <map>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::testing::HasSubstr;

std::map<std::string, std::string> AsMap(const EnvironmentVariables& env) {
  return {env.begin(), env.end()};
}

v1::LaunchCommand TwoAgentLaunch() {
  v1::LaunchCommand l;
  l.set_world_size(4);
  l.set_num_agents(2);
  l.set_agent_rank(1);
  (*l.mutable_env())["DET_TRIAL_ID"] = "7";
  for (int r = 2; r < 4; ++r) {
    auto* p = l.add_ranks();
    p->set_rank(r);
    p->set_agent_id("b");
    p->set_local_rank(r - 2);
    p->add_slot_ids(std::to_string(r - 2));
  }
  return l;
}

TEST(WorkerEnvironment, CarriesRanksAndHidesTheSecret) {
  v1::LaunchCommand l = TwoAgentLaunch();
  LaunchContext ctx{"b", "10.0.0.1:8080", "cuda", {"/opt/det/bin"}};
  auto env = AsMap(WorkerEnvironment(l, l.ranks(1), ctx,
                                     {{"PATH", "/usr/bin"}, {"DET_CLUSTER_SECRET", "s3cret"}, {"HOME", "/root"}}));
  EXPECT_EQ(env["RANK"], "3");
  EXPECT_EQ(env["WORLD_SIZE"], "4");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(env["CROSS_RANK"], "1");
  EXPECT_EQ(env["CROSS_SIZE"], "2");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "1");
  EXPECT_EQ(env["DET_MASTER"], "10.0.0.1:8080");
  EXPECT_EQ(env["DET_TRIAL_ID"], "7");
  EXPECT_EQ(env["PATH"], "/opt/det/bin:/usr/bin");
  EXPECT_EQ(env["HOME"], "/root");
  EXPECT_EQ(env.count("DET_CLUSTER_SECRET"), 0u);
}

TEST(WorkerEnvironment, CpuWorkersSeeNoGpu) {
  v1::LaunchCommand l = TwoAgentLaunch();
  LaunchContext ctx{"b", "m:1", "cpu", {}};
  auto env = AsMap(WorkerEnvironment(l, l.ranks(0), ctx, {}));
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "");
  EXPECT_EQ(env["DET_SLOT_IDS"], "0");
}

TEST(WriteContext, WritesFilesAndRefusesEscapes) {
  std::string dir = std::string(getenv("TEST_TMPDIR")) + "/ctx";
  google::protobuf::RepeatedPtrField<v1::ContextFile> files;
  auto* f = files.Add();
  f->set_path("src/model.txt");
  f->set_content("weights");
  f->set_mode(0600);
  ASSERT_TRUE(WriteContext(dir, files).ok());
  std::ifstream in(dir + "/src/model.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), "weights");

  for (const char* bad : {"../evil", "/etc/passwd", "a/../../b", ""}) {
    google::protobuf::RepeatedPtrField<v1::ContextFile> evil;
    evil.Add()->set_path(bad);
    absl::Status st = WriteContext(dir, evil);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(SafeName, KeepsOnlyHarmlessCharacters) {
  EXPECT_EQ(SafeName("12.0"), "12.0");
  EXPECT_EQ(SafeName("../x y"), "_.._x_y");
}

}  // namespace
}  // namespace det::agent
