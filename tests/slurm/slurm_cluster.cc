#include "tests/slurm/slurm_cluster.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status/status_macros.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

absl::Status WriteText(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  if (chmod(path.c_str(), mode) != 0) return absl::InternalError(absl::StrCat("chmod ", path));
  return absl::OkStatus();
}

std::string HostName() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace

SlurmCluster::SlurmCluster() {
  char tmpl[] = "/tmp/det-slurm-XXXXXX";
  if (mkdtemp(tmpl) != nullptr) dir_ = tmpl;
}

SlurmCluster::~SlurmCluster() {
  // Jobs still running first: their steps' processes are not the slurmds' children.
  if (!conf_.empty() && daemons_.size() > 1) {
    (void)Run({"scancel", absl::StrCat("--user=", geteuid())});
    (void)WaitUntil("every job of the test's Slurm ended", [&] {
      auto active = Run({"squeue", "-h", "--states=RUNNING,COMPLETING,PENDING", "-o", "%i"});
      return active.ok() && absl::StripAsciiWhitespace(*active).empty();
    }, absl::Seconds(20), absl::Milliseconds(200));
  }
  // slurmds first (they run the jobs' steps), the controller, then munge.
  for (auto it = daemons_.rbegin(); it != daemons_.rend(); ++it) {
    (void)it->second->Terminate(absl::Seconds(5));
  }
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

std::string SlurmCluster::LogTail(const std::string& name) const {
  std::string text = Slurp(absl::StrCat(dir_, "/log/", name, ".log"));
  return text.size() > 2000 ? text.substr(text.size() - 2000) : text;
}

absl::Status SlurmCluster::StartDaemon(const std::string& name, std::vector<std::string> argv) {
  SpawnOptions opts;
  opts.argv = std::move(argv);
  opts.env = CurrentEnvironment();
  opts.stdout_mode = opts.stderr_mode = SpawnOptions::Output::kFile;
  opts.stdout_path = opts.stderr_path = absl::StrCat(dir_, "/log/", name, ".log");
  auto proc = Subprocess::Spawn(opts);
  if (!proc.ok()) return absl::Status(proc.status().code(), absl::StrCat(name, ": ", proc.status().message()));
  daemons_.emplace_back(name, *std::move(proc));
  return absl::OkStatus();
}

absl::Status SlurmCluster::Start(const SlurmClusterOptions& options) {
  nodes_ = options.nodes;
  if (dir_.empty()) return absl::InternalError("cannot create a directory under /tmp");
  for (const char* sub : {"", "/munge", "/state", "/spool", "/log", "/run"}) {
    std::string d = dir_ + sub;
    if (mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InternalError(absl::StrCat("cannot create ", d));
    }
  }
  // munged checks its key's directory: not writable by others.
  chmod((dir_ + "/munge").c_str(), 0711);
  std::string key;
  {
    std::ifstream random("/dev/urandom", std::ios::binary);
    key.resize(1024);
    random.read(key.data(), key.size());
  }
  const std::string munge = dir_ + "/munge";
  RETURN_IF_ERROR(WriteText(munge + "/munge.key", key, 0600));
  RETURN_IF_ERROR(StartDaemon(
      "munged", {"munged", "--foreground", "--force", "--key-file=" + munge + "/munge.key",
                 "--socket=" + munge + "/sock", "--pid-file=" + munge + "/pid",
                 "--seed-file=" + munge + "/seed", "--log-file=" + dir_ + "/log/munged.file"}));
  const std::string socket = munge + "/sock";
  if (!WaitUntil("munged's socket", [&] { return Exists(socket); }, absl::Seconds(20))) {
    return absl::UnavailableError(absl::StrCat("munged did not start: ", LogTail("munged")));
  }
  const int ctld_port = FreeLoopbackPort();
  const std::string host = HostName();
  std::vector<std::string> conf = {
      "ClusterName=dettest",
      absl::StrCat("SlurmctldHost=", host, "(127.0.0.1)"),
      absl::StrCat("SlurmctldPort=", ctld_port),
      "SlurmUser=root",
      "SlurmdUser=root",
      "AuthType=auth/munge",
      "CredType=cred/munge",
      absl::StrCat("AuthInfo=socket=", socket),
      absl::StrCat("StateSaveLocation=", dir_, "/state"),
      absl::StrCat("SlurmdSpoolDir=", dir_, "/spool/%n"),
      absl::StrCat("SlurmctldPidFile=", dir_, "/run/slurmctld.pid"),
      absl::StrCat("SlurmdPidFile=", dir_, "/run/slurmd-%n.pid"),
      "ProctrackType=proctrack/linuxproc",
      "TaskPlugin=task/none",
      "JobAcctGatherType=jobacct_gather/none",
      "AccountingStorageType=accounting_storage/none",
      "JobCompType=jobcomp/none",
      "SchedulerType=sched/backfill",
      "SelectType=select/cons_tres",
      "SelectTypeParameters=CR_CPU",
      "MpiDefault=none",
      "ReturnToService=2",
      "MinJobAge=300",
      absl::StrCat("KillWait=", options.kill_wait_s),
  };
  std::vector<std::string> names;
  for (const std::string& node : nodes_) {
    conf.push_back(absl::StrCat("NodeName=", node, " NodeHostname=", host,
                                " NodeAddr=127.0.0.1 CPUs=", options.cpus_per_node,
                                " Port=", FreeLoopbackPort(), " State=UNKNOWN"));
    names.push_back(node);
  }
  conf.push_back(absl::StrCat("PartitionName=", kPartition, " Nodes=", absl::StrJoin(names, ","),
                              " Default=YES MaxTime=INFINITE State=UP"));
  conf_ = dir_ + "/slurm.conf";
  RETURN_IF_ERROR(WriteText(conf_, absl::StrJoin(conf, "\n") + "\n", 0644));
  setenv("SLURM_CONF", conf_.c_str(), 1);
  RETURN_IF_ERROR(StartDaemon("slurmctld", {"slurmctld", "-D", "-i", "-f", conf_}));
  for (const std::string& node : nodes_) {
    RETURN_IF_ERROR(
        StartDaemon("slurmd-" + node, {"slurmd", "-D", "-f", conf_, "-N", node}));
  }
  auto all_idle = [&] {
    for (const std::string& node : nodes_) {
      if (NodeState(node) != "idle") return false;
    }
    return true;
  };
  if (!WaitUntil("every Slurm node idle", all_idle, absl::Seconds(60), absl::Milliseconds(200))) {
    std::string tails;
    for (const auto& [name, proc] : daemons_) {
      absl::StrAppend(&tails, "\n--- ", name, ":\n", LogTail(name));
    }
    return absl::UnavailableError(absl::StrCat("Slurm nodes not idle: ", tails));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SlurmCluster::Run(const std::vector<std::string>& argv,
                                              absl::Duration timeout) const {
  CommandResult r = RunCommand(argv, timeout, {{"SLURM_CONF", conf_}});
  if (!r.exit.ok()) {
    return absl::InternalError(absl::StrCat(absl::StrJoin(argv, " "), ": ", r.exit.ToString(),
                                            ": ", r.err));
  }
  return r.out;
}

std::string SlurmCluster::NodeState(const std::string& node) const {
  auto out = Run({"sinfo", "-h", "-N", "-n", node, "-o", "%T"});
  if (!out.ok()) return "";
  return std::string(absl::StripAsciiWhitespace(*out));
}

}  // namespace det::testing
