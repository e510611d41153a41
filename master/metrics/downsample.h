// Thinning of metric series for plotting: the REST API and the web page ask for at most
// N points per metric group instead of every row a long trial reported.
#ifndef DET_MASTER_METRICS_DOWNSAMPLE_H_
#define DET_MASTER_METRICS_DOWNSAMPLE_H_

#include <cstdint>
#include <vector>

#include "proto/types.pb.h"

namespace det::master {

// Keeps at most `max_points` rows of each group, evenly spaced by index over that group's
// rows, always its first and last; kept rows stay in their original order. `max_points`
// <= 0: `rows` unchanged; 1: the last row of each group.
std::vector<v1::Metrics> DownsampleMetrics(std::vector<v1::Metrics> rows, int max_points);

// The positions (0-based, ascending) of the rows DownsampleMetrics keeps of one group of
// `n` rows: all of them when max_points <= 0 or n <= max_points.
std::vector<int64_t> DownsamplePositions(int64_t n, int max_points);

}  // namespace det::master

#endif  // DET_MASTER_METRICS_DOWNSAMPLE_H_
