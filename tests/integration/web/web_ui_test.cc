// The web page in a real browser: headless Chromium (Debian's `chromium`, installed by
// deploy/setup.sh) against a live master and agent after a short Fashion-MNIST experiment
// and a small grid search. The page must show the experiment list, the agent table, the
// trial's curves with the values the master stored, and what a person reads of a search:
// hyperparameter columns, the best trial marked, an accuracy chart on accuracy's range,
// no diagnostics unless asked, no raw floats. Screenshots (overview.png, experiments.png,
// experiment.png, search.png, trial.png) go to TEST_UNDECLARED_OUTPUTS_DIR. A search's
// charts, selection and comparison: web_search_test.
#include <algorithm>
#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"
#include "tests/integration/web/browser.h"

namespace det::testing {
namespace {

using ::testing::ContainsRegex;
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

class WebUi : public WebTest {
 protected:
  WebUi() : WebTest("WebUi", 1) {}

  // The page's DOM at `fragment` ("#/trials/1").
  std::string Browse(const std::string& fragment, bool with_token = true,
                     const std::string& window = "1280,900") {
    return browser_.Dom(fragment, window, with_token);
  }

  // A screenshot of the page at `fragment`: a whole image of the window's size, not blank.
  void Screenshot(const std::string& fragment, const std::string& file,
                  const std::string& window = "1280,900") {
    absl::StatusOr<Image> shot = browser_.Screenshot(fragment, Out(file), window);
    ASSERT_TRUE(shot.ok()) << shot.status();
    EXPECT_EQ(absl::StrCat(shot->width, ",", shot->height), window) << file;
    EXPECT_GT(CountColor(*shot, {0, 0, 1280, 40}, *Rgb::Parse("#1d2330"), 4), 10000)
        << file << ": no header bar";
  }
};

// What a person reads of `dom`: the text outside tags, without scripts, logs (the
// program's own text) and <code> (ids, paths).
std::string VisibleText(const std::string& dom) {
  // Plain string scans: std::regex recurses per character and overflows on long pages.
  std::string text = dom;
  auto drop = [&text](const std::string& open, const std::string& close) {
    for (size_t at = text.find(open); at != std::string::npos; at = text.find(open, at)) {
      size_t end = text.find(close, at);
      text.erase(at, end == std::string::npos ? std::string::npos : end + close.size() - at);
    }
  };
  drop("<script", "</script>");
  drop("<pre class=\"logs\"", "</pre>");
  drop("<code>", "</code>");
  std::string out;
  bool in_tag = false;
  for (char c : text) {
    if (c == '<') in_tag = true;
    if (!in_tag) out += c;
    if (c == '>') {
      in_tag = false;
      out += ' ';
    }
  }
  return out;
}

// The y-axis labels of `chart`, as numbers.
std::vector<double> YLabels(const std::string& chart) {
  std::vector<double> out;
  std::regex re("<text class=\"ytick\"[^>]*>([^<]*)</text>");
  for (std::sregex_iterator it(chart.begin(), chart.end(), re), end; it != end; ++it) {
    double v = 0;
    EXPECT_TRUE(absl::SimpleAtod((*it)[1].str(), &v)) << "label '" << (*it)[1].str() << "'";
    out.push_back(v);
  }
  return out;
}

// A number printed with more digits than a person reads: a raw double.
const char kRawFloat[] = "[0-9]\\.[0-9]{8,}";

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
  std::string overview = Browse("#/");
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
  std::string page = Browse("#/trials/1");
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
  // One chart per metric; accuracy on accuracy's range, never stretched by a hash.
  std::string accuracy = ChartHtml(page, "accuracy");
  ASSERT_FALSE(accuracy.empty()) << page;
  std::vector<double> labels = YLabels(accuracy);
  ASSERT_GE(labels.size(), 2u) << accuracy;
  for (double v : labels) {
    EXPECT_GE(v, 0) << accuracy;
    EXPECT_LE(v, 1) << accuracy;
  }
  // Log lines carry their time and rank; timings have units.
  EXPECT_THAT(page, ContainsRegex("<span class=\"ts\">20[0-9][0-9]-[0-9][0-9]-[0-9][0-9] "
                                  "[0-9][0-9]:[0-9][0-9]:[0-9][0-9]\\.[0-9][0-9][0-9]</span>"));
  EXPECT_THAT(page, HasSubstr("<span class=\"rank\">[rank 0]</span>"));
  EXPECT_THAT(page, HasSubstr("id=\"timings-table\""));
  EXPECT_THAT(page, ContainsRegex("<td>train_batch</td><td class=\"num\">[0-9.]+ (ns|µs|ms|s)<"));
  // Diagnostics (the example's hashes) only when asked; no raw doubles.
  std::string visible = VisibleText(page);
  EXPECT_THAT(visible, Not(HasSubstr("diag/"))) << visible;
  EXPECT_THAT(visible, Not(ContainsRegex(kRawFloat))) << visible;
  std::string diagnostics = VisibleText(Browse("#/trials/1?diagnostics=1"));
  EXPECT_THAT(diagnostics, HasSubstr("diag/params_hash_hi"));
  EXPECT_THAT(diagnostics, ContainsRegex("0x[0-9a-f]+"));  // hashes in hex

