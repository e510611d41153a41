// The local deployer behind `det deploy local` (the CLI's deploy_local_cmd.cc parses the
// flags and calls it): finding a cluster's running daemons, writing their configs, the
// private TLS CA, starting and stopping them. It writes what it did to the CliContext's
// streams and keeps the admin's session in ~/.det/auth.json.
// `det deploy local`: a master and agents as background daemons on this machine, their
// config, logs and pid files under one data directory D:
//   D/master.yaml, D/agent-I.yaml        written by ClusterUp (mode 0600)
//   D/                                   mode 0711: a task user reaches what it needs by
//                                        path (D/agent-I, D/checkpoints, D/tls/ca.crt)
//                                        and lists nothing
//   D/cluster_secret                     random hex, made once, mode 0600
//   D/admin_password                     random hex, made once, mode 0600: the password
//                                        the master gives its admin account on first start
//   D/logs/master.log, D/logs/agent-I.log  the daemons' stdout and stderr, appended (D/logs
//                                        mode 0700)
//   D/run/master.pid, D/run/agent-I.pid  "PID\n" of each running daemon (D/run 0700)
//   D/master/, D/agent-I/                the daemons' data_dir / work_dir (each daemon sets
//                                        their modes: 0700, and 0711 with private parts)
//   D/checkpoints/                       the default checkpoint storage: 01733 with a task
//                                        user (each trial's user creates its own entries,
//                                        lists and deletes no one else's), else 0700
//   D/bin/, D/python/                    with a task user that cannot reach the binaries where
//                                        they are (under /root, say): copies of det-agent,
//                                        the example worker and det's Python package (0755,
//                                        0644), which the agents run (checkpoint GC runs
//                                        det-agent's own binary as the task user)
//   D/tls/ca.crt, D/tls/ca.key           with --tls: a private CA (made once; key 0600)
//   D/tls/master.crt, D/tls/master.key   the master's certificate for 127.0.0.1 and
//                                        localhost, signed by it (key 0600)
// with I = 0 .. agents-1 and agent ids "local-agent-I".
#ifndef DET_DEPLOY_LOCAL_LOCAL_CLUSTER_H_
#define DET_DEPLOY_LOCAL_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/cli_context.h"
#include "common/process/subprocess.h"

