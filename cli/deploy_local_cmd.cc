// det deploy local cluster-up|cluster-down
#include <CLI/CLI.hpp>

#include <pwd.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "agent/launcher/launcher.h"
#include "cli/commands.h"
#include "cli/private_postgres.h"
#include "common/status/status_macros.h"
#include "deploy/local/local_cluster.h"

namespace det::cli {

using deploy::ClusterDown;
using deploy::ClusterUp;
using deploy::ClusterUpOptions;

namespace {

// The uid/gid of a --task-user value (NAME or UID:GID); nullopt when unknown (cluster-up
// then reports it).
std::optional<RunAs> LookUpUser(const std::string& user) {
  std::vector<std::string> ids = absl::StrSplit(user, ':');
  uint32_t uid = 0, gid = 0;
  if (ids.size() == 2 && absl::SimpleAtoi(ids[0], &uid) && absl::SimpleAtoi(ids[1], &gid)) {
    return RunAs{static_cast<uid_t>(uid), static_cast<gid_t>(gid)};
  }
  struct passwd* pw = ::getpwnam(user.c_str());
  if (pw == nullptr) return std::nullopt;
  return RunAs{pw->pw_uid, pw->pw_gid};
}

// cluster-up with the master's state in the cluster's private PostgreSQL (D/postgres),
// started first; stopped again when the rest does not come up.
absl::Status ClusterUpWithPostgres(CliContext& ctx, ClusterUpOptions options) {
  ASSIGN_OR_RETURN(const std::string dir, deploy::ResolveDataDir(options.data_dir));
  PrivatePostgresOptions pg_options;
  pg_options.data_dir = dir;
  pg_options.can_reach = options.can_reach;
  if (std::string task_user = deploy::EffectiveTaskUser(options, ::geteuid()); !task_user.empty()) {
    pg_options.task_user = LookUpUser(task_user);
  }
  ASSIGN_OR_RETURN(const PrivatePostgres pg, StartPrivatePostgres(ctx, pg_options));
  if (pg.created && ::access((dir + "/master/det.db").c_str(), F_OK) == 0) {
    ctx.err << "det: warning: " << dir
            << "/master/det.db holds this cluster's earlier SQLite state, which the new "
               "PostgreSQL database does not have; `det-master migrate-db` copies it (see "
               "docs/postgres.md)\n";
  }
  options.master_yaml_extra = PostgresDbYaml(pg);
  absl::Status up = ClusterUp(ctx, options);
  if (!up.ok()) {
    if (pg.started) (void)StopPrivatePostgres(ctx, dir);
    return up;
  }
  ctx.out << "Database: PostgreSQL 15 in " << pg.dir << " (password in " << pg.password_file
          << "; stopped by cluster-down)\n";
  return absl::OkStatus();
}

// cluster-up without --db postgres on a data directory that has a PostgreSQL database.
void WarnOfUnusedPostgres(CliContext& ctx, const std::string& data_dir) {
  absl::StatusOr<std::string> dir = deploy::ResolveDataDir(data_dir);
  if (!dir.ok() || ::access((*dir + "/postgres/PG_VERSION").c_str(), F_OK) != 0) return;
  ctx.err << "det: warning: " << *dir
          << "/postgres holds the PostgreSQL database of an earlier `cluster-up --db "
             "postgres`; this cluster keeps its state in SQLite (" << *dir
          << "/master) instead. Give --db postgres to use it.\n";
}

absl::Status ClusterDownWithPostgres(CliContext& ctx, const std::string& data_dir) {
  RETURN_IF_ERROR(ClusterDown(ctx, data_dir));
  // After the master: it keeps writing until it stops.
  ASSIGN_OR_RETURN(const std::string dir, deploy::ResolveDataDir(data_dir));
  return StopPrivatePostgres(ctx, dir);
}

}  // namespace

void RegisterDeployCommands(CLI::App& app, CliContext& ctx) {
  CLI::App* deploy = app.add_subcommand("deploy", "run a det cluster");
  deploy->require_subcommand(1);
  CLI::App* local = deploy->add_subcommand("local", "a cluster of daemons on this machine");
  local->require_subcommand(1);

  auto up = std::make_shared<ClusterUpOptions>();
  CLI::App* up_cmd =
      local->add_subcommand("cluster-up", "start a master and agents as background daemons");
  up_cmd->add_option("--agents", up->agents, "number of agents")->capture_default_str();
  up_cmd->add_option("--slots-per-agent", up->slots_per_agent, "cpu slots of each agent")
      ->capture_default_str();
  up_cmd->add_option("--data-dir", up->data_dir, "config, logs, pid files and data")
      ->capture_default_str();
  up_cmd->add_option("--master-port", up->master_port, "gRPC port of the master on 127.0.0.1")
      ->capture_default_str();
  up_cmd->add_option("--http-port", up->http_port,
                     "port of the web page and REST API on 127.0.0.1 (default: master port + 1)");
  up_cmd->add_option("--bin-dir", up->bin_dir,
                     "where det-master, det-agent and det-fashion-mnist are (searched "
                     "first, then the directory of det, then $PATH)");
  up_cmd->add_flag("--tls", up->tls,
                   "both master ports over TLS with a private CA made under DATA_DIR/tls "
                   "(clients need DET_MASTER_CERT_FILE=DATA_DIR/tls/ca.crt)");
  auto task_user = std::make_shared<std::string>();
  CLI::Option* task_user_opt = up_cmd->add_option(
      "--task-user", *task_user,
      "the OS user (NAME or UID:GID) trials run as, unless their owner is linked to another "
      "(default when run as root: nobody)");
  auto no_task_user = std::make_shared<bool>(false);
  up_cmd
      ->add_flag("--no-task-user", *no_task_user,
                 "trials run as the user running cluster-up (as root: every det user of the "
                 "cluster can act as root on this machine)")
      ->excludes(task_user_opt);
  auto db = std::make_shared<std::string>("sqlite");
  up_cmd
      ->add_option("--db", *db,
                   "where the master keeps its state: sqlite (a file under DATA_DIR/master) "
                   "or postgres (a private PostgreSQL 15 in DATA_DIR/postgres, made on the "
                   "first cluster-up, started before the master, run as the OS user "
                   "postgres when root, its password in DATA_DIR/db_password, stopped by "
                   "cluster-down; needs `apt install postgresql-15`)")
      ->capture_default_str()
      ->check(CLI::IsMember({"sqlite", "postgres"}));
  up_cmd->callback([&ctx, up, task_user, task_user_opt, no_task_user, db] {
    if (task_user_opt->count() > 0) up->task_user = *task_user;
    if (*no_task_user) up->task_user = "";
    up->can_reach = agent::CheckUserCanReach;
    ctx.action = [&ctx, up, db]() -> absl::Status {
      if (*db == "postgres") return ClusterUpWithPostgres(ctx, *up);
      WarnOfUnusedPostgres(ctx, up->data_dir);
      return ClusterUp(ctx, *up);
    };
  });

  auto down_dir = std::make_shared<std::string>(ClusterUpOptions().data_dir);
  CLI::App* down_cmd =
      local->add_subcommand("cluster-down",
                            "stop the daemons started by cluster-up (and its PostgreSQL)");
  down_cmd->add_option("--data-dir", *down_dir, "data directory given to cluster-up")
      ->capture_default_str();
  down_cmd->callback([&ctx, down_dir] {
    ctx.action = [&ctx, down_dir] { return ClusterDownWithPostgres(ctx, *down_dir); };
  });
}

}  // namespace det::cli
