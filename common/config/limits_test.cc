#include "common/config/limits.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::config {
namespace {

TEST(FindInvalidUtf8, NamesTheFirstBadByte) {
  EXPECT_EQ(FindInvalidUtf8("plain\ncafé ☕ 𝄞\n"), "");
  EXPECT_EQ(FindInvalidUtf8("ok\nbad \xff here"), "line 2, byte offset 7 (0xff)");
  EXPECT_EQ(FindInvalidUtf8("\xc3"), "line 1, byte offset 0 (0xc3)");          // truncated
  EXPECT_EQ(FindInvalidUtf8("a\xc0\xaf"), "line 1, byte offset 1 (0xc0)");     // overlong '/'
  EXPECT_EQ(FindInvalidUtf8("\xed\xa0\x80"), "line 1, byte offset 0 (0xed)");  // surrogate
  EXPECT_EQ(FindInvalidUtf8("\xf4\x90\x80\x80"), "line 1, byte offset 0 (0xf4)");  // > U+10FFFF
}

std::string Error(const std::vector<ContextEntry>& files) {
  absl::Status status = CheckContext(files);
  return status.ok() ? "ok" : std::string(status.message());
}

TEST(CheckContext, PathsStayInsideAndAreUnambiguous) {
  EXPECT_EQ(Error({{"train.py", 10}, {"data/a.csv", 5}, {"data/b/c.txt", 1}, {"data.txt", 1}}),
            "ok");
  EXPECT_EQ(Error({}), "ok");
  EXPECT_EQ(Error({{"../secret", 1}}),
            "model context: file '../secret': a '..' component; paths stay inside the context");
  EXPECT_EQ(Error({{"a/./b", 1}}),
            "model context: file 'a/./b': a '.' component; paths stay inside the context");
  EXPECT_EQ(Error({{"/etc/passwd", 1}}),
            "model context: file '/etc/passwd': an absolute path; context paths are relative");
  EXPECT_EQ(Error({{"a//b", 1}}),
            "model context: file 'a//b': an empty path component ('//' or a trailing '/')");
  EXPECT_EQ(Error({{"a/", 1}}),
            "model context: file 'a/': an empty path component ('//' or a trailing '/')");
  EXPECT_EQ(Error({{"", 1}}), "model context: file '': an empty path");
  EXPECT_EQ(Error({{"x.py", 1}, {"x.py", 2}}), "model context: file 'x.py': appears twice");
  EXPECT_EQ(Error({{"a", 1}, {"a/b", 1}}),
            "model context: 'a' is a file and also the directory of 'a/b'");
  EXPECT_EQ(Error({{"a/b/c", 1}, {"a/b", 1}}),
            "model context: 'a/b' is a file and also the directory of 'a/b/c'");
  EXPECT_EQ(Error({{"line\nbreak", 1}}),
            "model context: file 'line\\nbreak': the path contains a control character");
  EXPECT_EQ(Error({{"bad\xff", 1}}),
            "model context: file 'bad\\xff': the path is not valid UTF-8");
  EXPECT_EQ(Error({{std::string(5000, 'p'), 1}}).substr(0, 30), "model context: file 'ppppppppp");
  EXPECT_THAT(Error({{std::string(5000, 'p'), 1}}),
              ::testing::EndsWith("...: a path of 5000 bytes; at most 4096 are accepted"));
}

TEST(CheckContext, CountsAndBytes) {
  std::vector<ContextEntry> many;
  for (int i = 0; i <= kMaxContextFiles; ++i) many.push_back({"f" + std::to_string(i), 0});
  EXPECT_EQ(Error(many), "model context: 10001 files; at most 10000 are accepted");
  many.pop_back();
  EXPECT_EQ(Error(many), "ok");
  EXPECT_EQ(Error({{"a", 40 << 20}, {"b", 30 << 20}}),
            "model context: more than 64 MiB in all (70.0 MiB up to 'b'); at most 64 MiB are "
            "accepted");
}

}  // namespace
}  // namespace det::config
