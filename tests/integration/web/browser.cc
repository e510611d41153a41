#include "tests/integration/web/browser.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace det::testing {

std::optional<Rgb> Rgb::Parse(const std::string& hex) {
  if (hex.size() != 7 || hex[0] != '#') return std::nullopt;
  Rgb c;
  int* parts[] = {&c.r, &c.g, &c.b};
  for (int i = 0; i < 3; ++i) {
    char* end = nullptr;
    std::string two = hex.substr(1 + 2 * i, 2);
    *parts[i] = static_cast<int>(std::strtol(two.c_str(), &end, 16));
    if (end != two.c_str() + 2) return std::nullopt;
  }
  return c;
}

int Rgb::Distance(const Rgb& o) const {
  return std::max({std::abs(r - o.r), std::abs(g - o.g), std::abs(b - o.b)});
}

Rgb Image::At(int x, int y) const {
  size_t at = (static_cast<size_t>(y) * width + x) * 3;
  return {rgb[at], rgb[at + 1], rgb[at + 2]};
}

namespace {

uint32_t BigEndian32(const std::string& s, size_t at) {
  return (static_cast<uint32_t>(static_cast<uint8_t>(s[at])) << 24) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[at + 2])) << 8) |
         static_cast<uint32_t>(static_cast<uint8_t>(s[at + 3]));
}

int Paeth(int a, int b, int c) {
  int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

}  // namespace

