#include "common/worker/cpp/collective/gloo_collective.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
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

// The "ip:port"s a Gloo address string ("[10.0.0.7]:41234", maybe with a "$seq" suffix)
// may stand for: Debian's Gloo prints the port in network byte order, so both readings.
std::vector<std::string> HostPorts(std::string text) {
  if (size_t seq = text.find('$'); seq != std::string::npos) text.resize(seq);
  std::string plain;
  for (char c : text) {
    if (c != '[' && c != ']') plain.push_back(c);
  }
  size_t colon = plain.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(plain.substr(colon + 1), &port)) return {};
  const std::string ip = plain.substr(0, colon);
  const int swapped = ((port & 0xff) << 8) | ((port >> 8) & 0xff);
  return {absl::StrCat(ip, ":", port), absl::StrCat(ip, ":", swapped)};
}

// The "ip:port"s that the "[ip]:port" addresses in a Gloo error message may stand for.
std::vector<std::string> NamedAddresses(const std::string& msg) {
  std::vector<std::string> out;
  for (size_t open = msg.find('['); open != std::string::npos; open = msg.find('[', open + 1)) {
    size_t close = msg.find("]:", open);
    if (close == std::string::npos) break;
    size_t end = close + 2;
    while (end < msg.size() && isdigit(static_cast<unsigned char>(msg[end]))) ++end;
    for (std::string& a : HostPorts(msg.substr(open, end - open))) out.push_back(std::move(a));
  }
  return out;
}

// "ip:port" of a socket address; "" for anything but IPv4/IPv6.
std::string HostPort(const sockaddr_storage& sa) {
  char ip[INET6_ADDRSTRLEN] = {0};
  int port = 0;
  if (sa.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&sa);
    inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
    port = ntohs(in->sin_port);
  } else if (sa.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
    port = ntohs(in6->sin6_port);
  } else {
    return "";
  }
  return absl::StrCat(ip, ":", port);
}

// This process's connected TCP sockets: fd -> (local, peer) as "ip:port". Gloo does not
// hand out its sockets, so they are found by their addresses.
std::map<int, std::pair<std::string, std::string>> TcpSockets() {
  std::map<int, std::pair<std::string, std::string>> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &fd)) continue;
    int type = 0;
    socklen_t len = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
      continue;
    }
    out[fd] = {HostPort(local), HostPort(peer)};
  }
  return out;
}

