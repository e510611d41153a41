#include "cli/private_postgres.h"

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <system_error>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status/status_macros.h"
#include "deploy/local/local_cluster.h"

namespace det::cli {
namespace {

namespace fs = std::filesystem;

// The OS user the server runs as when cluster-up is root (Debian's postgresql-15 makes it).
constexpr char kServerUser[] = "postgres";
// The database superuser and the database the master uses.
constexpr char kRole[] = "det";
constexpr char kDatabase[] = "det";
// The socket's port number (no TCP listener: it only names the socket file).
constexpr int kSocketPort = 5432;
constexpr absl::Duration kReadyTimeout = absl::Seconds(60);
constexpr absl::Duration kReadyPoll = absl::Milliseconds(50);
constexpr absl::Duration kToolTimeout = absl::Seconds(120);
constexpr int kLogTailLines = 20;

std::string ErrnoText() { return std::strerror(errno); }

std::string PgDir(const std::string& data_dir) { return data_dir + "/postgres"; }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

// The last lines of the file at `path`, for an error message.
std::string Tail(const std::string& path) {
  std::istringstream in(ReadAll(path));
  std::deque<std::string> last;
  for (std::string line; std::getline(in, line);) {
    last.push_back(std::move(line));
    if (static_cast<int>(last.size()) > kLogTailLines) last.pop_front();
  }
  std::string text = absl::StrCat("--- last lines of ", path, " ---\n");
  for (const std::string& line : last) absl::StrAppend(&text, line, "\n");
  return text + "---";
}

// Writes `password` to a new file `path`, mode 0600, owned by `owner` when set.
absl::Status WritePasswordFile(const std::string& path, const std::string& password,
                               const std::optional<RunAs>& owner) {
  ::unlink(path.c_str());
  const std::string text = password + "\n";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  bool ok = fd >= 0 && (!owner || ::fchown(fd, owner->uid, owner->gid) == 0) &&
            ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const std::string error = ErrnoText();
  if (fd >= 0 && ::close(fd) != 0) ok = false;
  if (!ok) return absl::InternalError(absl::StrCat("cannot write '", path, "': ", error));
  return absl::OkStatus();
}

// A value of postgresql.conf: single-quoted, quotes doubled, backslashes escaped.
std::string ConfString(const std::string& s) {
  std::string quoted = "'";
  for (char c : s) {
    if (c == '\'') quoted += "''";
    else if (c == '\\') quoted += "\\\\";
    else quoted += c;
  }
  return quoted + "'";
}

// `s` percent-encoded for a libpq URI's query value ('/' kept).
std::string UriEncode(const std::string& s) {
  std::string encoded;
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
      encoded += static_cast<char>(c);
    } else {
      encoded += absl::StrFormat("%%%02X", c);
    }
  }
  return encoded;
}

// A YAML double-quoted scalar.
std::string YamlQuote(const std::string& s) {
  std::string quoted = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

bool ProcessRuns(int pid) {
  if (pid <= 0) return false;
  std::string stat = ReadAll(absl::StrCat("/proc/", pid, "/stat"));
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) {
    return ::kill(pid, 0) == 0 || errno == EPERM;
  }
  const char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
}

// The environment of PostgreSQL's programs: nothing of the caller's but the locale.
EnvironmentVariables ToolEnvironment(const EnvironmentVariables& extra = {}) {
  EnvironmentVariables env = {{"LC_ALL", "C"}, {"PATH", "/usr/bin:/bin"}};
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

SpawnOptions ToolOptions(std::vector<std::string> argv, const std::string& cwd,
                         const std::optional<RunAs>& run_as, const std::string& log,
                         const EnvironmentVariables& extra_env = {}) {
  SpawnOptions options;
  options.argv = std::move(argv);
  options.env = ToolEnvironment(extra_env);
  options.cwd = cwd;
  options.stdout_mode = SpawnOptions::Output::kFile;
  options.stderr_mode = SpawnOptions::Output::kFile;
  options.stdout_path = log;
  options.stderr_path = log;
  options.run_as = run_as;
  return options;
}

// Runs a PostgreSQL program to its end; an error naming it, with the tail of `log`, unless
// it exits 0.
absl::Status RunTool(const SpawnOptions& options, const std::string& log) {
  const std::string name = fs::path(options.argv.front()).filename().string();
  ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> tool, Subprocess::Spawn(options));
  absl::StatusOr<ExitStatus> exit = tool->WaitFor(kToolTimeout);
  if (!exit.ok()) {
    (void)tool->Terminate(absl::Seconds(5));
    return absl::DeadlineExceededError(absl::StrCat(
        name, " did not finish within ", absl::FormatDuration(kToolTimeout), "\n", Tail(log)));
  }
  if (!exit->ok()) {
    return absl::InternalError(absl::StrCat(name, " failed (", exit->ToString(), ")\n", Tail(log)));
  }
  return absl::OkStatus();
}

