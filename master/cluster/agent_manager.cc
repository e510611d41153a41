#include "master/cluster/agent_manager.h"

#include <sodium.h>

#include <cstdlib>
#include <map>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging/logging.h"
#include "common/status/status_macros.h"

namespace det::master {
namespace {

std::string Hex(const unsigned char* bytes, size_t n) {
  std::string out(2 * n + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), bytes, n);
  out.pop_back();
  return out;
}

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  randombytes_buf(raw.data(), raw.size());
  return Hex(reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
}

// What the store keeps of a credential: its SHA-256, hex. A credential is 32 random bytes,
// so a fast hash suffices (as for session tokens); no one can guess one from its hash.
std::string CredentialHash(const std::string& credential) {
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(digest, reinterpret_cast<const unsigned char*>(credential.data()),
                     credential.size());
  return Hex(digest, sizeof(digest));
}

// Compares secrets without leaking where they differ through timing.
bool SecretsEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

// Whether `credential` has a credential's form (32 bytes, lowercase hex), as an agent
// proposes one at its first registration.
bool WellFormedCredential(const std::string& credential) {
  if (credential.size() != 64) return false;
  for (char c : credential) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Who a registration came from, for the log: the caller's address and what it said.
std::string Who(const v1::RegisterRequest& req, const std::string& peer) {
  // What the caller said is escaped: it may not forge lines of the log.
  std::string who = absl::StrCat("from ", peer.empty() ? "an unknown address" : peer,
                                 " (hostname '", absl::CHexEscape(req.hostname()), "'");
  if (req.running_allocations_size() > 0) {
    absl::StrAppend(&who, ", claiming allocations ",
                    absl::CHexEscape(absl::StrJoin(req.running_allocations(), ", ")));
  }
  return who + ")";
}

}  // namespace

AgentManager::AgentManager(Clock& clock, EventLoop& loop, Store& store, Options options)
    : clock_(clock), loop_(loop), store_(store), options_(std::move(options)) {
  if (sodium_init() < 0) {
    // Only fails when the system has no usable randomness: no credential can be issued.
    Logger("agents")->critical("libsodium cannot initialize");
    std::abort();
  }
}

void AgentManager::Restore(const std::vector<v1::Agent>& agents,
                           const std::map<std::string, std::string>& credential_hashes) {
  for (const auto& a : agents) {
    Entry& e = agents_[a.id()];
    e.agent = a;
    auto hash = credential_hashes.find(a.id());
    if (hash != credential_hashes.end()) e.credential_hash = hash->second;
    e.agent.set_connected(false);
    for (auto& s : *e.agent.mutable_slots()) {
      s.clear_allocation_id();
      s.set_agent_id(a.id());
    }
  }
}

void AgentManager::Persist(const v1::Agent& agent) {
  absl::Status st = store_.UpsertAgent(agent);
  if (!st.ok()) Logger("agents")->error("agent {}: cannot persist: {}", agent.id(), st.ToString());
}

absl::Status AgentManager::CheckClusterSecret(const v1::RegisterRequest& req) const {
  if (!options_.cluster_secret.empty() &&
      !SecretsEqual(req.cluster_secret(), options_.cluster_secret)) {
    Logger("agents")->warn("agent {} refused: wrong or missing cluster secret", req.agent_id());
    return absl::UnauthenticatedError(
        "cluster secret missing or wrong: set cluster_secret in agent.yaml or DET_CLUSTER_SECRET");
  }
  return absl::OkStatus();
}

absl::StatusOr<AgentManager::Admission> AgentManager::Register(
    const v1::RegisterRequest& req, const std::string& peer) {
  RETURN_IF_ERROR(CheckClusterSecret(req));
  if (req.agent_id().empty()) return absl::InvalidArgumentError("agent_id: must not be empty");
  auto known = agents_.find(req.agent_id());
  // The id's credential before anything else of the request is looked at.
  const bool enrolled_before = known != agents_.end() && !known->second.credential_hash.empty();
  if (enrolled_before &&
      !SecretsEqual(CredentialHash(req.agent_credential()), known->second.credential_hash)) {
    const bool connected = known->second.agent.connected();
    Logger("agents")->warn(
        "registration as agent {} refused: the request has {} agent credential and the agent "
        "is {}; it came {}",
        req.agent_id(), req.agent_credential().empty() ? "no" : "a wrong",
        connected ? "connected" : "disconnected", Who(req, peer));
    if (connected) {
      return absl::AlreadyExistsError(absl::StrCat(
          "agent id '", req.agent_id(), "' is connected: registering under it needs the agent "
          "credential the master issued to that agent (kept in its work_dir as "
          "run/agent_credential); start this agent with another agent_id"));
    }
    return absl::PermissionDeniedError(absl::StrCat(
        "agent id '", req.agent_id(), "' is enrolled: registering under it needs the agent "
        "credential the master issued to that agent (kept in its work_dir as "
        "run/agent_credential), ", req.agent_credential().empty() ? "none was sent" : "another was sent",
        ". An agent that lost its credential is re-enrolled by an admin: det agent "
        "reset-credential ", req.agent_id()));
  }
  ChiefEndpoint chief{req.advertise_address().empty() ? req.hostname() : req.advertise_address(),
                      req.chief_port_first(), req.chief_port_last()};
  if (chief.port_first == 0 && chief.port_last == 0) {
    chief.port_first = kDefaultChiefPortFirst;
    chief.port_last = kDefaultChiefPortLast;
  } else if (chief.port_first < 1 || chief.port_last > 65535 ||
             chief.port_first > chief.port_last) {
    return absl::InvalidArgumentError(absl::StrCat(
        "agent ", req.agent_id(), ": chief_port_range: expected 1 <= first <= last <= 65535, got ",
        chief.port_first, "..", chief.port_last));
  }
  const bool returning = known != agents_.end() && known->second.agent.registered_time_ms() != 0;
  std::map<std::string, std::string> used;
  std::set<std::string> disabled_slots;
  if (known != agents_.end()) {
    for (const auto& s : known->second.agent.slots()) {
      used[s.id()] = s.allocation_id();
      if (!s.enabled()) disabled_slots.insert(s.id());
    }
  }

  v1::Agent agent;
  agent.set_id(req.agent_id());
  agent.set_hostname(req.hostname());
  agent.set_version(req.version());
  agent.set_worker_python(req.worker_python());
  agent.set_worker_torch_version(req.worker_torch_version());
  agent.set_resource_pool(req.resource_pool().empty() ? "default" : req.resource_pool());
  agent.set_enabled(returning ? known->second.agent.enabled() : true);
  agent.set_draining(returning && known->second.agent.draining());
  agent.set_connected(true);
  agent.set_registered_time_ms(clock_.NowMs());
  agent.set_last_heartbeat_ms(clock_.NowMs());
  for (const auto& s : req.slots()) {
    v1::Slot* slot = agent.add_slots();
    *slot = s;
    slot->set_enabled(disabled_slots.count(s.id()) == 0);
    slot->set_allocation_id(used.count(s.id()) ? used[s.id()] : "");
    slot->set_agent_id(req.agent_id());
  }
  Admission admitted;
  std::string credential_hash;
  if (enrolled_before) {
    admitted.credential = req.agent_credential();
    credential_hash = known->second.credential_hash;
    Persist(agent);
  } else {
    // Enrolment: the credential's hash is stored before anyone is told the credential.
    admitted.enrolled = true;
    // The agent's own proposal (kept in its work_dir before it asked: an answer lost on the
    // way costs nothing), else a new one.
    admitted.credential =
        WellFormedCredential(req.agent_credential()) ? req.agent_credential() : RandomHex(32);
    credential_hash = CredentialHash(admitted.credential);
    absl::Status stored = store_.SetAgentCredential(agent, credential_hash);
    if (!stored.ok()) {
      Logger("agents")->error("agent {}: cannot store its credential; registration refused: {}",
                              req.agent_id(), stored.ToString());
      return absl::Status(stored.code(),
                          absl::StrCat("agent ", req.agent_id(),
                                       ": the master cannot store its credential: ",
                                       stored.message()));
    }
  }
  Entry& e = agents_[req.agent_id()];
  if (e.waiter) {
    e.waiter(absl::AbortedError("agent registered again"), {});
    e.waiter = nullptr;
    loop_.Cancel(e.waiter_timer);
  }
  e.agent = std::move(agent);
  e.chief = std::move(chief);
  e.session_id = RandomHex(16);
  e.credential_hash = std::move(credential_hash);
  e.last_seen = clock_.Now();
  e.queued.clear();
  admitted.session_id = e.session_id;
  if (admitted.enrolled && known != agents_.end()) {
    Logger("agents")->warn(
        "agent {} enrolled anew {}: the master kept no credential for it (reset by an admin, "
        "or stored by a master that kept none); issued a new one; nothing it ran before is "
        "reattached",
        req.agent_id(), Who(req, peer));
  }
  Logger("agents")->info("agent {} {} with {} slots (pool {}) {}{}", req.agent_id(),
                         returning ? "reconnected" : "registered", req.slots_size(),
                         e.agent.resource_pool(), Who(req, peer),
                         admitted.enrolled ? "; issued its agent credential" : "");
  return admitted;
}

absl::Status AgentManager::ResetCredential(const std::string& agent_id, const std::string& by) {
  if (agent_id.empty()) return absl::InvalidArgumentError("agent_id: must not be empty");
  auto it = agents_.find(agent_id);
  if (it == agents_.end()) return absl::NotFoundError(absl::StrCat("agent ", agent_id, " not found"));
  Entry& e = it->second;
  if (e.agent.connected()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "agent ", agent_id, " is connected: its credential can be reset only while it is "
        "disconnected (stop it, or wait until the master lists it disconnected), so that a live "
        "agent's id is not handed to whoever registers next"));
  }
  RETURN_IF_ERROR(store_.SetAgentCredential(e.agent, ""));
  e.credential_hash.clear();
  Logger("agents")->warn(
      "agent {}: credential reset by '{}'; the next registration under the id is enrolled and "
      "issued a new one (allocations it claims are not reattached)",
      agent_id, by);
  return absl::OkStatus();
}