// Sets TCP keepalive (idle and interval peer_timeout / 5, at least 1s) and
// TCP_USER_TIMEOUT = peer_timeout on `fd`. An error names the option.
absl::Status SetPeerTimeout(int fd, absl::Duration peer_timeout) {
  const int probe_s = std::max<int64_t>(1, absl::ToInt64Seconds(peer_timeout / 5));
  const unsigned int user_timeout_ms =
      static_cast<unsigned int>(absl::ToInt64Milliseconds(peer_timeout));
  const int one = 1;
  struct Option {
    int level, name;
    const void* value;
    socklen_t size;
    const char* what;
  };
  const Option options[] = {
      {SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one), "SO_KEEPALIVE"},
      {IPPROTO_TCP, TCP_KEEPIDLE, &probe_s, sizeof(probe_s), "TCP_KEEPIDLE"},
      {IPPROTO_TCP, TCP_KEEPINTVL, &probe_s, sizeof(probe_s), "TCP_KEEPINTVL"},
      {IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms),
       "TCP_USER_TIMEOUT"},
  };
  for (const Option& o : options) {
    if (setsockopt(fd, o.level, o.name, o.value, o.size) != 0) {
      return absl::InternalError(absl::StrCat("setsockopt ", o.what, ": ", strerror(errno)));
    }
  }
  return absl::OkStatus();
}

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
  // Gloo writes with writev(), which raises SIGPIPE on a connection the peer reset: the
  // rank would die by the signal, saying nothing, instead of failing the operation.
  struct sigaction current{};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
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
  // Every rank's listening address for each of its pairs (what the other side of the pair
  // connected to, and what Gloo's errors name), exchanged in one more round.
  std::vector<std::string> peers(size);
  if (size > 1) {
    std::string mine;
    for (int peer = 0; peer < size; ++peer) {
      std::string address = peer == rank ? "" : context->getPair(peer)->address().str();
      AppendField(&mine, address.data(), address.size());
    }
    auto all =
        rendezvous.AllGather(absl::StrCat(key, "/pairs"), mine, options.rendezvous_timeout);
    if (!all.ok()) {
      return absl::Status(all.status().code(),
                          absl::StrCat("gloo: rank ", rank, " of ", size,
                                       " could not exchange pair addresses under '", key,
                                       "/pairs': ", all.status().message()));
    }
    for (int peer = 0; peer < size; ++peer) {
      size_t pos = 0;
      std::string field;
      for (int i = 0; i <= rank; ++i) {
        if (!ReadField((*all)[peer], &pos, &field)) {
          return absl::DataLossError(
              absl::StrCat("gloo: the pair addresses of rank ", peer, " are malformed"));
        }
      }
      if (peer != rank) peers[peer] = field;
    }
  }
  // Pair `peer`'s socket: accepted on this rank's listening address for it, or connected
  // to the peer's. Its peer address, as the kernel has it, is what errors show.
  std::vector<std::string> shown(size);
  if (size > 1) {
    std::map<int, std::pair<std::string, std::string>> sockets = TcpSockets();
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      const std::string peer_local = context->getPair(peer)->address().str();
      const std::vector<std::string> locals = HostPorts(peer_local);
      const std::vector<std::string> remotes = HostPorts(peers[peer]);
      auto in = [](const std::vector<std::string>& v, const std::string& x) {
        return std::find(v.begin(), v.end(), x) != v.end();
      };
      int fd = -1;
      for (const auto& [f, addresses] : sockets) {
        if (in(locals, addresses.first) || in(remotes, addresses.second)) {
          fd = f;
          shown[peer] = addresses.second;
        }
      }
      absl::Status st = absl::OkStatus();
      if (fd < 0) {
        st = absl::NotFoundError(
            absl::StrCat("no socket from ", peer_local, " or to ", peers[peer]));
      } else if (options.peer_timeout > absl::ZeroDuration()) {
        st = SetPeerTimeout(fd, options.peer_timeout);
      }
      if (!st.ok()) {
        return absl::InternalError(absl::StrCat("gloo: rank ", rank,
                                                " cannot set the peer timeout on its connection "
                                                "to rank ",
                                                peer, " at ", peers[peer], ": ", st.message()));
      }
    }
  }
  // Gloo's errors name a connection by its peer's address as Gloo holds it: the peer's
  // listening address, or where an accepted connection came from.
  std::vector<std::vector<std::string>> aliases(size);
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    aliases[peer] = HostPorts(peers[peer]);
    if (!shown[peer].empty()) aliases[peer].push_back(shown[peer]);
  }
  return std::unique_ptr<GlooCollective>(new GlooCollective(
      rank, size, std::move(context), options.timeout, std::move(aliases), std::move(shown)));
}

GlooCollective::GlooCollective(int rank, int size, std::shared_ptr<gloo::Context> context,
                               absl::Duration timeout,
                               std::vector<std::vector<std::string>> aliases,
                               std::vector<std::string> peers)
    : rank_(rank),
      size_(size),
      context_(std::move(context)),
      timeout_(timeout),
      aliases_(std::move(aliases)),
      peers_(std::move(peers)) {}

std::string GlooCollective::PeerAddress(int peer) const {
  return peer >= 0 && peer < static_cast<int>(peers_.size()) ? peers_[peer] : "";
}

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
    // Gloo names the connection that broke by its peer's address.
    std::vector<std::string> named = NamedAddresses(msg);
    int peer = -1;
    for (int r = 0; r < size_ && peer < 0; ++r) {
      for (const std::string& alias : aliases_[r]) {
        if (std::find(named.begin(), named.end(), alias) != named.end()) peer = r;
      }
    }
    const bool host_silent = absl::StrContains(msg, strerror(ETIMEDOUT));
    const std::string who =
        peer >= 0 ? absl::StrCat("rank ", peer, " at ", peers_[peer])
                  : absl::StrCat("the rank at ", named.empty() ? "an unknown address" : named[0]);
    if (host_silent) {
      failed_ = absl::AbortedError(absl::StrCat(
          prefix, "lost ", who,
          ": its host acknowledged nothing for the peer timeout (host down or network cut): ",
          msg));
    } else if (peer >= 0) {
      failed_ = absl::AbortedError(absl::StrCat(
          prefix, "a peer rank exited or its connection broke (", who, "): ", msg));
    } else if (absl::StrContains(msg, "imed out") || absl::StrContains(msg, "imeout")) {
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
