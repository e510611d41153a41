#include "master/store/metric_records.h"

#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::master {
namespace {

v1::Metrics Row(int32_t run, int64_t batches, int64_t time_ms,
                std::vector<std::pair<std::string, double>> values) {
  v1::Metrics m;
  m.set_trial_id(7);
  m.set_group("training");
  m.set_run_id(run);
  m.set_total_batches(batches);
  m.set_report_time_ms(time_ms);
  for (auto& [k, v] : values) (*m.mutable_values())[k] = v;
  return m;
}

std::vector<v1::Metrics> Decode(const std::string& text) {
  std::vector<std::string_view> rows;
  absl::Status st = SplitMetricRecord(text, 7, &rows);
  EXPECT_TRUE(st.ok()) << st;
  std::vector<v1::Metrics> out;
  for (std::string_view r : rows) {
    v1::Metrics& m = out.emplace_back();
    st = ParseMetricRecordRow(r, 7, &m);
    EXPECT_TRUE(st.ok()) << st << " in " << r;
  }
  return out;
}

TEST(MetricRecords, RowsRoundTripInOrderWithTheirBounds) {
  MetricRecordBuilder b(7, "training");
  std::vector<v1::Metrics> in = {
      Row(2, 10, 1795846370000, {{"loss", 0.5}, {"acc", -0.0}}),
      Row(1, -3, -1, {{"we]ird \"key\" {[,", 1e-300}, {"big", 1.7976931348623157e308}}),
      Row(3, 40, 0, {}),
      Row(0, 5, 9, {{"nan", std::numeric_limits<double>::quiet_NaN()},
                    {"inf", std::numeric_limits<double>::infinity()},
                    {"ninf", -std::numeric_limits<double>::infinity()},
                    {"ctl\n\x01\\", 3.25}}),
  };
  for (const auto& m : in) b.Add(m);
  EXPECT_EQ(b.count(), 4);
  EXPECT_EQ(b.min_run_id(), 0);
  EXPECT_EQ(b.max_batches(), 40);
  std::vector<v1::Metrics> out = Decode(b.Finish());
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].run_id(), in[i].run_id()) << i;
    EXPECT_EQ(out[i].total_batches(), in[i].total_batches()) << i;
    EXPECT_EQ(out[i].report_time_ms(), in[i].report_time_ms()) << i;
    ASSERT_EQ(out[i].values_size(), in[i].values_size()) << i;
    for (const auto& [k, v] : in[i].values()) {
      ASSERT_TRUE(out[i].values().contains(k)) << k;
      const double got = out[i].values().at(k);
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(got)) << k;
      } else {
        EXPECT_EQ(got, v) << k;
        EXPECT_EQ(std::signbit(got), std::signbit(v)) << k;
      }
    }
  }
}

TEST(MetricRecords, AnEmptyRecordHasNoRows) {
  MetricRecordBuilder b(7, "validation");
  EXPECT_TRUE(Decode(b.Finish()).empty());
  EXPECT_TRUE(Decode(" [ ] ").empty());
}

TEST(MetricRecords, ToleratesWhitespaceAsSqliteMayWriteIt) {
  std::vector<v1::Metrics> out = Decode(" [ [1, 2 ,3, {\"a\": 1.5} ] , [4,5,6,{}]] ");
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].values().at("a"), 1.5);
  EXPECT_EQ(out[1].total_batches(), 5);
}

TEST(MetricRecords, CorruptRecordsAreDataLossNamingTheTrial) {
  for (const char* bad : {"", "{}", "[", "[[1,2,3,{}]", "[[1,2,3,{}],]", "[[1,2,3,{}]] x",
                          "[[1,2,3,{}] [4,5,6,{}]]", "[[1,2,3,{\"a\":\"x]]"}) {
    std::vector<std::string_view> rows;
    absl::Status st = SplitMetricRecord(bad, 42, &rows);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << bad;
    EXPECT_THAT(std::string(st.message()), testing::HasSubstr("trial 42")) << bad;
  }
  for (const char* bad : {"[1,2,{}]", "[1,2,3]", "[x,2,3,{}]", "[1,2,3,{\"a\":\"b\"}]",
                          "[1,2,3,[]]"}) {
    v1::Metrics m;
    absl::Status st = ParseMetricRecordRow(bad, 42, &m);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << bad;
    EXPECT_THAT(std::string(st.message()), testing::HasSubstr("trial 42")) << bad;
  }
}

}  // namespace
}  // namespace det::master
