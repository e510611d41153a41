// Internal to the PostgreSQL store (postgres_store.cc): the one query that reads a trial's
// metric series downsampled (MetricsReader::GetTrialMetrics) with window functions.
// (SQLite's reader steps through the index instead: its window functions cost ten times
// as much per row, sqlite_store.cc.) The rows chosen are DownsamplePositions'
// (master/metrics/downsample.h), which the conformance suite checks.
#ifndef DET_MASTER_STORE_DOWNSAMPLE_SQL_H_
#define DET_MASTER_STORE_DOWNSAMPLE_SQL_H_

#include <string>

#include "absl/strings/str_cat.h"

namespace det::master::store_internal {

// SELECT run_id, grp, total_batches, time_ms, vals of the rows of trial `trial` (of group
// `group` unless it is ''), in report order (id), at most `m` rows per group when m > 0.
// The arguments are the placeholders of the dialect ("?1" or "$1::bigint").
//
// The rows are numbered within their group (r = 0..n-1) over the index metrics_by_trial
// (trial_id, grp, id) alone; only the chosen ids are then read whole. Row r is chosen when
// n <= m, or (m == 1) it is the last, or (m > 1) some j in 0..m-1 has
// floor((j * (n - 1) + h) / (m - 1)) = r with h = floor((m - 1) / 2) (DownsampleMetrics'
// rounding): j * (n - 1) lies in [a, b] = [r * (m - 1) - h, (r + 1) * (m - 1) - h - 1], a
// range shorter than n - 1 with b >= 0, so it holds a multiple of n - 1 exactly when
// floor(b / (n - 1)) * (n - 1) >= a. NULLIF keeps a division by zero (n = 1) out of it.
inline std::string DownsampledMetricsSql(const std::string& trial, const std::string& group,
                                         const std::string& m) {
  const std::string h = absl::StrCat("((", m, " - 1) / 2)");
  return absl::StrCat(
      "SELECT run_id, grp, total_batches, time_ms, vals FROM metrics WHERE id IN ("
      "SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY grp ORDER BY id) - 1 AS r, "
      "COUNT(*) OVER (PARTITION BY grp) AS n FROM metrics WHERE trial_id = ", trial,
      " AND (", group, " = '' OR grp = ", group, ")) AS numbered WHERE ", m, " <= 0 OR n <= ",
      m, " OR r = n - 1 OR (", m, " > 1 AND (((r + 1) * (", m, " - 1) - ", h,
      " - 1) / NULLIF(n - 1, 0)) * (n - 1) >= r * (", m, " - 1) - ", h,
      ")) ORDER BY id");
}

}  // namespace det::master::store_internal

#endif  // DET_MASTER_STORE_DOWNSAMPLE_SQL_H_
