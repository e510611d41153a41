// A metric row's values as the `vals` JSON column of the SQL stores (SqliteStore,
// PostgresStore): an object of numbers, or for the values JSON has no number for, the
// strings protobuf's JSON uses: "NaN", "Infinity", "-Infinity".
#ifndef DET_MASTER_STORE_METRIC_VALUES_JSON_H_
#define DET_MASTER_STORE_METRIC_VALUES_JSON_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/types.pb.h"

namespace det::master {

std::string MetricValuesJson(const v1::Metrics& m);
// Sets `m`'s values from `json` (as MetricValuesJson wrote it); DataLoss naming trial
// `trial_id` for anything else.
absl::Status ParseMetricValuesJson(const std::string& json, int64_t trial_id, v1::Metrics* m);

}  // namespace det::master

#endif  // DET_MASTER_STORE_METRIC_VALUES_JSON_H_
