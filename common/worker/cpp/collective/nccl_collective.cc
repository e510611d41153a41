#include "common/worker/cpp/collective/nccl_collective.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/worker/cpp/collective/cuda_devices.h"

namespace det::collective {
namespace {

constexpr char kIdTag = 'I';     // rank 0: the unique id follows
constexpr char kReadyTag = 'R';  // other ranks: ready, nothing follows
constexpr char kErrorTag = 'E';  // any rank: cannot join, the reason follows

std::string NcclError(ncclResult_t r, ncclComm_t comm) {
  std::string out = ncclGetErrorString(r);
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') absl::StrAppend(&out, " (", last, ")");
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> ExchangeNcclUniqueId(
    int rank, Rendezvous& rendezvous, const std::string& key, absl::Duration timeout,
    const absl::Status& local_error, const std::function<absl::StatusOr<std::string>()>& make_id) {
  absl::Status own = local_error;
  std::string mine(1, kReadyTag);
  if (own.ok() && rank == 0) {
    absl::StatusOr<std::string> id = make_id();
    if (!id.ok()) {
      own = id.status();
    } else if (id->size() != kNcclUniqueIdBytes) {
      own = absl::InternalError(absl::StrCat("nccl: unique id has ", id->size(), " bytes, not ",
                                             kNcclUniqueIdBytes));
    } else {
      mine = std::string(1, kIdTag) + *id;
    }
  }
  if (!own.ok()) mine = std::string(1, kErrorTag) + std::string(own.message());
  absl::StatusOr<std::vector<std::string>> all = rendezvous.AllGather(key, mine, timeout);
  if (!all.ok()) {
    return absl::Status(all.status().code(),
                        absl::StrCat("nccl: rank ", rank, " could not exchange the unique id: ",
                                     all.status().message()));
  }
  if (!own.ok()) return own;
  for (size_t r = 0; r < all->size(); ++r) {
    const std::string& v = (*all)[r];
    if (!v.empty() && v[0] == kErrorTag) {
      return absl::FailedPreconditionError(
          absl::StrCat("nccl: rank ", r, " cannot join the communicator: ", v.substr(1)));
    }
  }
  const std::string& root = (*all)[0];
  if (root.size() != 1 + kNcclUniqueIdBytes || root[0] != kIdTag) {
    return absl::DataLossError(absl::StrCat("nccl: rank 0 published ", root.size(),
                                            " bytes under '", key, "', not a unique id"));
  }
  return root.substr(1);
}

struct NcclCollective::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int* scratch = nullptr;  // one device int for Barrier()
  int device = 0;
};

absl::StatusOr<std::unique_ptr<NcclCollective>> NcclCollective::Create(
    int rank, int size, Rendezvous& rendezvous, const std::string& key,
    const NcclOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("nccl: rank ", rank, " is outside a world of ", size));
  }
  absl::Status local;
  CudaDevices devices = DiscoverCudaDevices();
  if (devices.count == 0) {
    local = absl::FailedPreconditionError(
        absl::StrCat("nccl: rank ", rank, " has no usable CUDA device: ", devices.why_none));
  } else if (options.device < 0 || options.device >= devices.count) {
    local = absl::InvalidArgumentError(absl::StrCat("nccl: rank ", rank, ": device ", options.device,
                                                    " does not exist (", devices.count, " visible)"));
  } else if (cudaError_t e = cudaSetDevice(options.device); e != cudaSuccess) {
    local = absl::InternalError(absl::StrCat("nccl: rank ", rank, ": cudaSetDevice(", options.device,
                                             "): ", cudaGetErrorString(e)));
  }
  auto make_id = []() -> absl::StatusOr<std::string> {
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return absl::InternalError(absl::StrCat("ncclGetUniqueId: ", NcclError(r, nullptr)));
    return std::string(id.internal, sizeof(id.internal));
  };
  absl::StatusOr<std::string> id_bytes =
      ExchangeNcclUniqueId(rank, rendezvous, key, options.rendezvous_timeout, local, make_id);
  if (!id_bytes.ok()) return id_bytes.status();