  // The experiment: its trial and the same curve.
  std::string experiment = Browse("#/experiments/1");
  EXPECT_THAT(experiment, HasSubstr("id=\"trials-table\""));
  EXPECT_THAT(experiment, HasSubstr("href=\"#/trials/1\""));
  EXPECT_EQ(Attr(SeriesPath(experiment, "training loss"), "data-points"),
            absl::StrCat(training_points));
  EXPECT_THAT(VisibleText(experiment), Not(HasSubstr("diag/")));
  // A single trial: no search section, no best mark; a completed experiment: no buttons.
  EXPECT_THAT(experiment, HasSubstr("id=\"search-section\" hidden=\"\""));
  EXPECT_THAT(experiment, Not(HasSubstr("★ best")));
  EXPECT_THAT(experiment, HasSubstr("id=\"act-kill\" class=\"danger\" hidden=\"\""));
  EXPECT_THAT(experiment, HasSubstr("id=\"act-pause\" hidden=\"\""));
  // Ended: Archive offered (Unarchive once archived), and a label can be added.
  EXPECT_THAT(experiment, HasSubstr("<button id=\"act-archive\">Archive</button>"));
  EXPECT_THAT(experiment, HasSubstr("id=\"act-unarchive\" hidden=\"\""));
  EXPECT_THAT(experiment, HasSubstr("id=\"act-label\""));

  // Without a session the page asks to log in and shows no data.
  std::string anonymous = Browse("#/", /*with_token=*/false);
  EXPECT_THAT(anonymous, HasSubstr("id=\"login-form\""));
  EXPECT_THAT(anonymous, Not(HasSubstr("agent-a")));

