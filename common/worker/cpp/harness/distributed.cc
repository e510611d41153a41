#include "common/worker/cpp/harness/distributed.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/worker/cpp/collective/gloo_collective.h"
#include "common/worker/cpp/collective/local_collective.h"
#include "common/worker/cpp/collective/nccl_collective.h"

namespace det::harness {

namespace {

// The local IP address of the interface that routes to `host_port` (a UDP connect sends
// nothing); "127.0.0.1" when that cannot be found.
std::string LocalAddressTowards(const std::string& host_port) {
  std::string host = host_port.substr(0, host_port.rfind(':'));
  std::string port = host_port.substr(host_port.rfind(':') + 1);
  if (!host.empty() && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints = {};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) return "127.0.0.1";
  std::string out = "127.0.0.1";
  int fd = socket(res->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage local = {};
    socklen_t len = sizeof(local);
    char buf[INET6_ADDRSTRLEN] = {0};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        getnameinfo(reinterpret_cast<sockaddr*>(&local), len, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) == 0) {
      out = buf;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return out;
}

}  // namespace

std::string MembershipKey(const TrialContext& context, const std::string& backend) {
  std::string alloc = context.allocation_id.empty() ? absl::StrCat(context.spec.trial_id(), ".", context.spec.run_id())
                                                    : context.allocation_id;
  return absl::StrCat(alloc, "/", backend);
}

absl::StatusOr<std::unique_ptr<collective::Collective>> ConnectCollective(
    const TrialContext& context, collective::Rendezvous& rendezvous, const CollectiveOptions& options) {
  if (context.world_size == 1) return std::make_unique<collective::LocalCollective>();
  collective::GlooOptions gloo;
  gloo.hostname = context.collective_host;
  if (gloo.hostname.empty()) {
    gloo.hostname = context.cross_size <= 1 ? "127.0.0.1" : LocalAddressTowards(context.master);
  }
  gloo.iface = context.collective_iface;
  gloo.timeout = options.timeout;
  gloo.rendezvous_timeout = options.rendezvous_timeout;
  gloo.peer_timeout = context.collective_peer_timeout;
  auto c = collective::GlooCollective::Create(context.rank, context.world_size, rendezvous,
                                              MembershipKey(context, "gloo"), gloo);
  if (!c.ok()) return c.status();
  return std::unique_ptr<collective::Collective>(std::move(*c));
}

absl::StatusOr<std::unique_ptr<collective::Collective>> ConnectCudaCollective(
    const TrialContext& context, collective::Rendezvous& rendezvous, int device,
    const CollectiveOptions& options) {
  collective::NcclOptions nccl;
  nccl.device = device;
  nccl.timeout = options.timeout;
  nccl.rendezvous_timeout = options.rendezvous_timeout;
  auto c = collective::NcclCollective::Create(context.rank, context.world_size, rendezvous,
                                              MembershipKey(context, "nccl"), nccl);
  if (!c.ok()) return c.status();
  return std::unique_ptr<collective::Collective>(std::move(*c));
}

absl::StatusOr<std::map<std::string, double>> ReduceMetrics(collective::Collective& collective,
                                                            const std::map<std::string, double>& values,
                                                            bool average) {
  std::vector<float> buf;
  buf.reserve(values.size());
  for (const auto& [name, v] : values) buf.push_back(static_cast<float>(v));
  if (auto st = collective.AllReduceSum(absl::MakeSpan(buf)); !st.ok()) return st;
  std::map<std::string, double> out;
  size_t i = 0;
  for (const auto& [name, v] : values) {
    out[name] = average ? static_cast<double>(buf[i]) / collective.size() : buf[i];
    ++i;
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> AllGatherBytes(collective::Collective& collective,
                                                        const std::string& mine) {
  const int n = collective.size();
  const int rank = collective.rank();
  std::vector<int64_t> lengths(n, 0);
  lengths[rank] = static_cast<int64_t>(mine.size());
  if (auto st = collective.AllReduceSum(absl::MakeSpan(lengths)); !st.ok()) return st;
  int64_t longest = 0;
  for (int64_t l : lengths) longest = std::max(longest, l);
  const size_t words = static_cast<size_t>((longest + 7) / 8);
  std::vector<int64_t> buf(words * n, 0);
  if (!mine.empty()) std::memcpy(&buf[words * rank], mine.data(), mine.size());
  if (auto st = collective.AllReduceSum(absl::MakeSpan(buf)); !st.ok()) return st;
  std::vector<std::string> out(n);
  for (int r = 0; r < n; ++r) {
    out[r].assign(reinterpret_cast<const char*>(&buf[words * r]), static_cast<size_t>(lengths[r]));
  }
  return out;
}

namespace {
volatile std::sig_atomic_t stop_requested = 0;
void OnStopSignal(int) { stop_requested = 1; }
}  // namespace

void InstallStopHandler() {
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

bool StopRequested() { return stop_requested != 0; }

absl::StatusOr<bool> AnyRankStopRequested(collective::Collective& collective) {
  int64_t flag = StopRequested() ? 1 : 0;
  if (auto st = collective.AllReduceSum(absl::MakeSpan(&flag, 1)); !st.ok()) return st;
  return flag > 0;
}

}  // namespace det::harness
