#include "master/store/metric_records.h"

#include <algorithm>
#include <charconv>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "master/metrics/downsample.h"
#include "master/store/metric_values_json.h"

namespace det::master {
namespace {

absl::Status Corrupt(int64_t trial_id, const char* what) {
  return absl::DataLossError(
      absl::StrCat("database: corrupt metric record of trial ", trial_id, ": ", what));
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

void SkipSpace(std::string_view s, size_t* i) {
  while (*i < s.size() && IsSpace(s[*i])) ++*i;
}

// The index just past the JSON array or object starting at s[i] (strings inside skipped,
// escapes included); npos when it does not end.
size_t SkipComposite(std::string_view s, size_t i) {
  int depth = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '"') {
      for (++i; i < s.size() && s[i] != '"'; ++i) {
        if (s[i] == '\\') ++i;
      }
      if (i >= s.size()) return std::string_view::npos;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if (c == ']' || c == '}') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// Parses the integer at s[*i] (then skips the ',' after it).
bool ParseInt(std::string_view s, size_t* i, int64_t* v) {
  SkipSpace(s, i);
  const char* begin = s.data() + *i;
  const char* end = s.data() + s.size();
  const std::from_chars_result r = std::from_chars(begin, end, *v);
  if (r.ec != std::errc() || r.ptr == begin) return false;
  *i += static_cast<size_t>(r.ptr - begin);
  SkipSpace(s, i);
  if (*i >= s.size() || s[*i] != ',') return false;
  ++*i;
  return true;
}

}  // namespace

void MetricRecordBuilder::Add(const v1::Metrics& m) {
  if (count_ == 0) {
    min_run_id_ = m.run_id();
    max_batches_ = m.total_batches();
  } else {
    rows_.push_back(',');
    min_run_id_ = std::min<int64_t>(min_run_id_, m.run_id());
    max_batches_ = std::max<int64_t>(max_batches_, m.total_batches());
  }
  ++count_;
  absl::StrAppend(&rows_, "[", m.run_id(), ",", m.total_batches(), ",", m.report_time_ms(), ",",
                  MetricValuesJson(m), "]");
}

absl::Status SplitMetricRecord(std::string_view rows, int64_t trial_id,
                               std::vector<std::string_view>* out) {
  size_t i = 0;
  SkipSpace(rows, &i);
  if (i >= rows.size() || rows[i] != '[') return Corrupt(trial_id, "not an array");
  ++i;
  SkipSpace(rows, &i);
  if (i < rows.size() && rows[i] == ']') return absl::OkStatus();
  while (true) {
    SkipSpace(rows, &i);
    if (i >= rows.size() || rows[i] != '[') return Corrupt(trial_id, "a row is not an array");
    const size_t end = SkipComposite(rows, i);
    if (end == std::string_view::npos) return Corrupt(trial_id, "a row does not end");
    out->push_back(rows.substr(i, end - i));
    i = end;
    SkipSpace(rows, &i);
    if (i >= rows.size()) return Corrupt(trial_id, "the array does not end");
    if (rows[i] == ']') break;
    if (rows[i] != ',') return Corrupt(trial_id, "no ',' between rows");
    ++i;
  }
  ++i;
  SkipSpace(rows, &i);
  if (i != rows.size()) return Corrupt(trial_id, "text after the array");
  return absl::OkStatus();
}

absl::Status ParseMetricRecordRow(std::string_view row, int64_t trial_id, v1::Metrics* m) {
  // "[" run_id "," total_batches "," time_ms "," {values} "]"
  size_t i = 1;
  int64_t run_id = 0, batches = 0, time_ms = 0;
  if (row.size() < 2 || row.front() != '[' || row.back() != ']' || !ParseInt(row, &i, &run_id) ||
      !ParseInt(row, &i, &batches) || !ParseInt(row, &i, &time_ms)) {
    return Corrupt(trial_id, "a row is not [run_id, total_batches, time_ms, values]");
  }
  m->set_run_id(static_cast<int32_t>(run_id));
  m->set_total_batches(batches);
  m->set_report_time_ms(time_ms);
  return ParseMetricValuesJson(std::string(row.substr(i, row.size() - 1 - i)), trial_id, m);
}

std::vector<MetricRecordBuilder> BuildMetricRecords(const std::vector<v1::Metrics>& metrics) {
  std::vector<MetricRecordBuilder> records;
  absl::flat_hash_map<int64_t, size_t> open;  // trial id -> its last record
  for (const auto& m : metrics) {
    auto [it, inserted] = open.try_emplace(m.trial_id(), records.size());
    if (!inserted) {
      const MetricRecordBuilder& r = records[it->second];
      if (r.group() != m.group() || r.count() >= kMetricRecordRowsMax) {
        it->second = records.size();
        inserted = true;
      }
    }
    if (inserted) records.emplace_back(m.trial_id(), m.group());
    records[it->second].Add(m);
  }
  return records;
}

absl::Status AppendMetricRecordRows(std::string_view rows, int64_t trial_id,
                                    const std::string& group, const std::vector<int64_t>* picks,
                                    std::vector<v1::Metrics>* out) {
  std::vector<std::string_view> split;
  RETURN_IF_ERROR(SplitMetricRecord(rows, trial_id, &split));
  auto add = [&](std::string_view row) {
    v1::Metrics& m = out->emplace_back();
    m.set_trial_id(trial_id);
    m.set_group(group);
    return ParseMetricRecordRow(row, trial_id, &m);
  };
  if (picks == nullptr) {
    for (std::string_view row : split) RETURN_IF_ERROR(add(row));
    return absl::OkStatus();
  }
  for (int64_t k : *picks) {
    if (k < 0 || k >= static_cast<int64_t>(split.size())) {
      return absl::DataLossError(absl::StrCat("database: metric record of trial ", trial_id,
                                              " has ", split.size(), " rows, fewer than its count"));
    }
    RETURN_IF_ERROR(add(split[k]));
  }
  return absl::OkStatus();
}

std::map<int64_t, std::vector<int64_t>> PickDownsampledRows(
    const std::vector<MetricRecordExtent>& extents, int max_points) {
  std::map<int64_t, std::vector<int64_t>> picks;
  size_t begin = 0;
  while (begin < extents.size()) {
    // One group: extents[begin, end).
    size_t end = begin;
    int64_t total = 0;
    for (; end < extents.size() && extents[end].group == extents[begin].group; ++end) {
      total += extents[end].n;
    }
    const std::vector<int64_t> chosen = DownsamplePositions(total, max_points);
    size_t next = 0;
    int64_t position = 0;
    for (size_t i = begin; i < end; ++i) {
      while (next < chosen.size() && chosen[next] < position + extents[i].n) {
        picks[extents[i].id].push_back(chosen[next] - position);
        ++next;
      }
      position += extents[i].n;
    }
    begin = end;
  }
  return picks;
}

int64_t KeepUnsupersededRows(const std::vector<v1::Metrics>& rows, int32_t run_id,
                             int64_t after_batches, MetricRecordBuilder* kept) {
  int64_t dropped = 0;
  for (const auto& m : rows) {
    if (m.run_id() < run_id && m.total_batches() > after_batches) {
      ++dropped;
    } else {
      kept->Add(m);
    }
  }
  return dropped;
}

}  // namespace det::master
