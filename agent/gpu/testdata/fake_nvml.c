/* A stand-in for libnvidia-ml.so.1 with the entry points det-agent loads, for testing the
 * dlopen path on machines without a GPU. Devices come from FAKE_NVML_DEVICES:
 * "NAME,UUID,TOTAL_MIB,FREE_MIB,UTIL_PERCENT;..." (unset or empty: no device).
 * FAKE_NVML_INIT_ERROR=N makes nvmlInit_v2 fail with code N. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
  unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct {
  char name[64];
  char uuid[64];
  unsigned long long total_mib, free_mib;
  unsigned int util;
} FakeDevice;

static FakeDevice devices[16];
static unsigned int num_devices = 0;
static int initialised = 0;

int nvmlInit_v2(void) {
  const char* err = getenv("FAKE_NVML_INIT_ERROR");
  if (err && *err) return atoi(err);
  num_devices = 0;
  const char* spec = getenv("FAKE_NVML_DEVICES");
  char buf[4096];
  snprintf(buf, sizeof(buf), "%s", spec ? spec : "");
  char* save = NULL;
  for (char* dev = strtok_r(buf, ";", &save); dev && num_devices < 16;
       dev = strtok_r(NULL, ";", &save)) {
    FakeDevice* d = &devices[num_devices];
    memset(d, 0, sizeof(*d));
    if (sscanf(dev, "%63[^,],%63[^,],%llu,%llu,%u", d->name, d->uuid, &d->total_mib,
               &d->free_mib, &d->util) == 5) {
      ++num_devices;
    }
  }
  initialised = 1;
  return 0;
}

int nvmlShutdown(void) {
  initialised = 0;
  return 0;
}

const char* nvmlErrorString(int rc) { return rc == 9 ? "Driver Not Loaded" : "Unknown Error"; }

int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!initialised) return 1;
  *count = num_devices;
  return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (!initialised || index >= num_devices) return 2;
  *device = &devices[index];
  return 0;
}

int nvmlDeviceGetName(void* device, char* name, unsigned int length) {
  snprintf(name, length, "%s", ((FakeDevice*)device)->name);
  return 0;
}

int nvmlDeviceGetUUID(void* device, char* uuid, unsigned int length) {
  snprintf(uuid, length, "%s", ((FakeDevice*)device)->uuid);
  return 0;
}

int nvmlDeviceGetMemoryInfo(void* device, nvmlMemory_t* memory) {
  FakeDevice* d = (FakeDevice*)device;
  memory->total = d->total_mib << 20;
  memory->free = d->free_mib << 20;
  memory->used = memory->total - memory->free;
  return 0;
}

int nvmlDeviceGetUtilizationRates(void* device, nvmlUtilization_t* utilization) {
  utilization->gpu = ((FakeDevice*)device)->util;
  utilization->memory = 0;
  return 0;
}
