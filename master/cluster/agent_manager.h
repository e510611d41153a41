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

  // Agents known from the store; all start disconnected.
  void Restore(const std::vector<v1::Agent>& agents);

  struct Admission {
    std::string session_id;
    // The agent's credential: issued at its first registration with this master process,
    // presented by the agent (RegisterRequest.agent_credential) at every later one.
    std::string credential;
  };
  // Admits (or re-admits) an agent: a new session id. Slot usage recorded for the agent is
  // kept. Unauthenticated without the right secret. While an agent is connected, a
  // registration under its id without its credential is refused (ALREADY_EXISTS naming the
  // id): no one else with the cluster secret can take over a live agent. A disconnected
  // agent (silent for agent_timeout) may come back without it (e.g. restarted with a fresh
  // work_dir) and is issued a new one. Credentials live in this process only (agent
  // records in the store carry none): after a master restart the first registration of an
  // id is issued a new one.
  absl::StatusOr<Admission> Register(const v1::RegisterRequest& request);
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

  // Enables or disables an agent (persisted). NotFound for an unknown agent.
  absl::StatusOr<v1::Agent> SetEnabled(const std::string& agent_id, bool enabled);

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
  // Connected agents, for the scheduler.
  std::vector<scheduler::AgentView> SchedulerView() const;

  // Ends every pending poll with `status` (shutdown).
  void FailPolls(const absl::Status& status);

 private:
  struct Entry {
    v1::Agent agent;
    ChiefEndpoint chief;
    std::string session_id;
    std::string credential;  // Empty until the agent registers with this process.
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
};

}  // namespace det::master

#endif  // DET_MASTER_CLUSTER_AGENT_MANAGER_H_
