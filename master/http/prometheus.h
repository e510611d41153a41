// The Prometheus text exposition format (version 0.0.4) of the master's stats.
#ifndef DET_MASTER_HTTP_PROMETHEUS_H_
#define DET_MASTER_HTTP_PROMETHEUS_H_

#include <cstdint>
#include <string>

#include "proto/api.pb.h"

namespace det::master {

// One "# HELP", "# TYPE" and sample line per metric: the gauges and counters of `stats`
// (det_agents, det_slots_used, det_metric_rows_stored_total, ...) and
// det_http_requests_total = `http_requests`.
std::string PrometheusText(const v1::GetMasterStatsResponse& stats, int64_t http_requests);

}  // namespace det::master

#endif  // DET_MASTER_HTTP_PROMETHEUS_H_
