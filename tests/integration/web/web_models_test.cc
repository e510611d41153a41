// The model registry's page in headless Chromium (Debian's `chromium`, installed by
// deploy/setup.sh) against a live master and agent: a 2-trial search of search_train.py
// stores one checkpoint per trial; a model is created and both checkpoints registered as its
// versions through the REST API (/api/v1/models...). The page's Models view must list the
// model (description, labels, 2 versions) and its page both versions, newest first, each
// linked to its checkpoint's trial and experiment, with user text shown as text. Checked in
// the DOM and in a screenshot (each version's badge drawn in its row). Screenshots
// (models.png, model.png) go to TEST_UNDECLARED_OUTPUTS_DIR.
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_cluster.h"
#include "tests/integration/web/browser.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kModel[] = "cifar-cnn.v2";
// Markup in the user's text: the page must show it as text.
constexpr char kDescription[] = "ships <b>bold</b> & \"quoted\"";
constexpr char kLabel[] = "<i>prod</i>";
constexpr char kComment[] = "<img src=x onerror=alert(1)> best so far";
// The version badge's colour (.version-badge in master/http/web/style.css).
const Rgb kBadge = *Rgb::Parse("#5f3dc4");

class WebModels : public WebTest {
 protected:
  WebModels() : WebTest("WebModels", 2) {}

  void SetUp() override {
    WebTest::SetUp();
    if (HasFatalFailure()) return;
    WriteSearchContext();
  }

  // `method` http://<master>/api/v1/<path> as admin, with `body` (JSON) unless empty; the
  // reply's JSON, or a discarded value (a failure logged) when curl fails.
  nlohmann::json Rest(const std::string& method, const std::string& path,
                      const std::string& body = "") {
    std::vector<std::string> argv = {"curl", "-sS", "-X", method, "-H",
                                     "Authorization: Bearer " + cluster_.token()};
    if (!body.empty()) {
      for (const char* a : {"-H", "Content-Type: application/json", "--data-binary"}) {
        argv.push_back(a);
      }
      argv.push_back(body);
    }
    argv.push_back(absl::StrCat("http://", cluster_.http_address(), "/api/v1/", path));
    CommandResult r = RunCommand(argv);
    EXPECT_TRUE(r.exit.ok()) << method << " " << path << ": " << r.err;
    return nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  }
};

// The place of the element `start_tag` on the page, from its data-box.
std::optional<Box> BoxOf(const std::string& start_tag) {
  return ChartBox(absl::StrCat("<svg data-box=\"", Attr(start_tag, "data-box"), "\">"));
}

