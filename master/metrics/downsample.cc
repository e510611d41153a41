#include "master/metrics/downsample.h"

#include <map>
#include <string>
#include <utility>

namespace det::master {

std::vector<v1::Metrics> DownsampleMetrics(std::vector<v1::Metrics> rows, int max_points) {
  if (max_points <= 0) return rows;
  std::map<std::string, std::vector<size_t>> by_group;  // group -> indices of its rows
  for (size_t i = 0; i < rows.size(); ++i) by_group[rows[i].group()].push_back(i);
  std::vector<bool> keep(rows.size(), false);
  for (const auto& [group, idx] : by_group) {
    const size_t n = idx.size();
    const size_t m = static_cast<size_t>(max_points);
    if (n <= m) {
      for (size_t i : idx) keep[i] = true;
    } else if (m == 1) {
      keep[idx.back()] = true;
    } else {
      // Point j of m sits at j*(n-1)/(m-1), rounded: 0 and n-1 are always chosen and the
      // chosen indices are strictly increasing because n > m.
      for (size_t j = 0; j < m; ++j) keep[idx[(j * (n - 1) + (m - 1) / 2) / (m - 1)]] = true;
    }
  }
  std::vector<v1::Metrics> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (keep[i]) out.push_back(std::move(rows[i]));
  }
  return out;
}

}  // namespace det::master
