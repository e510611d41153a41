// det-master: flags -> config -> server.
#include <pthread.h>

#include <csignal>
#include <cstring>
#include <iostream>
#include <string>

#include "common/config/daemon_config.h"
#include "common/logging/logging.h"
#include "master/server/master.h"

int main(int argc, char** argv) {
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
