#include "master/scheduling/request_id.h"

#include "gtest/gtest.h"

namespace det::master {
namespace {

TEST(RequestIdTest, KeysAreDistinctPerKindAndMapBackWithoutParsing) {
  RequestIds ids;
  std::string trial = ids.Add(RequestId::Trial(7));
  std::string gc = ids.Add(RequestId::Gc(7));
  EXPECT_EQ(trial, "7");
  EXPECT_EQ(gc, "gc-7");
  EXPECT_EQ(ids.At(trial), RequestId::Trial(7));
  EXPECT_EQ(ids.At(gc), RequestId::Gc(7));
  EXPECT_TRUE(RequestId::Trial(7) < RequestId::Gc(1));
}

TEST(RequestIdTest, TagsAreDistinctPerKindAndMapBack) {
  for (int64_t id : {int64_t{0}, int64_t{7}, int64_t{1} << 40}) {
    EXPECT_NE(RequestId::Trial(id).Tag(), RequestId::Gc(id).Tag());
    EXPECT_EQ(RequestId::FromTag(RequestId::Trial(id).Tag()), RequestId::Trial(id));
    EXPECT_EQ(RequestId::FromTag(RequestId::Gc(id).Tag()), RequestId::Gc(id));
  }
}

}  // namespace
}  // namespace det::master
