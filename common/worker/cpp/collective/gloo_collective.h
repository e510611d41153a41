// Collectives on host memory over TCP with Gloo (Debian's libgloo): a full mesh of TCP
// connections between the ranks, bootstrapped through a Rendezvous (each rank publishes
// its listening addresses under `key`), then Gloo's ring all-reduce, one-to-all
// broadcast and barrier.
//
// Failure handling: a peer that exits closes its sockets, so the ranks talking to it
// fail at once with kAborted and exit; their exit closes their own sockets, so the
// failure reaches every rank within one round trip. A peer whose host vanishes (power,
// cable, partition: no FIN or RST ever arrives) is caught by `peer_timeout`: every
// connection to a peer has TCP keepalive and TCP_USER_TIMEOUT set, so the kernel aborts
// it once the peer's kernel has acknowledged nothing for that long, and the waiting
// operation fails with kAborted naming the peer's rank and address. A peer that hangs
// without exiting (its kernel still acknowledges) is caught by `timeout`. Gloo throws C++
// exceptions; they are caught here and never leave this class.
#ifndef DET_COMMON_WORKER_CPP_COLLECTIVE_GLOO_COLLECTIVE_H_
#define DET_COMMON_WORKER_CPP_COLLECTIVE_GLOO_COLLECTIVE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/worker/cpp/collective/collective.h"
#include "common/worker/cpp/collective/rendezvous.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace det::collective {

struct GlooOptions {
  // Address to listen on and advertise to the other ranks: a host name or IP address
  // ("127.0.0.1" for ranks on one machine). Ignored when `iface` is set.
  std::string hostname = "127.0.0.1";
  // A network interface name (e.g. "eth0"), whose address is used instead of hostname.
  std::string iface;
  // Longest wait of any single operation (and of connecting) for the other ranks.
  absl::Duration timeout = absl::Minutes(5);
  // How long a peer's host may leave what this rank sent, and its keepalive probes,
  // unacknowledged before the connection counts as lost (TCP_USER_TIMEOUT, with keepalive
  // probes every peer_timeout / 5, at least 1s). Only the peer's kernel answers these,
  // so a peer busy in a long step never trips it. Zero: the kernel's defaults (about 15
  // minutes with data unacknowledged, never while idle).
  absl::Duration peer_timeout = absl::Seconds(15);
  // Longest wait for every rank to publish its addresses.
  absl::Duration rendezvous_timeout = absl::Minutes(5);
};

class GlooCollective : public Collective {
 public:
  // Connects rank `rank` of `size` to the others: creates its TCP endpoints, publishes
  // them through `rendezvous` under `key` (which must be fresh for this membership) and
  // connects to every other rank. Errors name the rank, the key and the cause. Sets
  // SIGPIPE to SIG_IGN in this process when it has the default action (Gloo's writes would
  // otherwise kill the rank silently when a peer resets a connection).
  // REQUIRES: 0 <= rank < size. `rendezvous` is used only during Create().
  static absl::StatusOr<std::unique_ptr<GlooCollective>> Create(int rank, int size,
                                                               Rendezvous& rendezvous,
                                                               const std::string& key,
                                                               const GlooOptions& options = {});
  // After a failure the connections are abandoned rather than shut down cleanly (a clean
  // shutdown may wait on dead peers), so destruction never blocks.
  ~GlooCollective() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "gloo"; }
  Device device() const override { return Device::kHost; }

  absl::Status AllReduceSum(absl::Span<float> data) override;
  absl::Status AllReduceSum(absl::Span<int64_t> data) override;
  absl::Status BroadcastBytes(void* data, size_t bytes, int root) override;
  absl::Status Barrier() override;

  // The connected Gloo context, for benchmarks that compare with raw Gloo calls on the
  // same connections. Do not use it while another operation runs.
  const std::shared_ptr<gloo::Context>& gloo_context() const { return context_; }

  // The address ("10.0.0.7:41234") at the other end of this rank's connection to rank
  // `peer`; "" for this rank itself or an unknown rank.
  std::string PeerAddress(int peer) const;

 private:
  GlooCollective(int rank, int size, std::shared_ptr<gloo::Context> context,
                 absl::Duration timeout, std::vector<std::vector<std::string>> aliases,
                 std::vector<std::string> peers);

  // Runs `op` (which may throw), mapping exceptions to a status that names the
  // operation (`what()`, built only on failure) and marking the collective failed.
  template <typename Describe, typename Op>
  absl::Status Run(Describe what, Op op);

  const int rank_;
  const int size_;
  std::shared_ptr<gloo::Context> context_;
  const absl::Duration timeout_;
  // rank -> the "ip:port"s Gloo's errors may name its connection by, and PeerAddress(rank).
  const std::vector<std::vector<std::string>> aliases_;
  const std::vector<std::string> peers_;
  uint32_t next_tag_ = 1;
  absl::Status failed_;
};

}  // namespace det::collective

#endif  // DET_COMMON_WORKER_CPP_COLLECTIVE_GLOO_COLLECTIVE_H_
