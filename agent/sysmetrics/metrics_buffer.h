// Host metrics on their way to the master: sampled on the agent's metrics thread, carried by
// its heartbeats, dropped once the master has them.
#ifndef DET_AGENT_SYSMETRICS_METRICS_BUFFER_H_
#define DET_AGENT_SYSMETRICS_METRICS_BUFFER_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "agent/sysmetrics/system_sampler.h"
#include "common/clock/clock.h"
#include "proto/agent.pb.h"

namespace det::agent {

// Samples not yet accepted by the master, oldest first. Thread-safe.
class MetricsBuffer {
 public:
  // Default: an hour of samples at the default period of 5 s.
  explicit MetricsBuffer(size_t capacity = 720) : capacity_(capacity) {}
  // Past the capacity, the oldest sample goes.
  void Add(v1::SystemMetrics sample);
  std::vector<v1::SystemMetrics> Pending();
  // The master accepted the samples up to `time_ms` (their time_ms) inclusive.
  void SentUntil(int64_t time_ms);

 private:
  const size_t capacity_;
  absl::Mutex mu_;
  std::deque<v1::SystemMetrics> samples_ ABSL_GUARDED_BY(mu_);
};

// Takes samples into a buffer. Not thread-safe: the metrics thread's. Everything passed must
// outlive it.
class MetricsCollector {
 public:
  MetricsCollector(std::string agent_id, SystemSampler& sampler, Clock& clock,
                   MetricsBuffer& buffer)
      : agent_id_(std::move(agent_id)), sampler_(sampler), clock_(clock), buffer_(buffer) {}
  // The first sample only primes the sampler's counters.
  void Prime();
  // A sample into the buffer; a failure is logged (the first only).
  void SampleOnce();

 private:
  const std::string agent_id_;
  SystemSampler& sampler_;
  Clock& clock_;
  MetricsBuffer& buffer_;
  bool warned_ = false;
};

}  // namespace det::agent

#endif  // DET_AGENT_SYSMETRICS_METRICS_BUFFER_H_
