#include "cli/format.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace det::cli {
namespace {

// Display width: UTF-8 code points (continuation bytes do not count).
size_t Width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) {
    if ((c & 0xC0) != 0x80) ++n;
  }
  return n;
}

void RTrimAndNewline(std::string& line, std::ostream& out) {
  while (!line.empty() && line.back() == ' ') line.pop_back();
  out << line << '\n';
}

std::string YesNo(bool b) { return b ? "yes" : "no"; }

// A wrapped column is never made narrower than this.
constexpr size_t kLeastWrappedWidth = 8;

// `text` in lines of at most `width` code points, broken after a space (else a '_', '/',
// '-' or ',') where one is in the line's second half, else at the width.
std::vector<std::string> Wrap(const std::string& text, size_t width) {
  if (width == 0 || Width(text) <= width) return {text};
  std::vector<std::string> lines;
  std::string rest = text;
  while (Width(rest) > width) {
    // Byte offset of the first code point past `width`.
    size_t end = 0;
    for (size_t n = 0; end < rest.size(); ++end) {
      if ((static_cast<unsigned char>(rest[end]) & 0xC0) != 0x80 && n++ == width) break;
    }
    size_t cut = end;
    for (const char* breaks : {" ", "_/-,"}) {
      size_t at = rest.find_last_of(breaks, end - (breaks[0] == ' ' ? 0 : 1));
      if (at != std::string::npos && at != 0 && at >= end / 2) {
        cut = at + 1;
        break;
      }
    }
    std::string line = rest.substr(0, cut);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    lines.push_back(std::move(line));
    rest = rest.substr(cut);
  }
  if (!rest.empty()) lines.push_back(rest);
  return lines;
}

}  // namespace

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

void Table::Render(std::ostream& out, size_t max_width) const {
  std::vector<size_t> widths(headers_.size());
  std::vector<size_t> least(headers_.size());  // narrowest a column may become
  for (size_t c = 0; c < headers_.size(); ++c) {
    widths[c] = Width(headers_[c]);
    for (const auto& row : rows_) widths[c] = std::max(widths[c], Width(row[c]));
    least[c] = std::min(widths[c], kLeastWrappedWidth);
  }
  if (max_width > 0) {
    // Each column takes its width plus 3 (" | "); narrow the widest until it fits.
    auto total = [&] {
      size_t t = 0;
      for (size_t w : widths) t += w + 3;
      return t;
    };
    while (total() > max_width + 1) {
      size_t widest = widths.size();
      for (size_t c = 0; c < widths.size(); ++c) {
        if (widths[c] > least[c] && (widest == widths.size() || widths[c] > widths[widest])) {
          widest = c;
        }
      }
      if (widest == widths.size()) break;  // every column as narrow as it may be
      --widths[widest];
    }
  }
  auto render_row = [&](const std::vector<std::string>& cells) {
    std::vector<std::vector<std::string>> pieces(cells.size());
    size_t lines = 1;
    for (size_t c = 0; c < cells.size(); ++c) {
      pieces[c] = Wrap(cells[c], widths[c]);
      lines = std::max(lines, pieces[c].size());
    }
    for (size_t l = 0; l < lines; ++l) {
      std::string line;
      for (size_t c = 0; c < cells.size(); ++c) {
        const std::string piece = l < pieces[c].size() ? pieces[c][l] : "";
        if (c > 0) line += " |";
        line += ' ';
        line += piece;
        line.append(widths[c] - std::min(widths[c], Width(piece)), ' ');
      }
      RTrimAndNewline(line, out);
    }
  };
  render_row(headers_);
  std::string sep;
  for (size_t c = 0; c < widths.size(); ++c) {
    if (c > 0) sep += '+';
    sep.append(widths[c] + 2, '-');
  }
  out << sep << '\n';
  for (const auto& row : rows_) render_row(row);
}

