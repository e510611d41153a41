#include "agent/gpu/nvml.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace det::agent {
namespace {

// The NVML entry points used, declared here so that no NVML header is needed to build.
struct NvmlMemory {
  unsigned long long total, free, used;
};
struct NvmlUtilization {
  unsigned int gpu, memory;
};
using NvmlDevice = void*;
using InitFn = int (*)();
using ErrorStringFn = const char* (*)(int);
using CountFn = int (*)(unsigned int*);
using HandleFn = int (*)(unsigned int, NvmlDevice*);
using StringFn = int (*)(NvmlDevice, char*, unsigned int);
using MemoryFn = int (*)(NvmlDevice, NvmlMemory*);
using UtilizationFn = int (*)(NvmlDevice, NvmlUtilization*);

class DlNvml : public Nvml {
 public:
  static absl::StatusOr<std::unique_ptr<Nvml>> Load(const std::string& library) {
    void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      return absl::NotFoundError(absl::StrCat("no NVIDIA driver: cannot load ", library, ": ",
                                              why ? why : "unknown error"));
    }
    std::unique_ptr<DlNvml> n(new DlNvml(lib));
    auto sym = [&](const char* name) { return dlsym(lib, name); };
    n->init_ = reinterpret_cast<InitFn>(sym("nvmlInit_v2"));
    n->shutdown_ = reinterpret_cast<InitFn>(sym("nvmlShutdown"));
    n->error_string_ = reinterpret_cast<ErrorStringFn>(sym("nvmlErrorString"));
    n->count_ = reinterpret_cast<CountFn>(sym("nvmlDeviceGetCount_v2"));
    n->handle_ = reinterpret_cast<HandleFn>(sym("nvmlDeviceGetHandleByIndex_v2"));
    n->name_ = reinterpret_cast<StringFn>(sym("nvmlDeviceGetName"));
    n->uuid_ = reinterpret_cast<StringFn>(sym("nvmlDeviceGetUUID"));
    n->memory_ = reinterpret_cast<MemoryFn>(sym("nvmlDeviceGetMemoryInfo"));
    n->utilization_ = reinterpret_cast<UtilizationFn>(sym("nvmlDeviceGetUtilizationRates"));
    if (!n->init_ || !n->shutdown_ || !n->count_ || !n->handle_ || !n->name_ || !n->uuid_ ||
        !n->memory_ || !n->utilization_) {
      return absl::NotFoundError(
          absl::StrCat(library, " lacks the NVML functions det-agent needs (driver too old?)"));
    }
    if (int rc = n->init_(); rc != 0) {
      return absl::NotFoundError(absl::StrCat("NVML initialisation failed: ", n->ErrorText(rc)));
    }
    n->initialised_ = true;
    return std::unique_ptr<Nvml>(std::move(n));
  }

  ~DlNvml() override {
    if (initialised_) shutdown_();
    dlclose(lib_);
  }

  absl::StatusOr<int> DeviceCount() override {
    unsigned int n = 0;
    if (int rc = count_(&n); rc != 0) return Error("nvmlDeviceGetCount", rc);
    return static_cast<int>(n);
  }

  absl::StatusOr<GpuDevice> Device(int index) override {
    NvmlDevice dev = nullptr;
    if (int rc = handle_(index, &dev); rc != 0) return Error("nvmlDeviceGetHandleByIndex", rc);
    GpuDevice d;
    char text[96] = {0};
    if (int rc = name_(dev, text, sizeof(text)); rc != 0) return Error("nvmlDeviceGetName", rc);
    d.name = text;
    char id[96] = {0};
    if (int rc = uuid_(dev, id, sizeof(id)); rc != 0) return Error("nvmlDeviceGetUUID", rc);
    d.uuid = id;
    NvmlMemory mem{};
    if (int rc = memory_(dev, &mem); rc != 0) return Error("nvmlDeviceGetMemoryInfo", rc);
    d.memory_total_bytes = static_cast<int64_t>(mem.total);
    return d;
  }

  absl::StatusOr<GpuUsage> Usage(int index) override {
    NvmlDevice dev = nullptr;
    if (int rc = handle_(index, &dev); rc != 0) return Error("nvmlDeviceGetHandleByIndex", rc);
    GpuUsage u;
    NvmlMemory mem{};
    if (int rc = memory_(dev, &mem); rc != 0) return Error("nvmlDeviceGetMemoryInfo", rc);
    u.memory_free_bytes = static_cast<int64_t>(mem.free);
    u.memory_total_bytes = static_cast<int64_t>(mem.total);
    NvmlUtilization util{};
    if (int rc = utilization_(dev, &util); rc != 0) {
      return Error("nvmlDeviceGetUtilizationRates", rc);
    }
    u.utilization_percent = util.gpu;
    return u;
  }

 private:
  explicit DlNvml(void* lib) : lib_(lib) {}

  std::string ErrorText(int rc) {
    const char* text = error_string_ ? error_string_(rc) : nullptr;
    return text ? absl::StrCat(text, " (code ", rc, ")") : absl::StrCat("code ", rc);
  }
  absl::Status Error(const char* call, int rc) {
    return absl::InternalError(absl::StrCat(call, ": ", ErrorText(rc)));
  }

  void* lib_;
  bool initialised_ = false;
  InitFn init_ = nullptr;
  InitFn shutdown_ = nullptr;
  ErrorStringFn error_string_ = nullptr;
  CountFn count_ = nullptr;
  HandleFn handle_ = nullptr;
  StringFn name_ = nullptr;
  StringFn uuid_ = nullptr;
  MemoryFn memory_ = nullptr;
  UtilizationFn utilization_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Nvml>> LoadNvml(const std::string& library) {
  return DlNvml::Load(library);
}

}  // namespace det::agent
