// SqliteStore's metric records: the rows of one trial and group that one AddMetrics stored
// one after another (a report, or several of the trial's reports in one flush), kept as one
// SQL row of table metric_records instead of one SQL row each. The record's `rows` column
// is a JSON array with one array per metric row, [run_id, total_batches, time_ms, values],
// the values as MetricValuesJson writes them; the view `metrics` (sqlite_schema.cc) shows
// them as the rows of the table it replaced.
#ifndef DET_MASTER_STORE_METRIC_RECORDS_H_
#define DET_MASTER_STORE_METRIC_RECORDS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "proto/types.pb.h"

namespace det::master {

// At most this many metric rows go into one record (the view numbers a record's rows
// record_id * kMetricRecordRowsMax + index).
inline constexpr int kMetricRecordRowsMax = 4096;

// One record under construction: rows of one trial and group, in order.
class MetricRecordBuilder {
 public:
  MetricRecordBuilder(int64_t trial_id, std::string group)
      : trial_id_(trial_id), group_(std::move(group)) {}
  // Appends `m` (of this builder's trial and group).
  void Add(const v1::Metrics& m);
  // The record's `rows` text.
  std::string Finish() const { return rows_ + "]"; }

  int64_t trial_id() const { return trial_id_; }
  const std::string& group() const { return group_; }
  int64_t count() const { return count_; }
  int64_t min_run_id() const { return min_run_id_; }
  int64_t max_batches() const { return max_batches_; }

 private:
  int64_t trial_id_;
  std::string group_;
  std::string rows_ = "[";
  int64_t count_ = 0;
  int64_t min_run_id_ = 0;
  int64_t max_batches_ = 0;
};

// The rows of record text `rows` as views into it, one array each ("[run,batches,time,{...}]"),
// in order; DataLoss naming trial `trial_id` when it is not such an array.
absl::Status SplitMetricRecord(std::string_view rows, int64_t trial_id,
                               std::vector<std::string_view>* out);
// Sets `m`'s run_id, total_batches, report_time_ms and values from one row SplitMetricRecord
// returned (trial and group are the caller's); DataLoss naming trial `trial_id` for anything
// else.
absl::Status ParseMetricRecordRow(std::string_view row, int64_t trial_id, v1::Metrics* m);

}  // namespace det::master

#endif  // DET_MASTER_STORE_METRIC_RECORDS_H_