void RenderKeyValues(const KeyValues& fields, std::ostream& out, size_t max_width) {
  size_t width = 0;
  for (const auto& [key, value] : fields) width = std::max(width, Width(key) + 1);
  // Values are wrapped to what is left of the line, but never narrower than a table's
  // narrowest wrapped column.
  const size_t value_width =
      max_width > 0 ? std::max(max_width - std::min(max_width, width + 1), kLeastWrappedWidth)
                    : 0;
  for (const auto& [key, value] : fields) {
    std::string line = key + ":";
    line.append(width - Width(key) - 1 + 1, ' ');
    if (value_width == 0 || Width(value) <= value_width) {
      line += value;
      RTrimAndNewline(line, out);
      continue;
    }
    bool first = true;
    for (absl::string_view paragraph : absl::StrSplit(value, '\n')) {
      for (const std::string& piece : Wrap(std::string(paragraph), value_width)) {
        if (!first) line = std::string(width + 1, ' ');
        first = false;
        line += piece;
        RTrimAndNewline(line, out);
      }
    }
  }
}

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("cannot convert ", message.GetTypeName(),
                                            " to JSON: ", status.ToString()));
  }
  if (!json.empty() && json.back() == '\n') json.pop_back();
  return json;
}

absl::Status WriteJson(const google::protobuf::Message& message, std::ostream& out,
                       bool pretty) {
  absl::StatusOr<std::string> json = ToJson(message, pretty);
  if (!json.ok()) return json.status();
  out << *json << '\n';
  return absl::OkStatus();
}

std::string StateName(v1::State state) {
  std::string name = v1::State_Name(state);
  constexpr absl::string_view kPrefix = "STATE_";
  if (absl::string_view(name).substr(0, kPrefix.size()) == kPrefix) {
    name = name.substr(kPrefix.size());
  }
  return name.empty() ? absl::StrCat("STATE(", static_cast<int>(state), ")") : name;
}

bool IsTerminal(v1::State state) {
  return state == v1::STATE_COMPLETED || state == v1::STATE_CANCELED ||
         state == v1::STATE_ERROR;
}

std::string FormatTimeMs(int64_t ms) {
  if (ms == 0) return "";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(ms),
                          absl::UTCTimeZone());
}

std::string FormatLogTimeMs(int64_t ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(ms), absl::UTCTimeZone());
}

std::string FormatMetric(double value) {
  // As the master's JSON and the web page write them (not printf's nan/inf).
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  return absl::StrFormat("%.6g", value);
}

std::string FormatMetric(std::string_view name, double value) {
  const bool hash = name.find("hash") != std::string_view::npos ||
                    name.find("checksum") != std::string_view::npos;
  if (hash && value >= 0 && value < 9007199254740992.0 && std::floor(value) == value) {
    return absl::StrFormat("0x%x", static_cast<uint64_t>(value));
  }
  return FormatMetric(value);
}

std::string FormatPercent(double fraction) {
  return absl::StrFormat("%.1f%%", fraction * 100.0);
}

std::string FormatDurationMs(double ms) {
  if (!(ms == ms)) return "nan";
  const double abs = ms < 0 ? -ms : ms;
  if (abs >= 1000.0 * 1000.0) return absl::StrFormat("%.0f s", ms / 1000.0);
  if (abs >= 1000.0) return absl::StrFormat("%.3g s", ms / 1000.0);
  if (abs >= 1.0 || abs == 0.0) return absl::StrFormat("%.3g ms", ms);
  if (abs >= 1e-3) return absl::StrFormat("%.3g µs", ms * 1e3);
  return absl::StrFormat("%.3g ns", ms * 1e6);
}

std::string FormatRate(double per_second, const std::string& unit) {
  return absl::StrFormat("%.3g %s", per_second, unit);
}

