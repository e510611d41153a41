// det-agent: flags -> config -> agent.
#include <pthread.h>

#include <csignal>
#include <iostream>
#include <string>
#include <thread>

#include "agent/agent.h"
#include "agent/gpu/slots.h"
#include "agent/master_client/master_client.h"
#include "common/config/daemon_config.h"
#include "common/logging/logging.h"

int main(int argc, char** argv) {
  std::string config_path;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--config" && i + 1 < argc) {
      config_path = argv[++i];
    } else if (arg.rfind("--config=", 0) == 0) {
      config_path = arg.substr(9);
    } else {
      std::cerr << "usage: det-agent --config AGENT_YAML\n";
      return 2;
    }
  }
  if (config_path.empty()) {
    std::cerr << "det-agent: --config AGENT_YAML is required\n";
    return 2;
  }
  auto config = det::config::LoadAgentConfig(config_path);
  if (!config.ok()) {
    std::cerr << "det-agent: " << config.status().message() << "\n";
    return 2;
  }
  if (auto st = det::InitLogging(config->log_level); !st.ok()) {
    std::cerr << "det-agent: " << st.message() << "\n";
    return 2;
  }
  auto slots = det::agent::DiscoverSlots(config->slot_type, config->slots);
  if (!slots.ok()) {
    std::cerr << "det-agent: slot_type " << config->slot_type << ": " << slots.status().message()
              << "\n";
    return 2;
  }
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto client = det::agent::NewGrpcMasterClient(config->master);
  det::agent::Agent agent(*config, *client, *slots);
  std::thread signals([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    agent.Stop();
  });
  agent.Run();
  // Run() returns only after Stop(), which only the signal thread calls.
  signals.join();
  return 0;
}
