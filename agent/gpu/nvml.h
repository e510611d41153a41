// NVIDIA GPUs as the agent sees them, through the few NVML calls it needs. The real
// implementation loads the driver's libnvidia-ml.so.1 with dlopen at run time, so det-agent
// runs where no driver is installed; tests use FakeNvml (fake_nvml.h) or a fake library.
#ifndef DET_AGENT_GPU_NVML_H_
#define DET_AGENT_GPU_NVML_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace det::agent {

// What does not change while the agent runs.
struct GpuDevice {
  std::string name;  // "NVIDIA H100 80GB HBM3"
  std::string uuid;  // "GPU-8f6b..."
  int64_t memory_total_bytes = 0;
};

// A sample of what does.
struct GpuUsage {
  // 0..100: percent of NVML's last sample period in which a kernel ran.
  double utilization_percent = 0;
  int64_t memory_free_bytes = 0;
  int64_t memory_total_bytes = 0;
};

// Thread-safe (NVML itself is). Devices are numbered 0..DeviceCount()-1 in NVML's order.
class Nvml {
 public:
  virtual ~Nvml() = default;
  virtual absl::StatusOr<int> DeviceCount() = 0;
  virtual absl::StatusOr<GpuDevice> Device(int index) = 0;
  virtual absl::StatusOr<GpuUsage> Usage(int index) = 0;
};

// Loads `library` with dlopen and initialises NVML. NotFound, naming the library, when it
// cannot be loaded, lacks a needed function, or NVML cannot initialise (no driver, no
// device). Destroying the object shuts NVML down and closes the library.
absl::StatusOr<std::unique_ptr<Nvml>> LoadNvml(const std::string& library = "libnvidia-ml.so.1");

}  // namespace det::agent

#endif  // DET_AGENT_GPU_NVML_H_
