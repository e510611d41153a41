// Issue 23: with profiling on, the trial's web page shows a PyTorchTrial's timings and its
// agent's system metrics. A real master and agent (sampling its host every 500 ms) run the
// Fashion-MNIST PyTorchTrial example (common/worker/python/examples/fashion_mnist_trial,
// configs/examples/trial-const.yaml with `profiling.enabled: true`, as
// tests/integration:trial_profiling_test runs it), held after a few batches until the test
// releases it; headless Chromium reads the trial page's Profiler section, by text (the
// timing names Determined's profiler uses, units, the profiling state) and by pixels (each
// chart's series drawn in its colour in a screenshot). A trial with profiling off and
// nothing recorded says so. Screenshot: profiler.png in TEST_UNDECLARED_OUTPUTS_DIR.
#include <sys/stat.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_cluster.h"
#include "tests/integration/web/browser.h"

namespace det::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

// Batches the trial trains before it waits for the test; a training report (with its
// timings) every kReport of them.
constexpr int kHeldAt = 20;
constexpr int kReport = 5;

// The trial page, its logs read once: a followed log (a long poll) of a running trial would
// hold the browser's virtual time.
constexpr char kPage[] = "#/trials/1?follow=0";

// The example's trial, held at batch kHeldAt until the file `release` exists: the page is
// read while the trial runs, with its reports so far fixed.
std::string HeldTrial(const std::string& release) {
  return absl::StrCat(R"(import os
import time

import model_def


class HeldTrial(model_def.FashionTrial):
    def train_batch(self, batch, epoch_idx, batch_idx):
        while batch_idx >= )",
                      kHeldAt, R"( and not os.path.exists(")", release, R"("):
            time.sleep(0.05)
        return super().train_batch(batch, epoch_idx, batch_idx)
)");
}

// The chart titled `title` in `dom`, which must have a series `series` of at least
// `min_points` points; returns the series' <path> start tag ("" after a failure).
std::string ChartSeries(const std::string& dom, const std::string& title,
                        const std::string& series, int min_points) {
  std::string chart = ChartHtml(dom, title);
  if (chart.empty()) {
    ADD_FAILURE() << "no chart \"" << title << "\"";
    return "";
  }
  std::string path = SeriesPath(chart, series);
  if (path.empty()) {
    ADD_FAILURE() << "chart \"" << title << "\" has no series \"" << series << "\":\n" << chart;
    return "";
  }
  int points = 0;
  EXPECT_TRUE(absl::SimpleAtoi(Attr(path, "data-points"), &points)) << path;
  EXPECT_GE(points, min_points) << title << ": " << path;
  return path;
}

class WebProfiling : public WebTest {
 protected:
  WebProfiling() : WebTest("WebProfiling", 1, "system_metrics_period: 500ms\n") {}

  // The example's context with HeldTrial; returns its directory.
  std::string WriteContext() {
    const std::string runfiles = TestCluster::BinDir() + "/../../";
    EXPECT_EQ(mkdir((cluster_.dir() + "/context").c_str(), 0755), 0);
    for (const char* f : {"model_def.py", "data.py"}) {
      std::string text =
          Slurp(runfiles + "common/worker/python/examples/fashion_mnist_trial/" + f);
      EXPECT_FALSE(text.empty()) << f;
      cluster_.WriteFile(std::string("context/") + f, text);
    }
    std::string path = cluster_.WriteFile("context/held_trial.py", HeldTrial(Release()));
    return path.substr(0, path.rfind('/'));
  }
  std::string Release() const { return cluster_.dir() + "/release"; }
  std::string Config() const {
    return TestCluster::BinDir() + "/../../configs/examples/trial-const.yaml";
  }
};

