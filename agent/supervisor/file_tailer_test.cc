#include "agent/supervisor/file_tailer.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace det::agent {
namespace {

using Lines = std::vector<std::pair<std::string, int64_t>>;

std::string TempFile(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string path = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::remove(path.c_str());
  return path;
}

void Append(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::app) << text;
}

Lines Poll(FileTailer& t, bool final = false) {
  Lines out;
  t.Poll(final, 1 << 30,
         [&](std::string_view l, int64_t end) { out.emplace_back(std::string(l), end); });
  return out;
}

TEST(FileTailer, LinesWithTheirEndOffsetsAsTheFileGrows) {
  std::string path = TempFile("grow");
  FileTailer t(path, 0);
  EXPECT_TRUE(Poll(t).empty());  // Not created yet.
  Append(path, "one\ntw");
  EXPECT_EQ(Poll(t), (Lines{{"one", 4}}));
  Append(path, "o\r\nthree\n");
  EXPECT_EQ(Poll(t), (Lines{{"two", 9}, {"three", 15}}));
  Append(path, "partial");
  EXPECT_TRUE(Poll(t).empty());
  EXPECT_EQ(Poll(t, /*final=*/true), (Lines{{"partial", 22}}));
}

TEST(FileTailer, ResumesAtAnOffset) {
  std::string path = TempFile("resume");
  Append(path, "one\ntwo\nthree\n");
  FileTailer t(path, 4);
  EXPECT_EQ(Poll(t), (Lines{{"two", 8}, {"three", 14}}));
}

TEST(FileTailer, LongLinesComeInPieces) {
  std::string path = TempFile("long");
  std::string big(FileTailer::kMaxLineLength * 2 + 10, 'x');
  Append(path, big + "\n" + std::string(FileTailer::kMaxLineLength, 'y') + "\nz\n");
  FileTailer t(path, 0);
  Lines lines = Poll(t);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0].first.size(), FileTailer::kMaxLineLength);
  EXPECT_EQ(lines[1].second, static_cast<int64_t>(2 * FileTailer::kMaxLineLength));
  EXPECT_EQ(lines[2].first, std::string(10, 'x'));
  EXPECT_EQ(lines[3].first, std::string(FileTailer::kMaxLineLength, 'y'));
  EXPECT_EQ(lines[4].first, "z");
  EXPECT_EQ(lines[4].second, static_cast<int64_t>(big.size() + FileTailer::kMaxLineLength + 4));
}

TEST(FileTailer, StopsAfterMaxLinesAndResumes) {
  std::string path = TempFile("max");
  std::string text;
  for (int i = 0; i < 100000; ++i) text += "line\n";
  Append(path, text + "tail");
  FileTailer t(path, 0);
  int total = 0;
  int calls = 0;
  int64_t last_end = 0;
  while (true) {
    int n = t.Poll(/*final=*/true, 1000, [&](std::string_view, int64_t end) { last_end = end; });
    ++calls;
    // At most one 64 KiB chunk (13108 lines of 5 bytes) beyond the limit.
    EXPECT_LE(n, 1000 + 65536 / 5 + 1);
    total += n;
    if (t.at_end()) break;
  }
  EXPECT_EQ(total, 100001);
  EXPECT_GT(calls, 5);
  EXPECT_EQ(last_end, 500004);
}

}  // namespace
}  // namespace det::agent