std::string Seconds(absl::Duration d) {
  return absl::StrFormat("%.1f s", absl::ToDoubleSeconds(d));
}

// The user the server runs as: `postgres` as root (never root, never the task user), else
// the caller (nullopt: no switch).
absl::StatusOr<std::optional<RunAs>> ServerUser(const PrivatePostgresOptions& options) {
  if (::geteuid() != 0) return std::optional<RunAs>();
  struct passwd* pw = ::getpwnam(kServerUser);
  if (pw == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--db postgres: no OS user '", kServerUser,
        "' to run PostgreSQL as (PostgreSQL refuses root; Debian's postgresql-15 package "
        "makes that user: `apt install postgresql-15`, or run deploy/setup.sh)"));
  }
  RunAs user{pw->pw_uid, pw->pw_gid};
  if (user.uid == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--db postgres: the OS user '", kServerUser, "' is root"));
  }
  if (options.task_user && options.task_user->uid == user.uid) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--db postgres: the task user is '", kServerUser,
        "', who would own the database; give cluster-up another --task-user"));
  }
  return std::optional<RunAs>(user);
}

// Waits until the server `server` (started on `pg_dir`) is ready: postmaster.pid names its
// pid and says "ready". An error with the log's tail if it exits or the time runs out.
absl::Status WaitReady(CliContext& ctx, Subprocess& server, const std::string& pg_dir,
                       const std::string& log) {
  const absl::Time deadline = ctx.now() + kReadyTimeout;
  while (true) {
    std::vector<std::string> lines =
        absl::StrSplit(ReadAll(pg_dir + "/postmaster.pid"), '\n');
    int pid = 0;
    if (lines.size() >= 8 && absl::SimpleAtoi(lines[0], &pid) && pid == server.pid() &&
        absl::StripAsciiWhitespace(lines[7]) == "ready") {
      return absl::OkStatus();
    }
    if (std::optional<ExitStatus> exit = server.TryWait()) {
      return absl::InternalError(absl::StrCat("PostgreSQL exited before it was ready (",
                                              exit->ToString(), ")\n", Tail(log)));
    }
    if (ctx.now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("PostgreSQL was not ready within ",
                                                      absl::FormatDuration(kReadyTimeout),
                                                      "\n", Tail(log)));
    }
    ctx.sleep(kReadyPoll);
  }
}

