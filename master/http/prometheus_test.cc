#include "master/http/prometheus.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(PrometheusText, GaugesAndCountersWithHelpAndType) {
  v1::GetMasterStatsResponse s;
  s.set_agents(3);
  s.set_slots_used(5);
  s.set_slots_free(2);
  s.set_uptime_ms(61500);
  s.set_metric_rows_stored_total(1234);
  std::string text = PrometheusText(s, 42);
  EXPECT_THAT(text, HasSubstr("# HELP det_agents Agents known to the master.\n"
                              "# TYPE det_agents gauge\ndet_agents 3\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE det_slots_used gauge\ndet_slots_used 5\n"));
  EXPECT_THAT(text, HasSubstr("\ndet_slots_free 2\n"));
  EXPECT_THAT(text, HasSubstr("\ndet_master_uptime_seconds 61\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE det_metric_rows_stored_total counter\n"
                              "det_metric_rows_stored_total 1234\n"));
  EXPECT_THAT(text, HasSubstr("\ndet_http_requests_total 42\n"));
  EXPECT_THAT(text, Not(HasSubstr("\n\n")));
  EXPECT_EQ(text.back(), '\n');
}

}  // namespace
}  // namespace det::master
