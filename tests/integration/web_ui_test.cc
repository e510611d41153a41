// The web page in a real browser: headless Chromium (Debian's `chromium`, installed by
// deploy/setup.sh) against a live master and agent after a short Fashion-MNIST experiment.
// The page must show the experiment list, the agent table and the trial's loss curves
// with the values the master stored. Screenshots go to TEST_UNDECLARED_OUTPUTS_DIR.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Quotes and markup in the name: the page must show it as text.
constexpr char kName[] = "web \"ui\" <b>bold</b> & 'done'";

std::string ExperimentYaml() {
  ExampleExperiment exp;
  exp.name = kName;
  exp.batches = 160;
  exp.validation_period = 40;
  exp.scheduling_unit = 20;
  return exp.Yaml();
}

std::string Chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

class WebUi : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium_ = Chromium();
    ASSERT_FALSE(chromium_.empty())
        << "chromium is not installed (deploy/setup.sh installs it): the web page cannot be "
           "tested";
    ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
    ASSERT_TRUE(cluster_.StartAgent("agent-a").ok()) << cluster_.LogTail("agent-a");
    const char* out = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
    outputs_ = out ? out : cluster_.dir();
  }

  // Runs headless Chromium on the page at `fragment` ("#/trials/1") with `mode`
  // ("--dump-dom" or "--screenshot=PATH"); its stdout.
  std::string Browse(const std::string& fragment, const std::string& mode,
                     bool with_token = true) {
    std::string profile = absl::StrCat(cluster_.dir(), "/chromium-", runs_++);
    mkdir(profile.c_str(), 0700);
    std::string url = absl::StrCat("http://", cluster_.http_address(), "/", fragment);
    if (with_token) {
      absl::StrAppend(&url, fragment.find('?') == std::string::npos ? "?" : "&", "token=",
                      cluster_.token());
    }
    CommandResult r = RunCommand(
        {chromium_, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--disable-dev-shm-usage", "--user-data-dir=" + profile,
         "--window-size=1280,900", "--virtual-time-budget=5000", mode, url},
        absl::Seconds(90));
    EXPECT_TRUE(r.exit.ok()) << "chromium failed (" << r.exit.ToString() << "):\n" << r.err;
    return r.out;
  }

  void Screenshot(const std::string& fragment, const std::string& file) {
    std::string path = outputs_ + "/" + file;
    unlink(path.c_str());
    Browse(fragment, "--screenshot=" + path);
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0) << "no screenshot at " << path;
    EXPECT_GT(st.st_size, 10000) << path;
  }

  TestCluster cluster_{"WebUi"};
  std::string chromium_;
  std::string outputs_;
  int runs_ = 0;
};

// The `name="value"` attributes of the first SVG path of series `series` in `dom`.
std::string SeriesPath(const std::string& dom, const std::string& series) {
  std::regex path_re("<path class=\"series[^\"]*\" [^>]*data-series=\"" + series + "\"[^>]*>");
  std::smatch m;
  return std::regex_search(dom, m, path_re) ? m.str() : "";
}

std::string Attr(const std::string& element, const std::string& name) {
  std::regex re(" " + name + "=\"([^\"]*)\"");
  std::smatch m;
  return std::regex_search(element, m, re) ? m[1].str() : "";
}

