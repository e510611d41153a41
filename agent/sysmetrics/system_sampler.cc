#include "agent/sysmetrics/system_sampler.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace det::agent {
namespace {

absl::StatusOr<std::string> ReadProcFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Fields(absl::string_view line) {
  return absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
}

// "/proc/stat": the aggregate "cpu" line; busy = everything but idle and iowait (guest
// time is already part of user time and is not added again).
absl::Status ParseCpu(const std::string& path, const std::string& text, uint64_t* busy,
                      uint64_t* total) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<std::string> f = Fields(line);
    if (f.empty() || f[0] != "cpu") continue;
    if (f.size() < 5) break;
    uint64_t v[8] = {0};
    for (size_t i = 1; i < f.size() && i <= 8; ++i) {
      if (!absl::SimpleAtoi(f[i], &v[i - 1])) {
        return absl::DataLossError(absl::StrCat(path, ": bad cpu field \"", f[i], "\""));
      }
    }
    *total = 0;
    for (uint64_t x : v) *total += x;
    *busy = *total - v[3] - v[4];
    return absl::OkStatus();
  }
  return absl::DataLossError(absl::StrCat(path, ": no aggregate \"cpu\" line"));
}

// "/proc/meminfo" in bytes: MemAvailable (MemFree on kernels without it) and MemTotal.
absl::Status ParseMemory(const std::string& path, const std::string& text, int64_t* free,
                         int64_t* total) {
  std::map<std::string, int64_t> kb;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<std::string> f = Fields(line);
    int64_t v = 0;
    if (f.size() >= 2 && absl::SimpleAtoi(f[1], &v)) kb[f[0]] = v;
  }
  if (!kb.count("MemTotal:")) return absl::DataLossError(absl::StrCat(path, ": no MemTotal"));
  *total = kb["MemTotal:"] * 1024;
  auto avail = kb.find("MemAvailable:");
  if (avail == kb.end()) avail = kb.find("MemFree:");
  if (avail == kb.end()) return absl::DataLossError(absl::StrCat(path, ": no MemAvailable"));
  *free = avail->second * 1024;
  return absl::OkStatus();
}

bool IsVirtualDisk(const std::string& name) {
  for (const char* prefix : {"loop", "ram", "zram", "dm-", "md", "sr", "fd", "nbd"}) {
    if (absl::StartsWith(name, prefix)) return true;
  }
  return false;
}

// True for "sda1" (of "sda"), "nvme0n1p2" (of "nvme0n1"), "mmcblk0p1" (of "mmcblk0").
bool IsPartition(const std::string& name, const std::set<std::string>& disks) {
  for (const auto& disk : disks) {
    if (disk.size() >= name.size() || !absl::StartsWith(name, disk)) continue;
    absl::string_view rest = absl::string_view(name).substr(disk.size());
    // A disk whose name ends in a digit numbers its partitions after a 'p'.
    if (absl::ascii_isdigit(disk.back()) && !absl::ConsumePrefix(&rest, "p")) continue;
    if (!rest.empty() && std::all_of(rest.begin(), rest.end(), absl::ascii_isdigit)) return true;
  }
  return false;
}

// "/proc/diskstats": whole physical disks only (partitions and virtual devices would
// count the same I/O twice). Sectors are 512 bytes there, whatever the device's.
absl::Status ParseDisks(const std::string& path, const std::string& text, uint64_t* reads,
                        uint64_t* writes, uint64_t* read_bytes, uint64_t* write_bytes) {
  std::vector<std::vector<std::string>> rows;
  std::set<std::string> names;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<std::string> f = Fields(line);
    if (f.size() < 14) continue;
    names.insert(f[2]);
    rows.push_back(std::move(f));
  }
  *reads = *writes = *read_bytes = *write_bytes = 0;
  for (const auto& f : rows) {
    if (IsVirtualDisk(f[2]) || IsPartition(f[2], names)) continue;
    uint64_t r = 0, rs = 0, w = 0, ws = 0;
    if (!absl::SimpleAtoi(f[3], &r) || !absl::SimpleAtoi(f[5], &rs) ||
        !absl::SimpleAtoi(f[7], &w) || !absl::SimpleAtoi(f[9], &ws)) {
      return absl::DataLossError(absl::StrCat(path, ": bad counters for ", f[2]));
    }
    *reads += r;
    *writes += w;
    *read_bytes += rs * 512;
    *write_bytes += ws * 512;
  }
  return absl::OkStatus();
}

bool IsVirtualInterface(const std::string& name) {
  if (name == "lo") return true;
  for (const char* prefix : {"veth", "docker", "br-", "virbr", "cni", "flannel"}) {
    if (absl::StartsWith(name, prefix)) return true;
  }
  return false;
}

