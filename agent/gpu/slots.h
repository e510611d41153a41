// The slots an agent offers: its NVIDIA GPUs (through Nvml) or CPU slots.
#ifndef DET_AGENT_GPU_SLOTS_H_
#define DET_AGENT_GPU_SLOTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/gpu/nvml.h"
#include "proto/types.pb.h"

namespace det::agent {

// One slot of type "cuda" per GPU `nvml` reports: id = NVML index, device name, UUID,
// total memory. NotFound when it reports none; a failing NVML call is returned as is.
absl::StatusOr<std::vector<v1::Slot>> GpuSlots(Nvml& nvml);

// `count` CPU slots with ids "0".."count-1".
std::vector<v1::Slot> CpuSlots(int count);

// The agent's slots for `slot_type` (agent.yaml):
//   "cpu":  CpuSlots(cpu_slots); `nvml` is not used.
//   "cuda": GpuSlots(*nvml), or an error saying why there are none (`nvml`'s own error
//           when NVML could not be loaded).
//   "auto": the GPUs when `nvml` loaded and reports any, else CpuSlots(cpu_slots).
absl::StatusOr<std::vector<v1::Slot>> DiscoverSlots(const std::string& slot_type, int cpu_slots,
                                                    const absl::StatusOr<Nvml*>& nvml);

}  // namespace det::agent

#endif  // DET_AGENT_GPU_SLOTS_H_
