#include "common/worker/cpp/collective/cuda_devices.h"

#include <cuda_runtime.h>

namespace det::collective {

CudaDevices DiscoverCudaDevices() {
  CudaDevices out;
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    out.why_none = cudaGetErrorString(err);
    cudaGetLastError();  // Clear the sticky error for later calls.
    return out;
  }
  out.count = n;
  if (n == 0) out.why_none = "no CUDA-capable device is detected";
  return out;
}

}  // namespace det::collective
