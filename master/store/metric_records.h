// SqliteStore's metric records: the rows of one trial and group that one AddMetrics stored
// one after another (a report, or several of the trial's reports in one flush), kept as one
// SQL row of table metric_records instead of one SQL row each. The record's `rows` column
// is a JSON array with one array per metric row, [run_id, total_batches, time_ms, values],
// the values as MetricValuesJson writes them; the view `metrics` (sqlite_schema.cc) shows
// them as the rows of the table it replaced.
#ifndef DET_MASTER_STORE_METRIC_RECORDS_H_
#define DET_MASTER_STORE_METRIC_RECORDS_H_

#include <cstdint>
#include <map>
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

// The records an AddMetrics of `metrics` stores, in the order to store them: one per run of
// a trial's rows of one group (another trial's rows in between do not end it; a row of
// another group or the kMetricRecordRowsMax-th row does), so that each trial's rows keep
// their order by record id.
std::vector<MetricRecordBuilder> BuildMetricRecords(const std::vector<v1::Metrics>& metrics);

// Appends the rows of record text `rows` (of `trial_id` and `group`) to `out`; of those only
// the ones at ascending indexes `picks` when `picks` is not null. DataLoss naming the trial
// for a corrupt record or a pick past its rows.
absl::Status AppendMetricRecordRows(std::string_view rows, int64_t trial_id,
                                    const std::string& group, const std::vector<int64_t>* picks,
                                    std::vector<v1::Metrics>* out);

// A stored record's place in its trial's series, as a downsampled read scans them.
struct MetricRecordExtent {
  std::string group;
  int64_t id = 0;
  int64_t n = 0;  // its rows
};
// For a read of at most `max_points` rows per group (> 0): the rows DownsamplePositions
// keeps of each group of `extents` (one trial's records ordered by group, then id), as
// record id -> ascending indexes into that record's rows.
std::map<int64_t, std::vector<int64_t>> PickDownsampledRows(
    const std::vector<MetricRecordExtent>& extents, int max_points);

// `rows` (one record's) without those a rerun of `run_id` from a checkpoint at
// `after_batches` supersedes (run_id < `run_id` and total_batches > `after_batches`), into
// `kept`; returns how many were dropped.
int64_t KeepUnsupersededRows(const std::vector<v1::Metrics>& rows, int32_t run_id,
                             int64_t after_batches, MetricRecordBuilder* kept);

}  // namespace det::master

#endif  // DET_MASTER_STORE_METRIC_RECORDS_H_