// "/proc/net/dev": "  eth0: rx_bytes rx_packets ... (8 receive fields) tx_bytes ...".
absl::Status ParseNetwork(const std::string& path, const std::string& text, uint64_t* sent,
                          uint64_t* received) {
  *sent = *received = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    std::string name(absl::StripAsciiWhitespace(line.substr(0, colon)));
    std::vector<std::string> f = Fields(line.substr(colon + 1));
    if (f.size() < 9 || IsVirtualInterface(name)) continue;
    uint64_t rx = 0, tx = 0;
    if (!absl::SimpleAtoi(f[0], &rx) || !absl::SimpleAtoi(f[8], &tx)) {
      return absl::DataLossError(absl::StrCat(path, ": bad counters for ", name));
    }
    *received += rx;
    *sent += tx;
  }
  return absl::OkStatus();
}

// Per second over `seconds`; a counter that went backwards (reset, device removed) gives 0.
double Rate(uint64_t now, uint64_t before, double seconds) {
  if (now < before || seconds <= 0) return 0;
  return static_cast<double>(now - before) / seconds;
}

}  // namespace

SystemSampler::SystemSampler(std::string proc_root, Nvml* nvml)
    : proc_root_(std::move(proc_root)), nvml_(nvml) {}

absl::StatusOr<SystemSampler::Counters> SystemSampler::ReadCounters() {
  Counters c;
  std::string stat = proc_root_ + "/stat";
  absl::StatusOr<std::string> text = ReadProcFile(stat);
  if (!text.ok()) return text.status();
  if (auto st = ParseCpu(stat, *text, &c.cpu_busy, &c.cpu_total); !st.ok()) return st;
  std::string disks = proc_root_ + "/diskstats";
  text = ReadProcFile(disks);
  if (!text.ok()) return text.status();
  if (auto st = ParseDisks(disks, *text, &c.disk_reads, &c.disk_writes, &c.disk_read_bytes,
                           &c.disk_write_bytes);
      !st.ok()) {
    return st;
  }
  std::string net = proc_root_ + "/net/dev";
  text = ReadProcFile(net);
  if (!text.ok()) return text.status();
  if (auto st = ParseNetwork(net, *text, &c.net_sent, &c.net_received); !st.ok()) return st;
  return c;
}

absl::StatusOr<v1::SystemMetrics> SystemSampler::Sample(absl::Time now) {
  absl::StatusOr<Counters> counters = ReadCounters();
  if (!counters.ok()) return counters.status();
  std::optional<Counters> last = std::exchange(last_, *counters);
  absl::Time last_time = std::exchange(last_time_, now);
  if (!last) return absl::UnavailableError("the first sample only reads the counters");

  v1::SystemMetrics m;
  m.set_time_ms(absl::ToUnixMillis(now));
  const Counters& c = *counters;
  double seconds = absl::ToDoubleSeconds(now - last_time);
  uint64_t total = c.cpu_total - std::min(c.cpu_total, last->cpu_total);
  uint64_t busy = c.cpu_busy - std::min(c.cpu_busy, last->cpu_busy);
  m.set_cpu_utilization_percent(total == 0 ? 0 : std::min(100.0, 100.0 * busy / total));
  std::string meminfo = proc_root_ + "/meminfo";
  absl::StatusOr<std::string> text = ReadProcFile(meminfo);
  if (!text.ok()) return text.status();
  int64_t free = 0, mem_total = 0;
  if (auto st = ParseMemory(meminfo, *text, &free, &mem_total); !st.ok()) return st;
  m.set_memory_free_bytes(free);
  m.set_memory_total_bytes(mem_total);
  m.set_disk_read_iops(Rate(c.disk_reads, last->disk_reads, seconds));
  m.set_disk_write_iops(Rate(c.disk_writes, last->disk_writes, seconds));
  m.set_disk_read_bytes_per_second(Rate(c.disk_read_bytes, last->disk_read_bytes, seconds));
  m.set_disk_write_bytes_per_second(Rate(c.disk_write_bytes, last->disk_write_bytes, seconds));
  m.set_network_sent_bytes_per_second(Rate(c.net_sent, last->net_sent, seconds));
  m.set_network_received_bytes_per_second(Rate(c.net_received, last->net_received, seconds));
  if (nvml_ != nullptr) {
    absl::StatusOr<int> n = nvml_->DeviceCount();
    for (int i = 0; n.ok() && i < *n; ++i) {
      absl::StatusOr<GpuUsage> usage = nvml_->Usage(i);
      if (!usage.ok()) continue;
      v1::GpuMetrics* g = m.add_gpus();
      g->set_slot_id(absl::StrCat(i));
      absl::StatusOr<GpuDevice> dev = nvml_->Device(i);
      if (dev.ok()) g->set_uuid(dev->uuid);
      g->set_utilization_percent(usage->utilization_percent);
      g->set_memory_free_bytes(usage->memory_free_bytes);
      g->set_memory_total_bytes(usage->memory_total_bytes);
    }
  }
  return m;
}

}  // namespace det::agent
