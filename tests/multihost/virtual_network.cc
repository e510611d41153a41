#include "tests/multihost/virtual_network.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

constexpr char kPrefix[] = "mh";
constexpr absl::Duration kIpTimeout = absl::Seconds(30);

std::string Base36(uint64_t v) {
  const char* digits = "0123456789abcdefghijklmnopqrstuvwxyz";
  std::string out;
  do {
    out.insert(out.begin(), digits[v % 36]);
    v /= 36;
  } while (v > 0);
  return out;
}

// The pid encoded in `tag` (-1 when it is not base 36).
int64_t PidOfTag(const std::string& tag) {
  int64_t v = 0;
  for (char c : tag) {
    int d = absl::ascii_isdigit(c) ? c - '0' : (c >= 'a' && c <= 'z' ? c - 'a' + 10 : -1);
    if (d < 0 || v > (int64_t{1} << 40)) return -1;
    v = v * 36 + d;
  }
  return tag.empty() ? -1 : v;
}

bool ValidLabel(const std::string& label) {
  if (label.empty() || label.size() > 4) return false;
  for (char c : label) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c)) return false;
  }
  return true;
}

// Every namespace name `ip netns list` shows.
std::vector<std::string> ListNamespaces() {
  std::vector<std::string> out;
  CommandResult r = RunCommand({VirtualNetwork::IpPath(), "netns", "list"}, kIpTimeout);
  for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (!words.empty()) out.push_back(words[0]);
  }
  return out;
}

std::vector<int> NamespacePids(const std::string& ns) {
  std::vector<int> pids;
  CommandResult r = RunCommand({VirtualNetwork::IpPath(), "netns", "pids", ns}, kIpTimeout);
  for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
    int pid;
    if (absl::SimpleAtoi(line, &pid) && pid > 1 && pid != getpid()) pids.push_back(pid);
  }
  return pids;
}

// SIGKILLs what runs in `ns` and deletes it (errors ignored: best effort cleanup).
void KillAndDelete(const std::string& ns) {
  for (int pid : NamespacePids(ns)) kill(pid, SIGKILL);
  RunCommand({VirtualNetwork::IpPath(), "netns", "delete", ns}, kIpTimeout);
}

// Deletes namespaces of runs that are gone: tagged with this pid (a dead run whose pid was
// reused) or with a pid that no longer runs.
void RemoveLeftovers() {
  for (const std::string& ns : ListNamespaces()) {
    if (!absl::StartsWith(ns, kPrefix)) continue;
    std::string rest = ns.substr(sizeof(kPrefix) - 1);
    size_t dash = rest.find('-');
    if (dash == std::string::npos) continue;
    int64_t pid = PidOfTag(rest.substr(0, dash));
    if (pid <= 0) continue;
    bool dead = kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    if (pid == getpid() || dead) KillAndDelete(ns);
  }
}

}  // namespace

std::string VirtualNetwork::TagOf(int64_t pid) { return Base36(static_cast<uint64_t>(pid)); }

std::string VirtualNetwork::IpPath() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

absl::Status VirtualNetwork::Ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {IpPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  CommandResult r = RunCommand(argv, kIpTimeout);
  if (r.exit.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("`", absl::StrJoin(argv, " "), "` failed (",
                                          r.exit.ToString(), "): ",
                                          absl::StripAsciiWhitespace(r.err)));
}

absl::Status VirtualNetwork::Available() {
  if (geteuid() != 0) {
    return absl::FailedPreconditionError(
        "multi-host tests need root to create network namespaces (euid is not 0)");
  }
  if (IpPath().empty()) {
    return absl::FailedPreconditionError(
        "multi-host tests need iproute2's `ip` (none in /usr/sbin, /sbin, /usr/bin, /bin)");
  }
  std::string probe = absl::StrCat(kPrefix, Base36(getpid()), "-prob");
  absl::Status st = Ip({"netns", "add", probe});
  if (!st.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create a network namespace: ", st.message()));
  }
  return Ip({"netns", "delete", probe});
}

VirtualNetwork::VirtualNetwork(std::string tag, std::string subnet)
    : tag_(std::move(tag)), subnet_(std::move(subnet)) {}

absl::StatusOr<std::unique_ptr<VirtualNetwork>> VirtualNetwork::Create() {
  if (absl::Status st = Available(); !st.ok()) return st;
  RemoveLeftovers();
  const int pid = getpid();
  std::unique_ptr<VirtualNetwork> net(
      new VirtualNetwork(Base36(pid), absl::StrCat("10.77.", pid % 250 + 1)));
  const std::string br = net->BridgeNamespace();
  if (absl::Status st = Ip({"netns", "add", br}); !st.ok()) return st;
  net->bridge_created_ = true;
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"-n", br, "link", "set", "lo", "up"},
           {"-n", br, "link", "add", "br0", "type", "bridge"},
           {"-n", br, "link", "set", "br0", "up"}}) {
    if (absl::Status st = Ip(args); !st.ok()) return st;
  }
  return net;
}

VirtualNetwork::~VirtualNetwork() {
  for (const auto& [label, address] : hosts_) KillAndDelete(Namespace(label));
  if (bridge_created_) KillAndDelete(BridgeNamespace());
}

std::string VirtualNetwork::BridgeNamespace() const {
  return absl::StrCat(kPrefix, tag_, "-br");
}

std::string VirtualNetwork::Namespace(const std::string& label) const {
  if (!hosts_.count(label)) return "";
  return absl::StrCat(kPrefix, tag_, "-", label);
}

std::string VirtualNetwork::Address(const std::string& label) const {
  auto it = hosts_.find(label);
  return it == hosts_.end() ? "" : it->second;
}

absl::StatusOr<std::string> VirtualNetwork::AddHost(const std::string& label) {
  if (!ValidLabel(label) || label == "br") {
    return absl::InvalidArgumentError(
        absl::StrCat("host label '", label, "': want 1..4 of [a-z0-9], not 'br'"));
  }
  if (hosts_.count(label)) {
    return absl::InvalidArgumentError(absl::StrCat("host '", label, "' already exists"));
  }
  const std::string address = absl::StrCat(subnet_, ".", hosts_.size() + 1);
  const std::string ns = absl::StrCat(kPrefix, tag_, "-", label);
  const std::string br = BridgeNamespace();
  const std::string port = "p-" + label;
  if (absl::Status st = Ip({"netns", "add", ns}); !st.ok()) return st;
  hosts_[label] = address;  // From here the destructor deletes it.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"-n", ns, "link", "set", "lo", "up"},
           {"-n", br, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns},
           {"-n", br, "link", "set", port, "master", "br0"},
           {"-n", br, "link", "set", port, "up"},
           {"-n", ns, "addr", "add", address + "/24", "dev", "eth0"},
           {"-n", ns, "link", "set", "eth0", "up"}}) {
    if (absl::Status st = Ip(args); !st.ok()) return st;
  }
  return address;
}

std::vector<std::string> VirtualNetwork::InHost(const std::string& label,
                                                const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {IpPath(), "netns", "exec", Namespace(label)};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

absl::Status VirtualNetwork::SetLink(const std::string& label, bool up) {
  if (!hosts_.count(label)) {
    return absl::InvalidArgumentError(absl::StrCat("no host '", label, "'"));
  }
  return Ip({"-n", BridgeNamespace(), "link", "set", "p-" + label, up ? "up" : "down"});
}

std::vector<int> VirtualNetwork::Pids(const std::string& label) const {
  if (!hosts_.count(label)) return {};
  return NamespacePids(Namespace(label));
}

}  // namespace det::testing
