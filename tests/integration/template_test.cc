// Config templates with real processes: det template set/list/describe/remove, experiments
// created with --template and --config, the stored effective config, and what a later
// change to the template does not change. No agent: the experiments only need to exist.
#include <signal.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kTemplate[] = R"(description: from the template
resources:
  priority: 7
bind_mounts:
  - host_path: /tmp/template-data
    container_path: /data
  - host_path: /tmp/template-cache
    container_path: /cache
labels: [team-a]
checkpoint_storage:
  type: shared_fs
  host_path: /tmp/checkpoints
)";

constexpr char kConfig[] = R"(name: templated
entrypoint: det-fashion-mnist
searcher:
  name: single
  metric: validation_loss
  max_length: {batches: 10}
bind_mounts:
  - host_path: /tmp/config-data
    container_path: /data
labels: [mine]
)";

class Templates : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master"); }

  // `det ARGS`, which must succeed; its stdout.
  std::string Ok(const std::vector<std::string>& args) {
    CommandResult r = cluster_.Det(args);
    EXPECT_TRUE(r.exit.ok()) << "det " << args[0] << " " << args[1] << ": " << r.err;
    return r.out;
  }
  // `det ARGS`, which must fail; its stderr.
  std::string Fails(const std::vector<std::string>& args) {
    CommandResult r = cluster_.Det(args);
    EXPECT_FALSE(r.exit.ok()) << r.out;
    return r.err;
  }

  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TEST_F(Templates, MergedAtCreationAndNeverAfter) {
  std::string tpl = cluster_.WriteFile("tpl.yaml", kTemplate);
  std::string exp = cluster_.WriteFile("exp.yaml", kConfig);
  EXPECT_EQ(Ok({"tpl", "set", "base", tpl}), "Created template base\n");
  EXPECT_THAT(Ok({"template", "list"}), HasSubstr(" base "));
  EXPECT_THAT(Ok({"tpl", "list", "-d"}), HasSubstr("    - host_path: /tmp/template-cache"));
  EXPECT_EQ(Ok({"tpl", "describe", "base"}), kTemplate);

  EXPECT_THAT(Ok({"experiment", "create", exp, "--template", "base", "--config",
                  "resources.priority=5", "--config", "max_restarts=1"}),
              HasSubstr("Created experiment 1"));
  const std::string first = Ok({"experiment", "config", "1"});
  // Scalars: the config's, else the template's, and overrides over both.
  EXPECT_THAT(first, HasSubstr("name: templated"));
  EXPECT_THAT(first, HasSubstr("description: from the template"));
  EXPECT_THAT(first, HasSubstr("priority: 5"));
  EXPECT_THAT(first, HasSubstr("max_restarts: 1"));
  // Lists: the template's items, then the config's; the template's /data mount is dropped.
  EXPECT_THAT(first, HasSubstr("  - team-a\n  - mine\n"));
  EXPECT_THAT(first, Not(HasSubstr("/tmp/template-data")));
  ASSERT_NE(first.find("/tmp/template-cache"), std::string::npos);
  EXPECT_LT(first.find("/tmp/template-cache"), first.find("/tmp/config-data"));
  // Objects from the template, with their defaults filled in.
  EXPECT_THAT(first, HasSubstr("host_path: /tmp/checkpoints"));
  EXPECT_THAT(first, HasSubstr("save_trial_best: 1"));
  EXPECT_THAT(first, Not(HasSubstr("\ntemplate:")));

  // The template changes: new experiments see it, the first does not.
  std::string tpl2 = cluster_.WriteFile("tpl2.yaml", "resources:\n  priority: 9\nlabels: [team-b]\n");
  EXPECT_EQ(Ok({"tpl", "set", "base", tpl2}), "Replaced template base\n");
  EXPECT_THAT(Ok({"tpl", "describe", "base"}), HasSubstr("priority: 9"));
  EXPECT_THAT(Ok({"experiment", "create", exp, "-t", "base"}), HasSubstr("Created experiment 2"));
  const std::string second = Ok({"experiment", "config", "2"});
  EXPECT_THAT(second, HasSubstr("priority: 9"));
  EXPECT_THAT(second, HasSubstr("  - team-b\n  - mine\n"));
  EXPECT_THAT(second, Not(HasSubstr("checkpoints")));
  EXPECT_EQ(Ok({"experiment", "config", "1"}), first);

  // Removed: the experiments keep their configs; new ones cannot use it.
  EXPECT_EQ(Ok({"tpl", "remove", "base"}), "Removed template base\n");
  EXPECT_EQ(Ok({"experiment", "config", "1"}), first);
  EXPECT_THAT(Fails({"experiment", "create", exp, "--template", "base"}),
              HasSubstr("template 'base' does not exist"));
  EXPECT_THAT(Fails({"tpl", "describe", "base"}), HasSubstr("template 'base' does not exist"));
}

TEST_F(Templates, ErrorsNameTheTemplateAndTheLine) {
  std::string nested = cluster_.WriteFile("nested.yaml", "description: x\ntemplate: other\n");
  EXPECT_THAT(Fails({"tpl", "set", "t", nested}),
              HasSubstr("nested.yaml:2: template: a template cannot use another template (it "
                        "names 'other')"));
  std::string typo = cluster_.WriteFile("typo.yaml", "resources:\n  slot_per_trial: 2\n");
  EXPECT_THAT(Fails({"tpl", "set", "t", typo}),
              HasSubstr("typo.yaml:2: resources.slot_per_trial: unknown key (did you mean "
                        "'slots_per_trial'?)"));
  EXPECT_THAT(Fails({"tpl", "set", "bad name", typo}), HasSubstr("template name 'bad name'"));
  EXPECT_EQ(Ok({"tpl", "list"}), " Name | Created | Updated\n------+---------+---------\n");

  std::string exp = cluster_.WriteFile("exp.yaml", kConfig);
  EXPECT_THAT(Fails({"experiment", "create", exp, "--config", "resources.slots_per_trial=eight"}),
              HasSubstr("--config resources.slots_per_trial=eight: resources.slots_per_trial: "
                        "expected an integer >= 0, got \"eight\""));
  std::string good = cluster_.WriteFile("good.yaml", "resources:\n  slots_per_trial: many\n");
  // Templates are checked when set, so only a value of the right type reaches experiments;
  // a config naming a template picks it up too.
  EXPECT_THAT(Fails({"tpl", "set", "base", good}),
              HasSubstr("good.yaml:2: resources.slots_per_trial: expected an integer >= 0"));
  std::string base = cluster_.WriteFile("base.yaml", "max_restarts: 3\n");
  Ok({"tpl", "set", "base", base});
  std::string named = cluster_.WriteFile("named.yaml", std::string(kConfig) + "template: base\n");
  EXPECT_THAT(Ok({"experiment", "create", named}), HasSubstr("Created experiment 1"));
  EXPECT_THAT(Ok({"experiment", "config", "1"}), HasSubstr("max_restarts: 3"));
  EXPECT_THAT(Fails({"experiment", "create", named, "--template", "other"}),
              HasSubstr("named.yaml:11: template: the config names template 'base' but "
                        "--template names 'other'"));

  // Templates live in the master's database.
  cluster_.StopMaster(SIGTERM);
  ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
  EXPECT_EQ(Ok({"tpl", "describe", "base"}), "max_restarts: 3\n");
}

}  // namespace
}  // namespace det::testing
