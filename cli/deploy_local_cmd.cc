// det deploy local cluster-up|cluster-down
#include <CLI/CLI.hpp>

#include <memory>

#include "agent/launcher/launcher.h"
#include "cli/commands.h"
#include "deploy/local/local_cluster.h"

namespace det::cli {

using deploy::ClusterDown;
using deploy::ClusterUp;
using deploy::ClusterUpOptions;

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
  up_cmd->callback([&ctx, up, task_user, task_user_opt, no_task_user] {
    if (task_user_opt->count() > 0) up->task_user = *task_user;
    if (*no_task_user) up->task_user = "";
    up->can_reach = agent::CheckUserCanReach;
    ctx.action = [&ctx, up] { return ClusterUp(ctx, *up); };
  });

  auto down_dir = std::make_shared<std::string>(ClusterUpOptions().data_dir);
  CLI::App* down_cmd =
      local->add_subcommand("cluster-down", "stop the daemons started by cluster-up");
  down_cmd->add_option("--data-dir", *down_dir, "data directory given to cluster-up")
      ->capture_default_str();
  down_cmd->callback(
      [&ctx, down_dir] { ctx.action = [&ctx, down_dir] { return ClusterDown(ctx, *down_dir); }; });
}

}  // namespace det::cli
