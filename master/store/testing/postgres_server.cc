#include "master/store/testing/postgres_server.h"

#include <fcntl.h>
#include <grp.h>
#include <postgresql/libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace det::master::testing {
namespace {

// Starts argv[0] with `argv` as `uid`/`gid` (unless already so), stdout and stderr
// appended to `log`, a minimal environment. The child gets SIGINT (PostgreSQL's fast
// shutdown) if the thread that started it dies. Returns the child's pid.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& args, uid_t uid, gid_t gid,
                            const std::string& log) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  char env_locale[] = "LC_ALL=C";
  char env_path[] = "PATH=/usr/bin:/bin";
  char* envp[] = {env_locale, env_path, nullptr};
  const bool switch_user = getuid() != uid;
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    // Only async-signal-safe calls until execve.
    if (switch_user && (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0)) {
      _exit(126);
    }
    prctl(PR_SET_PDEATHSIG, SIGINT);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    execve(argv[0], argv.data(), envp);
    _exit(127);
  }
  return pid;
}

// Waits for `pid` to exit; its exit status, or -1 for a signal.
int WaitExit(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ReadTail(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string all = ss.str();
  return all.size() > 2000 ? all.substr(all.size() - 2000) : all;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostgresServer>> PostgresServer::Start(const std::string& bin_dir) {
  for (const char* tool : {"initdb", "postgres"}) {
    std::string path = absl::StrCat(bin_dir, "/", tool);
    if (access(path.c_str(), X_OK) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " is not installed (Debian: apt-get install postgresql-15)"));
    }
  }
  uid_t uid = getuid();
  gid_t gid = getgid();
  if (uid == 0) {
    // PostgreSQL will not run as root.
    struct passwd* nobody = getpwnam("nobody");
    if (nobody == nullptr) {
      return absl::FailedPreconditionError("running as root, and no user 'nobody' to run postgres as");
    }
    uid = nobody->pw_uid;
    gid = nobody->pw_gid;
  }
  // Under /tmp, not TEST_TMPDIR: the server's user must reach it, and a unix socket's path
  // is limited to 107 bytes.
  char dir_template[] = "/tmp/det-pg-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp: ", strerror(errno)));
  }
  std::unique_ptr<PostgresServer> server(new PostgresServer(bin_dir, dir_template, uid, gid));
  if (chown(dir_template, uid, gid) != 0) {
    return absl::InternalError(absl::StrCat("chown ", dir_template, ": ", strerror(errno)));
  }
  auto initdb = Spawn({absl::StrCat(bin_dir, "/initdb"), "-D", server->dir_ + "/data", "-U", "det",
                       "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"},
                      uid, gid, server->dir_ + "/initdb.log");
  if (!initdb.ok()) return initdb.status();
  if (int rc = WaitExit(*initdb); rc != 0) {
    return absl::InternalError(absl::StrCat("initdb exited with ", rc, ":\n",
                                            ReadTail(server->dir_ + "/initdb.log")));
  }
  if (absl::Status st = server->Launch(); !st.ok()) return st;
  return server;
}

PostgresServer::~PostgresServer() {
  (void)Stop();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

absl::Status PostgresServer::Launch() {
  auto pid = Spawn({absl::StrCat(bin_dir_, "/postgres"), "-D", dir_ + "/data", "-k", dir_, "-c",
                    "listen_addresses=", "-c", "fsync=off", "-c", "max_connections=40", "-c",
                    "shared_buffers=16MB"},
                   uid_, gid_, dir_ + "/postgres.log");
  if (!pid.ok()) return pid.status();
  pid_ = *pid;
  return WaitReady();
}

absl::Status PostgresServer::WaitReady() {
  const std::string conninfo = absl::StrCat("host=", dir_, " user=det dbname=postgres");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (true) {
    if (PQping(conninfo.c_str()) == PQPING_OK) return absl::OkStatus();
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::InternalError(absl::StrCat("postgres exited before accepting connections:\n",
                                              LogTail()));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("postgres did not accept connections within 30 s:\n", LogTail()));
    }
    // Polling the condition (the socket answers) at a short interval.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string PostgresServer::LogTail() const { return ReadTail(dir_ + "/postgres.log"); }

absl::Status PostgresServer::Stop() {
  if (pid_ <= 0) return absl::OkStatus();
  kill(pid_, SIGINT);
  int rc = WaitExit(pid_);
  pid_ = -1;
  if (rc != 0) return absl::InternalError(absl::StrCat("postgres exited with ", rc));
  return absl::OkStatus();
}

absl::Status PostgresServer::Restart() {
  if (pid_ > 0) return absl::FailedPreconditionError("postgres is running");
  return Launch();
}

std::string PostgresServer::Url(const std::string& name) const {
  return absl::StrCat("postgresql:///", name, "?host=", dir_, "&user=det");
}

absl::StatusOr<std::string> PostgresServer::CreateDatabase(const std::string& name) {
  for (char c : name) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_')) {
      return absl::InvalidArgumentError(absl::StrCat("database name '", name, "': use [a-z0-9_]"));
    }
  }
  const std::string conninfo = absl::StrCat("host=", dir_, " user=det dbname=postgres");
  PGconn* conn = PQconnectdb(conninfo.c_str());
  absl::Status st;
  if (PQstatus(conn) != CONNECTION_OK) {
    st = absl::UnavailableError(absl::StrCat("connect: ", PQerrorMessage(conn)));
  } else {
    PGresult* res = PQexec(conn, absl::StrCat("CREATE DATABASE ", name).c_str());
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
      st = absl::InternalError(absl::StrCat("CREATE DATABASE ", name, ": ", PQerrorMessage(conn)));
    }
    PQclear(res);
  }
  PQfinish(conn);
  if (!st.ok()) return st;
  return Url(name);
}

}  // namespace det::master::testing
