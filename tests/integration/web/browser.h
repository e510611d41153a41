// Headless Chromium on the web page of a TestCluster's master, and what the browser tests
// read of it: the page's DOM after its scripts ran, and screenshots decoded to pixels, with
// the place of each chart on the page (the `data-box` the page writes on each chart's SVG).
#ifndef DET_TESTS_INTEGRATION_WEB_BROWSER_H_
#define DET_TESTS_INTEGRATION_WEB_BROWSER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {

// An RGB colour, "#rrggbb".
struct Rgb {
  int r = 0, g = 0, b = 0;
  static std::optional<Rgb> Parse(const std::string& hex);
  // The largest difference of one channel.
  int Distance(const Rgb& o) const;
};

// A decoded 8-bit RGB or RGBA PNG, non-interlaced (what Chromium writes).
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3, row by row
  Rgb At(int x, int y) const;
};
absl::StatusOr<Image> DecodePng(const std::string& bytes);

// A rectangle of the page, in CSS pixels (= screenshot pixels at the default scale).
struct Box {
  double x = 0, y = 0, width = 0, height = 0;
};

// The pixels of `image` within `box` (clipped to the image) at most `tolerance` from `color`
// in every channel.
int CountColor(const Image& image, const Box& box, const Rgb& color, int tolerance = 6);

// Runs /usr/bin/chromium headless against a cluster's web page. Each call starts a fresh
// browser (its own profile under the cluster's directory) and lets the page run for 5 s of
// virtual time. REQUIRES: `cluster` has started its master and outlives this.
class Browser {
 public:
  explicit Browser(TestCluster& cluster);

  // The path of Chromium, or "" when it is not installed.
  static std::string Path();

  // The DOM of the page at `fragment` ("#/trials/1"), logged in with the cluster's admin
  // token unless `with_token` is false.
  std::string Dom(const std::string& fragment, const std::string& window = "1280,900",
                  bool with_token = true);
  // A screenshot of the page at `fragment` in a window of `window` pixels, written to
  // `path` and decoded.
  absl::StatusOr<Image> Screenshot(const std::string& fragment, const std::string& path,
                                   const std::string& window = "1280,900");

 private:
  std::string Run(const std::string& fragment, const std::string& mode, bool with_token,
                  const std::string& window);

  TestCluster& cluster_;
  int runs_ = 0;
};

// A browser test: SetUp checks that Chromium is installed and starts the cluster's master
// and one agent, "agent-a", of `agent_slots` slots (with `agent_yaml`, more keys of its
// agent.yaml, e.g. "system_metrics_period: 500ms\n"); screenshots go to outputs_
// (TEST_UNDECLARED_OUTPUTS_DIR, or the cluster's directory outside Bazel).
class WebTest : public ::testing::Test {
 protected:
  WebTest(const std::string& name, int agent_slots, const std::string& agent_yaml = "");
  void SetUp() override;
  // outputs_ + "/" + file.
  std::string Out(const std::string& file) const { return outputs_ + "/" + file; }
  // Copies search_train.py (a data dependency of the test) into the directory
  // cluster_.dir() + "/context", the context of the experiments the test creates.
  void WriteSearchContext();

  TestCluster cluster_;
  Browser browser_{cluster_};
  std::string outputs_;

 private:
  int agent_slots_;
  std::string agent_yaml_;
};

// The chart titled `title` of `dom`: from its <div class="chart..."> to its </svg>, or "".
std::string ChartHtml(const std::string& dom, const std::string& title);
// The data-box of the (first) <svg> in `chart_html`.
std::optional<Box> ChartBox(const std::string& chart_html);
// The start tag of the first <path> of line-chart series `series` (its data-series) in
// `html`, or "".
std::string SeriesPath(const std::string& html, const std::string& series);
// The value of attribute `name` of the first element of `html` that has it, or "".
std::string Attr(const std::string& html, const std::string& name);
// Every element `<tag ...>` (its start tag) of `html`.
std::vector<std::string> Elements(const std::string& html, const std::string& tag);

}  // namespace det::testing

#endif  // DET_TESTS_INTEGRATION_WEB_BROWSER_H_