TEST_F(WebProfiling, TrialPageChartsTimingsAndSystemMetricsOfAProfiledPyTorchTrial) {
  const std::string context = WriteContext();
  CommandResult created = cluster_.Det(
      {"experiment", "create", Config(), context, "--config", "entrypoint=held_trial:HeldTrial",
       "--config", "profiling={enabled: true}", "--config",
       absl::StrCat("searcher.max_length={batches: ", 2 * kHeldAt, "}"), "--config",
       "min_validation_period={batches: 0}", "--config",
       absl::StrCat("scheduling_unit=", kReport), "--config",
       "checkpoint_storage={type: shared_fs, host_path: '" + cluster_.dir() + "/checkpoints'}"});
  ASSERT_TRUE(created.exit.ok()) << created.out << created.err;

  // Held at kHeldAt: its kHeldAt / kReport reports in, and at least 4 samples of its agent
  // since it started.
  nlohmann::json trial;
  ASSERT_TRUE(WaitUntil(
      "trial 1 held with its timings and 4 samples of agent-a",
      [&] {
        nlohmann::json d = cluster_.DetJson({"trial", "describe", "1"});
        if (!d.is_object() || !d.contains("trial")) return false;
        trial = d;
        const nlohmann::json& t = d["trial"];
        if (Int(t["total_batches"]) != kHeldAt || !t.contains("timings_summary") ||
            Int(t["timings_summary"]["train_batch_count"]["count"]) != kHeldAt / kReport) {
          return false;
        }
        int samples = 0;
        for (const auto& m : d["system_metrics"]) {
          samples += m.value("agent_id", "") == "agent-a" &&
                     Int(m["time_ms"]) >= Int(t["start_time_ms"]);
        }
        return samples >= 4;
      },
      absl::Minutes(4)))
      << trial.dump() << cluster_.Det({"trial", "logs", "1"}).out << cluster_.LogTail("agent-a");

  const std::string window = "1280,5200";
  std::string page = browser_.Dom(kPage, window);
  EXPECT_THAT(page, HasSubstr("<h2>Profiler</h2>"));
  EXPECT_THAT(page, HasSubstr("<p id=\"profiler-state\">Profiling <b>on</b>")) << page;
  EXPECT_THAT(page, Not(HasSubstr("id=\"profiler-empty\"")));
  // The timings table: Determined's names for the PyTorchTrial loop's phases, in units.
  for (const char* op : {"dataloader_next", "to_device", "train_batch", "from_device"}) {
    EXPECT_THAT(page, ContainsRegex(absl::StrCat("<td>", op,
                                                 "</td><td class=\"num\">[0-9.]+ (ns|µs|ms|s)<")))
        << op << " in:\n" << page;
  }
  EXPECT_THAT(page, ContainsRegex("<td>samples_per_second</td><td class=\"num\">[0-9.]+k? "
                                  "samples/s<"));

  // The charts: each of the held trial's reports per timing name; samples of agent-a since
  // it started, with the host's memory in use.
  struct Series {
    std::string chart, series;
    int min_points;
  };
  const std::vector<Series> charted = {
      {"Time in dataloader_next (ms)", "mean", kHeldAt / kReport},
      {"Time in to_device (ms)", "mean", kHeldAt / kReport},
      {"Time in train_batch (ms)", "mean", kHeldAt / kReport},
      {"Time in from_device (ms)", "mean", kHeldAt / kReport},
      // A rate from the second report on.
      {"Throughput (samples/s)", "samples/s", kHeldAt / kReport - 1},
      {"CPU utilisation (%)", "agent-a", 4},
      {"Memory used (GiB)", "agent-a", 4},
      {"Disk throughput (MB/s)", "agent-a read", 4},
      {"Network throughput (MB/s)", "agent-a received", 4},
  };
  for (const Series& s : charted) {
    std::string path = ChartSeries(page, s.chart, s.series, s.min_points);
    if (s.chart == "Time in train_batch (ms)" || s.chart == "Memory used (GiB)") {
      double last = 0;
      EXPECT_TRUE(absl::SimpleAtod(Attr(path, "data-last"), &last)) << path;
      EXPECT_GT(last, 0) << s.chart << ": " << path;
    }
  }
  ChartSeries(page, "Time in train_batch (ms)", "p99", kHeldAt / kReport);
  EXPECT_THAT(ChartHtml(page, "CPU utilisation (%)"), HasSubstr("seconds since the trial started"));

  // By pixels: each series drawn in its colour inside its chart's box on the screen (the
  // held trial's page keeps its layout between the two browser runs).
  absl::StatusOr<Image> shot = browser_.Screenshot(kPage, Out("profiler.png"), window);
  ASSERT_TRUE(shot.ok()) << shot.status();
  for (const Series& s : charted) {
    std::string chart = ChartHtml(page, s.chart);
    std::optional<Box> box = ChartBox(chart);
    ASSERT_TRUE(box.has_value()) << s.chart << ":\n" << chart;
    std::optional<Rgb> color = Rgb::Parse(Attr(SeriesPath(chart, s.series), "stroke"));
    ASSERT_TRUE(color.has_value()) << s.chart << " " << s.series;
    EXPECT_GE(CountColor(*shot, *box, *color), 20)
        << s.chart << ": series " << s.series << " not drawn in the screenshot";
  }

  // Released, it completes; its page keeps every report's timings.
  cluster_.WriteFile("release", "");
  CommandResult wait = cluster_.Det({"experiment", "wait", "1", "--interval", "0.5"},
                                    absl::Minutes(4));
  nlohmann::json e = cluster_.DetJson({"experiment", "describe", "1"});
  ASSERT_TRUE(e.is_object()) << wait.out << wait.err;
  ASSERT_EQ(e["experiment"]["state"], "STATE_COMPLETED") << cluster_.Det({"trial", "logs", "1"}).out;
  std::string done = browser_.Dom(kPage, window);
  EXPECT_THAT(done, HasSubstr("<p id=\"profiler-state\">Profiling <b>on</b>"));
  ChartSeries(done, "Time in train_batch (ms)", "mean", 2 * kHeldAt / kReport);
}

TEST_F(WebProfiling, ATrialWithProfilingOffAndNothingRecordedSaysSo) {
  // Created paused: its trial never ran, so there is nothing to show.
  const std::string context = WriteContext();
  CommandResult created = cluster_.Det({"experiment", "create", Config(), context, "--paused"});
  ASSERT_TRUE(created.exit.ok()) << created.out << created.err;
  std::string page = browser_.Dom(kPage);
  EXPECT_THAT(page, HasSubstr("<p id=\"profiler-state\">Profiling <b>off</b>")) << page;
  EXPECT_THAT(page, HasSubstr("<p id=\"profiler-empty\" class=\"muted\">Profiling was off for "
                              "this trial: there are no timings or system metrics to show."));
  EXPECT_THAT(page, Not(HasSubstr("id=\"timings-table\"")));
  EXPECT_THAT(page, Not(HasSubstr("data-title=\"CPU utilisation (%)\"")));
}

}  // namespace
}  // namespace det::testing
