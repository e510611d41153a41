#include "common/collective/gloo_collective.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace det::collective {
namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// Appends a 4-byte little-endian length and the bytes.
void AppendField(std::string* out, const char* data, size_t n) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out->append(data, n);
}

bool ReadField(const std::string& in, size_t* pos, std::string* field) {
  if (*pos + 4 > in.size()) return false;
  size_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<size_t>(static_cast<uint8_t>(in[*pos + i])) << (8 * i);
  *pos += 4;
  if (*pos + n > in.size()) return false;
  *field = in.substr(*pos, n);
  *pos += n;
  return true;
}

// Gloo's key/value store on top of a Rendezvous. Gloo's bootstrap sets one key per rank
// and then reads the other ranks' keys; every set() therefore starts a round, and the
// first read after it all-gathers the (key, value) pairs of every rank under
// "<key>/<round>". All ranks issue the same sequence of set()s and reads, so rounds line
// up. Failures are thrown (Gloo's store contract) after recording the status.
class RendezvousStore : public gloo::rendezvous::Store {
 public:
  RendezvousStore(Rendezvous& rendezvous, std::string key, absl::Duration timeout)
      : rendezvous_(rendezvous), key_(std::move(key)), timeout_(timeout) {}

  const absl::Status& status() const { return status_; }

  void set(const std::string& key, const std::vector<char>& data) override {
    Exchange();  // A pending earlier round goes first.
    pending_.clear();
    AppendField(&pending_, key.data(), key.size());
    AppendField(&pending_, data.data(), data.size());
    has_pending_ = true;
  }

  std::vector<char> get(const std::string& key) override {
    Exchange();
    auto it = values_.find(key);
    if (it == values_.end()) Fail(absl::InternalError(absl::StrCat("key '", key, "' was never set")));
    return std::vector<char>(it->second.begin(), it->second.end());
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, ToChrono(timeout_)); }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    Exchange();
    for (const auto& k : keys) {
      if (values_.count(k) == 0) Fail(absl::InternalError(absl::StrCat("key '", k, "' was never set")));
    }
  }

 private:
  [[noreturn]] void Fail(absl::Status status) {
    status_ = std::move(status);
    throw std::runtime_error(std::string(status_.message()));
  }

  void Exchange() {
    if (!has_pending_) return;
    has_pending_ = false;
    auto all = rendezvous_.AllGather(absl::StrCat(key_, "/", round_++), pending_, timeout_);
    if (!all.ok()) Fail(all.status());
    for (size_t r = 0; r < all->size(); ++r) {
      size_t pos = 0;
      std::string k, v;
      if (!ReadField((*all)[r], &pos, &k) || !ReadField((*all)[r], &pos, &v)) {
        Fail(absl::DataLossError(absl::StrCat("rendezvous entry of rank ", r, " is malformed")));
      }
      values_[k] = std::move(v);
    }
  }

  Rendezvous& rendezvous_;
  const std::string key_;
  const absl::Duration timeout_;
  int round_ = 0;
  bool has_pending_ = false;
  std::string pending_;
  std::map<std::string, std::string> values_;
  absl::Status status_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GlooCollective>> GlooCollective::Create(
    int rank, int size, Rendezvous& rendezvous, const std::string& key,
    const GlooOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank ", rank, " is outside a world of ", size));
  }
  std::string where = options.iface.empty() ? absl::StrCat("host '", options.hostname, "'")
                                            : absl::StrCat("interface '", options.iface, "'");
  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    if (options.iface.empty()) {
      attr.hostname = options.hostname;
    } else {
      attr.iface = options.iface;
    }
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank ", rank, " cannot listen on ", where, ": ", e.what()));
  }
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(ToChrono(options.timeout));
  RendezvousStore store(rendezvous, key, options.rendezvous_timeout);
  try {
    context->connectFullMesh(store, device);
  } catch (const std::exception& e) {
    if (!store.status().ok()) {
      return absl::Status(store.status().code(),
                          absl::StrCat("gloo: rank ", rank, " of ", size, " could not rendezvous under '",
                                       key, "': ", store.status().message()));
    }
    return absl::UnavailableError(absl::StrCat("gloo: rank ", rank, " of ", size,
                                               " could not connect to its peers (", where,
                                               ", key '", key, "'): ", e.what()));
  }
  return std::unique_ptr<GlooCollective>(
      new GlooCollective(rank, size, std::move(context), options.timeout));
}

GlooCollective::GlooCollective(int rank, int size, std::shared_ptr<gloo::Context> context,
                               absl::Duration timeout)
    : rank_(rank), size_(size), context_(std::move(context)), timeout_(timeout) {}

GlooCollective::~GlooCollective() {
  if (!failed_.ok() && context_) {
    // Deliberately leaked: tearing down pairs whose peers died can block.
    new std::shared_ptr<gloo::Context>(std::move(context_));
  }
}

template <typename Describe, typename Op>
absl::Status GlooCollective::Run(Describe what, Op op) {
  if (!failed_.ok()) return failed_;
  try {
    op();
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    std::string prefix = absl::StrCat("gloo ", what(), " on rank ", rank_, " of ", size_, " failed: ");
    std::string msg = e.what();
    if (absl::StrContains(msg, "imed out") || absl::StrContains(msg, "imeout")) {
      failed_ = absl::DeadlineExceededError(absl::StrCat(
          prefix, "no progress within ", absl::FormatDuration(timeout_),
          " (a peer rank hangs or is far behind): ", msg));
    } else {
      failed_ = absl::AbortedError(
          absl::StrCat(prefix, "a peer rank exited or its connection broke: ", msg));
    }
  } catch (const std::exception& e) {
    failed_ = absl::AbortedError(
        absl::StrCat("gloo ", what(), " on rank ", rank_, " of ", size_, " failed: ", e.what()));
  }
  return failed_;
}

absl::Status GlooCollective::AllReduceSum(absl::Span<float> data) {
  if (data.empty() || size_ == 1) return failed_;
  return Run([&] { return absl::StrCat("all-reduce of ", data.size(), " floats"); }, [&] {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data.data(), data.size());
    opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
    opts.setTag(next_tag_++);
    gloo::allreduce(opts);
  });
}

absl::Status GlooCollective::AllReduceSum(absl::Span<int64_t> data) {
  if (data.empty() || size_ == 1) return failed_;
  return Run([&] { return absl::StrCat("all-reduce of ", data.size(), " int64s"); }, [&] {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data.data(), data.size());
    opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<int64_t>));
    opts.setTag(next_tag_++);
    gloo::allreduce(opts);
  });
}

absl::Status GlooCollective::BroadcastBytes(void* data, size_t bytes, int root) {
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is outside a world of ", size_));
  }
  if (bytes == 0 || size_ == 1) return failed_;
  return Run([&] { return absl::StrCat("broadcast of ", bytes, " bytes from rank ", root); }, [&] {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(static_cast<uint8_t*>(data), bytes);
    opts.setRoot(root);
    opts.setTag(next_tag_++);
    gloo::broadcast(opts);
  });
}

absl::Status GlooCollective::Barrier() {
  if (size_ == 1) return failed_;
  return Run([] { return std::string("barrier"); }, [&] {
    gloo::BarrierOptions opts(context_);
    opts.setTag(next_tag_++);
    gloo::barrier(opts);
  });
}

}  // namespace det::collective
