// How a worker reports to the master (WorkerService): metrics and checkpoints of its own
// trial, authenticated by its allocation token. Transient failures (the master restarting,
// a lost connection) are retried with backoff until `give_up_after` has passed.
#ifndef DET_COMMON_WORKER_CPP_HARNESS_REPORTER_CLIENT_H_
#define DET_COMMON_WORKER_CPP_HARNESS_REPORTER_CLIENT_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/worker/cpp/harness/context.h"
#include "proto/types.pb.h"

namespace det::harness {

// Thread-compatible.
class Reporter {
 public:
  virtual ~Reporter() = default;
  // `group` is "training", "validation" or "timings".
  virtual absl::Status ReportMetrics(const std::string& group, int64_t total_batches,
                                     const std::map<std::string, double>& values) = 0;
  // Several reports (e.g. a batch group's training metrics and timings) in one call.
  virtual absl::Status ReportMetricsBatch(const std::vector<v1::Metrics>& metrics) = 0;
  virtual absl::Status ReportCheckpoint(const v1::Checkpoint& checkpoint) = 0;
};

// One report of `group` at `total_batches`, stamped now.
v1::Metrics MakeMetrics(const std::string& group, int64_t total_batches,
                        const std::map<std::string, double>& values);

std::unique_ptr<Reporter> NewGrpcReporter(const TrialContext& context,
                                          absl::Duration give_up_after = absl::Minutes(10));

}  // namespace det::harness

#endif  // DET_COMMON_WORKER_CPP_HARNESS_REPORTER_CLIENT_H_
