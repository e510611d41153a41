#include "agent/daemon.h"

#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/agent.h"
#include "agent/gpu/nvml.h"
#include "agent/gpu/slots.h"
#include "agent/master_client/master_client.h"
#include "agent/python/python_finder.h"
#include "agent/sysmetrics/system_sampler.h"
#include "common/config/daemon_config.h"
#include "common/logging/logging.h"
#include "common/rpc/rpc.h"

namespace det::agent {
namespace {

std::string SelfPath() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : "";
}

// --task-user into `options` (ignored, with a warning, unless the agent runs as root).
absl::Status UseTaskUser(const std::string& task_user, AgentOptions& options) {
  if (!task_user.empty()) {
    auto parsed = ParseTaskUser(task_user);
    if (!parsed.ok()) return parsed.status();
    if (parsed->first.uid == 0) {
      return absl::InvalidArgumentError("--task-user: uid 0 is root; name an unprivileged user");
    }
    if (geteuid() != 0) {
      Logger("agent")->warn(
          "--task-user {}: this agent is not root and cannot switch users; workers run as its "
          "own user (uid {}) and can read everything it can",
          task_user, geteuid());
    } else {
      options.task_user = parsed->first;
      options.task_user_name = parsed->second;
      Logger("agent")->info("workers run as uid {} gid {}", parsed->first.uid, parsed->first.gid);
    }
  } else if (geteuid() == 0) {
    Logger("agent")->warn(
        "workers run as root, like this agent: they can read its work_dir, secrets and every "
        "file on this machine; start det-agent with --task-user (e.g. nobody)");
  }
  return absl::OkStatus();
}

// The interpreter for Python entrypoints: agent.yaml's worker_python, else one found that
// can import torch (logged).
PythonChoice FindWorkerPython(const std::string& configured) {
  const char* path = getenv("PATH");
  const char* home = getenv("HOME");
  PythonChoice python =
      ChooseWorkerPython(configured, PythonCandidates(path ? path : "", home ? home : ""),
                         SubprocessTorchProbe(absl::Seconds(30)));
  if (python.has_torch()) {
    Logger("agent")->info("worker_python: {}", python.Describe());
  } else {
    Logger("agent")->warn(
        "worker_python: {}; PyTorch trials cannot run here unless their experiment sets "
        "environment.python (or set worker_python in agent.yaml)",
        python.Describe());
  }
  return python;
}

}  // namespace

int RunAgentDaemon(const AgentFlags& flags) {
  auto config = config::LoadAgentConfig(flags.config_path);
  if (!config.ok()) {
    std::cerr << "det-agent: " << config.status().message() << "\n";
    return 2;
  }
  if (auto st = InitLogging(config->log_level); !st.ok()) {
    std::cerr << "det-agent: " << st.message() << "\n";
    return 2;
  }
  // TLS to the master: the agent's channels and, through the inherited environment, its
  // workers' channels verify the master against this CA.
  if (!config->master_cert_file.empty()) {
    setenv(rpc::kMasterCertFileEnv, config->master_cert_file.c_str(), 1);
  }
  if (auto st = rpc::CheckMasterCertFile(); !st.ok()) {
    std::cerr << "det-agent: " << st.message() << "\n";
    return 2;
  }
  std::string self = SelfPath();
  if (self.empty()) {
    std::cerr << "det-agent: cannot find its own binary through /proc/self/exe\n";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<Nvml>> nvml =
      absl::NotFoundError("slot_type cpu: GPUs not looked for");
  if (config->slot_type != "cpu") nvml = LoadNvml();
  absl::StatusOr<Nvml*> nvml_view = nvml.ok() ? absl::StatusOr<Nvml*>(nvml->get()) : nvml.status();
  auto slots = DiscoverSlots(config->slot_type, config->slots, nvml_view);
  if (!slots.ok()) {
    std::cerr << "det-agent: slot_type " << config->slot_type << ": " << slots.status().message()
              << "\n";
    return 2;
  }
  bool gpus = !slots->empty() && (*slots)[0].type() == "cuda";
  if (gpus) {
    for (const auto& s : *slots) {
      Logger("agent")->info("slot {}: {} {} ({} MiB)", s.id(), s.device_name(), s.uuid(),
                            s.memory_bytes() >> 20);
    }
  } else {
    Logger("agent")->info("offering {} CPU slot(s){}", slots->size(),
                          nvml.ok() ? "" : absl::StrCat(" (", nvml.status().message(), ")"));
  }
  SystemSampler sampler("/proc", gpus ? nvml->get() : nullptr);

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto client = NewGrpcMasterClient(config->master);
  AgentOptions options;
  options.shim_path = self;
  options.system_metrics_period =
      flags.system_metrics_period.value_or(config->system_metrics_period);
  options.sampler = &sampler;
  if (absl::Status st = UseTaskUser(flags.task_user, options); !st.ok()) {
    std::cerr << "det-agent: " << st.message() << "\n";
    return 2;
  }
  options.python = FindWorkerPython(config->worker_python);
  Agent agent(*config, *client, *slots, options);
  std::thread signals([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (sig == SIGUSR1) {
      agent.Detach();
    } else {
      agent.Stop();
    }
  });
  absl::Status st = agent.Run();
  if (!st.ok()) {
    // Refused by the master; the signal thread still waits.
    std::cerr << "det-agent: the master refused this agent: " << st.message() << "\n";
    signals.detach();
    return 3;
  }
  signals.join();
  return 0;
}

}  // namespace det::agent
