#include "master/server/master.h"

#include <malloc.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/logging/logging.h"
#include "common/rpc/rpc.h"
#include "common/status/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "master/api/grpc_services.h"
#include "master/http/http_server.h"
#include "master/loop/on_loop.h"
#include "master/store/postgres_store.h"
#include "master/store/sqlite_store.h"

namespace det::master {
namespace {

// The master receives at most rpc::kMaxMasterReceiveBytes in one message (gRPC refuses
// larger ones with RESOURCE_EXHAUSTED before they are parsed): configs are at most 1 MiB,
// model contexts come in pieces of at most 1 MiB (CreateExperimentStream). What it sends
// is larger: a model context (up to 64 MiB) to an agent in one GetModelContextResponse.
constexpr int kMaxSendBytes = 256 << 20;
// gRPC reads a refused oversized message whole first, and malloc would keep those tens of
// MB. So a thread of the master looks at its resident memory every kMemoryTrimPeriod and calls
// malloc_trim when it has stayed kMemoryTrimGrowthBytes over what it was after the last
// trim for two looks in a row (a message still being received is not freed yet), and
// every kMemoryTrimEveryLooks looks whatever the growth (a trim during a burst does not
// keep what followed). A trim walks every free chunk: up to tens of ms on a fragmented
// heap, hence not at every look.
constexpr absl::Duration kMemoryTrimPeriod = absl::Milliseconds(250);
constexpr int64_t kMemoryTrimGrowthBytes = int64_t{4} << 20;
constexpr int kMemoryTrimEveryLooks = 240;

// This process's resident set in bytes (/proc/self/statm); 0 when unknown.
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0;
  int64_t resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * sysconf(_SC_PAGESIZE);
}

absl::Status MakeDirs(const std::string& path) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || (path[i] == '/' && i > 0)) {
      partial = path.substr(0, i);
      if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::PermissionDeniedError(
            absl::StrCat("cannot create directory '", partial, "': ", strerror(errno)));
      }
    }
  }
  if (access(path.c_str(), W_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("data directory '", path, "' is not writable: ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Store>> OpenStore(const config::MasterConfig& config) {
  if (config.db_type == "postgres") {
    ASSIGN_OR_RETURN(std::string password,
                     ReadDatabasePassword(config.db_password_env, "db.password_env",
                                          config.db_password_file, "db.password_file"));
    ASSIGN_OR_RETURN(std::unique_ptr<PostgresStore> store,
                     PostgresStore::Open(config.db_url, password));
    return std::unique_ptr<Store>(std::move(store));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteStore> store,
                   SqliteStore::Open(config.db_path, config.db_max_size_mb));
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Master>> Master::Start(const config::MasterConfig& config,
                                                      Clock& clock) {
  RETURN_IF_ERROR(MakeDirs(config.data_dir));
  ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStore(config));
  return Create(config, clock, std::move(store));
}

absl::StatusOr<std::unique_ptr<Master>> Master::Create(const config::MasterConfig& config,
                                                       Clock& clock,
                                                       std::unique_ptr<Store> store) {
  if (store == nullptr) return absl::InvalidArgumentError("Master::Create: no store");
  std::unique_ptr<Master> m(new Master(config, clock, std::move(store)));
  // Everything the master keeps lives on its loop, recovery included.
  m->loop_.Start();
  absl::Status restored;
  m->loop_.RunSync([&] {
    restored = m->Restore();
    if (!restored.ok()) return;
    m->managers_.liveness.CheckAgents();
    m->turns_.RequestSchedule();
    m->turns_.EndTurn();
  });
  if (!restored.ok()) {
    m->loop_.Stop();
    return restored;
  }
  RETURN_IF_ERROR(m->Serve());
  return m;
}

Master::Master(const config::MasterConfig& config, Clock& clock, std::unique_ptr<Store> store)
    : config_(config),
      clock_(clock),
      store_(std::move(store)),
      loop_(clock),
      turns_(loop_),
      managers_(config_, clock_, *store_, loop_, turns_),
      users_(loop_, *store_, clock, UserServiceOptions{config.session_ttl, config.admin_password}),
      contexts_(clock, *store_),
      service_(config_, clock, turns_,
               MasterService::Managers{managers_.agents, managers_.liveness, managers_.templates,
                                       users_, managers_.logs, managers_.registry,
                                       managers_.experiments, managers_.allocations,
                                       managers_.checkpoints, managers_.metrics, contexts_,
                                       managers_.models, managers_.reads}) {
  // A renamed user keeps what they own; published (EndTurn) before the rename is answered.
  users_.SetRenameHook([this](const std::string& from, const std::string& to) {
    absl::Status st = managers_.experiments.RenameOwner(from, to);
    if (st.ok()) st = managers_.models.RenameOwner(from, to);
    turns_.EndTurn();
    return st;
  });
}

Master::~Master() { Shutdown(); }

absl::Status Master::Restore() {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(StoreSnapshot snap, store_->Load());
  cluster_id_ = snap.cluster_id;
  service_.SetClusterId(cluster_id_);
  RETURN_IF_ERROR(users_.Restore());
  if (config::CheckpointStorageRoots(config_).empty()) {
    Logger("master")->warn(
        "checkpoint_storage_allowed_roots is not set: experiments may keep checkpoints (and "
        "have their garbage collection delete) under any path their task user can write");
  }
  RETURN_IF_ERROR(managers_.Restore(std::move(snap)));
  Logger("master")->info(
      "restored {} experiments, {} trials, {} open allocations, {} running checkpoint GC tasks from {}",
      managers_.registry.experiments.size(), managers_.registry.trials.size(),
      managers_.registry.allocation_trial.size(), managers_.checkpoints.running(), config::DatabaseName(config_));
  return absl::OkStatus();
}

void Master::TrimMemoryUntilStopped() {
  // Resident bytes after the last trim, whether the last look saw them grown, looks since
  // the last trim.
  int64_t trimmed_rss = ResidentBytes();
  bool grown_at_last_look = false;
  int looks_since_trim = 0;
  while (true) {
    {
      absl::MutexLock lock(&trim_mu_);
      if (trim_mu_.AwaitWithTimeout(absl::Condition(&trim_stop_), kMemoryTrimPeriod)) return;
    }
    bool grown = ResidentBytes() > trimmed_rss + kMemoryTrimGrowthBytes;
    if ((grown && grown_at_last_look) || ++looks_since_trim >= kMemoryTrimEveryLooks) {
      malloc_trim(0);
      trimmed_rss = ResidentBytes();
      looks_since_trim = 0;
      grown = false;
    }
    grown_at_last_look = grown;
  }
}

absl::Status Master::Serve() {
  grpc::ServerBuilder builder;
  int port = 0;
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!config_.grpc_tls_cert_file.empty()) {
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    for (auto [path, out] : {std::pair{config_.grpc_tls_cert_file, &pair.cert_chain},
                             std::pair{config_.grpc_tls_key_file, &pair.private_key}}) {
      std::ifstream in(path);
      if (!in) return absl::FailedPreconditionError(absl::StrCat("grpc_tls: cannot read '", path, "'"));
      std::stringstream ss;
      ss << in.rdbuf();
      *out = ss.str();
    }
    grpc::SslServerCredentialsOptions options;
    options.pem_key_cert_pairs.push_back(std::move(pair));
    credentials = grpc::SslServerCredentials(options);
  }
  builder.AddListeningPort(config_.grpc_listen, credentials, &port);
  builder.SetMaxReceiveMessageSize(rpc::kMaxMasterReceiveBytes);
  builder.SetMaxSendMessageSize(kMaxSendBytes);
  services_ = MakeGrpcServices(service_, service_, service_, &users_);
  trimmer_ = std::thread([this] { TrimMemoryUntilStopped(); });
  for (auto& s : services_) builder.RegisterService(s.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on grpc_listen '", config_.grpc_listen,
                     "' (address in use or invalid?)"));
  }
  std::string host = config_.grpc_listen.substr(0, config_.grpc_listen.rfind(':'));
  if (host == "0.0.0.0" || host == "[::]" || host.empty()) host = "127.0.0.1";
  address_ = absl::StrCat(host, ":", port);
  if (!config_.address_file.empty()) {
    std::string tmp = config_.address_file + ".tmp";
    std::ofstream(tmp) << address_ << "\n";
    if (rename(tmp.c_str(), config_.address_file.c_str()) != 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot write address_file '", config_.address_file, "'"));
    }
  }
  Logger("master")->info("det-master {} serving on {} (cluster {}, database {})", kVersion,
                         address_, cluster_id_, config::DatabaseName(config_));
  if (managers_.slurm) managers_.slurm->Serve(address_);
  if (!config_.http_listen.empty()) {
    HttpServerOptions http_options;
    http_options.listen = config_.http_listen;
    http_options.tls_cert_file = config_.http_tls_cert_file;
    http_options.tls_key_file = config_.http_tls_key_file;
    ASSIGN_OR_RETURN(http_, HttpServer::Start(http_options, service_, &users_));
    http_address_ = http_->address();
    if (!config_.http_address_file.empty()) {
      std::string tmp = config_.http_address_file + ".tmp";
      std::ofstream(tmp) << http_address_ << "\n";
      if (rename(tmp.c_str(), config_.http_address_file.c_str()) != 0) {
        return absl::PermissionDeniedError(
            absl::StrCat("cannot write http_address_file '", config_.http_address_file, "'"));
      }
    }
  }
  return absl::OkStatus();
}
void Master::Shutdown() {
  if (trimmer_.joinable()) {
    {
      absl::MutexLock lock(&trim_mu_);
      trim_stop_ = true;
    }
    trimmer_.join();
  }
  if (!server_) return;
  loop_.RunSync([this] { managers_.FailWaiters(absl::UnavailableError("master is shutting down")); });
  if (http_) http_->Stop();  // Before the loop stops: its calls in progress finish there.
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  server_->Wait();
  server_.reset();
  // Work already posted (pending metric and event writes) runs before the loop stops.
  loop_.RunSync([] {});
  loop_.Stop();
  Logger("master")->info("det-master stopped");
}

}  // namespace det::master
