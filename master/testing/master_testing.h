// Helpers for tests that drive a master through its handler interfaces (the test plays
// agents and workers): a blocking call of a handler method, a registration request, and
// an experiment config that needs no files.
#ifndef DET_MASTER_TESTING_MASTER_TESTING_H_
#define DET_MASTER_TESTING_MASTER_TESTING_H_

#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/config/daemon_config.h"
#include "master/api/handlers.h"
#include "proto/agent.pb.h"

namespace det::master::testing {

// A handler call whose Done has not come yet.
struct Pending {
  absl::Notification done;
  absl::Status status;
  Done Callback() {
    return [this](absl::Status st) {
      status = st;
      done.Notify();
    };
  }
  // Waits (real time, bounded) for the answer; false if it did not come.
  bool Wait(absl::Duration d = absl::Seconds(30)) {
    return done.WaitForNotificationWithTimeout(d);
  }
};

// Calls a handler method and waits (at most 2 minutes) for its Done.
template <typename H, typename Req, typename Resp>
absl::Status Sync(H* handler, void (H::*method)(const Req&, Resp*, Done), const Req& req,
                  Resp* resp) {
  Pending p;
  (handler->*method)(req, resp, p.Callback());
  if (!p.Wait(absl::Minutes(2))) return absl::DeadlineExceededError("no answer within 2 minutes");
  return p.status;
}

// An empty directory for the running test: TEST_TMPDIR/<prefix><test name>.
std::string FreshTestDir(const std::string& prefix);

// A master config on `dir` (det.db inside), gRPC on 127.0.0.1 port 0, cluster secret
// "secret", one resource pool "default" without preemption.
config::MasterConfig LoopbackMasterConfig(const std::string& dir);

// A single-searcher experiment of `slots` slots per trial, checkpoints under /ckpt.
std::string ExperimentYaml(const std::string& name, int slots = 1, int max_restarts = 5);

// Registration of agent `id` (hostname "host-<id>", pool "default", secret "secret")
// with `slots` enabled cpu slots, still running `running`.
v1::RegisterRequest RegisterRequest(const std::string& id, int slots,
                                    const std::vector<std::string>& running = {});

}  // namespace det::master::testing

#endif  // DET_MASTER_TESTING_MASTER_TESTING_H_
