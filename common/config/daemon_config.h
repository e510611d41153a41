// master.yaml and agent.yaml: the daemons' startup configuration.
#ifndef DET_COMMON_CONFIG_DAEMON_CONFIG_H_
#define DET_COMMON_CONFIG_DAEMON_CONFIG_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/config/experiment_config.h"

namespace det::config {

struct ResourcePoolConfig {
  std::string name;
  std::string description;
  // Stop less important trials (they checkpoint and are requeued) to place more important ones.
  bool preemption = false;
  // How long a preempted trial has to stop before it is killed.
  absl::Duration preemption_timeout = absl::Seconds(60);
};

// master.yaml's `resource_manager: {type: slurm, ...}`: trials run as Slurm batch jobs
// (docs/slurm.md) instead of on det's agents.
struct SlurmConfig {
  // sbatch --partition, --account, --qos; empty: Slurm's default.
  std::string partition;
  std::string account;
  std::string qos;
  // "cpu" (default: a slot is cpus_per_slot CPUs of one task) or "cuda" (a slot is one
  // GPU: --gres=gpu[:gpu_type]:N per node).
  std::string slot_type = "cpu";
  std::string gpu_type;
  int cpus_per_slot = 1;
  // The most slots one node gives a trial: a trial of more slots spans
  // ceil(slots / slots_per_node) nodes with slots_per_node tasks each. 0: all on one node.
  int slots_per_node = 0;
  // More sbatch options, one argv word each ("--time=04:00:00"), each starting with "--".
  std::vector<std::string> sbatch_options;
  // host:port the jobs reach the master's gRPC API at. Default: the master's own address.
  std::string master_address;
  // det-slurm-launcher on the nodes (absolute). Default: beside det-master.
  std::string launcher;
  // Where the launcher keeps each rank's work dir on the nodes (absolute).
  std::string work_dir = "/tmp/det-slurm";
  // The launcher's interpreter for `python3` entrypoints, and directories searched (before
  // PATH) for entrypoint programs, on the nodes.
  std::string worker_python;
  std::vector<std::string> worker_path;
  // torchrun's MASTER_PORT of a job: first + job id % (last - first + 1).
  int chief_port_first = 29500;
  int chief_port_last = 29999;
  // How often the master asks Slurm about its jobs (squeue).
  absl::Duration poll_interval = absl::Seconds(1);
  // Between scancel's SIGTERM to the ranks and the job's end (a Kill with no grace).
  absl::Duration kill_grace = absl::Seconds(10);
};

struct MasterConfig {
  // host:port of the gRPC API (users, agents, workers). Port 0 picks a free port.
  std::string grpc_listen = "0.0.0.0:8080";
  // Directory for the database (model contexts are stored in it); created if missing.
  std::string data_dir = "/var/lib/det";
  // The database (master.yaml's `db:`): "sqlite" (default; the file db_path) or
  // "postgres" (db_url).
  std::string db_type = "sqlite";
  // SQLite file (also `db: {path: ...}`). Default: DATA_DIR/det.db.
  std::string db_path;
  // PostgreSQL: a libpq connection URI or key=value string, without a password
  // ("postgresql://det@db.example.com/det?sslmode=verify-full").
  std::string db_url;
  // Where the PostgreSQL password comes from (at most one; neither: none, or libpq's own
  // ~/.pgpass / PGPASSWORD): a file holding it (trailing newline ignored), or the name of
  // an environment variable holding it. Never the command line.
  std::string db_password_file;
  std::string db_password_env;
  // Largest size of the database in MiB (0: no limit). Past it, writes fail as on a full
  // disk: the request gets a clear error and nothing is half-written.
  int64_t db_max_size_mb = 0;
  // Read connections to the database (and threads) for the API's metric, log and checkpoint
  // reads, which run off the master's loop, beside each other (1..64).
  int db_read_connections = 4;
  // When set, the master writes its bound gRPC address here once it serves.
  std::string address_file;
  // host:port of the REST API, the web page and /metrics. Port 0 picks a free port.
  // Default: empty, no HTTP server.
  std::string http_listen;
  // When set, the master writes its bound HTTP address here once it serves.
  std::string http_address_file;
  // PEM certificate chain and key: the HTTP server serves HTTPS only (both or neither).
  // TLS for the gRPC port (agents, workers and the CLI then need DET_MASTER_CERT_FILE /
  // master_cert_file naming the CA); empty: plaintext.
  std::string grpc_tls_cert_file;
  std::string grpc_tls_key_file;
  std::string http_tls_cert_file;
  std::string http_tls_key_file;
  // How long a user's login session lasts.
  absl::Duration session_ttl = absl::Hours(7 * 24);
  // Password of the `admin` account the master creates on its first start (no user in
  // the database yet). Not read from the file: from DET_ADMIN_PASSWORD in the
  // environment; empty: a random password, written once to the master's log.
  std::string admin_password;
  std::string cluster_name = "det";
  // Agents must present this secret to join (empty: any agent may join).
  std::string cluster_secret;
  // "best_fit" (default) or "worst_fit".
  std::string scheduler_fit = "best_fit";
  // Agents join one of these; experiments name one. Default: one pool named "default".
  std::vector<ResourcePoolConfig> resource_pools;
  // An agent silent for this long is declared lost and its trials are rescheduled.
  absl::Duration agent_timeout = absl::Seconds(30);
  // After a master restart, how long agents have to come back before their trials are
  // declared lost.
  absl::Duration agent_reconnect_wait = absl::Seconds(60);
  // How long a trial whose script asks should_preempt() has, once told to stop (pause,
  // preemption, an early stop), to checkpoint and exit before SIGTERM. An experiment's
  // stop_grace_period wins.
  absl::Duration stop_grace_period = absl::Minutes(5);
  // The cluster's default checkpoint storage: experiments whose config sets none use it
  // (their own keys win). Unset: such experiments keep no checkpoints, and pausing,
  // preempting or resizing them loses their progress (they are warned).
  std::optional<CheckpointStorageConfig> checkpoint_storage;
  // Directories (absolute, no "." or "..") under which an experiment's checkpoint_storage
  // may lie (with the default storage's directory); its checkpoint GC deletes nothing
  // outside them. Empty: any absolute path (the master warns).
  std::vector<std::string> checkpoint_storage_allowed_roots;
  std::string log_level = "info";
  // resource_manager: {type: agent} (default: det's agents) or {type: slurm, ...}.
  std::optional<SlurmConfig> slurm;
};

struct AgentConfig {
  // host:port of the master's gRPC API. Required.
  std::string master;
  // Default: the host name.
  std::string agent_id;
  // "cpu", "cuda" (GPUs, an error without them) or "auto" (GPUs when found, else CPU).
  std::string slot_type = "auto";
  // Number of CPU slots when the agent offers CPU slots.
  int slots = 1;
  std::string resource_pool = "default";
  // Per-allocation working directories live here. Created if missing.
  std::string work_dir = "/tmp/det-agent";
  // Directories searched (before PATH) for entrypoint programs.
  std::vector<std::string> worker_path;
  // Where the other agents reach this one: MASTER_ADDR of allocations whose chief (rank 0)
  // runs here. Default: empty, the address of the local interface that routes to the master.
  std::string advertise_address;
  // Ports lent to allocations whose chief runs here, one per live allocation, as MASTER_PORT:
  // "FIRST-LAST" in the YAML, 1024 <= FIRST <= LAST <= 65535.
  int chief_port_first = 29500;
  int chief_port_last = 29999;
  // The interpreter of Python entrypoints: an entrypoint whose argv[0] is `python3` or
  // `python` runs this instead; workers also get it as DET_PYTHON. Empty (not set): the
  // agent looks for one that can import torch (agent/python/python_finder.h).
  std::string worker_python;
  // Directories put first on the workers' PYTHONPATH (after the allocation's context
  // directory). Unset (nullopt): the agent's default, <dir of det-agent>/../python when it
  // exists.
  std::optional<std::vector<std::string>> python_path;
  std::string cluster_secret;
  // PEM file of the CA that signed the master's gRPC certificate (the master has
  // grpc_tls); the agent and its workers then speak TLS. Or DET_MASTER_CERT_FILE.
  std::string master_cert_file;
  absl::Duration heartbeat_interval = absl::Seconds(5);
  // SIGTERM to SIGKILL when killing workers.
  absl::Duration kill_grace = absl::Seconds(10);
  // How often host metrics are sampled and sent; 0 turns them off.
  absl::Duration system_metrics_period = absl::Seconds(5);
  std::string log_level = "info";
};

// The checkpoint storage roots experiments may use: checkpoint_storage_allowed_roots, then
// the directory of the default checkpoint_storage; empty (any absolute path) when
// checkpoint_storage_allowed_roots is.
// What the master's database is, for logs: the SQLite file or the PostgreSQL URI.
std::string DatabaseName(const MasterConfig& config);

std::vector<std::string> CheckpointStorageRoots(const MasterConfig& config);

// Reads a config file; missing keys keep their defaults. The cluster secret may also come
// from the DET_CLUSTER_SECRET environment variable (the file wins).
absl::StatusOr<MasterConfig> LoadMasterConfig(const std::string& path);
absl::StatusOr<AgentConfig> LoadAgentConfig(const std::string& path);
absl::StatusOr<MasterConfig> ParseMasterConfig(absl::string_view text, absl::string_view filename);
absl::StatusOr<AgentConfig> ParseAgentConfig(absl::string_view text, absl::string_view filename);

}  // namespace det::config

#endif  // DET_COMMON_CONFIG_DAEMON_CONFIG_H_
