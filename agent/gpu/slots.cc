#include "agent/gpu/slots.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace det::agent {
namespace {

// The few NVML entry points used, declared here so no NVML header is needed at build time.
struct NvmlMemory {
  unsigned long long total, free, used;
};
using NvmlDevice = void*;
using InitFn = int (*)();
using CountFn = int (*)(unsigned int*);
using HandleFn = int (*)(unsigned int, NvmlDevice*);
using StringFn = int (*)(NvmlDevice, char*, unsigned int);
using MemoryFn = int (*)(NvmlDevice, NvmlMemory*);

}  // namespace

absl::StatusOr<std::vector<v1::Slot>> DiscoverCudaSlots() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return absl::NotFoundError("no NVIDIA driver (libnvidia-ml.so.1 not found)");
  auto sym = [&](const char* name) { return dlsym(lib, name); };
  auto init = reinterpret_cast<InitFn>(sym("nvmlInit_v2"));
  auto shutdown = reinterpret_cast<InitFn>(sym("nvmlShutdown"));
  auto count = reinterpret_cast<CountFn>(sym("nvmlDeviceGetCount_v2"));
  auto handle = reinterpret_cast<HandleFn>(sym("nvmlDeviceGetHandleByIndex_v2"));
  auto name = reinterpret_cast<StringFn>(sym("nvmlDeviceGetName"));
  auto uuid = reinterpret_cast<StringFn>(sym("nvmlDeviceGetUUID"));
  auto memory = reinterpret_cast<MemoryFn>(sym("nvmlDeviceGetMemoryInfo"));
  if (!init || !shutdown || !count || !handle || !name || !uuid || !memory) {
    dlclose(lib);
    return absl::NotFoundError("libnvidia-ml.so.1 lacks the expected NVML functions");
  }
  if (int rc = init(); rc != 0) {
    dlclose(lib);
    return absl::NotFoundError(absl::StrCat("NVML initialisation failed (code ", rc, ")"));
  }
  std::vector<v1::Slot> slots;
  unsigned int n = 0;
  if (count(&n) == 0) {
    for (unsigned int i = 0; i < n; ++i) {
      NvmlDevice dev = nullptr;
      if (handle(i, &dev) != 0) continue;
      v1::Slot s;
      s.set_id(absl::StrCat(i));
      s.set_type("cuda");
      s.set_enabled(true);
      char text[96] = {0};
      if (name(dev, text, sizeof(text)) == 0) s.set_device_name(text);
      char id[96] = {0};
      if (uuid(dev, id, sizeof(id)) == 0) s.set_uuid(id);
      NvmlMemory mem{};
      if (memory(dev, &mem) == 0) s.set_memory_bytes(static_cast<int64_t>(mem.total));
      slots.push_back(std::move(s));
    }
  }
  shutdown();
  dlclose(lib);
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

absl::StatusOr<std::vector<v1::Slot>> DiscoverSlots(const std::string& slot_type, int cpu_slots) {
  if (slot_type == "cpu") return CpuSlots(cpu_slots);
  auto gpus = DiscoverCudaSlots();
  if (gpus.ok() || slot_type == "cuda") return gpus;
  return CpuSlots(cpu_slots);
}

}  // namespace det::agent
