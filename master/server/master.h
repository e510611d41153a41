// The master daemon's composition root (the shape of Ray's GCS server): it owns the store,
// the event loop and the managers in dependency order, rebuilds their state from the store
// on start, and serves the master service (master/api/master_service.h) over gRPC and,
// with http_listen, REST. It does nothing else: every concern lives in a manager
// (docs/architecture.md names them).
#ifndef DET_MASTER_SERVER_MASTER_H_
#define DET_MASTER_SERVER_MASTER_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock/clock.h"
#include "common/config/daemon_config.h"
#include "common/event_loop/event_loop.h"
#include "master/api/master_service.h"
#include "master/auth/user_service.h"
#include "master/loop/turns.h"
#include "master/server/managers.h"
#include "master/store/store.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace det::master {

class HttpServer;

class Master {
 public:
  // Creates the data directory, opens and migrates the database, rebuilds state from it,
  // and serves gRPC on config.grpc_listen. `clock` must outlive the master.
  static absl::StatusOr<std::unique_ptr<Master>> Start(const config::MasterConfig& config,
                                                       Clock& clock);
  // The same on `store` (already open and migrated): rebuilds state from it and serves.
  static absl::StatusOr<std::unique_ptr<Master>> Create(const config::MasterConfig& config,
                                                        Clock& clock,
                                                        std::unique_ptr<Store> store);
  ~Master();

  // host:port the gRPC server is bound to.
  const std::string& address() const { return address_; }
  // host:port of the HTTP server (REST API, web page), or "" without http_listen.
  const std::string& http_address() const { return http_address_; }
  // The master's services, as the gRPC and REST adapters call them (in-process tests too).
  MasterService& service() { return service_; }
  // Stops serving: answers pending long polls, shuts the server and the loop down.
  void Shutdown();

 private:
  Master(const config::MasterConfig& config, Clock& clock, std::unique_ptr<Store> store);
  // Rebuilds every manager's state from the store (on the loop).
  absl::Status Restore();
  absl::Status Serve();
  // The trimmer thread's body until Shutdown: every kMemoryTrimPeriod, malloc_trim when
  // the resident memory stayed kMemoryTrimGrowthBytes over what it was after the last
  // trim (see master.cc). Off the loop: a trim can take tens of ms.
  void TrimMemoryUntilStopped();

  // In dependency order: each member uses only those declared before it.
  const config::MasterConfig config_;
  Clock& clock_;
  std::unique_ptr<Store> store_;
  EventLoop loop_;
  Turns turns_;
  // Built and wired as the manager test harness builds them (master/server/managers.h).
  Managers managers_;
  // Users and sessions; every user API call (gRPC and REST) but Login is checked by it.
  UserService users_;
  ModelContexts contexts_;
  MasterService service_;

  absl::Mutex trim_mu_;
  bool trim_stop_ ABSL_GUARDED_BY(trim_mu_) = false;
  std::thread trimmer_;
  std::string cluster_id_;
  std::string address_;
  std::vector<std::unique_ptr<grpc::Service>> services_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpServer> http_;
  std::string http_address_;
};

}  // namespace det::master

#endif  // DET_MASTER_SERVER_MASTER_H_
