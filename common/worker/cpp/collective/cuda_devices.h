// Whether this process can use CUDA devices. A machine without a GPU, or with a driver
// older than the CUDA runtime det was built with, has none: that is an answer, not an
// error.
#ifndef DET_COMMON_WORKER_CPP_COLLECTIVE_CUDA_DEVICES_H_
#define DET_COMMON_WORKER_CPP_COLLECTIVE_CUDA_DEVICES_H_

#include <string>

namespace det::collective {

struct CudaDevices {
  // Devices visible to this process (after CUDA_VISIBLE_DEVICES); 0 when none.
  int count = 0;
  // Why there are none ("CUDA driver version is insufficient for CUDA runtime
  // version", "no CUDA-capable device is detected", ...); empty when count > 0.
  std::string why_none;
};

// Asks the CUDA runtime. Thread-safe.
CudaDevices DiscoverCudaDevices();

}  // namespace det::collective

#endif  // DET_COMMON_WORKER_CPP_COLLECTIVE_CUDA_DEVICES_H_
