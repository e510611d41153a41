// det-master: flags -> config -> server.
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "common/config/daemon_config.h"
#include "common/logging/logging.h"
#include "master/server/master.h"
#include "master/store/migrate_db.h"
#include "master/store/postgres_store.h"

namespace {

// The data directory and the database hold password hashes, tokens, every model context
// and log line: the master's user alone may read them. New files get that from the umask;
// what an older version left (0755, 0644) is tightened here.
void KeepDataPrivate(const det::config::MasterConfig& config) {
  umask(077);
  auto tighten = [](const std::string& path, mode_t mode) {
    struct stat st;
    if (path.empty() || stat(path.c_str(), &st) != 0 || (st.st_mode & 07777) == mode) return;
    if (chmod(path.c_str(), mode) != 0) {
      det::Logger("master")->warn("cannot make {} mode {:o}: {}", path, mode, strerror(errno));
    }
  };
  tighten(config.data_dir, 0700);
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    tighten(config.db_path + suffix, 0600);
  }
}

}  // namespace

// DET_ADMIN_PASSWORD is read once (the config holds it, for creating the admin at the first
// start); afterwards no other process of the machine's users may find it in
// /proc/<pid>/environ, which shows the bytes of the environment the process started with:
// they are overwritten there, not only unset.
static void ScrubAdminPassword() {
  constexpr char kName[] = "DET_ADMIN_PASSWORD";
  char* value = std::getenv(kName);
  if (value == nullptr) return;
  unsetenv(kName);  // Out of environ first: children never see an emptied entry.
  // The entry is "NAME=VALUE", contiguous: clear all of it.
  volatile char* p = value - (sizeof(kName) - 1) - 1;
  while (*p != '\0') *p++ = '\0';
}

// det-master migrate-db --from sqlite:PATH --to postgres:URL
//     [--password-file FILE | --password-env VAR]
// Copies an SQLite database's history into an empty PostgreSQL database (the password, as
// in master.yaml, never on the command line).
static int MigrateDb(int argc, char** argv) {
  std::string from, to, password_file, password_env;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    std::string* out = arg == "--from"            ? &from
                       : arg == "--to"            ? &to
                       : arg == "--password-file" ? &password_file
                       : arg == "--password-env"  ? &password_env
                                                  : nullptr;
    if (out == nullptr || i + 1 >= argc) {
      std::cerr << "usage: det-master migrate-db --from sqlite:PATH --to postgres:URL "
                   "[--password-file FILE | --password-env VAR]\n";
      return 2;
    }
    *out = argv[++i];
  }
  if (from.rfind("sqlite:", 0) != 0 || to.rfind("postgres:", 0) != 0) {
    std::cerr << "det-master migrate-db: expected --from sqlite:PATH --to postgres:URL\n";
    return 2;
  }
  absl::StatusOr<std::string> password = det::master::ReadDatabasePassword(
      password_env, "--password-env", password_file, "--password-file");
  if (!password.ok()) {
    std::cerr << "det-master migrate-db: " << password.status().message() << "\n";
    return 2;
  }
  auto copied = det::master::CopySqliteToPostgres(from.substr(7), to.substr(9), *password);
  if (!copied.ok()) {
    std::cerr << "det-master migrate-db: " << copied.status().message() << "\n";
    return 1;
  }
  std::cout << "copied " << *copied << " rows from " << from.substr(7) << "\n";
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "migrate-db") return MigrateDb(argc, argv);
  std::string config_path;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--config" && i + 1 < argc) {
      config_path = argv[++i];
    } else if (arg.rfind("--config=", 0) == 0) {
      config_path = arg.substr(9);
    } else if (arg == "--version") {
      std::cout << "det-master " << det::master::kVersion << "\n";
      return 0;
    } else {
      std::cerr << "usage: det-master --config MASTER_YAML\n";
      return 2;
    }
  }
  det::config::MasterConfig config;
  if (!config_path.empty()) {
    auto loaded = det::config::LoadMasterConfig(config_path);
    if (!loaded.ok()) {
      std::cerr << "det-master: " << loaded.status().message() << "\n";
      return 2;
    }
    config = *loaded;
  }
  if (auto st = det::InitLogging(config.log_level); !st.ok()) {
    std::cerr << "det-master: " << st.message() << "\n";
    return 2;
  }
  ScrubAdminPassword();
  KeepDataPrivate(config);
  // Block the stop signals in every thread (threads inherit the mask); main waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  det::RealClock clock;
  auto master = det::master::Master::Start(config, clock);
  if (!master.ok()) {
    std::cerr << "det-master: " << master.status().message() << "\n";
    return 1;
  }
  int sig = 0;
  sigwait(&stop_signals, &sig);
  (*master)->Shutdown();
  return 0;
}
