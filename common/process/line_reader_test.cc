#include "common/process/line_reader.h"

#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Feeds `chunks` in order, then flushes; returns every line delivered.
std::vector<std::string> Split(const std::vector<std::string>& chunks,
                               size_t max_line_length = LineSplitter::kDefaultMaxLineLength) {
  LineSplitter splitter(max_line_length);
  std::vector<std::string> lines;
  auto collect = [&](std::string_view line) { lines.emplace_back(line); };
  for (const std::string& chunk : chunks) splitter.Feed(chunk, collect);
  splitter.Flush(collect);
  EXPECT_EQ(splitter.buffered_size(), 0u);
  return lines;
}

TEST(LineSplitterTest, SplitsCompleteLines) {
  EXPECT_THAT(Split({"one\ntwo\nthree\n"}), ElementsAre("one", "two", "three"));
}

TEST(LineSplitterTest, KeepsEmptyLines) {
  EXPECT_THAT(Split({"\n\na\n\n"}), ElementsAre("", "", "a", ""));
}

TEST(LineSplitterTest, NothingFedGivesNoLines) {
  EXPECT_THAT(Split({}), IsEmpty());
  EXPECT_THAT(Split({"", ""}), IsEmpty());
}

TEST(LineSplitterTest, JoinsPartialLinesAcrossFeeds) {
  EXPECT_THAT(Split({"hel", "lo\nwo", "r", "ld\n"}), ElementsAre("hello", "world"));
}

TEST(LineSplitterTest, HoldsUnterminatedLineUntilFlush) {
  LineSplitter splitter;
  std::vector<std::string> lines;
  auto collect = [&](std::string_view line) { lines.emplace_back(line); };
  splitter.Feed("done\npartial", collect);
  EXPECT_THAT(lines, ElementsAre("done"));
  EXPECT_EQ(splitter.buffered_size(), 7u);
  splitter.Flush(collect);
  EXPECT_THAT(lines, ElementsAre("done", "partial"));
  splitter.Flush(collect);  // nothing left: no extra empty line
  EXPECT_THAT(lines, ElementsAre("done", "partial"));
  splitter.Feed("again\n", collect);  // reusable after Flush
  EXPECT_THAT(lines, ElementsAre("done", "partial", "again"));
}

TEST(LineSplitterTest, StripsCarriageReturnBeforeNewline) {
  EXPECT_THAT(Split({"a\r\nb\r\n"}), ElementsAre("a", "b"));
  EXPECT_THAT(Split({"a\r", "\nb\r", "\n"}), ElementsAre("a", "b"));
  EXPECT_THAT(Split({"tail\r"}), ElementsAre("tail"));
}

TEST(LineSplitterTest, KeepsCarriageReturnInsideLine) {
  EXPECT_THAT(Split({"progress 10%\rprogress 20%\n"}),
              ElementsAre("progress 10%\rprogress 20%"));
  EXPECT_THAT(Split({"a\r", "b\n"}), ElementsAre("a\rb"));
}

TEST(LineSplitterTest, CutsOverlongLinesAtMaxLength) {
  EXPECT_THAT(Split({"abcdefghij\n"}, 4), ElementsAre("abcd", "efgh", "ij"));
  EXPECT_THAT(Split({"abcdefgh\n"}, 4), ElementsAre("abcd", "efgh"));
  EXPECT_THAT(Split({"ab", "cdefghij", "kl"}, 4), ElementsAre("abcd", "efgh", "ijkl"));
}

TEST(LineSplitterTest, CutsWithoutWaitingForNewline) {
  LineSplitter splitter(4);
  std::vector<std::string> lines;
  auto collect = [&](std::string_view line) { lines.emplace_back(line); };
  splitter.Feed("abcdefghij", collect);
  EXPECT_THAT(lines, ElementsAre("abcd", "efgh"));
  EXPECT_EQ(splitter.buffered_size(), 2u);
}

TEST(LineSplitterTest, LineOfExactlyMaxLengthWithCrLfIsOneLine) {
  EXPECT_THAT(Split({"abcd\r\n"}, 4), ElementsAre("abcd"));
  EXPECT_THAT(Split({"abcd\r", "\n"}, 4), ElementsAre("abcd"));
  EXPECT_THAT(Split({"ab", "cd", "\r", "\n", "ef\r\n"}, 4), ElementsAre("abcd", "ef"));
}

TEST(LineSplitterTest, DefaultMaxLengthBoundsMemory) {
  LineSplitter splitter;
  size_t total = 0;
  int pieces = 0;
  std::string chunk(10000, 'x');
  for (int i = 0; i < 100; ++i) {
    splitter.Feed(chunk, [&](std::string_view line) {
      EXPECT_EQ(line.size(), LineSplitter::kDefaultMaxLineLength);
      total += line.size();
      ++pieces;
    });
    EXPECT_LE(splitter.buffered_size(), LineSplitter::kDefaultMaxLineLength);
  }
  splitter.Flush([&](std::string_view line) { total += line.size(); });
  EXPECT_EQ(total, 1000000u);
  EXPECT_EQ(pieces, 1000000 / 65536);
}

// However the stream is cut into Feed() calls, the lines are the same.
TEST(LineSplitterTest, ResultIndependentOfChunking) {
  const std::vector<std::string> streams = {
      "a\nbb\r\nccc\rc\n\n\r\n\rdddddddddd\r\neeeeeeee\n\r",
      "abcd\r\nabcdefgh\r\nabc\r\r\n\r\r\r\nx",
      "\r\r\r\r\r\r\r\r\r\n",
  };
  for (size_t max : {1u, 2u, 3u, 4u, 5u, 100u}) {
    for (const std::string& stream : streams) {
      const std::vector<std::string> whole = Split({stream}, max);
      std::vector<std::string> bytes;
      for (char c : stream) bytes.emplace_back(1, c);
      EXPECT_EQ(Split(bytes, max), whole) << "max=" << max << " stream=" << stream;
      for (size_t cut = 0; cut <= stream.size(); ++cut) {
        EXPECT_EQ(Split({stream.substr(0, cut), stream.substr(cut)}, max), whole)
            << "max=" << max << " cut=" << cut << " stream=" << stream;
      }
    }
  }
}

}  // namespace
}  // namespace det
