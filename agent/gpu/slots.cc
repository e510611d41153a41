#include "agent/gpu/slots.h"

#include "absl/strings/str_cat.h"

namespace det::agent {

absl::StatusOr<std::vector<v1::Slot>> GpuSlots(Nvml& nvml) {
  absl::StatusOr<int> count = nvml.DeviceCount();
  if (!count.ok()) return count.status();
  std::vector<v1::Slot> slots;
  for (int i = 0; i < *count; ++i) {
    absl::StatusOr<GpuDevice> dev = nvml.Device(i);
    if (!dev.ok()) {
      return absl::Status(dev.status().code(),
                          absl::StrCat("GPU ", i, ": ", dev.status().message()));
    }
    v1::Slot s;
    s.set_id(absl::StrCat(i));
    s.set_type("cuda");
    s.set_device_name(dev->name);
    s.set_uuid(dev->uuid);
    s.set_memory_bytes(dev->memory_total_bytes);
    s.set_enabled(true);
    slots.push_back(std::move(s));
  }
  if (slots.empty()) return absl::NotFoundError("the NVIDIA driver reports no GPU");
  return slots;
}

std::vector<v1::Slot> CpuSlots(int count) {
  std::vector<v1::Slot> slots;
  for (int i = 0; i < count; ++i) {
    v1::Slot s;
    s.set_id(absl::StrCat(i));
    s.set_type("cpu");
    s.set_device_name("cpu");
    s.set_enabled(true);
    slots.push_back(std::move(s));
  }
  return slots;
}

absl::StatusOr<std::vector<v1::Slot>> DiscoverSlots(const std::string& slot_type, int cpu_slots,
                                                    const absl::StatusOr<Nvml*>& nvml) {
  if (slot_type == "cpu") return CpuSlots(cpu_slots);
  absl::StatusOr<std::vector<v1::Slot>> gpus =
      nvml.ok() ? GpuSlots(**nvml) : absl::StatusOr<std::vector<v1::Slot>>(nvml.status());
  if (gpus.ok() || slot_type == "cuda") return gpus;
  return CpuSlots(cpu_slots);
}

}  // namespace det::agent
