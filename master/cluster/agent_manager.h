// The agents of the cluster: membership (register, sessions, heartbeats, liveness), their
// slots and which allocation uses each, and the queue of commands each agent long-polls.
#ifndef DET_MASTER_CLUSTER_AGENT_MANAGER_H_
#define DET_MASTER_CLUSTER_AGENT_MANAGER_H_

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock/clock.h"
#include "common/event_loop/event_loop.h"
#include "master/scheduler/scheduler.h"
#include "master/store/store.h"
#include "proto/agent.pb.h"

namespace det::master {

// The chief port range of an agent that registers none (chief_port_first = _last = 0).
inline constexpr int kDefaultChiefPortFirst = 29500;
inline constexpr int kDefaultChiefPortLast = 29999;

// Loop-thread only: every method must be called on `loop`.
class AgentManager {
 public:
  struct Options {
    // Empty: any agent may join.
    std::string cluster_secret;
    absl::Duration agent_timeout = absl::Seconds(30);
    absl::Duration heartbeat_interval = absl::Seconds(5);
  };
  using PollDone = std::function<void(absl::Status, std::vector<v1::AgentCommand>)>;

  AgentManager(Clock& clock, EventLoop& loop, Store& store, Options options);

  // Agents known from the store; all start disconnected. `credential_hashes`: each
  // enrolled agent's credential hash (StoreSnapshot::agent_credential_hashes).
  void Restore(const std::vector<v1::Agent>& agents,
               const std::map<std::string, std::string>& credential_hashes);

  struct Admission {
    std::string session_id;
    // The agent's credential, presented (RegisterRequest.agent_credential) at every later
    // registration of its id.
    std::string credential;
    // True when this registration enrolled the id (gave it its credential) rather than
    // proving it with the id's credential: nothing of what the id ran before may be
    // handed to it (its running allocations are not reattached).
    bool enrolled = false;
  };
  // Admits (or re-admits) an agent: a new session id. Slot usage recorded for the agent is
  // kept. Unauthenticated without the right secret. `peer` (the caller's address, as gRPC
  // names it) is only logged.
  //
  // Agent credentials: the first registration of an id, and the first after an admin's
  // ResetCredential, enrolls it: its credential is the one the request proposes (32 bytes,
  // lowercase hex: an agent makes and keeps one before it first registers), else a new
  // random one; its SHA-256 is stored with the agent before the answer (a store error
  // refuses the registration). Every later registration of the id must present it,
  // whether the agent is connected or not and across master restarts: without it, or
  // with another, the registration is refused, ALREADY_EXISTS while the agent is
  // connected, PERMISSION_DENIED otherwise, each naming the id, and the attempt is logged
  // with `peer` and the hostname it gave. Agents stored by a master that kept no
  // credentials enroll at their next registration.
  absl::StatusOr<Admission> Register(const v1::RegisterRequest& request,
                                     const std::string& peer = "");
  // An admin's re-enrolment of `agent_id` (whose agent lost its credential): forgets the
  // credential (in the store first), so that the id's next registration enrolls it.
  // InvalidArgument for an empty id, NotFound for an unknown agent; FailedPrecondition
  // while it is connected (a live agent's id is not handed to whoever registers next).
  // `by` (the admin) is logged.
  absl::Status ResetCredential(const std::string& agent_id, const std::string& by);
  // Unauthenticated unless `request` carries the cluster secret (when one is set): checked
  // first, before anything of the request is looked at or answered.
  absl::Status CheckClusterSecret(const v1::RegisterRequest& request) const;
  // OK when `session_id` is the agent's current session (and notes it alive); NotFound
  // otherwise, telling the agent to register again.
  absl::Status Touch(const std::string& agent_id, const std::string& session_id);
  // Answers with queued commands at once, or waits up to `wait` for some.
  void Poll(const std::string& agent_id, const std::string& session_id, absl::Duration wait,
            PollDone done);
  // Queues a command for a connected agent; false if the agent is not connected.
  bool Send(const std::string& agent_id, v1::AgentCommand command);

  // Agents silent for longer than agent_timeout become disconnected; returns their ids.
  std::vector<std::string> ExpireSilent();

  // Records that `slots` of `agent_id` are used by `allocation_id` ("" frees them).
  void SetSlotsUsed(const std::string& agent_id, const std::vector<std::string>& slots,
                    const std::string& allocation_id);
  // Frees every slot used by `allocation_id`.
  void ReleaseSlots(const std::string& allocation_id);

  // Enables or disables an agent (persisted); `drain` marks a disabled one draining
  // (enabling clears it). NotFound for an unknown agent.
  absl::StatusOr<v1::Agent> SetEnabled(const std::string& agent_id, bool enabled,
                                       bool drain = false);
  // Enables or disables one slot of an agent (persisted; kept when the agent registers
  // again). NotFound naming the agent or the slot (and the slots it has).
  absl::StatusOr<v1::Agent> SetSlotEnabled(const std::string& agent_id,
                                           const std::string& slot_id, bool enabled);

  const v1::Agent* Find(const std::string& agent_id) const;
  // Where allocations whose rank 0 runs on `agent_id` meet (torchrun's MASTER_ADDR) and
  // the ports it lends them, as it registered them (the defaults when it gave none).
  // NotFound for an agent that has not registered since the master started.
  struct ChiefEndpoint {
    std::string address;  // advertise_address, else the hostname
    int port_first = 0;
    int port_last = 0;
  };
  absl::StatusOr<ChiefEndpoint> Chief(const std::string& agent_id) const;
  std::vector<v1::Agent> List() const;
  // The nodes of an external resource manager (Slurm's, from sinfo; Agent.external_state
  // set), shown by Listed() in place of the agents `hidden` names (that manager's
  // in-process agents). Only listed: the scheduler and List() never see them.
  void SetExternalNodes(std::vector<v1::Agent> nodes,
                        std::function<bool(const std::string&)> hidden);
  // What `det agent list` and `det slot list` show: List() less the hidden agents, then the
  // external nodes.
  std::vector<v1::Agent> Listed() const;
  // Connected agents, for the scheduler.
  std::vector<scheduler::AgentView> SchedulerView() const;

  // Ends every pending poll with `status` (shutdown).
  void FailPolls(const absl::Status& status);

 private:
  struct Entry {
    v1::Agent agent;
    ChiefEndpoint chief;
    std::string session_id;
    // SHA-256 (hex) of the agent's credential; empty: not enrolled (its next registration
    // enrolls it).
    std::string credential_hash;
    absl::Time last_seen;
    std::deque<v1::AgentCommand> queued;
    PollDone waiter;
    EventLoop::TimerId waiter_timer = 0;
  };
  void Deliver(Entry& e);
  void Persist(const v1::Agent& agent);

  Clock& clock_;
  EventLoop& loop_;
  Store& store_;
  Options options_;
  std::map<std::string, Entry> agents_;
  std::vector<v1::Agent> external_nodes_;
  std::function<bool(const std::string&)> hidden_;
};

}  // namespace det::master

#endif  // DET_MASTER_CLUSTER_AGENT_MANAGER_H_
