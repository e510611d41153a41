// A private Slurm cluster for tests: munged, slurmctld and one slurmd per node (`slurmd
// -N NAME`, several on this machine), all with config, state, spool and logs under one
// temp directory, on loopback ports that were free. Runs as the test's user (root in the
// test sandbox: Slurm's daemons need it to launch jobs as their users). Clients (sbatch,
// squeue, ...) reach it through SLURM_CONF, which Start() sets in this process's
// environment so that child processes (a det-master) inherit it.
#ifndef DET_TESTS_SLURM_SLURM_CLUSTER_H_
#define DET_TESTS_SLURM_SLURM_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"

namespace det::testing {

struct SlurmClusterOptions {
  // Node names, each one slurmd with `cpus_per_node` CPUs.
  std::vector<std::string> nodes = {"n1"};
  int cpus_per_node = 2;
  // Slurm's KillWait: seconds between scancel's SIGTERM and SIGKILL.
  int kill_wait_s = 5;
};

class SlurmCluster {
 public:
  // A fresh directory /tmp/det-slurm-XXXXXX (short: munge's socket path must fit
  // sun_path). Daemons are started by Start(); the destructor cancels the jobs still there
  // (and waits up to 20 s for them to end), stops the daemons (SIGTERM, then SIGKILL) and
  // removes the directory.
  SlurmCluster();
  ~SlurmCluster();

  // Writes munge.key and slurm.conf under dir(), starts munged, slurmctld and the slurmds,
  // sets SLURM_CONF, and waits until sinfo lists every node idle. Errors name the daemon
  // that failed, with the tail of its log.
  absl::Status Start(const SlurmClusterOptions& options = {});

  // Runs a Slurm client (`argv`, e.g. {"squeue", "-h"}) against this cluster; its stdout,
  // or an error with its stderr.
  absl::StatusOr<std::string> Run(const std::vector<std::string>& argv,
                                  absl::Duration timeout = absl::Seconds(30)) const;
  // The state sinfo gives node `node` ("idle", "alloc", "mix", ...), or "" when unknown.
  std::string NodeState(const std::string& node) const;

  const std::string& dir() const { return dir_; }
  const std::string& conf() const { return conf_; }
  // The partition every node is in (the default one).
  static constexpr char kPartition[] = "det";

 private:
  absl::Status StartDaemon(const std::string& name, std::vector<std::string> argv);
  std::string LogTail(const std::string& name) const;

  std::string dir_;
  std::string conf_;
  std::vector<std::string> nodes_;
  std::vector<std::pair<std::string, std::unique_ptr<Subprocess>>> daemons_;
};

}  // namespace det::testing

#endif  // DET_TESTS_SLURM_SLURM_CLUSTER_H_
