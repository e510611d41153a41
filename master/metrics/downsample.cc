#include "master/metrics/downsample.h"

#include <map>
#include <string>
#include <utility>

namespace det::master {

std::vector<int64_t> DownsamplePositions(int64_t n, int max_points) {
  std::vector<int64_t> out;
  const int64_t m = max_points;
  if (m <= 0 || n <= m) {
    for (int64_t i = 0; i < n; ++i) out.push_back(i);
  } else if (m == 1) {
    out.push_back(n - 1);
  } else {
    // Point j of m sits at j*(n-1)/(m-1), rounded: 0 and n-1 are always chosen and the
    // chosen positions are strictly increasing because n > m.
    for (int64_t j = 0; j < m; ++j) out.push_back((j * (n - 1) + (m - 1) / 2) / (m - 1));
  }
  return out;
}

std::vector<v1::Metrics> DownsampleMetrics(std::vector<v1::Metrics> rows, int max_points) {
  if (max_points <= 0) return rows;
  std::map<std::string, std::vector<size_t>> by_group;  // group -> indices of its rows
  for (size_t i = 0; i < rows.size(); ++i) by_group[rows[i].group()].push_back(i);
  std::vector<bool> keep(rows.size(), false);
  for (const auto& [group, idx] : by_group) {
    for (int64_t p : DownsamplePositions(static_cast<int64_t>(idx.size()), max_points)) {
      keep[idx[static_cast<size_t>(p)]] = true;
    }
  }
  std::vector<v1::Metrics> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (keep[i]) out.push_back(std::move(rows[i]));
  }
  return out;
}

}  // namespace det::master
