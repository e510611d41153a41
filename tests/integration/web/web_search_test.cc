// The web page of a search in headless Chromium (Debian's `chromium`, installed by
// deploy/setup.sh), against a live master and a 4-slot agent: a 16-trial grid search of a
// det.core worker whose losses are a known function of its hyperparameters
// (search_train.py). Checked in the DOM and in screenshots (pixels where the charts are):
// all 16 trials on one chart, each in its colour; the best N and a selection;
// the parallel-coordinates chart; a 3-trial comparison; the checkpoint table; log search
// and level filter; the experiment list's label filter and best-metric column; a paused
// experiment's duration that does not count on. Screenshots go to
// TEST_UNDECLARED_OUTPUTS_DIR.
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_cluster.h"
#include "tests/integration/web/browser.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The parallel chart's SVG size (PC in master/http/web/charts.js).
constexpr double kPcWidth = 1000, kPcHeight = 330;
const Rgb kBestLine = *Rgb::Parse("#d9480f");

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

struct Point {
  double x = 0, y = 0;
};

std::vector<Point> PolylinePoints(const std::string& polyline) {
  std::vector<Point> out;
  for (absl::string_view pair : absl::StrSplit(Attr(polyline, "points"), ' ')) {
    std::vector<std::string> xy = absl::StrSplit(pair, ',');
    Point p;
    if (xy.size() == 2 && absl::SimpleAtod(xy[0], &p.x) && absl::SimpleAtod(xy[1], &p.y)) {
      out.push_back(p);
    }
  }
  return out;
}

class WebSearch : public WebTest {
 protected:
  WebSearch() : WebTest("WebSearch", 4) {}

  void SetUp() override {
    WebTest::SetUp();
    if (HasFatalFailure()) return;
    WriteSearchContext();
  }

  // Creates the experiment of `yaml`; with `follow`, waits for it to end.
  void Create(const std::string& file, const std::string& yaml, bool follow) {
    std::vector<std::string> args = {"experiment", "create", cluster_.WriteFile(file, yaml),
                                     cluster_.dir() + "/context"};
    if (follow) args.push_back("-f");
    CommandResult r = cluster_.Det(args);
    ASSERT_TRUE(r.exit.ok()) << r.out << r.err << cluster_.LogTail("master");
  }

};