TEST_F(WebUi, ShowsExperimentsAgentsAndLossCurves) {
  std::string config = cluster_.WriteFile("exp.yaml", ExperimentYaml());
  CommandResult create = cluster_.Det({"experiment", "create", config, "-f"});
  ASSERT_TRUE(create.exit.ok()) << create.out << create.err << cluster_.LogTail("master");
  nlohmann::json d = cluster_.DetJson({"experiment", "describe", "1"});
  ASSERT_TRUE(d.is_object());
  ASSERT_EQ(d["experiment"]["name"], kName);
  ASSERT_EQ(d["experiment"]["state"], "STATE_COMPLETED");
  const auto& trial = d["trials"][0];
  const int64_t training_points = Int(trial["training_summary"]["loss"]["count"]);
  const int64_t validation_points = Int(trial["validation_summary"]["validation_loss"]["count"]);
  const double last_validation_loss =
      trial["validation_summary"]["validation_loss"]["last"].get<double>();
  ASSERT_EQ(training_points, 8);
  ASSERT_EQ(validation_points, 4);

  // The cluster overview: the experiment list and the agent table.
  std::string overview = Browse("#/", "--dump-dom");
  ASSERT_THAT(overview, HasSubstr("id=\"experiments-table\"")) << overview;
  EXPECT_THAT(overview, HasSubstr("web \"ui\" &lt;b&gt;bold&lt;/b&gt; &amp; 'done'"));
  EXPECT_THAT(overview, Not(HasSubstr("<b>bold</b>")));  // Shown as text, not markup.
  EXPECT_THAT(overview, HasSubstr("state-completed\">COMPLETED<"));
  EXPECT_THAT(overview, HasSubstr("<td class=\"experiment-owner\">admin</td>"));  // who created it
  ASSERT_THAT(overview, HasSubstr("id=\"agents-table\"")) << overview;
  EXPECT_THAT(overview, HasSubstr("data-agent=\"agent-a\""));
  EXPECT_THAT(overview, HasSubstr("<td class=\"num slots-used\">0 / 1</td>"));
  EXPECT_THAT(overview, HasSubstr("state-connected\">connected<"));
  EXPECT_THAT(overview, HasSubstr("id=\"card-agents\"><div class=\"value\">1 / 1<"));

  // The trial: loss curves with one point per stored report, ending at the stored value.
  std::string page = Browse("#/trials/1", "--dump-dom");
  std::string training = SeriesPath(page, "training loss");
  ASSERT_FALSE(training.empty()) << "no training loss curve in:\n" << page;
  EXPECT_EQ(Attr(training, "data-points"), absl::StrCat(training_points));
  std::string d_attr = Attr(training, "d");
  EXPECT_EQ(std::count(d_attr.begin(), d_attr.end(), 'L'), training_points - 1) << d_attr;
  std::string validation = SeriesPath(page, "validation validation_loss");
  ASSERT_FALSE(validation.empty()) << page;
  EXPECT_EQ(Attr(validation, "data-points"), absl::StrCat(validation_points));
  double shown_last = 0;
  ASSERT_TRUE(absl::SimpleAtod(Attr(validation, "data-last"), &shown_last)) << validation;
  EXPECT_NEAR(shown_last, last_validation_loss, 1e-9 * std::abs(last_validation_loss));
  EXPECT_THAT(page, HasSubstr("data-series=\"validation accuracy\""));
  EXPECT_THAT(page, HasSubstr("state-completed\">COMPLETED<"));
  EXPECT_THAT(page, HasSubstr("the trial has ended"));  // The logs were read to the end.
  EXPECT_THAT(page, HasSubstr("batch 160/160"));

  // The experiment: its trial and the same curve.
  std::string experiment = Browse("#/experiments/1", "--dump-dom");
  EXPECT_THAT(experiment, HasSubstr("id=\"trials-table\""));
  EXPECT_THAT(experiment, HasSubstr("href=\"#/trials/1\""));
  EXPECT_EQ(Attr(SeriesPath(experiment, "training loss"), "data-points"),
            absl::StrCat(training_points));

  // Without a session the page asks to log in and shows no data.
  std::string anonymous = Browse("#/", "--dump-dom", /*with_token=*/false);
  EXPECT_THAT(anonymous, HasSubstr("id=\"login-form\""));
  EXPECT_THAT(anonymous, Not(HasSubstr("agent-a")));

  Screenshot("#/", "overview.png");
  Screenshot("#/trials/1", "trial.png");
  Screenshot("#/experiments/1", "experiment.png");
}

}  // namespace
}  // namespace det::testing
