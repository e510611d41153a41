// The agent's session with the master: its credential (kept in work_dir), registration,
// the session id the master issued, and the heartbeat that keeps it alive.
#ifndef DET_AGENT_SESSION_SESSION_H_
#define DET_AGENT_SESSION_SESSION_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/master_client/master_client.h"
#include "agent/python/python_finder.h"
#include "agent/sysmetrics/metrics_buffer.h"
#include "common/config/daemon_config.h"
#include "proto/agent.pb.h"

namespace det::agent {

// The credential file under work_dir/run (0700), mode 0600, so that no worker can read it
// and take the agent id over.
std::string CredentialPath(const std::string& work_dir);

// Thread-safe.
class Session {
 public:
  // `python`: the interpreter the agent found (reported to the master); unset: the
  // configured worker_python. `client` must outlive the session.
  Session(config::AgentConfig config, MasterClient& client, std::vector<v1::Slot> slots,
          std::optional<PythonChoice> python);

  // Reads the credential kept in work_dir; without one (not enrolled yet, or the file is
  // lost), makes one (32 random bytes, hex) and keeps it before it is ever sent, so that an
  // answer lost on the way does not leave the master holding one the agent never saw.
  void LoadCredential();

  // Registers with the master, naming `running_allocations`. On success the session is
  // current, and the result lists the allocations the master no longer runs (to kill).
  // Errors are the master's (a refusal: Unauthenticated, AlreadyExists, PermissionDenied;
  // logged).
  absl::StatusOr<std::vector<std::string>> Register(
      const std::vector<std::string>& running_allocations);

  // One heartbeat on session `session` carrying `metrics`' pending samples (acknowledged
  // in it when the master takes them). NotFound: the master does not know the session,
  // which is then dropped (register again). Failures are logged.
  absl::Status Heartbeat(const std::string& session, MetricsBuffer& metrics);

  // The current session; "" when there is none (register).
  std::string id();
  // Drops the session if it is still `stale_session`.
  void Lost(const std::string& stale_session);
  // The master's, once registered; else agent.yaml's.
  absl::Duration heartbeat_interval();

  // Where other agents reach this one, and the interface holding that address, as last
  // registered; either may be empty (unknown).
  struct Address {
    std::string advertise_address;
    std::string network_interface;
  };
  Address address();

 private:
  const config::AgentConfig config_;
  MasterClient& client_;
  const std::vector<v1::Slot> slots_;
  const std::optional<PythonChoice> python_;

  absl::Mutex mu_;
  std::string id_ ABSL_GUARDED_BY(mu_);
  std::string credential_ ABSL_GUARDED_BY(mu_);
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_);
  Address address_ ABSL_GUARDED_BY(mu_);
};

}  // namespace det::agent

#endif  // DET_AGENT_SESSION_SESSION_H_