absl::StatusOr<Image> DecodePng(const std::string& bytes) {
  if (bytes.size() < 8 || bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) {
    return absl::InvalidArgumentError("not a PNG file");
  }
  Image img;
  int channels = 0;
  std::string idat;
  for (size_t at = 8; at + 12 <= bytes.size();) {
    uint32_t len = BigEndian32(bytes, at);
    std::string type = bytes.substr(at + 4, 4);
    if (at + 12 + len > bytes.size()) return absl::InvalidArgumentError("truncated PNG chunk");
    std::string data = bytes.substr(at + 8, len);
    if (type == "IHDR") {
      img.width = static_cast<int>(BigEndian32(data, 0));
      img.height = static_cast<int>(BigEndian32(data, 4));
      int depth = static_cast<uint8_t>(data[8]), color = static_cast<uint8_t>(data[9]);
      int interlace = static_cast<uint8_t>(data[12]);
      if (depth != 8 || (color != 2 && color != 6) || interlace != 0) {
        return absl::UnimplementedError(absl::StrCat("PNG of depth ", depth, ", colour type ",
                                                     color, ", interlace ", interlace));
      }
      channels = color == 2 ? 3 : 4;
    } else if (type == "IDAT") {
      idat += data;
    } else if (type == "IEND") {
      break;
    }
    at += 12 + len;
  }
  if (channels == 0) return absl::InvalidArgumentError("PNG without IHDR");
  const size_t stride = static_cast<size_t>(img.width) * channels;
  std::string raw((stride + 1) * img.height, '\0');
  uLongf raw_len = raw.size();
  if (uncompress(reinterpret_cast<Bytef*>(raw.data()), &raw_len,
                 reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      raw_len != raw.size()) {
    return absl::InvalidArgumentError("PNG image data does not inflate to its size");
  }
  std::vector<uint8_t> cur(stride), prev(stride, 0);
  img.rgb.resize(static_cast<size_t>(img.width) * img.height * 3);
  for (int y = 0; y < img.height; ++y) {
    const uint8_t* line = reinterpret_cast<const uint8_t*>(raw.data()) + y * (stride + 1);
    const int filter = line[0];
    for (size_t i = 0; i < stride; ++i) {
      int a = i >= static_cast<size_t>(channels) ? cur[i - channels] : 0;
      int b = prev[i];
      int c = i >= static_cast<size_t>(channels) ? prev[i - channels] : 0;
      int pred = filter == 0 ? 0 : filter == 1 ? a : filter == 2 ? b : filter == 3 ? (a + b) / 2
                                                                               : Paeth(a, b, c);
      if (filter > 4) return absl::InvalidArgumentError(absl::StrCat("PNG filter ", filter));
      cur[i] = static_cast<uint8_t>(line[1 + i] + pred);
    }
    for (int x = 0; x < img.width; ++x) {
      for (int k = 0; k < 3; ++k) {
        img.rgb[(static_cast<size_t>(y) * img.width + x) * 3 + k] = cur[x * channels + k];
      }
    }
    std::swap(cur, prev);
  }
  return img;
}

int CountColor(const Image& image, const Box& box, const Rgb& color, int tolerance) {
  int x0 = std::max(0, static_cast<int>(std::floor(box.x)));
  int y0 = std::max(0, static_cast<int>(std::floor(box.y)));
  int x1 = std::min(image.width, static_cast<int>(std::ceil(box.x + box.width)));
  int y1 = std::min(image.height, static_cast<int>(std::ceil(box.y + box.height)));
  int n = 0;
  for (int y = y0; y < y1; ++y) {
    for (int x = x0; x < x1; ++x) {
      if (image.At(x, y).Distance(color) <= tolerance) ++n;
    }
  }
  return n;
}

Browser::Browser(TestCluster& cluster) : cluster_(cluster) {}

std::string Browser::Path() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

std::string Browser::Run(const std::string& fragment, const std::string& mode, bool with_token,
                         const std::string& window) {
  std::string profile = absl::StrCat(cluster_.dir(), "/chromium-", runs_++);
  mkdir(profile.c_str(), 0700);
  std::string url = absl::StrCat("http://", cluster_.http_address(), "/", fragment);
  if (with_token) {
    absl::StrAppend(&url, fragment.find('?') == std::string::npos ? "?" : "&",
                    "token=", cluster_.token());
  }
  const absl::Duration limit = absl::Seconds(90);
  const absl::Time start = absl::Now();
  CommandResult r = RunCommand(
      {Path(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
       "--no-first-run", "--disable-background-networking", "--disable-component-update",
       "--disable-sync", "--disable-dev-shm-usage", "--hide-scrollbars",
       "--force-device-scale-factor=1", "--user-data-dir=" + profile,
       "--window-size=" + window, "--virtual-time-budget=5000", mode, url},
      limit);
  if (absl::Now() - start >= limit) {
    // Virtual time stands still while a request is pending: a page that long-polls
    // (followed logs) never spends its budget, and the stopped browser prints nothing.
    ADD_FAILURE() << "chromium ran past " << limit << " on " << fragment
                  << ": does the page keep a request pending (a long poll)?";
  }
  if (!r.exit.ok()) {
    ADD_FAILURE() << "chromium failed (" << r.exit.ToString() << "):\n" << r.err;
  }
  return r.out;
}

std::string Browser::Dom(const std::string& fragment, const std::string& window,
                         bool with_token) {
  return Run(fragment, "--dump-dom", with_token, window);
}

absl::StatusOr<Image> Browser::Screenshot(const std::string& fragment, const std::string& path,
                                          const std::string& window) {
  unlink(path.c_str());
  Run(fragment, "--screenshot=" + path, /*with_token=*/true, window);
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("no screenshot at " + path);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return DecodePng(bytes.str());
}

WebTest::WebTest(const std::string& name, int agent_slots, const std::string& agent_yaml)
    : cluster_(name), agent_slots_(agent_slots), agent_yaml_(agent_yaml) {}

void WebTest::SetUp() {
  ASSERT_FALSE(Browser::Path().empty())
      << "chromium is not installed (deploy/setup.sh installs it): the web page cannot be "
         "tested";
  ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
  ASSERT_TRUE(cluster_.StartAgent("agent-a", agent_slots_, agent_yaml_).ok()) << cluster_.LogTail("agent-a");
  const char* out = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  outputs_ = out ? out : cluster_.dir();
}

void WebTest::WriteSearchContext() {
  const std::string train =
      Slurp(TestCluster::BinDir() + "/../../tests/integration/web/search_train.py");
  ASSERT_FALSE(train.empty()) << "search_train.py is not a data dependency of the test";
  ASSERT_EQ(mkdir((cluster_.dir() + "/context").c_str(), 0755), 0);
  cluster_.WriteFile("context/search_train.py", train);
}

std::string ChartHtml(const std::string& dom, const std::string& title) {
  const std::string key = absl::StrCat("data-title=\"", title, "\"");
  size_t at = dom.find(key);
  if (at == std::string::npos) return "";
  size_t start = dom.rfind("<div class=\"chart", at);
  size_t end = dom.find("</svg>", at);
  if (start == std::string::npos) start = at;
  return dom.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

std::optional<Box> ChartBox(const std::string& chart_html) {
  size_t svg = chart_html.find("<svg");
  if (svg == std::string::npos) return std::nullopt;
  std::string box = Attr(chart_html.substr(svg, chart_html.find('>', svg) - svg), "data-box");
  std::vector<std::string> parts = absl::StrSplit(box, ',');
  Box b;
  if (parts.size() != 4 || !absl::SimpleAtod(parts[0], &b.x) ||
      !absl::SimpleAtod(parts[1], &b.y) || !absl::SimpleAtod(parts[2], &b.width) ||
      !absl::SimpleAtod(parts[3], &b.height)) {
    return std::nullopt;
  }
  return b;
}

std::string SeriesPath(const std::string& html, const std::string& series) {
  std::regex path_re("<path class=\"series[^\"]*\" [^>]*data-series=\"" + series + "\"[^>]*>");
  std::smatch m;
  return std::regex_search(html, m, path_re) ? m.str() : "";
}

std::string Attr(const std::string& html, const std::string& name) {
  const std::string key = absl::StrCat(" ", name, "=\"");
  size_t at = html.find(key);
  if (at == std::string::npos) return "";
  at += key.size();
  size_t end = html.find('"', at);
  return html.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

std::vector<std::string> Elements(const std::string& html, const std::string& tag) {
  std::vector<std::string> out;
  const std::string open = "<" + tag + " ";
  for (size_t at = html.find(open); at != std::string::npos; at = html.find(open, at + 1)) {
    out.push_back(html.substr(at, html.find('>', at) + 1 - at));
  }
  return out;
}

}  // namespace det::testing