TEST_F(WebModels, ListsModelsAndShowsEachVersionLinkedToItsCheckpoint) {
  const std::string storage = cluster_.dir() + "/checkpoints";
  ASSERT_EQ(mkdir(storage.c_str(), 0755), 0);
  const std::string yaml = absl::StrCat(R"(name: two
entrypoint: python3 search_train.py
hyperparameters:
  lr: {type: categorical, vals: [0.001, 0.01]}
  width: {type: categorical, vals: [8]}
searcher: {name: grid, metric: validation_loss, smaller_is_better: true, max_length: {batches: 4}}
checkpoint_storage: {type: shared_fs, host_path: ')",
                                        storage, R"('}
max_restarts: 0
)");
  CommandResult create = cluster_.Det({"experiment", "create", cluster_.WriteFile("two.yaml", yaml),
                                       cluster_.dir() + "/context", "-f"});
  ASSERT_TRUE(create.exit.ok()) << create.out << create.err << cluster_.LogTail("master");

  // One checkpoint per trial: trial -> uuid.
  nlohmann::json ck = Rest("GET", "experiments/1/checkpoints");
  ASSERT_TRUE(ck.is_object()) << ck.dump();
  std::map<int64_t, std::string> uuid;
  for (const auto& c : ck["checkpoints"]) uuid[Int(c["trial_id"])] = c["uuid"].get<std::string>();
  ASSERT_EQ(uuid.size(), 2u) << ck.dump();
  const int64_t first_trial = uuid.begin()->first, second_trial = uuid.rbegin()->first;

  nlohmann::json model = Rest("POST", "models",
                              nlohmann::json{{"name", kModel},
                                             {"description", kDescription},
                                             {"labels", {"vision", kLabel}}}
                                  .dump());
  ASSERT_TRUE(model.is_object());
  ASSERT_EQ(model["model"]["name"], kModel) << model.dump();
  const std::string versions_path = absl::StrCat("models/", kModel, "/versions");
  nlohmann::json v1 = Rest("POST", versions_path,
                           nlohmann::json{{"checkpoint_uuid", uuid[first_trial]}, {"comment", kComment}}.dump());
  ASSERT_TRUE(v1.is_object());
  ASSERT_EQ(v1["model_version"]["version"], 1) << v1.dump();
  nlohmann::json v2 = Rest("POST", versions_path,
                           nlohmann::json{{"checkpoint_uuid", uuid[second_trial]}, {"comment", "second"}}.dump());
  ASSERT_TRUE(v2.is_object());
  ASSERT_EQ(v2["model_version"]["version"], 2) << v2.dump();
  // A second model without versions, listed beside it.
  nlohmann::json empty = Rest("POST", "models", R"({"name": "empty-model"})");
  ASSERT_TRUE(empty.is_object());
  ASSERT_EQ(empty["model"]["name"], "empty-model") << empty.dump();

  // The list: both models, ours with its description and labels as text, 2 versions.
  std::string list = browser_.Dom("#/models");
  EXPECT_THAT(list, HasSubstr("2 model(s)")) << list;
  EXPECT_THAT(list, HasSubstr("<a href=\"#/models\" data-nav=\"models\" class=\"active\">Models</a>"));
  EXPECT_THAT(list, HasSubstr(absl::StrCat("<a href=\"#/models/", kModel, "\">", kModel, "</a>")));
  EXPECT_THAT(list, HasSubstr("<a href=\"#/models/empty-model\">empty-model</a>"));
  EXPECT_THAT(list, HasSubstr("ships &lt;b&gt;bold&lt;/b&gt; &amp; \"quoted\"")) << list;
  EXPECT_THAT(list, HasSubstr("<span class=\"label\">&lt;i&gt;prod&lt;/i&gt;</span>"));
  EXPECT_THAT(list, Not(HasSubstr("<b>bold</b>")));
  EXPECT_THAT(list, Not(HasSubstr("<i>prod</i>")));
  std::vector<std::string> counts;
  for (size_t at = list.find("model-versions\">"); at != std::string::npos;
       at = list.find("model-versions\">", at + 1)) {
    counts.push_back(list.substr(at + 16, list.find('<', at) - at - 16));
  }
  EXPECT_EQ(counts, (std::vector<std::string>{"0", "2"}))
      << "newest change first: empty-model (0 versions), then " << kModel;
  absl::StatusOr<Image> list_shot = browser_.Screenshot("#/models", Out("models.png"));
  ASSERT_TRUE(list_shot.ok()) << list_shot.status();
  EXPECT_GT(CountColor(*list_shot, {0, 0, 1280, 40}, *Rgb::Parse("#1d2330"), 4), 10000) << "no header bar";

  // The model's page: both versions, newest first, each linked to its trial and experiment.
  const std::string fragment = absl::StrCat("#/models/", kModel);
  std::string page = browser_.Dom(fragment);
  EXPECT_THAT(page, HasSubstr(absl::StrCat("<h1 id=\"model-name\">", kModel, "</h1>")));
  std::vector<std::string> rows = Elements(page, "tr");
  std::vector<std::string> version_rows;
  for (const std::string& r : rows) {
    if (Attr(r, "class") == "version-row") version_rows.push_back(r);
  }
  ASSERT_EQ(version_rows.size(), 2u) << page;
  EXPECT_EQ(Attr(version_rows[0], "data-version"), "2");
  EXPECT_EQ(Attr(version_rows[1], "data-version"), "1");
  for (const auto& [trial, id] : uuid) {
    EXPECT_THAT(page, HasSubstr(absl::StrCat("<a class=\"version-checkpoint\" href=\"#/trials/", trial,
                                             "\"><code>", id, "</code></a>")))
        << "trial " << trial << "'s checkpoint: " << page;
    EXPECT_THAT(page, HasSubstr(absl::StrCat("trial <a href=\"#/trials/", trial, "\">", trial,
                                             "</a> of experiment <a href=\"#/experiments/1\">1</a>")));
  }
  EXPECT_LT(page.find(uuid[second_trial]), page.find(uuid[first_trial])) << "version 2 first";
  EXPECT_THAT(page, HasSubstr("<span class=\"version-badge\">v2</span>"));
  EXPECT_THAT(page, HasSubstr("<span class=\"version-badge\">v1</span>"));
  EXPECT_THAT(page, HasSubstr("&lt;img src=x onerror=alert(1)&gt; best so far"));
  EXPECT_THAT(page, Not(HasSubstr("<img")));
  EXPECT_THAT(page, HasSubstr("<td class=\"version-comment\">second</td>"));
  int admins = 0;
  for (size_t at = page.find("<td>admin</td>"); at != std::string::npos; at = page.find("<td>admin</td>", at + 1)) {
    ++admins;
  }
  EXPECT_EQ(admins, 3) << "the model's owner and each version's registrant: " << page;
  EXPECT_THAT(page, HasSubstr("ships &lt;b&gt;bold&lt;/b&gt;"));
  EXPECT_THAT(page, Not(HasSubstr("<b>bold</b>")));

  // In the screenshot: each version's badge in its row, none below the table.
  absl::StatusOr<Image> shot = browser_.Screenshot(fragment, Out("model.png"));
  ASSERT_TRUE(shot.ok()) << shot.status();
  double bottom = 0;
  for (const std::string& row : version_rows) {
    std::optional<Box> box = BoxOf(row);
    ASSERT_TRUE(box.has_value()) << row;
    EXPECT_GE(CountColor(*shot, *box, kBadge), 100)
        << "version " << Attr(row, "data-version") << "'s badge is not drawn in its row at "
        << box->x << "," << box->y;
    bottom = std::max(bottom, box->y + box->height);
  }
  EXPECT_EQ(CountColor(*shot, {0, bottom + 1, 1280, 900 - bottom - 1}, kBadge), 0);
  EXPECT_EQ(CountColor(*shot, {0, 0, 1280, 200}, kBadge), 0) << "no badge above the table";
}

}  // namespace
}  // namespace det::testing
