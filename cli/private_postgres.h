// A private PostgreSQL 15 server for one `det deploy local` cluster (`cluster-up --db
// postgres`), the way Determined's `det deploy local` started its database. Under the
// cluster's data directory D:
//   D/postgres/            the database cluster (initdb), owned by the server's OS user,
//                          mode 0700; its unix socket is there too (no TCP listener)
//   D/db_password          random hex, made once, mode 0600 (the caller's): the password
//                          of the database superuser "det" (scram-sha-256), read by the
//                          master through db.password_file
//   D/logs/postgres.log    the server's output, appended; D/logs/initdb.log, initdb's
// The server's OS user: as root, the user `postgres` (Debian's postgresql-15 makes it;
// PostgreSQL refuses to run as root, and neither the task user nor any trial can read the
// data); otherwise the caller. Every program is started by fork/exec of an argument
// vector: no shell.
#ifndef DET_CLI_PRIVATE_POSTGRES_H_
#define DET_CLI_PRIVATE_POSTGRES_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/cli_context.h"
#include "common/process/subprocess.h"

namespace det::cli {

// Where Debian's postgresql-15 puts the server programs.
inline constexpr char kPostgresBinDir[] = "/usr/lib/postgresql/15/bin";

struct PrivatePostgresOptions {
  // The cluster's data directory D: absolute (deploy::ResolveDataDir).
  std::string data_dir;
  // Where initdb, postgres, pg_ctl and createdb are.
  std::string bin_dir = kPostgresBinDir;
  // Trials' OS user (cluster-up's task user); the server must run as someone else.
  std::optional<RunAs> task_user;
  // Whether `user` can search every directory down to `path` (agent::CheckUserCanReach).
  // Unset: not checked.
  std::function<absl::Status(const std::string& path, const std::optional<RunAs>& user)>
      can_reach;
};

struct PrivatePostgres {
  std::string dir;            // D/postgres
  std::string url;            // libpq URI of database "det" over the unix socket, user "det"
  std::string password_file;  // D/db_password
  // Whether this call started the server (false: it was running already).
  bool started = false;
  // Whether this call created the database cluster (initdb).
  bool created = false;
};

// Starts D's server: the first time initdb (superuser "det", a generated password, UTF8, C
// locale), settings for a unix socket in D/postgres only, then the server, then `createdb
// det`; later, the server on the existing data (no initdb; nothing is lost). Returns once
// it is ready (deadline 60 s), the server running detached in a session of its own.
// Prints progress to ctx.out ("Starting PostgreSQL 15 in D/postgres ... ready in 1.2 s").
// A server already running in D/postgres is kept (started = false).
// FailedPrecondition when PostgreSQL 15 is not installed (naming the missing program and
// `apt install postgresql-15`), as root when there is no OS user `postgres` or it is the
// task user, when that user cannot reach D, or when D/postgres belongs to another user;
// InvalidArgument when the socket's path would be too long for a unix socket.
// A failed first start removes what it made, so that the next call starts afresh.
absl::StatusOr<PrivatePostgres> StartPrivatePostgres(CliContext& ctx,
                                                     const PrivatePostgresOptions& options);

// Stops D's server if it runs (`pg_ctl stop -m fast`, as the data's owner) and says so on
// ctx.out; OK when there is none. `data_dir` absolute.
absl::Status StopPrivatePostgres(CliContext& ctx, const std::string& data_dir,
                                 const std::string& bin_dir = kPostgresBinDir);

// The `db:` section of master.yaml for `pg`.
std::string PostgresDbYaml(const PrivatePostgres& pg);

// The pid of D's running server (from D/postgres/postmaster.pid), or nullopt.
std::optional<int> RunningPostgresPid(const std::string& data_dir);

}  // namespace det::cli

#endif  // DET_CLI_PRIVATE_POSTGRES_H_
