// The slots an agent offers: its NVIDIA GPUs, found through NVML loaded at run time (so the
// agent runs where no driver is installed), or CPU slots.
#ifndef DET_AGENT_GPU_SLOTS_H_
#define DET_AGENT_GPU_SLOTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/types.pb.h"

namespace det::agent {

// The machine's GPUs (type "cuda", id = device index, name, UUID, memory). NotFound when
// there is no NVIDIA driver or no GPU.
absl::StatusOr<std::vector<v1::Slot>> DiscoverCudaSlots();

// `count` CPU slots with ids "0".."count-1".
std::vector<v1::Slot> CpuSlots(int count);

// slot_type "cpu": CpuSlots(cpu_slots). "cuda": the GPUs, or an error. "auto": the GPUs when
// there are any, else CpuSlots(cpu_slots).
absl::StatusOr<std::vector<v1::Slot>> DiscoverSlots(const std::string& slot_type, int cpu_slots);

}  // namespace det::agent

#endif  // DET_AGENT_GPU_SLOTS_H_