  auto impl = std::make_unique<Impl>();
  impl->device = options.device;
  if (cudaError_t e = cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("nccl: rank ", rank, ": cudaStreamCreate: ", cudaGetErrorString(e)));
  }
  if (cudaError_t e = cudaMalloc(&impl->scratch, sizeof(int)); e != cudaSuccess) {
    cudaStreamDestroy(impl->stream);
    return absl::ResourceExhaustedError(absl::StrCat("nccl: rank ", rank, ": cudaMalloc: ", cudaGetErrorString(e)));
  }
  ncclUniqueId id;
  std::memcpy(id.internal, id_bytes->data(), sizeof(id.internal));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&impl->comm, size, id, rank, &config);
  absl::Time deadline = absl::Now() + options.timeout;
  absl::Duration pause = absl::Microseconds(100);
  while (r == ncclInProgress && impl->comm != nullptr) {
    if (absl::Now() > deadline) break;
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(10));
    ncclCommGetAsyncError(impl->comm, &r);
  }
  if (r != ncclSuccess) {
    std::string why = r == ncclInProgress
                          ? absl::StrCat("not every rank joined within ", absl::FormatDuration(options.timeout))
                          : NcclError(r, impl->comm);
    if (impl->comm != nullptr) ncclCommAbort(impl->comm);
    cudaFree(impl->scratch);
    cudaStreamDestroy(impl->stream);
    auto code = r == ncclInProgress ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kUnavailable;
    return absl::Status(code, absl::StrCat("nccl: rank ", rank, " of ", size,
                                           ": communicator initialization failed: ", why));
  }
  return std::unique_ptr<NcclCollective>(new NcclCollective(rank, size, std::move(impl), options));
}

NcclCollective::NcclCollective(int rank, int size, std::unique_ptr<Impl> impl,
                               const NcclOptions& options)
    : rank_(rank), size_(size), options_(options), impl_(std::move(impl)) {
  watchdog_ = std::thread([this] { Watchdog(); });
}

NcclCollective::~NcclCollective() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  watchdog_.join();
  absl::MutexLock l(&mu_);
  cudaSetDevice(impl_->device);
  if (impl_->comm != nullptr) {
    // Flush, then free; a communicator that does not finish in time is aborted.
    ncclResult_t r = ncclCommFinalize(impl_->comm);
    absl::Time deadline = absl::Now() + options_.timeout;
    while (r == ncclInProgress && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
      ncclCommGetAsyncError(impl_->comm, &r);
    }
    if (r == ncclSuccess) {
      ncclCommDestroy(impl_->comm);
    } else {
      ncclCommAbort(impl_->comm);
    }
    impl_->comm = nullptr;
  }
  cudaFree(impl_->scratch);
  cudaStreamDestroy(impl_->stream);
}

void NcclCollective::FailLocked(absl::Status status) {
  if (!failed_.ok()) return;
  failed_ = std::move(status);
  if (impl_->comm != nullptr) {
    ncclCommAbort(impl_->comm);
    impl_->comm = nullptr;
  }
}

void NcclCollective::Watchdog() {
  absl::MutexLock l(&mu_);
  while (!stopping_) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.watchdog_period);
    if (stopping_ || !failed_.ok() || impl_->comm == nullptr) continue;
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(impl_->comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      FailLocked(absl::AbortedError(absl::StrCat(
          "nccl: rank ", rank_, " of ", size_, ": asynchronous error",
          op_name_.empty() ? "" : absl::StrCat(" during ", op_name_), ": ",
          NcclError(async, impl_->comm), "; a peer rank probably exited or its network failed")));
    } else if (absl::Now() - op_started_ > options_.timeout) {
      FailLocked(absl::DeadlineExceededError(absl::StrCat(
          "nccl: rank ", rank_, " of ", size_, ": ", op_name_, " did not finish within ",
          absl::FormatDuration(options_.timeout), " (a peer rank hangs or is far behind)")));
    }
  }
}