  Screenshot("#/", "overview.png");
  Screenshot("#/experiments/1", "experiment.png", "1280,1600");
}

// A grid search of two learning rates, 30 batches each: the experiment list, the search's
// page (trial table, best trial, scatter, charts) and a trial page as a person sees them.
TEST_F(WebUi, ShowsASearchAsAPersonReadsIt) {
  std::string config = cluster_.WriteFile(
      "grid.yaml",
      GridYaml("lr grid", 30) + "min_validation_period: {batches: 10}\nscheduling_unit: 10\n");
  CommandResult create = cluster_.Det({"experiment", "create", config, "-f"});
  ASSERT_TRUE(create.exit.ok()) << create.out << create.err << cluster_.LogTail("master");
  nlohmann::json d = cluster_.DetJson({"experiment", "describe", "1"});
  ASSERT_EQ(d["experiment"]["state"], "STATE_COMPLETED") << d.dump();
  ASSERT_EQ(d["trials"].size(), 2u) << d.dump();
  // The best trial by the searcher's metric, as the master stored it.
  int64_t best = -1;
  double best_loss = 0;
  for (const auto& t : d["trials"]) {
    double loss = t["validation_summary"]["validation_loss"]["min"].get<double>();
    if (best < 0 || loss < best_loss) {
      best = Int(t["id"]);
      best_loss = loss;
    }
  }
  const int64_t worst = best == Int(d["trials"][0]["id"]) ? Int(d["trials"][1]["id"])
                                                          : Int(d["trials"][0]["id"]);

  std::string list = Browse("#/experiments");
  EXPECT_THAT(list, HasSubstr(">lr grid</a>"));
  EXPECT_THAT(list, HasSubstr("100%"));

  std::string page = Browse(absl::StrCat("#/experiments/1"), /*with_token=*/true, "1280,2400");
  std::string visible = VisibleText(page);
  // One column per hyperparameter, numbers as people write them, never raw JSON.
  for (const char* hp : {"global_batch_size", "hidden_size", "learning_rate"}) {
    EXPECT_THAT(page, HasSubstr(absl::StrCat("<th data-sort=\"hp:", hp, "\" class=\"num hp\"")))
        << hp << page;
  }
  EXPECT_THAT(page, HasSubstr("<td class=\"num\">0.05</td>"));
  EXPECT_THAT(page, HasSubstr("<td class=\"num\">0.0001</td>"));
  EXPECT_THAT(visible, Not(HasSubstr("{\""))) << visible;
  EXPECT_THAT(visible, Not(HasSubstr("&quot;"))) << visible;
  // The searcher metric's best value, the best trial marked (once, the right one).
  EXPECT_THAT(page, HasSubstr("best validation_loss (min)"));
  EXPECT_THAT(page, HasSubstr(absl::StrCat("<tr class=\"trial-row best\" data-trial=\"", best, "\"")));
  EXPECT_THAT(page, HasSubstr(absl::StrCat("<tr class=\"trial-row\" data-trial=\"", worst, "\"")));
  size_t marks = 0;
  for (size_t at = page.find("★ best"); at != std::string::npos; at = page.find("★ best", at + 1)) {
    ++marks;
  }
  EXPECT_EQ(marks, 1u) << page;
  EXPECT_THAT(page, HasSubstr(absl::StrCat("Best trial: <a href=\"#/trials/", best, "\">")));
  // The scatter of the metric against the hyperparameter that varies.
  EXPECT_THAT(page, HasSubstr("data-title=\"best validation_loss by learning_rate\""));
  EXPECT_THAT(page, HasSubstr(absl::StrCat("class=\"point best\"")));
  EXPECT_THAT(page, HasSubstr("data-xscale=\"log\""));  // 0.0001 .. 0.05
  // Charts: one per metric, both trials on it; accuracy within [0, 1].
  std::string accuracy = ChartHtml(page, "accuracy");
  ASSERT_FALSE(accuracy.empty()) << page;
  EXPECT_THAT(accuracy, HasSubstr(absl::StrCat("data-series=\"trial ", best, " validation accuracy\"")));
  EXPECT_THAT(accuracy, HasSubstr(absl::StrCat("data-series=\"trial ", worst, " validation accuracy\"")));
  std::vector<double> labels = YLabels(accuracy);
  ASSERT_GE(labels.size(), 2u) << accuracy;
  for (double v : labels) {
    EXPECT_GE(v, 0) << accuracy;
    EXPECT_LE(v, 1) << accuracy;
  }
  EXPECT_THAT(visible, Not(HasSubstr("diag/"))) << visible;
  EXPECT_THAT(visible, Not(ContainsRegex(kRawFloat))) << visible;
  EXPECT_THAT(page, HasSubstr("id=\"act-kill\" class=\"danger\" hidden=\"\""));  // completed

  // Sorted by the best metric, largest first: the worst trial's row comes first.
  std::string sorted = Browse("#/experiments/1?sort=best&dir=-1");
  size_t best_row = sorted.find(absl::StrCat("data-trial=\"", best, "\""));
  size_t worst_row = sorted.find(absl::StrCat("data-trial=\"", worst, "\""));
  ASSERT_NE(best_row, std::string::npos) << sorted;
  ASSERT_NE(worst_row, std::string::npos) << sorted;
  EXPECT_LT(worst_row, best_row);
  EXPECT_THAT(sorted, HasSubstr("best validation_loss (min) ▼"));

  // Diagnostics on: the hashes appear, in hex.
  std::string diagnostics = VisibleText(Browse("#/experiments/1?diagnostics=1"));
  EXPECT_THAT(diagnostics, HasSubstr("diag/"));

  // The best trial's page: its hyperparameters, its curves.
  std::string trial = Browse(absl::StrCat("#/trials/", best));
  EXPECT_THAT(trial, HasSubstr("id=\"hparams-table\""));
  EXPECT_THAT(trial, HasSubstr("<td>learning_rate</td>"));
  EXPECT_FALSE(ChartHtml(trial, "validation_loss").empty()) << trial;
  EXPECT_THAT(VisibleText(trial), Not(HasSubstr("diag/")));
  EXPECT_THAT(VisibleText(trial), Not(ContainsRegex(kRawFloat)));

  Screenshot("#/experiments", "experiments.png");
  Screenshot("#/experiments/1", "search.png", "1280,2400");
  Screenshot(absl::StrCat("#/trials/", best), "trial.png", "1280,2000");
}

}  // namespace
}  // namespace det::testing