std::string FormatBytes(uint64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string FormatLogLine(const v1::LogLine& line) {
  absl::string_view message = line.message();
  while (!message.empty() && (message.back() == '\n' || message.back() == '\r')) {
    message.remove_suffix(1);
  }
  if (line.stream() == "stderr") {
    return absl::StrCat("[rank ", line.rank(), "] [stderr] ", message);
  }
  if (line.stream() == "stdout" || line.stream().empty()) {
    return absl::StrCat("[rank ", line.rank(), "] ", message);
  }
  return absl::StrCat("[", line.stream(), "] ", message);  // "agent", "master"
}

Table ExperimentsTable(
    const google::protobuf::RepeatedPtrField<v1::Experiment>& experiments,
    bool archived_column) {
  std::vector<std::string> headers = {"ID",     "Owner",      "Name",    "State",
                                      "Progress", "Trials", "Start Time", "End Time"};
  if (archived_column) headers.push_back("Archived");
  Table table(std::move(headers));
  for (const v1::Experiment& e : experiments) {
    std::vector<std::string> row = {absl::StrCat(e.id()), e.owner(), e.name(),
                                    StateName(e.state()), FormatPercent(e.progress()),
                                    absl::StrCat(e.num_trials()), FormatTimeMs(e.start_time_ms()),
                                    FormatTimeMs(e.end_time_ms())};
    if (archived_column) row.push_back(YesNo(e.archived()));
    table.AddRow(std::move(row));
  }
  return table;
}

std::string TrialError(const v1::Trial& trial) {
  if (!trial.error().empty()) return trial.error();
  if (trial.state() == v1::STATE_ERROR) return trial.allocation().exit_reason();
  return "";
}

KeyValues ExperimentFields(const v1::Experiment& e) {
  KeyValues fields = {
      {"ID", absl::StrCat(e.id())},
      {"Name", e.name()},
  };
  if (!e.description().empty()) fields.emplace_back("Description", e.description());
  fields.emplace_back("State", StateName(e.state()));
  if (!e.owner().empty()) fields.emplace_back("Owner", e.owner());
  if (e.labels_size() > 0) fields.emplace_back("Labels", absl::StrJoin(e.labels(), ", "));
  if (e.archived()) fields.emplace_back("Archived", "yes");
  fields.emplace_back("Searcher", e.searcher());
  fields.emplace_back("Trials", absl::StrCat(e.num_trials()));
  fields.emplace_back("Progress", FormatPercent(e.progress()));
  fields.emplace_back("Seed", absl::StrCat(e.experiment_seed()));
  fields.emplace_back("Start Time", FormatTimeMs(e.start_time_ms()));
  fields.emplace_back("End Time", FormatTimeMs(e.end_time_ms()));
  if (!e.error().empty()) fields.emplace_back("Error", e.error());
  for (const std::string& w : e.warnings()) fields.emplace_back("Warning", w);
  return fields;
}

std::optional<SearcherMetric> ParseSearcherMetric(const std::string& config_yaml) {
  try {
    YAML::Node root = YAML::Load(config_yaml);
    YAML::Node searcher = root.IsMap() ? root["searcher"] : YAML::Node();
    if (!searcher.IsMap() || !searcher["metric"] || !searcher["metric"].IsScalar()) {
      return std::nullopt;
    }
    SearcherMetric metric;
    metric.name = searcher["metric"].as<std::string>();
    if (searcher["smaller_is_better"] && searcher["smaller_is_better"].IsScalar()) {
      metric.smaller_is_better = searcher["smaller_is_better"].as<bool>();
    }
    if (metric.name.empty()) return std::nullopt;
    return metric;
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
}

bool IsDiagnosticMetric(std::string_view name) { return name.substr(0, 5) == "diag/"; }

namespace {

void Flatten(const nlohmann::json& value, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>& out) {
  if (value.is_object()) {
    for (const auto& [key, item] : value.items()) {
      Flatten(item, prefix.empty() ? key : absl::StrCat(prefix, ".", key), out);
    }
  } else if (value.is_string()) {
    out.emplace_back(prefix, value.get<std::string>());
  } else if (value.is_number_float()) {
    out.emplace_back(prefix, FormatMetric(value.get<double>()));
  } else {
    out.emplace_back(prefix, value.dump());
  }
}

}  // namespace

std::vector<std::pair<std::string, std::string>> FlattenHparams(const std::string& hparams_json) {
  std::vector<std::pair<std::string, std::string>> out;
  nlohmann::json parsed = nlohmann::json::parse(hparams_json, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) return out;
  Flatten(parsed, "", out);
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<double> BestValue(const v1::Trial& trial, const SearcherMetric& metric) {
  auto it = trial.validation_summary().find(metric.name);
  if (it == trial.validation_summary().end() || it->second.count() == 0) return std::nullopt;
  return metric.smaller_is_better ? it->second.min() : it->second.max();
}

int BestTrialIndex(const google::protobuf::RepeatedPtrField<v1::Trial>& trials,
                   const SearcherMetric& metric) {
  int best = -1;
  std::optional<double> best_value;
  for (int i = 0; i < trials.size(); ++i) {
    std::optional<double> value = BestValue(trials[i], metric);
    if (!value.has_value() || *value != *value) continue;
    if (!best_value.has_value() ||
        (metric.smaller_is_better ? *value < *best_value : *value > *best_value)) {
      best = i;
      best_value = value;
    }
  }
  return best;
}

Table TrialsTable(const google::protobuf::RepeatedPtrField<v1::Trial>& trials,
                  const std::optional<SearcherMetric>& metric, bool diagnostics) {
  bool any_pending = false;
  bool any_stopped = false;
  bool any_error = false;
  std::set<std::string> metric_names;
  std::set<std::string> hparam_names;
  for (const v1::Trial& t : trials) {
    if (!t.pending_reason().empty()) any_pending = true;
    if (t.search().stopped_early()) any_stopped = true;
    if (!TrialError(t).empty()) any_error = true;
    for (const auto& [name, summary] : t.validation_summary()) {
      if (!diagnostics && IsDiagnosticMetric(name)) continue;
      if (metric.has_value() && name == metric->name) continue;  // in its own column
      metric_names.insert(name);
    }
    if (metric.has_value()) {
      for (const auto& [name, value] : FlattenHparams(t.hparams_json())) hparam_names.insert(name);
    }
  }
  const bool mark_best = metric.has_value() && trials.size() > 1;
  const int best = metric.has_value() ? BestTrialIndex(trials, *metric) : -1;
  std::vector<std::string> headers = {"Trial ID"};
  if (mark_best) headers.push_back("Best");
  headers.insert(headers.end(), {"State", "Restarts", "Batches"});
  if (any_pending) headers.push_back("Pending Reason");
  if (any_error) headers.push_back("Error");
  headers.insert(headers.end(), hparam_names.begin(), hparam_names.end());
  if (metric.has_value()) {
    headers.push_back(absl::StrCat("Best ", metric->name));
    if (any_stopped) headers.push_back("Stopped Early");
  }
  headers.insert(headers.end(), metric_names.begin(), metric_names.end());
  Table table(std::move(headers));
  for (int i = 0; i < trials.size(); ++i) {
    const v1::Trial& t = trials[i];
    std::vector<std::string> row = {absl::StrCat(t.id())};
    if (mark_best) row.push_back(i == best ? "*" : "");
    row.insert(row.end(), {StateName(t.state()), absl::StrCat(t.restarts()),
                           absl::StrCat(t.total_batches())});
    if (any_pending) row.push_back(t.pending_reason());
    if (any_error) row.push_back(TrialError(t));
    if (!hparam_names.empty()) {
      std::map<std::string, std::string> hparams;
      for (auto& [name, value] : FlattenHparams(t.hparams_json())) hparams[name] = value;
      for (const std::string& name : hparam_names) row.push_back(hparams[name]);
    }
    if (metric.has_value()) {
      std::optional<double> value = BestValue(t, *metric);
      row.push_back(value.has_value() ? FormatMetric(*value) : "");
      if (any_stopped) {
        row.push_back(t.search().stopped_early()
                          ? (t.search().stop_reason().empty() ? "yes" : t.search().stop_reason())
                          : "");
      }
    }
    for (const std::string& name : metric_names) {
      auto it = t.validation_summary().find(name);
      row.push_back(it == t.validation_summary().end() ? ""
                                                        : FormatMetric(name, it->second.last()));
    }
    table.AddRow(std::move(row));
  }
  return table;
}

KeyValues TrialFields(const v1::Trial& t) {
  KeyValues fields = {
      {"Trial ID", absl::StrCat(t.id())},
      {"Experiment ID", absl::StrCat(t.experiment_id())},
      {"State", StateName(t.state())},
  };
  if (!t.pending_reason().empty()) fields.emplace_back("Pending Reason", t.pending_reason());
  fields.emplace_back("Seed", absl::StrCat(t.seed()));
  fields.emplace_back("Hyperparameters", t.hparams_json());
  fields.emplace_back("Restarts", absl::StrCat(t.restarts()));
  fields.emplace_back("Run ID", absl::StrCat(t.run_id()));
  fields.emplace_back("Batches", absl::StrCat(t.total_batches()));
  fields.emplace_back("Start Time", FormatTimeMs(t.start_time_ms()));
  fields.emplace_back("End Time", FormatTimeMs(t.end_time_ms()));
  if (t.has_allocation() && !t.allocation().id().empty()) {
    const v1::Allocation& a = t.allocation();
    fields.emplace_back("Allocation", absl::StrCat(a.id(), " (", StateName(a.state()), ", ",
                                                   a.slots(), " slots)"));
    for (const v1::RankPlacement& r : a.ranks()) {
      fields.emplace_back(absl::StrCat("  Rank ", r.rank()),
                          absl::StrCat(r.agent_id(), " local rank ", r.local_rank(),
                                       " slots [", absl::StrJoin(r.slot_ids(), ", "),
                                       "]"));
    }
    if (!a.exit_reason().empty()) fields.emplace_back("Exit Reason", a.exit_reason());
  }
  if (!t.error().empty()) fields.emplace_back("Error", t.error());
  for (const std::string& w : t.warnings()) fields.emplace_back("Warning", w);
  return fields;
}

Table TrialMetricsTable(const v1::Trial& t, bool diagnostics) {
  Table table({"Group", "Metric", "Min", "Max", "Last", "Count"});
  auto add_group = [&](const std::string& group,
                       const google::protobuf::Map<std::string, v1::MetricSummary>& map) {
    std::map<std::string, v1::MetricSummary> sorted(map.begin(), map.end());
    for (const auto& [name, s] : sorted) {
      if (!diagnostics && IsDiagnosticMetric(name)) continue;
      table.AddRow({group, name, FormatMetric(name, s.min()), FormatMetric(name, s.max()),
                    FormatMetric(name, s.last()), absl::StrCat(s.count())});
    }
  };
  add_group("training", t.training_summary());
  add_group("validation", t.validation_summary());
  return table;
}

Table TrialTimingsTable(const v1::Trial& t) {
  Table table({"Phase", "Mean", "p50", "p90", "p99", "Max"});
  const auto& s = t.timings_summary();
  std::vector<std::string> phases = {"dataloader_next", "to_device",    "train_batch",
                                     "step_lr_schedulers", "from_device", "reduce_metrics"};
  std::set<std::string> others;
  for (const auto& [key, summary] : s) {
    const std::string suffix = "_mean_ms";
    if (key.size() <= suffix.size() || key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    std::string phase = key.substr(0, key.size() - suffix.size());
    if (std::find(phases.begin(), phases.end(), phase) == phases.end()) others.insert(phase);
  }
  phases.insert(phases.end(), others.begin(), others.end());
  for (const auto& phase : phases) {
    auto cell = [&](const std::string& stat) {
      auto it = s.find(absl::StrCat(phase, "_", stat, "_ms"));
      return it == s.end() ? std::string("-") : FormatDurationMs(it->second.last());
    };
    if (!s.count(absl::StrCat(phase, "_mean_ms"))) continue;
    table.AddRow({phase, cell("mean"), cell("p50"), cell("p90"), cell("p99"), cell("max")});
  }
  return table;
}

Table TimingsOverReportsTable(const google::protobuf::RepeatedPtrField<v1::Metrics>& reports) {
  struct Totals {
    double weight = 0, mean = 0, p50 = 0, max = 0;
    int64_t batches = 0;
    bool has_p50 = false;
  };
  const std::string suffix = "_mean_ms";
  std::map<std::string, Totals> totals;
  for (const v1::Metrics& r : reports) {
    const auto& v = r.values();
    for (const auto& [key, mean] : v) {
      if (key.size() <= suffix.size() ||
          key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0 ||
          !std::isfinite(mean)) {
        continue;
      }
      const std::string phase = key.substr(0, key.size() - suffix.size());
      auto count = v.find(absl::StrCat(phase, "_count"));
      const double w = count != v.end() && count->second > 0 ? count->second : 1;
      Totals& t = totals[phase];
      t.weight += w;
      t.mean += w * mean;
      t.batches += static_cast<int64_t>(w);
      auto p50 = v.find(absl::StrCat(phase, "_p50_ms"));
      if (p50 != v.end() && std::isfinite(p50->second)) {
        t.p50 += w * p50->second;
        t.has_p50 = true;
      }
      auto max = v.find(absl::StrCat(phase, "_max_ms"));
      t.max = std::max(t.max, max != v.end() && std::isfinite(max->second) ? max->second : mean);
    }
  }
  std::vector<std::string> phases = {"dataloader_next", "to_device",    "train_batch",
                                     "step_lr_schedulers", "from_device", "reduce_metrics"};
  for (const auto& [phase, t] : totals) {
    if (std::find(phases.begin(), phases.end(), phase) == phases.end()) phases.push_back(phase);
  }
  Table table({"Phase", "Mean", "p50", "Max", "Batches"});
  for (const auto& phase : phases) {
    auto it = totals.find(phase);
    if (it == totals.end()) continue;
    const Totals& t = it->second;
    table.AddRow({phase, FormatDurationMs(t.mean / t.weight),
                  t.has_p50 ? FormatDurationMs(t.p50 / t.weight) : "-", FormatDurationMs(t.max),
                  absl::StrCat(t.batches)});
  }
  return table;
}

Table CheckpointsTable(const google::protobuf::RepeatedPtrField<v1::Checkpoint>& checkpoints,
                       bool diagnostics) {
  Table table({"UUID", "Trial", "Batches", "State", "Size", "Metrics", "Reported", "Path"});
  for (const v1::Checkpoint& c : checkpoints) {
    int64_t bytes = 0;
    for (const auto& [file, size] : c.resources()) bytes += size;
    std::map<std::string, double> metrics(c.metrics().begin(), c.metrics().end());
    std::vector<std::string> parts;
    for (const auto& [name, value] : metrics) {
      if (!diagnostics && IsDiagnosticMetric(name)) continue;
      parts.push_back(absl::StrCat(name, "=", FormatMetric(name, value)));
    }
    table.AddRow({c.uuid(), absl::StrCat(c.trial_id()), absl::StrCat(c.total_batches()),
                  c.state() == v1::STATE_UNSPECIFIED ? "COMPLETED" : StateName(c.state()),
                  FormatBytes(static_cast<uint64_t>(bytes)), absl::StrJoin(parts, " "),
                  FormatTimeMs(c.report_time_ms()), c.storage_path()});
  }
  return table;
}

Table AgentsTable(const google::protobuf::RepeatedPtrField<v1::Agent>& agents) {
  Table table(
      {"ID", "Hostname", "Slots", "Used", "Connected", "Enabled", "Draining", "Pool"});
  for (const v1::Agent& a : agents) {
    int used = 0;
    int disabled = 0;
    for (const v1::Slot& s : a.slots()) {
      if (!s.allocation_id().empty()) ++used;
      if (!s.enabled()) ++disabled;
    }
    std::string slots = absl::StrCat(a.slots_size());
    if (disabled > 0) absl::StrAppend(&slots, " (", disabled, " disabled)");
    table.AddRow({a.id(), a.hostname(), slots, absl::StrCat(used), YesNo(a.connected()),
                  YesNo(a.enabled()), YesNo(a.draining()), a.resource_pool()});
  }
  return table;
}

Table RanksTable(const v1::Allocation& allocation) {
  Table table({"Rank", "Agent", "Local Rank", "Local World", "Cross Rank", "Cross Size", "Slots"});
  std::vector<std::string> agents;  // In rank order: the first hosts rank 0.
  std::map<std::string, int> per_agent;
  for (const v1::RankPlacement& r : allocation.ranks()) {
    if (per_agent[r.agent_id()]++ == 0) agents.push_back(r.agent_id());
  }
  for (const v1::RankPlacement& r : allocation.ranks()) {
    int cross = static_cast<int>(std::find(agents.begin(), agents.end(), r.agent_id()) - agents.begin());
    table.AddRow({absl::StrCat(r.rank()), r.agent_id(), absl::StrCat(r.local_rank()),
                  absl::StrCat(per_agent[r.agent_id()]), absl::StrCat(cross),
                  absl::StrCat(agents.size()), absl::StrJoin(r.slot_ids(), ",")});
  }
  return table;
}

KeyValues MasterInfoFields(const v1::GetMasterInfoResponse& info,
                           const std::string& master_address) {
  return {
      {"Master", master_address},
      {"Version", info.version()},
      {"Cluster ID", info.cluster_id()},
      {"Cluster Name", info.cluster_name()},
      {"Start Time", FormatTimeMs(info.start_time_ms())},
      {"Database", info.database()},
      {"Scheduler", info.scheduler()},
  };
}

}  // namespace det::cli