absl::Status NcclCollective::Run(const std::string& what,
                                 const std::function<int(void* comm, void* stream)>& op) {
  cudaStream_t stream;
  {
    absl::MutexLock l(&mu_);
    if (!failed_.ok()) return failed_;
    cudaSetDevice(impl_->device);
    int r = op(impl_->comm, impl_->stream);
    if (r != ncclSuccess && r != ncclInProgress) {
      FailLocked(absl::AbortedError(absl::StrCat("nccl: rank ", rank_, " of ", size_, ": ", what,
                                                 " failed: ", NcclError(static_cast<ncclResult_t>(r), impl_->comm))));
      return failed_;
    }
    op_started_ = absl::Now();
    op_name_ = what;
    stream = impl_->stream;
  }
  absl::Duration pause = absl::Microseconds(10);
  while (true) {
    {
      absl::MutexLock l(&mu_);
      if (!failed_.ok()) break;
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(impl_->comm, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        FailLocked(absl::AbortedError(absl::StrCat("nccl: rank ", rank_, " of ", size_, ": ", what,
                                                   " failed: ", NcclError(async, impl_->comm),
                                                   "; a peer rank probably exited or its network failed")));
        break;
      }
      if (async == ncclSuccess) {
        cudaError_t q = cudaStreamQuery(stream);
        if (q == cudaSuccess) {
          op_started_ = absl::InfiniteFuture();
          op_name_.clear();
          return absl::OkStatus();
        }
        if (q != cudaErrorNotReady) {
          FailLocked(absl::AbortedError(absl::StrCat("nccl: rank ", rank_, " of ", size_, ": ", what,
                                                     " failed on the device: ", cudaGetErrorString(q))));
          break;
        }
      }
      if (absl::Now() - op_started_ > options_.timeout) {
        FailLocked(absl::DeadlineExceededError(absl::StrCat(
            "nccl: rank ", rank_, " of ", size_, ": ", what, " did not finish within ",
            absl::FormatDuration(options_.timeout), " (a peer rank hangs or is far behind)")));
        break;
      }
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(1));
  }
  absl::MutexLock l(&mu_);
  op_started_ = absl::InfiniteFuture();
  return failed_;
}

absl::Status NcclCollective::AllReduceSum(absl::Span<float> data) {
  if (data.empty()) return absl::OkStatus();
  return Run(absl::StrCat("all-reduce of ", data.size(), " floats"), [&](void* comm, void* stream) {
    return static_cast<int>(ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat32, ncclSum,
                                          static_cast<ncclComm_t>(comm), static_cast<cudaStream_t>(stream)));
  });
}

absl::Status NcclCollective::AllReduceSum(absl::Span<int64_t> data) {
  if (data.empty()) return absl::OkStatus();
  return Run(absl::StrCat("all-reduce of ", data.size(), " int64s"), [&](void* comm, void* stream) {
    return static_cast<int>(ncclAllReduce(data.data(), data.data(), data.size(), ncclInt64, ncclSum,
                                          static_cast<ncclComm_t>(comm), static_cast<cudaStream_t>(stream)));
  });
}

absl::Status NcclCollective::BroadcastBytes(void* data, size_t bytes, int root) {
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is outside a world of ", size_));
  }
  if (bytes == 0) return absl::OkStatus();
  return Run(absl::StrCat("broadcast of ", bytes, " bytes from rank ", root), [&](void* comm, void* stream) {
    return static_cast<int>(ncclBroadcast(data, data, bytes, ncclUint8, root, static_cast<ncclComm_t>(comm),
                                          static_cast<cudaStream_t>(stream)));
  });
}

absl::Status NcclCollective::Barrier() {
  int* scratch;
  {
    absl::MutexLock l(&mu_);
    scratch = impl_->scratch;
  }
  return Run("barrier", [&](void* comm, void* stream) {
    return static_cast<int>(ncclAllReduce(scratch, scratch, 1, ncclInt32, ncclSum,
                                          static_cast<ncclComm_t>(comm), static_cast<cudaStream_t>(stream)));
  });
}

}  // namespace det::collective
