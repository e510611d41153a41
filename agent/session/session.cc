#include "agent/session/session.h"

#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "agent/launcher/launcher.h"
#include "agent/net/local_address.h"
#include "common/logging/logging.h"

namespace det::agent {
namespace {

std::string ReadCredential(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return std::string(absl::StripAsciiWhitespace(text.str()));
}

absl::Status WriteCredential(const std::string& path, const std::string& credential) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", strerror(errno)));
  }
  return WritePrivateFile(path, credential + "\n");
}

absl::StatusOr<std::string> NewCredential() {
  unsigned char raw[32];
  size_t got = 0;
  while (got < sizeof(raw)) {
    ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InternalError(absl::StrCat("getrandom: ", strerror(errno)));
    got += static_cast<size_t>(n);
  }
  std::string hex;
  for (unsigned char b : raw) absl::StrAppend(&hex, absl::Hex(b, absl::kZeroPad2));
  return hex;
}

void KeepCredential(const config::AgentConfig& config, const std::string& credential) {
  absl::Status kept = WriteCredential(CredentialPath(config.work_dir), credential);
  if (!kept.ok()) {
    Logger("agent")->error(
        "cannot keep the agent credential (this process keeps it in "
        "memory; a restarted agent will be refused until an admin runs "
        "det agent reset-credential {}): {}",
        config.agent_id, kept.ToString());
  }
}

// The address other agents reach this one at (agent.yaml's, or the local end of the route
// to the master) and the interface holding it; empty when unknown (warned).
Session::Address FindAddress(const config::AgentConfig& config) {
  Session::Address out;
  out.advertise_address = config.advertise_address;
  if (out.advertise_address.empty()) {
    absl::StatusOr<std::string> route = LocalAddressTowards(config.master);
    if (route.ok()) {
      out.advertise_address = *route;
    } else {
      Logger("agent")->warn(
          "cannot tell which address other agents reach this one at ({}); set "
          "advertise_address in agent.yaml",
          route.status().ToString());
    }
  }
  if (!out.advertise_address.empty()) {
    absl::StatusOr<std::string> held = InterfaceHolding(out.advertise_address);
    if (held.ok()) {
      out.network_interface = *held;
    } else {
      Logger("agent")->warn(
          "workers of trials across agents get no GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME: {}",
          held.status().ToString());
    }
  }
  return out;
}

}  // namespace

std::string CredentialPath(const std::string& work_dir) {
  return work_dir + "/run/agent_credential";
}

Session::Session(config::AgentConfig config, MasterClient& client, std::vector<v1::Slot> slots,
                 std::optional<PythonChoice> python)
    : config_(std::move(config)),
      client_(client),
      slots_(std::move(slots)),
      python_(std::move(python)) {
  absl::MutexLock l(&mu_);
  heartbeat_interval_ = config_.heartbeat_interval;
}

void Session::LoadCredential() {
  std::string credential = ReadCredential(CredentialPath(config_.work_dir));
  if (credential.empty()) {
    absl::StatusOr<std::string> fresh = NewCredential();
    if (fresh.ok()) {
      credential = *fresh;
      KeepCredential(config_, credential);
    } else {
      Logger("agent")->warn("cannot make an agent credential ({}); the master issues one",
                            fresh.status().ToString());
    }
  }
  absl::MutexLock l(&mu_);
  credential_ = std::move(credential);
}

absl::StatusOr<std::vector<std::string>> Session::Register(
    const std::vector<std::string>& running_allocations) {
  v1::RegisterRequest req;
  req.set_agent_id(config_.agent_id);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  req.set_hostname(host);
  req.set_cluster_secret(config_.cluster_secret);
  {
    absl::MutexLock l(&mu_);
    req.set_agent_credential(credential_);
  }
  req.set_version("0.1.0");
  req.set_resource_pool(config_.resource_pool);
  if (python_) {
    req.set_worker_python(python_->path);
    req.set_worker_torch_version(python_->torch_version);
  } else {
    req.set_worker_python(config_.worker_python);
  }
  Address address = FindAddress(config_);
  req.set_advertise_address(address.advertise_address);
  req.set_chief_port_first(config_.chief_port_first);
  req.set_chief_port_last(config_.chief_port_last);
  for (const auto& s : slots_) *req.add_slots() = s;
  for (const auto& id : running_allocations) req.add_running_allocations(id);
  auto resp = client_.Register(req);
  if (!resp.ok()) {
    if (absl::IsUnauthenticated(resp.status()) || absl::IsAlreadyExists(resp.status()) ||
        absl::IsPermissionDenied(resp.status())) {
      Logger("agent")->error("the master at {} refused agent {}: {}", config_.master,
                             config_.agent_id, std::string(resp.status().message()));
    } else {
      Logger("agent")->warn("cannot register with the master: {}", resp.status().ToString());
    }
    return resp.status();
  }
  if (!resp->agent_credential().empty() && resp->agent_credential() != req.agent_credential()) {
    KeepCredential(config_, resp->agent_credential());  // for the next registration
  }
  absl::MutexLock l(&mu_);
  if (!resp->agent_credential().empty()) credential_ = resp->agent_credential();
  id_ = resp->session_id();
  address_ = address;
  if (resp->heartbeat_interval_ms() > 0) {
    heartbeat_interval_ = absl::Milliseconds(resp->heartbeat_interval_ms());
  }
  Logger("agent")->info(
      "agent {} joined master {} with {} {} slot(s), {} running allocation(s); advertised as "
      "{} (interface {}), chief ports {}-{}",
      config_.agent_id, config_.master, slots_.size(), slots_.empty() ? "cpu" : slots_[0].type(),
      req.running_allocations_size(), address.advertise_address,
      address.network_interface.empty() ? "unknown" : address.network_interface,
      config_.chief_port_first, config_.chief_port_last);
  return std::vector<std::string>(resp->kill_allocations().begin(), resp->kill_allocations().end());
}

absl::Status Session::Heartbeat(const std::string& session, MetricsBuffer& metrics) {
  v1::HeartbeatRequest hb;
  hb.set_agent_id(config_.agent_id);
  hb.set_session_id(session);
  for (auto& m : metrics.Pending()) *hb.add_system_metrics() = std::move(m);
  absl::Status st = client_.Heartbeat(hb);
  if (absl::IsNotFound(st)) {
    Logger("agent")->warn("master does not know this session ({}); registering again",
                          std::string(st.message()));
    Lost(session);
    return st;
  }
  if (!st.ok()) {
    Logger("agent")->warn("heartbeat failed: {}", st.ToString());
    return st;
  }
  if (hb.system_metrics_size() > 0) {
    metrics.SentUntil(hb.system_metrics(hb.system_metrics_size() - 1).time_ms());
  }
  return st;
}

std::string Session::id() {
  absl::MutexLock l(&mu_);
  return id_;
}

void Session::Lost(const std::string& stale_session) {
  absl::MutexLock l(&mu_);
  if (id_ == stale_session) id_.clear();
}

absl::Duration Session::heartbeat_interval() {
  absl::MutexLock l(&mu_);
  return heartbeat_interval_;
}

Session::Address Session::address() {
  absl::MutexLock l(&mu_);
  return address_;
}

}  // namespace det::agent