namespace det::deploy {

// Whether the OS user `user` can reach `path`: search every directory on the way and, for a
// file, execute it. OK when `user` is unset.
using ReachCheck =
    std::function<absl::Status(const std::string& path, const std::optional<RunAs>& user)>;

// Flags of `det deploy local cluster-up`.
struct ClusterUpOptions {
  int agents = 1;
  int slots_per_agent = 1;
  // "~" and "~/..." expand to $HOME.
  std::string data_dir = "~/.det-local";
  int master_port = 8080;
  // Port of the master's web page and REST API on 127.0.0.1; 0: master_port + 1.
  int http_port = 0;
  // Searched first for the binaries; empty: not given.
  std::string bin_dir;
  // Both master ports over TLS with a private CA under D/tls (see MakeLocalTls); agents,
  // workers and this CLI trust that CA only.
  bool tls = false;
  // The OS user the agents run trials as (det-agent --task-user: NAME or UID:GID), unless
  // the experiment's owner is linked to another (det user link-with-agent-user). Unset:
  // "nobody" when cluster-up runs as root, else none. "" (--no-task-user): none, the workers
  // run as the user running cluster-up (for root: every det user's trials are root on this
  // machine).
  // A task user needs cluster-up to run as root and must be able to reach D/agent-I and
  // D/checkpoints.
  std::optional<std::string> task_user;
  // Not a flag: how the task user's reach is checked. The CLI passes the agent's own check
  // (agent::CheckUserCanReach), so cluster-up and its agents agree. REQUIRED with a task user.
  ReachCheck can_reach;
  // Not a flag: YAML appended to D/master.yaml (the CLI's `--db postgres` puts its `db:`
  // section there). Default: nothing.
  std::string master_yaml_extra;
};

// The task user the agents get for `options` when cluster-up runs as `euid`; "" for none.
std::string EffectiveTaskUser(const ClusterUpOptions& options, uid_t euid);

// What the config files say; every path absolute.
struct LocalClusterLayout {
  std::string data_dir;
  int master_port = 8080;
  // 0: no HTTP server.
  int http_port = 0;
  int slots_per_agent = 1;
  // Directories the agents search for worker programs.
  std::vector<std::string> worker_path;
  std::string cluster_secret;
  // The TLS files (MakeLocalTls); empty: plaintext.
  std::string ca_cert_file;
  std::string master_cert_file;
  std::string master_key_file;
};

// The text of D/master.yaml: grpc_listen, http_listen (when http_port > 0), data_dir,
// cluster_secret; with TLS files, grpc_tls and http_tls.
std::string MasterYaml(const LocalClusterLayout& layout);
// The text of D/agent-I.yaml: master, agent_id, slot_type (cpu), slots, work_dir,
// worker_path, cluster_secret; with TLS files, master_cert_file (the CA).
std::string AgentYaml(const LocalClusterLayout& layout, int index);

// Makes (or keeps, when all are there) `dir`/ca.crt + ca.key, a private CA, and
// `dir`/master.crt + master.key, the master's certificate for IP 127.0.0.1 and DNS
// localhost signed by it, with the `openssl` program at `openssl` (run without a shell,
// fixed arguments; its output appended to `log`). `dir` 0755, keys 0600, certificates
// 0644. Sets the layout's TLS files.
absl::Status MakeLocalTls(const std::string& dir, const std::string& openssl,
                          const std::string& log, LocalClusterLayout* layout);

// The programs the agents run: det-agent and the example worker ("" when not found).
struct StagedBinaries {
  std::string agent;
  std::string worker;
  // det's Python package copied to D/python; "" when not copied.
  std::string python;
};

// `found` when there is no task user or it can execute `found.agent` where it is
// (`can_reach`). Else
// copies det-agent (links followed), the worker and det's Python package (the directory
// ../python beside det-agent's real path, where the agent looks for it) into `dir`/bin and
// `dir`/python, readable and executable by everyone, and returns the copies. REQUIRES:
// the task user can search `dir`.
absl::StatusOr<StagedBinaries> StageBinariesForTaskUser(const std::string& dir,
                                                        const StagedBinaries& found,
                                                        const std::optional<RunAs>& task_user,
                                                        const ReachCheck& can_reach);

// The secret in `path` (trimmed; FailedPrecondition when empty), made when missing: 32
// random bytes in hex, mode 0600.
absl::StatusOr<std::string> ReadOrCreateSecret(const std::string& path);

// "~"-expanded, absolute, normalized.
absl::StatusOr<std::string> ResolveDataDir(const std::string& data_dir);

// Path of the executable `name`: in `dirs` in order, then in the directories of `path`
// (a $PATH-style list). NotFound naming the program and saying to build //deploy:bin.
absl::StatusOr<std::string> FindBinary(const std::string& name,
                                       const std::vector<std::string>& dirs,
                                       const std::string& path);

// Starts det-master and `agents` det-agents as detached daemons and waits (up to 60 s)
// until the master answers and every agent is connected; prints the master address and
// which OS user trials run as (EffectiveTaskUser, given to each agent as --task-user).
// Logs this CLI in as admin (with D/admin_password) and keeps the session in
// ~/.det/auth.json, so det commands work at once.
// Fails, stopping what it started, when a cluster already runs in the data directory, a
// binary is missing, a task user is named by a cluster-up that is not root
// (InvalidArgument), the task user is unknown (NotFound) or cannot reach the agents' work
// dirs or the checkpoint storage (FailedPrecondition naming the directory), or the wait
// runs out (then the tail of the guilty log goes to
// ctx.err).
absl::Status ClusterUp(cli::CliContext& ctx, const ClusterUpOptions& options);

// Stops the daemons of the data directory: SIGTERM to each process group (agents
// first, then the master), SIGKILL after 10 s, pid files removed. Prints what it did.
absl::Status ClusterDown(cli::CliContext& ctx, const std::string& data_dir);

}  // namespace det::deploy

#endif  // DET_DEPLOY_LOCAL_LOCAL_CLUSTER_H_
