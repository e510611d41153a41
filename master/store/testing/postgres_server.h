// A private PostgreSQL server for tests: initdb into a fresh directory under /tmp, the
// server listening only on a unix socket in that directory, stopped and removed by the
// destructor. PostgreSQL refuses to run as root: run as root (as tests are here), the
// server runs as the unprivileged user `nobody`; otherwise as the calling user. Every
// process is started with fork/exec of an argument vector: no shell.
#ifndef DET_MASTER_STORE_TESTING_POSTGRES_SERVER_H_
#define DET_MASTER_STORE_TESTING_POSTGRES_SERVER_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace det::master::testing {

class PostgresServer {
 public:
  // Where Debian's postgresql-15 puts the server binaries.
  static constexpr const char* kDefaultBinDir = "/usr/lib/postgresql/15/bin";

  // Creates the cluster and starts the server; returns once it accepts connections
  // (deadline 30 s). FailedPrecondition naming what is missing when the binaries are not
  // installed.
  static absl::StatusOr<std::unique_ptr<PostgresServer>> Start(
      const std::string& bin_dir = kDefaultBinDir);
  // Stops the server (if running) and removes its directory.
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  // Creates database `name` (owned by the superuser "det") and returns its libpq URI.
  absl::StatusOr<std::string> CreateDatabase(const std::string& name);
  // The URI of database `name`, over the unix socket, as the superuser "det" (no password).
  std::string Url(const std::string& name) const;

  // Stops the server (fast shutdown: open connections are closed, committed data stays)
  // and waits for it to exit.
  absl::Status Stop();
  // Starts the stopped server again on the same data; returns once it accepts connections.
  absl::Status Restart();
  bool running() const { return pid_ > 0; }

  // The directory holding the data, the socket and the server's log (postgres.log).
  const std::string& dir() const { return dir_; }

 private:
  PostgresServer(std::string bin_dir, std::string dir, uid_t uid, gid_t gid)
      : bin_dir_(std::move(bin_dir)), dir_(std::move(dir)), uid_(uid), gid_(gid) {}
  absl::Status Launch();
  absl::Status WaitReady();
  std::string LogTail() const;

  const std::string bin_dir_;
  const std::string dir_;
  const uid_t uid_;
  const gid_t gid_;
  pid_t pid_ = -1;
};

}  // namespace det::master::testing

#endif  // DET_MASTER_STORE_TESTING_POSTGRES_SERVER_H_
