// Host metrics of an agent's machine: CPU utilisation, free memory, disk IOPS and
// throughput, network throughput (all from /proc) and, with NVML, each GPU's utilisation
// and free memory.
#ifndef DET_AGENT_SYSMETRICS_SYSTEM_SAMPLER_H_
#define DET_AGENT_SYSMETRICS_SYSTEM_SAMPLER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/gpu/nvml.h"
#include "proto/types.pb.h"

namespace det::agent {

// Thread-compatible: one caller at a time.
class SystemSampler {
 public:
  // `proc_root` is where procfs is mounted ("/proc"; tests pass a directory of fake files).
  // `nvml`, when non-null, is asked for every GPU; not owned, must outlive the sampler.
  explicit SystemSampler(std::string proc_root = "/proc", Nvml* nvml = nullptr);

  // A sample taken at `now`, with agent_id unset. Rates (CPU utilisation, disk, network)
  // are averages since the previous successful call; the first call only reads the
  // counters and returns Unavailable. A file that cannot be read or parsed is an error
  // naming it; a failing GPU is left out of the sample.
  absl::StatusOr<v1::SystemMetrics> Sample(absl::Time now);

 private:
  struct Counters {
    uint64_t cpu_busy = 0, cpu_total = 0;
    uint64_t disk_reads = 0, disk_writes = 0;
    uint64_t disk_read_bytes = 0, disk_write_bytes = 0;
    uint64_t net_sent = 0, net_received = 0;
  };
  absl::StatusOr<Counters> ReadCounters();

  std::string proc_root_;
  Nvml* nvml_;
  std::optional<Counters> last_;
  absl::Time last_time_;
};

}  // namespace det::agent

#endif  // DET_AGENT_SYSMETRICS_SYSTEM_SAMPLER_H_
