#include "common/config/json_text.h"

#include "gtest/gtest.h"

namespace det::config {
namespace {

TEST(JsonString, QuotesAndEscapes) {
  EXPECT_EQ(JsonString(""), R"("")");
  EXPECT_EQ(JsonString("a\"b\\c\n\r\t\x01"), R"("a\"b\\c\n\r\t\u0001")");
  EXPECT_EQ(JsonString("h\xc3\xa9"), "\"h\xc3\xa9\"");  // UTF-8 copied as it is
}

}  // namespace
}  // namespace det::config