// initdb into `pg_dir` (made here, owned by `user`) with the superuser kRole and
// `password`, then the settings for a private unix socket.
absl::Status InitDb(const PrivatePostgresOptions& options, const std::optional<RunAs>& user,
                    const std::string& pg_dir, const std::string& password) {
  const std::string dir = options.data_dir;
  const std::string log = dir + "/logs/initdb.log";
  if (::mkdir(pg_dir.c_str(), 0700) != 0 ||
      (user && ::chown(pg_dir.c_str(), user->uid, user->gid) != 0)) {
    return absl::InternalError(absl::StrCat("cannot make '", pg_dir, "': ", ErrnoText()));
  }
  // initdb reads the password from a file its user can read; removed right after.
  const std::string pwfile = dir + "/.postgres-initdb-password";
  RETURN_IF_ERROR(WritePasswordFile(pwfile, password, user));
  absl::Status initdb = RunTool(
      ToolOptions({options.bin_dir + "/initdb", "-D", pg_dir, "-U", kRole,
                   "--pwfile=" + pwfile, "--auth-local=scram-sha-256",
                   "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C"},
                  pg_dir, user, log),
      log);
  ::unlink(pwfile.c_str());
  RETURN_IF_ERROR(initdb);
  // No TCP listener; the socket in the data directory, reachable by its owner only (and
  // root, the master when cluster-up is root).
  const std::string settings = absl::StrCat(
      "\n# Written by `det deploy local cluster-up --db postgres`: a unix socket in this\n"
      "# directory only, no TCP listener.\n",
      "listen_addresses = ''\n", "port = ", kSocketPort, "\n",
      "unix_socket_directories = ", ConfString(pg_dir), "\n",
      "unix_socket_permissions = 0700\n");
  std::ofstream conf(pg_dir + "/postgresql.conf", std::ios::app);
  conf << settings;
  conf.close();
  if (!conf) {
    return absl::InternalError(
        absl::StrCat("cannot append to '", pg_dir, "/postgresql.conf': ", ErrnoText()));
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<int> RunningPostgresPid(const std::string& data_dir) {
  const std::string text = ReadAll(PgDir(data_dir) + "/postmaster.pid");
  int pid = 0;
  if (!absl::SimpleAtoi(text.substr(0, text.find('\n')), &pid) || !ProcessRuns(pid)) {
    return std::nullopt;
  }
  // A stale file's pid reused by another program is not the server.
  const std::string cmdline = ReadAll(absl::StrCat("/proc/", pid, "/cmdline"));
  if (!cmdline.empty() && cmdline.find("postgres") == std::string::npos) return std::nullopt;
  return pid;
}

absl::StatusOr<PrivatePostgres> StartPrivatePostgres(CliContext& ctx,
                                                     const PrivatePostgresOptions& options) {
  for (const char* program : {"initdb", "postgres", "pg_ctl", "createdb"}) {
    const std::string path = absl::StrCat(options.bin_dir, "/", program);
    if (::access(path.c_str(), X_OK) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--db postgres: PostgreSQL 15 is not installed (no ", path,
          "); install it with `apt install postgresql-15` (deploy/setup.sh does)"));
    }
  }
  const std::string dir = options.data_dir;
  const std::string pg_dir = PgDir(dir);
  // PostgreSQL refuses a socket path longer than a unix socket address holds.
  const std::string socket = absl::StrCat(pg_dir, "/.s.PGSQL.", kSocketPort);
  if (socket.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data-dir '", dir, "' is too long for --db postgres: the database's unix socket ",
        socket, " would be ", socket.size(), " bytes, and at most ",
        sizeof(sockaddr_un{}.sun_path) - 1, " fit; choose a shorter --data-dir"));
  }
  if (dir.find(',') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data-dir '", dir, "' holds a ',', which PostgreSQL's unix_socket_directories "
        "cannot take; choose another --data-dir"));
  }
  ASSIGN_OR_RETURN(const std::optional<RunAs> user, ServerUser(options));
  const std::string user_name =
      user ? std::string(kServerUser) : absl::StrCat("uid ", ::geteuid());

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!ec) fs::create_directories(dir + "/logs", ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create '", dir, "': ", ec.message()));
  // As cluster-up makes them: others search D only; the logs are private.
  if (::chmod(dir.c_str(), 0711) != 0 || ::chmod((dir + "/logs").c_str(), 0700) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot set the mode of '", dir, "': ", ErrnoText()));
  }
  if (user && options.can_reach) {
    if (absl::Status st = options.can_reach(dir, user); !st.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--db postgres: PostgreSQL runs as the OS user ", kServerUser, ", and ", st.message(),
          "; give a --data-dir under directories every user may search (e.g. "
          "/var/lib/det-local rather than under /root)"));
    }
  }

  PrivatePostgres pg;
  pg.dir = pg_dir;
  pg.password_file = dir + "/db_password";
  pg.url = absl::StrCat("postgresql:///", kDatabase, "?host=", UriEncode(pg_dir),
                        "&port=", kSocketPort, "&user=", kRole);
  if (std::optional<int> pid = RunningPostgresPid(dir)) {
    ctx.out << "PostgreSQL is already running in " << pg_dir << " (pid " << *pid
            << "); using it\n";
    return pg;
  }

  struct stat st;
  const bool exists = ::stat((pg_dir + "/PG_VERSION").c_str(), &st) == 0;
  if (exists) {
    struct stat dir_st {};
    const uid_t owner_wanted = user ? user->uid : ::geteuid();
    if (::stat(pg_dir.c_str(), &dir_st) != 0 || dir_st.st_uid != owner_wanted) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--db postgres: ", pg_dir, " belongs to uid ", dir_st.st_uid, ", not to ", user_name,
          " who runs PostgreSQL here"));
    }
    if (::access(pg.password_file.c_str(), F_OK) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--db postgres: ", pg_dir, " holds a database but its password file ",
          pg.password_file, " is gone; restore it, or remove ", pg_dir,
          " to start a new, empty database"));
    }
  } else if (fs::exists(pg_dir, ec)) {
    // What an interrupted first start left (no PG_VERSION: initdb did not finish).
    fs::remove_all(pg_dir, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("cannot remove the unfinished '", pg_dir,
                                              "': ", ec.message()));
    }
  }
  ASSIGN_OR_RETURN(const std::string password, deploy::ReadOrCreateSecret(pg.password_file));
  // Removes a database whose first start failed, so that the next call starts afresh.
  auto undo_create = [&] {
    std::error_code ignored;
    fs::remove_all(pg_dir, ignored);
  };

  if (!exists) {
    ctx.out << "Creating a PostgreSQL 15 database in " << pg_dir << " (initdb, as "
            << user_name << ") ..." << std::flush;
    const absl::Time start = ctx.now();
    if (absl::Status made = InitDb(options, user, pg_dir, password); !made.ok()) {
      ctx.out << " failed\n";
      undo_create();
      return made;
    }
    ctx.out << " done in " << Seconds(ctx.now() - start) << "\n";
    pg.created = true;
  }

  ctx.out << "Starting PostgreSQL 15 in " << pg_dir << " ..." << std::flush;
  const absl::Time start = ctx.now();
  const std::string log = dir + "/logs/postgres.log";
  SpawnOptions server_options =
      ToolOptions({options.bin_dir + "/postgres", "-D", pg_dir}, pg_dir, user, log);
  server_options.new_session = true;
  absl::StatusOr<std::unique_ptr<Subprocess>> server = Subprocess::Spawn(server_options);
  if (!server.ok()) {
    ctx.out << " failed\n";
    if (pg.created) undo_create();
    return server.status();
  }
  auto fail = [&](absl::Status error) {
    ctx.out << " failed\n";
    (void)(*server)->Terminate(absl::Seconds(10));
    if (pg.created) undo_create();
    return error;
  };
  if (absl::Status ready = WaitReady(ctx, **server, pg_dir, log); !ready.ok()) {
    return fail(ready);
  }
  if (pg.created) {
    absl::Status made = RunTool(
        ToolOptions({options.bin_dir + "/createdb", "-h", pg_dir, "-p", absl::StrCat(kSocketPort),
                     "-U", kRole, kDatabase},
                    pg_dir, std::nullopt, dir + "/logs/initdb.log",
                    {{"PGPASSWORD", password}}),
        dir + "/logs/initdb.log");
    if (!made.ok()) return fail(made);
  }
  (*server)->Detach();
  pg.started = true;
  ctx.out << " ready in " << Seconds(ctx.now() - start) << " (pid " << (*server)->pid()
          << ", log " << log << ")\n";
  return pg;
}

