// det-agent: flags -> config -> agent. Also the worker shim (`det-agent --worker-shim`) and
// the checkpoint garbage-collection process (`det-agent --checkpoint-gc`).
#include <pthread.h>
#include <pwd.h>
#include <unistd.h>

#include <csignal>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/agent.h"
#include "agent/checkpoint_gc/checkpoint_gc.h"
#include "agent/gpu/nvml.h"
#include "agent/gpu/slots.h"
#include "agent/master_client/master_client.h"
#include "agent/python/python_finder.h"
#include "agent/supervisor/shim.h"
#include "agent/sysmetrics/system_sampler.h"
#include "common/config/daemon_config.h"
#include "common/logging/logging.h"
#include "common/rpc/rpc.h"

namespace {

constexpr char kUsage[] =
    "usage: det-agent --config AGENT_YAML [--system-metrics-period DURATION]\n"
    "                 [--task-user NAME|UID:GID]\n"
    "  --task-user              the unprivileged OS user every worker runs as (its work dir\n"
    "                           is its own, mode 0700); needs an agent running as root\n"
    "  --system-metrics-period  how often host metrics are sampled and sent (overrides\n"
    "                           agent.yaml's system_metrics_period, default 5s; 0 off)\n"
    "Signals: SIGTERM/SIGINT stop the workers and exit; SIGUSR1 exits leaving the workers\n"
    "running for the next det-agent on the same work_dir (upgrades).\n";

std::string SelfPath() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : "";
}

// "NAME" (a passwd entry: its uid and primary group) or "UID:GID".
absl::StatusOr<std::pair<det::RunAs, std::string>> ParseTaskUser(const std::string& text) {
  uint32_t uid = 0, gid = 0;
  size_t colon = text.find(':');
  if (colon != std::string::npos) {
    if (!absl::SimpleAtoi(text.substr(0, colon), &uid) ||
        !absl::SimpleAtoi(text.substr(colon + 1), &gid)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--task-user: expected NAME or UID:GID, got \"", text, "\""));
    }
    return std::pair{det::RunAs{uid, gid}, std::string()};
  }
  struct passwd entry;
  struct passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (getpwnam_r(text.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
      found == nullptr) {
    return absl::NotFoundError(absl::StrCat("--task-user: no user \"", text, "\""));
  }
  return std::pair{det::RunAs{found->pw_uid, found->pw_gid}, text};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == det::agent::kWorkerShimFlag) {
    return det::agent::RunWorkerShim(std::vector<std::string>(argv + 2, argv + argc));
  }
  if (argc >= 2 && std::string(argv[1]) == det::agent::kCheckpointGcFlag) {
    return det::agent::RunCheckpointGc(std::vector<std::string>(argv + 2, argv + argc));
  }
  std::string config_path;
  std::optional<absl::Duration> metrics_period;
  std::string task_user;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    auto take = [&](const std::string& flag) {
      if (arg == flag && i + 1 < argc) {
        value = argv[++i];
        return true;
      }
      if (arg.rfind(flag + "=", 0) == 0) {
        value = arg.substr(flag.size() + 1);
        return true;
      }
      return false;
    };
    if (take("--config")) {
      config_path = value;
    } else if (take("--task-user")) {
      task_user = value;
    } else if (take("--system-metrics-period")) {
      absl::Duration d;
      if (!absl::ParseDuration(value, &d) || d < absl::ZeroDuration()) {
        std::cerr << "det-agent: --system-metrics-period: expected a duration such as 5s, got \""
                  << value << "\"\n";
        return 2;
      }
      metrics_period = d;
    } else {
      std::cerr << kUsage;
      return 2;
    }
  }
  if (config_path.empty()) {
    std::cerr << "det-agent: --config AGENT_YAML is required\n" << kUsage;
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
  // TLS to the master: the agent's channels and, through the inherited environment, its
  // workers' channels verify the master against this CA.
  if (!config->master_cert_file.empty()) {
    setenv(det::rpc::kMasterCertFileEnv, config->master_cert_file.c_str(), 1);
  }
  if (auto st = det::rpc::CheckMasterCertFile(); !st.ok()) {
    std::cerr << "det-agent: " << st.message() << "\n";
    return 2;
  }
  std::string self = SelfPath();
  if (self.empty()) {
    std::cerr << "det-agent: cannot find its own binary through /proc/self/exe\n";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<det::agent::Nvml>> nvml =
      absl::NotFoundError("slot_type cpu: GPUs not looked for");
  if (config->slot_type != "cpu") nvml = det::agent::LoadNvml();
  absl::StatusOr<det::agent::Nvml*> nvml_view =
      nvml.ok() ? absl::StatusOr<det::agent::Nvml*>(nvml->get()) : nvml.status();
  auto slots = det::agent::DiscoverSlots(config->slot_type, config->slots, nvml_view);
  if (!slots.ok()) {
    std::cerr << "det-agent: slot_type " << config->slot_type << ": " << slots.status().message()
              << "\n";
    return 2;
  }
  bool gpus = !slots->empty() && (*slots)[0].type() == "cuda";
  if (gpus) {
    for (const auto& s : *slots) {
      det::Logger("agent")->info("slot {}: {} {} ({} MiB)", s.id(), s.device_name(), s.uuid(),
                                 s.memory_bytes() >> 20);
    }
  } else {
    det::Logger("agent")->info("offering {} CPU slot(s){}", slots->size(),
                               nvml.ok() ? "" : absl::StrCat(" (", nvml.status().message(), ")"));
  }
  det::agent::SystemSampler sampler("/proc", gpus ? nvml->get() : nullptr);

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto client = det::agent::NewGrpcMasterClient(config->master);
  det::agent::AgentOptions options;
  options.shim_path = self;
  options.system_metrics_period = metrics_period.value_or(config->system_metrics_period);
  options.sampler = &sampler;
  if (!task_user.empty()) {
    auto parsed = ParseTaskUser(task_user);
    if (!parsed.ok()) {
      std::cerr << "det-agent: " << parsed.status().message() << "\n";
      return 2;
    }
    if (parsed->first.uid == 0) {
      std::cerr << "det-agent: --task-user: uid 0 is root; name an unprivileged user\n";
      return 2;
    }
    if (geteuid() != 0) {
      det::Logger("agent")->warn(
          "--task-user {}: this agent is not root and cannot switch users; workers run as its "
          "own user (uid {}) and can read everything it can",
          task_user, geteuid());
    } else {
      options.task_user = parsed->first;
      options.task_user_name = parsed->second;
      det::Logger("agent")->info("workers run as uid {} gid {}", parsed->first.uid,
                                 parsed->first.gid);
    }
  } else if (geteuid() == 0) {
    det::Logger("agent")->warn(
        "workers run as root, like this agent: they can read its work_dir, secrets and every "
        "file on this machine; start det-agent with --task-user (e.g. nobody)");
  }
  {
    const char* path = getenv("PATH");
    const char* home = getenv("HOME");
    det::agent::PythonChoice python = det::agent::ChooseWorkerPython(
        config->worker_python,
        det::agent::PythonCandidates(path ? path : "", home ? home : ""),
        det::agent::SubprocessTorchProbe(absl::Seconds(30)));
    if (python.has_torch()) {
      det::Logger("agent")->info("worker_python: {}", python.Describe());
    } else {
      det::Logger("agent")->warn(
          "worker_python: {}; PyTorch trials cannot run here unless their experiment sets "
          "environment.python (or set worker_python in agent.yaml)",
          python.Describe());
    }
    options.python = std::move(python);
  }
  det::agent::Agent agent(*config, *client, *slots, options);
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