absl::Status AgentManager::Touch(const std::string& agent_id, const std::string& session_id) {
  auto it = agents_.find(agent_id);
  if (it == agents_.end() || !it->second.agent.connected() ||
      it->second.session_id != session_id) {
    return absl::NotFoundError(absl::StrCat("agent ", agent_id, ": unknown session; register again"));
  }
  it->second.last_seen = clock_.Now();
  it->second.agent.set_last_heartbeat_ms(clock_.NowMs());
  return absl::OkStatus();
}

void AgentManager::Poll(const std::string& agent_id, const std::string& session_id,
                        absl::Duration wait, PollDone done) {
  absl::Status st = Touch(agent_id, session_id);
  if (!st.ok()) {
    done(st, {});
    return;
  }
  Entry& e = agents_[agent_id];
  if (e.waiter) {  // A poll the agent abandoned; answer it empty.
    loop_.Cancel(e.waiter_timer);
    std::exchange(e.waiter, nullptr)(absl::OkStatus(), {});
  }
  e.waiter = std::move(done);
  if (!e.queued.empty()) {
    Deliver(e);
    return;
  }
  e.waiter_timer = loop_.PostAfter(wait, [this, agent_id] {
    auto it = agents_.find(agent_id);
    if (it != agents_.end() && it->second.waiter) {
      std::exchange(it->second.waiter, nullptr)(absl::OkStatus(), {});
    }
  });
}