absl::Status StopPrivatePostgres(CliContext& ctx, const std::string& data_dir,
                                 const std::string& bin_dir) {
  const std::string pg_dir = PgDir(data_dir);
  std::optional<int> pid = RunningPostgresPid(data_dir);
  if (!pid) return absl::OkStatus();
  struct stat st;
  if (::stat(pg_dir.c_str(), &st) != 0) {
    return absl::InternalError(absl::StrCat("cannot stat '", pg_dir, "': ", ErrnoText()));
  }
  // pg_ctl, as PostgreSQL itself, refuses root: it runs as the data's owner.
  std::optional<RunAs> owner;
  if (::geteuid() == 0 && st.st_uid != 0) owner = RunAs{st.st_uid, st.st_gid};
  const std::string pg_ctl = bin_dir + "/pg_ctl";
  if (::access(pg_ctl.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "PostgreSQL runs in ", pg_dir, " (pid ", *pid, "), but there is no ", pg_ctl,
        " to stop it; stop it with SIGINT"));
  }
  const std::string log = data_dir + "/logs/postgres.log";
  ctx.out << "Stopping PostgreSQL in " << pg_dir << " (pid " << *pid << ") ..." << std::flush;
  const absl::Time start = ctx.now();
  absl::Status stopped = RunTool(
      ToolOptions({pg_ctl, "stop", "-D", pg_dir, "-m", "fast", "-w", "-t", "60"}, pg_dir, owner,
                  log),
      log);
  if (!stopped.ok()) {
    ctx.out << " failed\n";
    return stopped;
  }
  ctx.out << " stopped in " << Seconds(ctx.now() - start) << "\n";
  return absl::OkStatus();
}

std::string PostgresDbYaml(const PrivatePostgres& pg) {
  return absl::StrCat(
      "# The cluster's private PostgreSQL 15 in ", pg.dir,
      " (det deploy local cluster-up --db postgres).\n",
      "db:\n  type: postgres\n  url: ", YamlQuote(pg.url), "\n  password_file: ",
      YamlQuote(pg.password_file), "\n");
}

}  // namespace det::cli
