#include "common/worker/cpp/harness/timings.h"

#include <algorithm>
#include <cmath>

namespace det::harness {
namespace {

double Percentile(const std::vector<double>& sorted, double p) {
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

}  // namespace

void Timings::Add(const std::string& name, absl::Duration d) {
  samples_[name].push_back(absl::ToDoubleMilliseconds(d));
}

std::map<std::string, double> Timings::Summarize() {
  std::map<std::string, double> out;
  for (auto& [name, v] : samples_) {
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (double x : v) sum += x;
    out[name + "_mean_ms"] = sum / static_cast<double>(v.size());
    out[name + "_p50_ms"] = Percentile(v, 50);
    out[name + "_p90_ms"] = Percentile(v, 90);
    out[name + "_p99_ms"] = Percentile(v, 99);
    out[name + "_max_ms"] = v.back();
    out[name + "_count"] = static_cast<double>(v.size());
  }
  samples_.clear();
  return out;
}

}  // namespace det::harness