void AgentManager::Deliver(Entry& e) {
  if (!e.waiter || e.queued.empty()) return;
  loop_.Cancel(e.waiter_timer);
  std::vector<v1::AgentCommand> commands(e.queued.begin(), e.queued.end());
  e.queued.clear();
  std::exchange(e.waiter, nullptr)(absl::OkStatus(), std::move(commands));
}

bool AgentManager::Send(const std::string& agent_id, v1::AgentCommand command) {
  auto it = agents_.find(agent_id);
  if (it == agents_.end() || !it->second.agent.connected()) return false;
  it->second.queued.push_back(std::move(command));
  Deliver(it->second);
  return true;
}

std::vector<std::string> AgentManager::ExpireSilent() {
  std::vector<std::string> lost;
  absl::Time now = clock_.Now();
  for (auto& [id, e] : agents_) {
    if (!e.agent.connected() || now - e.last_seen <= options_.agent_timeout) continue;
    e.agent.set_connected(false);
    e.session_id.clear();
    e.queued.clear();
    if (e.waiter) {
      loop_.Cancel(e.waiter_timer);
      std::exchange(e.waiter, nullptr)(absl::NotFoundError("agent timed out; register again"), {});
    }
    Logger("agents")->warn("agent {} lost: no heartbeat for {}", id,
                           absl::FormatDuration(now - e.last_seen));
    Persist(e.agent);
    lost.push_back(id);
  }
  return lost;
}

void AgentManager::SetSlotsUsed(const std::string& agent_id, const std::vector<std::string>& slots,
                                const std::string& allocation_id) {
  auto it = agents_.find(agent_id);
  if (it == agents_.end()) return;
  for (auto& s : *it->second.agent.mutable_slots()) {
    if (std::find(slots.begin(), slots.end(), s.id()) != slots.end()) s.set_allocation_id(allocation_id);
  }
}

