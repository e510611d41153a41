#include "master/store/metric_values_json.h"

#include <cmath>
#include <limits>
#include <optional>

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

}  // namespace

std::string MetricValuesJson(const v1::Metrics& m) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : m.values()) {
    if (std::isnan(v)) {
      j[k] = "NaN";
    } else if (std::isinf(v)) {
      j[k] = v > 0 ? "Infinity" : "-Infinity";
    } else {
      j[k] = v;
    }
  }
  return j.dump();
}

absl::Status ParseMetricValuesJson(const std::string& json, int64_t trial_id, v1::Metrics* m) {
  auto j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::DataLossError("database: corrupt metrics row");
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