std::string GridYaml(const std::string& storage) {
  return absl::StrCat(R"(name: sixteen
entrypoint: python3 search_train.py
hyperparameters:
  lr: {type: categorical, vals: [0.001, 0.01, 0.1, 1.0]}
  width: {type: categorical, vals: [8, 16, 32, 64]}
searcher: {name: grid, metric: validation_loss, smaller_is_better: true, max_length: {batches: 4}}
checkpoint_storage: {type: shared_fs, host_path: ')",
                      storage, R"(', save_trial_latest: 1}
max_restarts: 0
)");
}

TEST_F(WebSearch, SixteenTrialsOnAChartParallelCoordinatesAndACompareView) {
  const std::string storage = cluster_.dir() + "/checkpoints";
  ASSERT_EQ(mkdir(storage.c_str(), 0755), 0);
  Create("grid.yaml", GridYaml(storage), /*follow=*/true);
  nlohmann::json d = cluster_.DetJson({"experiment", "describe", "1"});
  ASSERT_EQ(d["experiment"]["state"], "STATE_COMPLETED") << d.dump();
  ASSERT_EQ(d["trials"].size(), 16u) << d.dump();
  // Each trial's best validation loss, as the master stored it; ids best first.
  std::map<int64_t, double> best_loss;
  std::vector<int64_t> ranked;
  for (const auto& t : d["trials"]) {
    ASSERT_EQ(t["state"], "STATE_COMPLETED") << t.dump();
    best_loss[Int(t["id"])] = t["validation_summary"]["validation_loss"]["min"].get<double>();
    ranked.push_back(Int(t["id"]));
  }
  std::sort(ranked.begin(), ranked.end(), [&](int64_t a, int64_t b) {
    return best_loss[a] < best_loss[b] || (best_loss[a] == best_loss[b] && a < b);
  });
  const int64_t best = ranked.front();
  const std::string window = "1280,3200";

  // All 16 trials on the training-loss chart, each in its own colour.
  const std::string all_frag = "#/experiments/1?trials=all&metric=loss";
  std::string page = browser_.Dom(all_frag, window);
  EXPECT_THAT(page, HasSubstr("16 of 16 trial(s) charted"));
  EXPECT_EQ(Count(page, "<input type=\"checkbox\" data-pick="), 16) << "a check box per trial";
  std::string loss = ChartHtml(page, "loss");
  ASSERT_FALSE(loss.empty()) << page;
  std::map<int64_t, std::string> color;  // trial -> "#rrggbb" on the chart
  for (const std::string& path : Elements(loss, "path")) {
    const std::string series = Attr(path, "data-series");
    int64_t id = 0;
    std::vector<std::string> words = absl::StrSplit(series, ' ');
    ASSERT_EQ(words.size(), 4u) << series;
    ASSERT_TRUE(absl::SimpleAtoi(words[1], &id)) << series;
    EXPECT_EQ(words[2] + " " + words[3], "training loss") << series;
    EXPECT_EQ(Attr(path, "data-points"), "4") << path;
    color[id] = Attr(path, "stroke");
  }
  ASSERT_EQ(color.size(), 16u) << loss;
  std::set<std::string> distinct;
  for (const auto& [id, c] : color) distinct.insert(c);
  EXPECT_EQ(distinct.size(), 16u) << "16 trials, 16 colours";
  std::optional<Box> box = ChartBox(loss);
  ASSERT_TRUE(box.has_value()) << loss;
  absl::StatusOr<Image> shot = browser_.Screenshot(all_frag, Out("search_16_trials.png"), window);
  ASSERT_TRUE(shot.ok()) << shot.status();
  for (const auto& [id, c] : color) {
    EXPECT_GE(CountColor(*shot, *box, *Rgb::Parse(c)), 20)
        << "trial " << id << "'s curve (" << c << ") is not drawn in the loss chart at "
        << box->x << "," << box->y;
  }
  // Outside the chart, the top-left corner of the page: none of the curves' colours.
  EXPECT_EQ(CountColor(*shot, {0, 40, 300, 60}, *Rgb::Parse(color[best])), 0);

  // The best 3 by the searcher metric; a selection of 2.
  std::string best3 = ChartHtml(browser_.Dom("#/experiments/1?trials=best&best=3&metric=loss", window), "loss");
  std::vector<std::string> best3_paths = Elements(best3, "path");
  ASSERT_EQ(best3_paths.size(), 3u) << best3;
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(best3, HasSubstr(absl::StrCat("data-series=\"trial ", ranked[i], " training loss\"")));
  }
  std::string sel = browser_.Dom(
      absl::StrCat("#/experiments/1?trials=selected&sel=", ranked[15], ",", ranked[7], "&metric=loss"), window);
  EXPECT_EQ(Elements(ChartHtml(sel, "loss"), "path").size(), 2u);
  EXPECT_THAT(sel, HasSubstr(absl::StrCat("data-pick=\"", ranked[7], "\" title=\"select trial ",
                                          ranked[7], "\" checked")));
  EXPECT_THAT(sel, HasSubstr("id=\"compare-link\""));

  // The parallel coordinates: lr (log), width, the metric; one line per trial, the best on
  // top in orange; a lower loss lower on the metric axis.
  std::string pc = ChartHtml(page, "parallel coordinates: validation_loss");
  ASSERT_FALSE(pc.empty()) << page;
  std::vector<std::string> axes = Elements(pc, "line");
  ASSERT_EQ(axes.size(), 3u) << pc;
  EXPECT_EQ(Attr(axes[0], "data-dim"), "lr");
  EXPECT_EQ(Attr(axes[0], "data-scale"), "log");
  EXPECT_EQ(Attr(axes[1], "data-dim"), "width");
  EXPECT_EQ(Attr(axes[2], "data-dim"), "best validation_loss");
  std::vector<std::string> lines = Elements(pc, "polyline");
  ASSERT_EQ(lines.size(), 16u) << pc;
  std::map<int64_t, double> metric_y;
  std::vector<Point> best_points;
  for (const std::string& l : lines) {
    int64_t id = 0;
    ASSERT_TRUE(absl::SimpleAtoi(Attr(l, "data-trial"), &id)) << l;
    std::vector<Point> pts = PolylinePoints(l);
    ASSERT_EQ(pts.size(), 3u) << l;
    metric_y[id] = pts[2].y;
    if (id == best) {
      EXPECT_EQ(Attr(l, "class"), "pc-line best") << l;
      EXPECT_EQ(Attr(l, "stroke"), "#d9480f");
      best_points = pts;
    } else {
      EXPECT_EQ(Attr(l, "class"), "pc-line") << l;
    }
  }
  EXPECT_EQ(Attr(lines.back(), "data-trial"), absl::StrCat(best)) << "the best is drawn last";
  for (size_t i = 1; i < ranked.size(); ++i) {
    if (best_loss[ranked[i]] > best_loss[ranked[i - 1]]) {
      EXPECT_LT(metric_y[ranked[i]], metric_y[ranked[i - 1]]) << "trial " << ranked[i];
    }
  }
  std::optional<Box> pc_box = ChartBox(pc);
  ASSERT_TRUE(pc_box.has_value()) << pc;
  const double sx = pc_box->width / kPcWidth, sy = pc_box->height / kPcHeight;
  // In the screenshot: the best line's orange at each of its three vertices, and each axis a
  // dark vertical line where the chart puts it.
  for (const Point& p : best_points) {
    Box around{pc_box->x + p.x * sx - 4, pc_box->y + p.y * sy - 4, 8, 8};
    EXPECT_GE(CountColor(*shot, around, kBestLine, 10), 4)
        << "no orange at the best line's vertex " << p.x << "," << p.y;
  }
  for (const std::string& a : axes) {
    double x = 0, y1 = 0, y2 = 0;
    ASSERT_TRUE(absl::SimpleAtod(Attr(a, "x1"), &x));
    ASSERT_TRUE(absl::SimpleAtod(Attr(a, "y1"), &y1));
    ASSERT_TRUE(absl::SimpleAtod(Attr(a, "y2"), &y2));
    const int px = static_cast<int>(pc_box->x + x * sx);
    int dark_rows = 0, rows = 0;
    for (int y = static_cast<int>(pc_box->y + y1 * sy) + 2; y < pc_box->y + y2 * sy - 2; ++y) {
      ++rows;
      for (int dx = -2; dx <= 2; ++dx) {
        Rgb c = shot->At(px + dx, y);
        if (std::max({c.r, c.g, c.b}) < 200) {
          ++dark_rows;
          break;
        }
      }
    }
    EXPECT_GT(rows, 200);
    EXPECT_EQ(dark_rows, rows) << "axis " << Attr(a, "data-dim") << " at x=" << px;
  }

  // Compare the best, a middle and the worst trial: their hyperparameters side by side,
  // their best losses, their curves overlaid in their colours (and no other trial's).
  const std::vector<int64_t> three = {ranked[0], ranked[7], ranked[15]};
  const std::string cmp_frag = absl::StrCat("#/experiments/1/compare?trials=",
                                            absl::StrJoin(three, ","), "&metric=loss");
  std::string cmp = browser_.Dom(cmp_frag, "1280,1400");
  ASSERT_THAT(cmp, HasSubstr("id=\"compare-table\"")) << cmp;
  for (int64_t id : three) {
    EXPECT_THAT(cmp, HasSubstr(absl::StrCat("<th class=\"num\" data-trial=\"", id, "\">")));
  }
  EXPECT_THAT(cmp, HasSubstr("<tr class=\"hp differs\"><td>lr</td>"));
  EXPECT_THAT(cmp, HasSubstr("<tr class=\"hp differs\"><td>width</td>"));
  EXPECT_THAT(cmp, HasSubstr("best validation_loss (min)"));
  std::string cmp_chart = ChartHtml(cmp, "loss");
  ASSERT_EQ(Elements(cmp_chart, "path").size(), 3u) << cmp_chart;
  for (int64_t id : three) {
    EXPECT_THAT(cmp_chart, HasSubstr(absl::StrCat("stroke=\"", color[id], "\" data-series=\"trial ", id, " training loss\"")));
  }
  std::optional<Box> cmp_box = ChartBox(cmp_chart);
  ASSERT_TRUE(cmp_box.has_value()) << cmp_chart;
  absl::StatusOr<Image> cmp_shot = browser_.Screenshot(cmp_frag, Out("compare_3_trials.png"), "1280,1400");
  ASSERT_TRUE(cmp_shot.ok()) << cmp_shot.status();
  for (int64_t id : three) {
    EXPECT_GE(CountColor(*cmp_shot, *cmp_box, *Rgb::Parse(color[id])), 20) << "trial " << id;
  }
  for (int64_t id : {ranked[1], ranked[8], ranked[14]}) {
    EXPECT_LE(CountColor(*cmp_shot, *cmp_box, *Rgb::Parse(color[id]), 3), 2)
        << "trial " << id << " is not compared";
  }
  EXPECT_THAT(browser_.Dom("#/experiments/1/compare?trials=1,2,3,4,5"), HasSubstr("Compare 2 to 4 trials: 5 given"));

  // The checkpoint table: one row per trial's checkpoint, each (completed) with its button
  // to register it as a model version.
  EXPECT_EQ(Count(page, "<tr class=\"checkpoint-row"), 16) << page;
  EXPECT_EQ(Count(page, "<button class=\"register-version\" data-uuid=\""), 16) << page;

  // Log search and level filter on the best trial's logs.
  std::string errors = browser_.Dom(absl::StrCat("#/trials/", best, "?level=error"));
  std::string warnings = browser_.Dom(absl::StrCat("#/trials/", best, "?level=warning"));
  std::string search = browser_.Dom(absl::StrCat("#/trials/", best, "?logq=STEP%203"));
  for (const std::string* dom : {&errors, &warnings, &search}) {
    ASSERT_THAT(*dom, HasSubstr("the trial has ended")) << *dom;
  }
  // The log lines not hidden: their text (tags removed).
  auto shown_lines = [](const std::string& dom) {
    std::vector<std::string> out;
    const std::string open = "<span class=\"line ";
    for (size_t at = dom.find(open); at != std::string::npos; at = dom.find(open, at + 1)) {
      size_t tag_end = dom.find('>', at);
      if (dom.substr(at, tag_end - at).find(" hidden") != std::string::npos) continue;
      std::string text;
      bool in_tag = false;
      for (size_t i = tag_end + 1; i < dom.size() && dom[i] != '\n'; ++i) {
        if (dom[i] == '<') in_tag = true;
        if (!in_tag) text += dom[i];
        if (dom[i] == '>') in_tag = false;
      }
      out.push_back(text);
    }
    return out;
  };
  std::vector<std::string> e = shown_lines(errors), w = shown_lines(warnings), s = shown_lines(search);
  ASSERT_FALSE(e.empty()) << errors;
  for (const std::string& l : e) EXPECT_THAT(l, HasSubstr("ERROR")) << l;
  EXPECT_THAT(absl::StrJoin(e, "\n"), HasSubstr("ERROR: an error from the worker"));
  EXPECT_THAT(absl::StrJoin(w, "\n"), HasSubstr("WARNING: a warning from the worker"));
  EXPECT_GT(w.size(), e.size());
  ASSERT_FALSE(s.empty()) << search;
  for (const std::string& l : s) EXPECT_THAT(absl::AsciiStrToLower(l), HasSubstr("step 3")) << l;
  EXPECT_THAT(absl::StrJoin(s, "\n"), HasSubstr("INFO: step 3 of 4"));
  EXPECT_THAT(search, HasSubstr(absl::StrCat(s.size(), " of ")));

  // The experiment list: filtered by label, with the best metric column.
  CommandResult label = cluster_.Det({"experiment", "label", "add", "1", "sweep"});
  ASSERT_TRUE(label.exit.ok()) << label.out << label.err;
  std::string listed = browser_.Dom("#/experiments?label=sweep&columns=owner,labels,best");
  EXPECT_THAT(listed, HasSubstr("data-id=\"1\""));
  EXPECT_THAT(listed, HasSubstr("<span class=\"label\">sweep</span>"));
  EXPECT_THAT(listed, HasSubstr(absl::StrCat("<td class=\"experiment-best\">validation_loss 0.225 <a class=\"muted\" href=\"#/trials/", best, "\">")));
  EXPECT_THAT(listed, HasSubstr("id=\"bulk-kill\""));
  std::string none = browser_.Dom("#/experiments?label=other");
  EXPECT_THAT(none, Not(HasSubstr("data-id=\"1\"")));
  EXPECT_THAT(none, HasSubstr("No experiments."));

  (void)browser_.Screenshot("#/experiments/1?trials=best&best=3", Out("search_best_3.png"), window);
  (void)browser_.Screenshot("#/experiments?columns=owner,labels,best,description", Out("experiment_list.png"));
}