void AgentManager::ReleaseSlots(const std::string& allocation_id) {
  for (auto& [id, e] : agents_) {
    for (auto& s : *e.agent.mutable_slots()) {
      if (s.allocation_id() == allocation_id) s.clear_allocation_id();
    }
  }
}

absl::StatusOr<v1::Agent> AgentManager::SetEnabled(const std::string& agent_id, bool enabled,
                                                   bool drain) {
  auto it = agents_.find(agent_id);
  if (it == agents_.end()) return absl::NotFoundError(absl::StrCat("agent ", agent_id, " not found"));
  v1::Agent updated = it->second.agent;
  updated.set_enabled(enabled);
  updated.set_draining(!enabled && drain);
  absl::Status st = store_.UpsertAgent(updated);
  if (!st.ok()) return st;
  it->second.agent = updated;
  Logger("agents")->info("agent {} {}", agent_id,
                         enabled ? "enabled" : (drain ? "disabled (draining)" : "disabled"));
  return updated;
}

absl::StatusOr<v1::Agent> AgentManager::SetSlotEnabled(const std::string& agent_id,
                                                       const std::string& slot_id,
                                                       bool enabled) {
  auto it = agents_.find(agent_id);
  if (it == agents_.end()) return absl::NotFoundError(absl::StrCat("agent ", agent_id, " not found"));
  v1::Agent updated = it->second.agent;
  v1::Slot* slot = nullptr;
  std::string ids;
  for (v1::Slot& s : *updated.mutable_slots()) {
    absl::StrAppend(&ids, ids.empty() ? "" : ", ", s.id());
    if (s.id() == slot_id) slot = &s;
  }
  if (slot == nullptr) {
    return absl::NotFoundError(absl::StrCat("agent ", agent_id, " has no slot '", slot_id,
                                            "' (its slots: ", ids.empty() ? "none" : ids, ")"));
  }
  slot->set_enabled(enabled);
  absl::Status st = store_.UpsertAgent(updated);
  if (!st.ok()) return st;
  it->second.agent = updated;
  Logger("agents")->info("slot {} of agent {} {}", slot_id, agent_id,
                         enabled ? "enabled" : "disabled");
  return updated;
}

const v1::Agent* AgentManager::Find(const std::string& agent_id) const {
  auto it = agents_.find(agent_id);
  return it == agents_.end() ? nullptr : &it->second.agent;
}

std::vector<v1::Agent> AgentManager::List() const {
  std::vector<v1::Agent> out;
  for (const auto& [id, e] : agents_) out.push_back(e.agent);
  return out;
}

void AgentManager::SetExternalNodes(std::vector<v1::Agent> nodes,
                                    std::function<bool(const std::string&)> hidden) {
  external_nodes_ = std::move(nodes);
  hidden_ = std::move(hidden);
}

std::vector<v1::Agent> AgentManager::Listed() const {
  std::vector<v1::Agent> out;
  for (const auto& [id, e] : agents_) {
    if (!hidden_ || !hidden_(id)) out.push_back(e.agent);
  }
  out.insert(out.end(), external_nodes_.begin(), external_nodes_.end());
  return out;
}

std::vector<scheduler::AgentView> AgentManager::SchedulerView() const {
  std::vector<scheduler::AgentView> out;
  for (const auto& [id, e] : agents_) {
    if (!e.agent.connected()) continue;
    scheduler::AgentView v;
    v.id = id;
    v.pool = e.agent.resource_pool();
    v.enabled = e.agent.enabled();
    v.num_slots = e.agent.slots_size();
    for (const auto& s : e.agent.slots()) {
      if (s.enabled() && s.allocation_id().empty()) v.free_slots.push_back(s.id());
    }
    out.push_back(std::move(v));
  }
  return out;
}

void AgentManager::FailPolls(const absl::Status& status) {
  for (auto& [id, e] : agents_) {
    if (!e.waiter) continue;
    loop_.Cancel(e.waiter_timer);
    std::exchange(e.waiter, nullptr)(status, {});
  }
}

}  // namespace det::master

namespace det::master {

absl::StatusOr<AgentManager::ChiefEndpoint> AgentManager::Chief(const std::string& agent_id) const {
  auto it = agents_.find(agent_id);
  if (it == agents_.end() || it->second.session_id.empty()) {
    return absl::NotFoundError(
        absl::StrCat("agent ", agent_id, " has not registered since the master started"));
  }
  return it->second.chief;
}

}  // namespace det::master
