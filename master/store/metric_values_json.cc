#include "master/store/metric_values_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace det::master {
namespace {

// The value MetricValuesJson wrote; nullopt for anything else.
std::optional<double> ValueFromJson(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  if (!v.is_string()) return std::nullopt;
  const std::string& s = v.get_ref<const std::string&>();
  if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (s == "Infinity") return std::numeric_limits<double>::infinity();
  if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
  return std::nullopt;
}

// Appends `s` as a JSON string: UTF-8 as is; quotes, backslashes and control characters
// escaped.
void AppendJsonString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (u < 0x20) {
      constexpr char kHex[] = "0123456789abcdef";
      out->append("\\u00");
      out->push_back(kHex[u >> 4]);
      out->push_back(kHex[u & 0xf]);
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

}  // namespace

// Written by hand (on the ingestion path, once per stored row): the object nlohmann's dump
// wrote, names in ascending byte order, numbers in their shortest round-trip form.
std::string MetricValuesJson(const v1::Metrics& m) {
  std::vector<std::pair<const std::string*, double>> values;
  values.reserve(m.values_size());
  for (const auto& [k, v] : m.values()) values.emplace_back(&k, v);
  std::sort(values.begin(), values.end(),
            [](const auto& a, const auto& b) { return *a.first < *b.first; });
  std::string out = "{";
  for (const auto& [k, v] : values) {
    if (out.size() > 1) out.push_back(',');
    AppendJsonString(*k, &out);
    out.push_back(':');
    if (std::isnan(v)) {
      out.append("\"NaN\"");
    } else if (std::isinf(v)) {
      out.append(v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
    } else {
      char buf[32];
      const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), v);
      const std::string_view number(buf, static_cast<size_t>(r.ptr - buf));
      out.append(number);
      // Read back as a double, not an integer (so -0 stays negative).
      if (number.find_first_of(".e") == std::string_view::npos) out.append(".0");
    }
  }
  out.push_back('}');
  return out;
}

absl::Status ParseMetricValuesJson(const std::string& json, int64_t trial_id, v1::Metrics* m) {
  auto j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return absl::DataLossError(
        absl::StrCat("database: metrics row of trial ", trial_id, ": values are not an object"));
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::optional<double> value = ValueFromJson(*it);
    if (!value) {
      return absl::DataLossError(absl::StrCat("database: metrics row of trial ", trial_id,
                                              ": value '", it.key(), "' is not a number"));
    }
    (*m->mutable_values())[it.key()] = *value;
  }
  return absl::OkStatus();
}

}  // namespace det::master