// "3m 12s" as the page writes a duration (util.js duration()).
std::string PageDuration(int64_t ms) {
  int64_t s = (ms + 500) / 1000;
  const int64_t h = s / 3600, m = (s % 3600) / 60;
  s %= 60;
  return h ? absl::StrCat(h, "h ", m, "m") : m ? absl::StrCat(m, "m ", s, "s") : absl::StrCat(s, "s");
}

// A paused experiment's duration stops when its trial stopped: it does not count on.
TEST_F(WebSearch, APausedExperimentsDurationDoesNotCountOn) {
  Create("slow.yaml", R"(name: slow
entrypoint: python3 search_train.py
hyperparameters: {lr: 0.01, width: 16, steps: 1000, sleep: 0.3}
searcher: {name: single, metric: validation_loss, smaller_is_better: true, max_length: {batches: 1000}}
max_restarts: 0
)", /*follow=*/false);
  // Paused once it has reported a few steps, and once its trial has stopped.
  const absl::Time deadline = absl::Now() + absl::Minutes(2);
  nlohmann::json d;
  while (absl::Now() < deadline) {
    d = cluster_.DetJson({"experiment", "describe", "1"});
    if (!d["trials"].empty() && Int(d["trials"][0]["total_batches"]) >= 3) break;
    absl::SleepFor(absl::Milliseconds(200));  // poll interval
  }
  ASSERT_GE(Int(d["trials"][0]["total_batches"]), 3) << d.dump();
  CommandResult pause = cluster_.Det({"experiment", "pause", "1"});
  ASSERT_TRUE(pause.exit.ok()) << pause.out << pause.err;
  while (absl::Now() < deadline) {
    d = cluster_.DetJson({"experiment", "describe", "1"});
    if (d["experiment"]["state"] == "STATE_PAUSED" &&
        Int(d["trials"][0]["allocation"]["end_time_ms"]) > 0) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(200));  // poll interval
  }
  ASSERT_EQ(d["experiment"]["state"], "STATE_PAUSED") << d.dump();
  const int64_t start = Int(d["experiment"]["start_time_ms"]);
  const int64_t stopped = Int(d["trials"][0]["allocation"]["end_time_ms"]);
  ASSERT_GT(stopped, start) << d.dump();
  // Both the experiment's page and the list: from its start to when its trial stopped.
  const std::string shown = absl::StrCat(PageDuration(stopped - start), " (paused)");
  EXPECT_THAT(browser_.Dom("#/experiments/1"),
              HasSubstr(absl::StrCat("<tr><th>Duration</th><td>", shown, "</td></tr>")));
  EXPECT_THAT(browser_.Dom("#/experiments?columns=state,duration"),
              HasSubstr(absl::StrCat("<td>", shown, "</td>")));
  CommandResult kill = cluster_.Det({"experiment", "kill", "1"});
  EXPECT_TRUE(kill.exit.ok()) << kill.out << kill.err;
}

}  // namespace
}  // namespace det::testing
