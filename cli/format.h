// Output of the det CLI: aligned tables and key/value blocks for people, JSON for
// scripts. Pure functions of the protobuf messages; nothing here does I/O besides
// writing to the stream it is given.
#ifndef DET_CLI_FORMAT_H_
#define DET_CLI_FORMAT_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "proto/api.pb.h"
#include "proto/types.pb.h"

namespace det::cli {

// A table of text cells with a header row. Rendered as
//
//    ID | Name  | State
//   ----+-------+--------
//    1  | mnist | ACTIVE
//
// every column as wide as its widest cell (counted in UTF-8 code points).
class Table {
 public:
  explicit Table(std::vector<std::string> headers);

  // REQUIRES: cells.size() == number of headers.
  void AddRow(std::vector<std::string> cells);

  size_t num_rows() const { return rows_.size(); }

  // Writes the header, a separator line and the rows, each line ending in '\n' and
  // without trailing spaces. With `max_width` > 0 (a terminal's width) and a table wider
  // than that, the widest columns are narrowed (to no less than 8 characters) and their
  // cells (headers too) wrapped onto more lines, at spaces where possible: nothing is cut
  // off.
  void Render(std::ostream& out, size_t max_width = 0) const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// Ordered "Key: value" lines; keys are padded so that the values line up. With
// `max_width` > 0 (a terminal's width), a longer line's value is wrapped as Table wraps
// cells, its further lines indented under the values: nothing is cut off.
using KeyValues = std::vector<std::pair<std::string, std::string>>;
void RenderKeyValues(const KeyValues& fields, std::ostream& out, size_t max_width = 0);

// The message as JSON with the proto field names, every primitive field printed (also
// at its default value). `pretty`: indented over several lines; otherwise one line.
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message,
                                   bool pretty = true);

// ToJson(message, pretty) and a newline, written to `out`.
absl::Status WriteJson(const google::protobuf::Message& message, std::ostream& out,
                       bool pretty = true);

// "ACTIVE" for STATE_ACTIVE, and so on.
std::string StateName(v1::State state);
// COMPLETED, CANCELED and ERROR.
bool IsTerminal(v1::State state);
// Milliseconds since the epoch as "2024-01-02T15:04:05Z" (UTC); "" for 0.
std::string FormatTimeMs(int64_t ms);
// A log line's time: "2023-11-14T22:13:20.001Z" (UTC, milliseconds).
std::string FormatLogTimeMs(int64_t ms);
// A metric value with up to 6 significant digits.
std::string FormatMetric(double value);
// The value of metric `name`: a hash or checksum (a name containing "hash" or
// "checksum", a non-negative integer value below 2^53) in hex ("0x8b2f..."), as the web page
// shows it; any other value as FormatMetric.
std::string FormatMetric(std::string_view name, double value);
// A 0..1 fraction as "42.5%".
std::string FormatPercent(double fraction);
// A duration given in milliseconds, for people: 3 significant digits in ns, µs, ms or s
// ("812 µs", "4.21 ms", "1.5 s").
std::string FormatDurationMs(double ms);
// A rate with 3 significant digits and its unit: FormatRate(2.78181, "IOPS") = "2.78 IOPS".
std::string FormatRate(double per_second, const std::string& unit);
// A byte count as "1.5 MiB".
std::string FormatBytes(uint64_t bytes);

// "[rank 0] message" (stdout), "[rank 1] [stderr] message", and for lines the agent or
// the master wrote about the trial "[agent] message", "[master] message". No newline.
std::string FormatLogLine(const v1::LogLine& line);

// What an experiment's searcher optimises, read from its stored (effective) config.
struct SearcherMetric {
  std::string name;
  bool smaller_is_better = true;
};
// searcher.metric and searcher.smaller_is_better (default true) of `config_yaml`;
// std::nullopt when it has no searcher.metric or is not YAML.
std::optional<SearcherMetric> ParseSearcherMetric(const std::string& config_yaml);

// Diagnostic metrics (parameter hashes, sample checksums) are named "diag/...": tables
// leave them out unless asked, so that they never crowd out or rescale what people read.
bool IsDiagnosticMetric(std::string_view name);

// A trial's hyperparameters (its hparams_json object) flattened to dotted names in
// sorted order, each value printed for people: numbers with up to 6 significant digits,
// strings as they are, lists as JSON. Empty for "" or a non-object.
std::vector<std::pair<std::string, std::string>> FlattenHparams(const std::string& hparams_json);

// The trial's best validation value of `metric` (its min or max, as the searcher
// wants); std::nullopt when it reported none.
std::optional<double> BestValue(const v1::Trial& trial, const SearcherMetric& metric);
// The index in `trials` of the trial with the best value of `metric`; -1 when none has one.
int BestTrialIndex(const google::protobuf::RepeatedPtrField<v1::Trial>& trials,
                   const SearcherMetric& metric);

// ID, Owner, Name, State, Progress, Trials, Start Time, End Time (and Archived, yes or
// no, with `archived_column`: det e list --all).
Table ExperimentsTable(
    const google::protobuf::RepeatedPtrField<v1::Experiment>& experiments,
    bool archived_column = false);

// Why a trial failed: its error, else (for an ERROR trial) its last run's exit reason; ""
// for none.
std::string TrialError(const v1::Trial& trial);
KeyValues ExperimentFields(const v1::Experiment& experiment);

// Trial ID, State, Restarts, Batches, Pending Reason (only when some trial has one),
// then one column per validation metric with its latest value (diagnostic metrics only
// when `diagnostics`). With the experiment's searcher `metric` (a search): a "Best"
// column marking the best trial with "*" (when there are several trials), one column per
// hyperparameter, "Best <metric>" (each trial's best value) and, when a trial was
// stopped early, "Stopped Early" with the searcher's reason.
Table TrialsTable(const google::protobuf::RepeatedPtrField<v1::Trial>& trials,
                  const std::optional<SearcherMetric>& metric = std::nullopt,
                  bool diagnostics = false);
KeyValues TrialFields(const v1::Trial& trial);
// Group, Metric, Min, Max, Last, Count of the trial's training and validation
// summaries.
// Diagnostic metrics only when `diagnostics`.
Table TrialMetricsTable(const v1::Trial& trial, bool diagnostics = false);
// Phase, Mean, p50, p90, p99, Max (milliseconds) of the trial's latest timings report,
// phases in the order training runs them (dataloader_next, to_device, train_batch,
// step_lr_schedulers, from_device, reduce_metrics), then any others.
Table TrialTimingsTable(const v1::Trial& trial);
// Phase, Mean, p50, Max, Batches over every report of `reports` (a trial's "timings"
// group, as GetTrialMetrics returns it): Mean and p50 are the reports' <phase>_mean_ms and
// <phase>_p50_ms averaged with each report's <phase>_count as weight (1 where absent), Max
// the largest <phase>_max_ms and Batches the sum of the counts; same phase order as
// TrialTimingsTable.
Table TimingsOverReportsTable(const google::protobuf::RepeatedPtrField<v1::Metrics>& reports);

// UUID, Trial, Batches, State, Size, Metrics (diagnostic ones only when `diagnostics`),
// Reported, Path.
Table CheckpointsTable(const google::protobuf::RepeatedPtrField<v1::Checkpoint>& checkpoints,
                       bool diagnostics = false);

// ID, Hostname, Slots, Used, Connected, Enabled, Pool.
Table AgentsTable(const google::protobuf::RepeatedPtrField<v1::Agent>& agents);

// One row per rank: rank, agent, local rank and world, cross rank and size, slots.
Table RanksTable(const v1::Allocation& allocation);

// `master_address` is the host:port the CLI talked to.
KeyValues MasterInfoFields(const v1::GetMasterInfoResponse& info,
                           const std::string& master_address);

}  // namespace det::cli

#endif  // DET_CLI_FORMAT_H_
