// det-agent's flags: both spellings, the last one winning, and an error naming the flag for
// each bad input.
#include "agent/agent_flags.h"

#include <sstream>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::det::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Parsed {
  std::optional<AgentFlags> flags;
  int exit_code = -1;
  std::string out;
  std::string err;
};

Parsed Parse(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  std::variant<AgentFlags, int> r = ParseAgentFlags(args, out, err);
  Parsed p;
  if (const AgentFlags* f = std::get_if<AgentFlags>(&r)) p.flags = *f;
  if (const int* code = std::get_if<int>(&r)) p.exit_code = *code;
  p.out = out.str();
  p.err = err.str();
  return p;
}

TEST(AgentFlagsTest, TakesEachFlagInBothSpellings) {
  Parsed p = Parse(
      {"--config", "/etc/det/agent.yaml", "--system-metrics-period=250ms", "--task-user=nobody"});
  ASSERT_TRUE(p.flags) << p.err;
  EXPECT_EQ(p.flags->config_path, "/etc/det/agent.yaml");
  EXPECT_EQ(p.flags->system_metrics_period, absl::Milliseconds(250));
  EXPECT_EQ(p.flags->task_user, "nobody");
  p = Parse({"--config=a.yaml", "--system-metrics-period", "0", "--task-user", "65534:65534"});
  ASSERT_TRUE(p.flags) << p.err;
  EXPECT_EQ(p.flags->config_path, "a.yaml");
  EXPECT_EQ(p.flags->system_metrics_period, absl::ZeroDuration());
  EXPECT_EQ(p.flags->task_user, "65534:65534");
}

TEST(AgentFlagsTest, OptionalFlagsMayBeLeftOutAndTheLastOneWins) {
  Parsed p = Parse({"--config", "a.yaml", "--config", "b.yaml"});
  ASSERT_TRUE(p.flags) << p.err;
  EXPECT_EQ(p.flags->config_path, "b.yaml");
  EXPECT_FALSE(p.flags->system_metrics_period);
  EXPECT_EQ(p.flags->task_user, "");
}

TEST(AgentFlagsTest, ConfigIsRequired) {
  Parsed p = Parse({"--task-user", "nobody"});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_THAT(p.err, StartsWith("det-agent: --config AGENT_YAML is required\nusage: det-agent"));
}

TEST(AgentFlagsTest, ABadPeriodIsNamed) {
  for (const std::string bad : {"soon", "-5s", ""}) {
    Parsed p = Parse({"--config", "a.yaml", "--system-metrics-period", bad});
    EXPECT_EQ(p.exit_code, 2) << bad;
    EXPECT_EQ(p.err, "det-agent: --system-metrics-period: expected a duration such as 5s, got \"" +
                         bad + "\"\n");
  }
}

TEST(AgentFlagsTest, AnUnknownFlagOrArgumentPrintsTheUsage) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--config", "a.yaml", "--verbose"}, {"--config", "a.yaml", "extra"}}) {
    Parsed p = Parse(args);
    EXPECT_EQ(p.exit_code, 2);
    EXPECT_THAT(p.err, HasSubstr(args.back()));
    EXPECT_THAT(p.err, HasSubstr("usage: det-agent --config AGENT_YAML"));
  }
}

TEST(AgentFlagsTest, HelpListsTheFlags) {
  Parsed p = Parse({"--help"});
  EXPECT_EQ(p.exit_code, 0);
  EXPECT_THAT(p.out, HasSubstr("--config"));
  EXPECT_THAT(p.out, HasSubstr("--system-metrics-period"));
  EXPECT_THAT(p.out, HasSubstr("--task-user"));
  EXPECT_THAT(p.out, HasSubstr("SIGUSR1"));
}

TEST(AgentFlagsTest, TaskUserIsANameOrUidColonGid) {
  absl::StatusOr<std::pair<RunAs, std::string>> ids = ParseTaskUser("65534:65533");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->first.uid, 65534u);
  EXPECT_EQ(ids->first.gid, 65533u);
  EXPECT_EQ(ids->second, "");
  absl::StatusOr<std::pair<RunAs, std::string>> root = ParseTaskUser("root");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(root->first.uid, 0u);
  EXPECT_EQ(root->second, "root");
  EXPECT_THAT(ParseTaskUser("1:x").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--task-user: expected NAME or UID:GID, got \"1:x\""));
  EXPECT_THAT(ParseTaskUser("no-such-user-here").status(),
              StatusIs(absl::StatusCode::kNotFound, "--task-user: no user \"no-such-user-here\""));
}

}  // namespace
}  // namespace det::agent
