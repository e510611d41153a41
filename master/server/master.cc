#include "master/server/master.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "common/checkpoint/checkpoint_files.h"
#include "common/logging/logging.h"
#include "common/status/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "master/api/grpc_services.h"
#include "master/checkpoints/checkpoint_gc.h"
#include "master/http/http_server.h"
#include "master/logs/log_manager.h"
#include "master/loop/on_loop.h"
#include "master/metrics/downsample.h"
#include "master/scheduler/scheduler.h"
#include "master/scheduling/request_id.h"
#include "master/store/metric_summary.h"
#include "master/store/sqlite_store.h"
#include "master/views/views.h"
#include "nlohmann/json.hpp"

namespace det::master {
namespace {

constexpr absl::Duration kAgentCheckPeriod = absl::Seconds(1);
constexpr absl::Duration kMaxPollWait = absl::Seconds(60);
constexpr int kMaxMessageBytes = 256 << 20;
// Metric rows stored by one group commit at most.
constexpr size_t kMaxRowsPerFlush = 5000;
// Largest model context an experiment may upload (the CLI checks the same limit first).
constexpr int64_t kMaxContextBytes = int64_t{64} << 20;
// How long agents' host metrics are kept, and how many of each agent's latest samples
// GetTrial shows.
constexpr absl::Duration kSystemMetricsRetention = absl::Hours(24);
constexpr int kTrialSystemMetricsSamples = 12;
// How many ended checkpoint GC tasks ListTasks shows (the latest), besides every queued and
// running one.
constexpr int kEndedGcTasksListed = 100;

std::string RandomHex(int bytes) {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < bytes; ++i) absl::StrAppend(&out, absl::Hex(rd() & 0xff, absl::kZeroPad2));
  return out;
}

// "COMPLETED" for STATE_COMPLETED.
std::string StateName(v1::State s) { return v1::State_Name(s).substr(6); }

using views::Terminal;

// After a write of `updated` that returned `written` (evaluated before the call: the
// arguments' order is unspecified): keeps `updated` in `*memory` if the store took it;
// else logs one line naming `what` and returns the refusal, memory unchanged.
template <typename T>
absl::Status WriteThenKeep(absl::Status written, const std::string& what, T* memory, T updated) {
  if (!written.ok()) {
    Logger("master")->error("{}: cannot persist: {}", what, written.ToString());
    return written;
  }
  *memory = std::move(updated);
  return absl::OkStatus();
}

using views::GcAllocationId;

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

}  // namespace

absl::StatusOr<std::unique_ptr<Master>> Master::Start(const config::MasterConfig& config,
                                                      Clock& clock) {
  RETURN_IF_ERROR(MakeDirs(config.data_dir));
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteStore> store, SqliteStore::Open(config.db_path, config.db_max_size_mb));
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
    m->CheckAgents();
    m->RequestSchedule();
    m->EndTurn();
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
      agents_(clock, loop_, *store_,
              AgentManager::Options{config.cluster_secret, config.agent_timeout,
                                    std::min(absl::Seconds(5), config.agent_timeout / 3)}),
      templates_(*store_, clock),
      users_(loop_, *store_, clock, UserServiceOptions{config.session_ttl, config.admin_password}),
      logs_(clock, loop_, *store_,
            [this](int64_t id) -> absl::StatusOr<bool> {
              ASSIGN_OR_RETURN(TrialState * t, FindTrial(id));
              return Terminal(t->trial.state());
            }),
      start_time_ms_(clock.NowMs()) {}

Master::~Master() { Shutdown(); }

absl::Status Master::Restore() {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(StoreSnapshot snap, store_->Load());
  cluster_id_ = snap.cluster_id;
  RETURN_IF_ERROR(users_.Restore());
  agents_.Restore(snap.agents);
  for (auto& e : snap.experiments) {
    ExperimentState& es = experiments_[e.id()];
    auto parsed = config::ParseExperimentConfig(e.config_yaml(), absl::StrCat("experiment ", e.id()),
                                                static_cast<uint32_t>(e.experiment_seed()));
    if (!parsed.ok()) {
      return absl::DataLossError(absl::StrCat("stored config of experiment ", e.id(),
                                              " no longer parses: ", parsed.status().message()));
    }
    es.config = parsed->config;
    es.config_json = parsed->effective_json;
    if (e.priority() == 0) e.set_priority(parsed->config.resources.priority);
    if (e.resource_pool().empty()) e.set_resource_pool(parsed->config.resources.resource_pool);
    e.set_slots_per_trial(parsed->config.resources.slots_per_trial);
    es.experiment = std::move(e);
  }
  for (auto& t : snap.trials) {
    auto e = experiments_.find(t.experiment_id());
    if (e == experiments_.end()) continue;
    e->second.trial_ids.push_back(t.id());
    TrialState& ts = trials_[t.id()];
    ts.trial = std::move(t);
  }
  // Checkpoint GC tasks: a queued one waits for the scheduler; a running one waits for its
  // agent to register again with it (below: requeued if it does not).
  for (auto& task : snap.checkpoint_gc_tasks) {
    GcTaskState& g = gc_tasks_[task.id()];
    g.task = std::move(task);
    if (g.task.state() == v1::STATE_RUNNING) {
      gc_allocations_[GcAllocationId(g.task)] = g.task.id();
      g.unattached = true;
    }
  }
  for (auto& [allocation, token] : snap.open_allocations) {
    auto t = trials_.find(allocation.trial_id());
    if (t == trials_.end() || Terminal(t->second.trial.state())) continue;
    TrialState& ts = t->second;
    *ts.trial.mutable_allocation() = allocation;
    ts.token = token;
    allocation_trial_[allocation.id()] = ts.trial.id();
    if (allocation.chief_port() > 0 && allocation.ranks_size() > 0) {
      chief_ports_.Hold(allocation.ranks(0).agent_id(), allocation.chief_port(), allocation.id());
    }
    for (const auto& r : allocation.ranks()) {
      ts.unattached.insert(r.agent_id());
      agents_.SetSlotsUsed(r.agent_id(), {r.slot_ids().begin(), r.slot_ids().end()}, allocation.id());
    }
  }
  // Trials whose run was not yet placed go back to the queue.
  for (auto& [id, ts] : trials_) {
    if (!Terminal(ts.trial.state()) && ts.trial.allocation().id().empty() &&
        ts.trial.state() != v1::STATE_QUEUED) {
      ts.trial.set_state(v1::STATE_QUEUED);
    }
  }
  // Runs whose agents do not come back in time are lost.
  PostAfter(config_.agent_reconnect_wait, [this] {
    for (auto& [id, ts] : trials_) {
      // Agents that came back and went silent again since wait for their own deadline
      // (AgentDisconnected).
      std::set<std::string> gone;
      for (const auto& agent : ts.unattached) {
        if (agent_disconnects_[agent] == 0) gone.insert(agent);
      }
      if (gone.empty()) continue;
      std::string agents = absl::StrJoin(gone, ", ");
      TrialEvent(id, absl::StrCat("agent(s) ", agents, " did not return after the master restarted"));
      ts.lost = true;
      for (const auto& agent : gone) ts.unattached.erase(agent);
      ExitRanksOn(ts, [&](const std::string& agent) { return gone.count(agent) > 0; },
                  "agent did not return");
    }
    std::vector<int64_t> lost;
    for (const auto& [id, g] : gc_tasks_) {
      if (g.unattached && agent_disconnects_[g.task.agent_id()] == 0) lost.push_back(id);
    }
    for (int64_t id : lost) {
      GcTaskState& g = gc_tasks_.at(id);
      EndCheckpointGc(g, v1::STATE_QUEUED,
                      absl::StrCat("lost: agent ", g.task.agent_id(),
                                   " did not return after the master restarted"));
    }
  });
  // Searchers of the experiments still running, rebuilt from their trials; trials the
  // searcher stopped before the restart end, and trials it wanted but had no time to
  // create are created.
  for (auto& [id, es] : experiments_) {
    if (Terminal(es.experiment.state())) continue;
    RETURN_IF_ERROR(RebuildSearcher(es));
    for (int64_t tid : es.trial_ids) {
      TrialState& ts = trials_.at(tid);
      if (ts.trial.search().stopped_early() && !Terminal(ts.trial.state()) &&
          ts.trial.allocation().id().empty()) {
        FinishTrial(ts, v1::STATE_COMPLETED, "");
      }
    }
    absl::Status st = CreateSearcherTrials(es);
    if (!st.ok()) Logger("master")->error("experiment {}: {}", id, st.ToString());
  }
  for (auto& [id, es] : experiments_) UpdateExperiment(es);
  Logger("master")->info(
      "restored {} experiments, {} trials, {} open allocations, {} running checkpoint GC tasks from {}",
      experiments_.size(), trials_.size(), allocation_trial_.size(), gc_allocations_.size(),
      config_.db_path);
  return absl::OkStatus();
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
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  services_ = MakeGrpcServices(*this, *this, *this, &users_);
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
                         address_, cluster_id_, config_.db_path);
  if (!config_.http_listen.empty()) {
    HttpServerOptions http_options;
    http_options.listen = config_.http_listen;
    http_options.tls_cert_file = config_.http_tls_cert_file;
    http_options.tls_key_file = config_.http_tls_key_file;
    ASSIGN_OR_RETURN(http_, HttpServer::Start(http_options, *this, &users_));
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
  if (!server_) return;
  loop_.RunSync([this] {
    shutting_down_ = true;
    absl::Status bye = absl::UnavailableError("master is shutting down");
    agents_.FailPolls(bye);
    logs_.AnswerAll();
    for (auto& [id, ts] : trials_) {
      AnswerPreemptWaiters(ts, bye);
      for (auto& d : ts.rendezvous_waiters) d(bye);
      ts.rendezvous_waiters.clear();
      ts.rendezvous_responses.clear();
      ts.rendezvous_keys.clear();
    }
  });
  if (http_) http_->Stop();  // Before the loop stops: its calls in progress finish there.
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  server_->Wait();
  server_.reset();
  // Work already posted (pending metric and event writes) runs before the loop stops.
  loop_.RunSync([] {});
  loop_.Stop();
  Logger("master")->info("det-master stopped");
}

void Master::Post(std::function<void()> fn) {
  loop_.Post([this, fn = std::move(fn)] {
    fn();
    EndTurn();
  });
}

EventLoop::TimerId Master::PostAfter(absl::Duration delay, std::function<void()> fn) {
  return loop_.PostAfter(delay, [this, fn = std::move(fn)] {
    fn();
    EndTurn();
  });
}

void Master::OnLoop(Done done, std::function<absl::Status()> fn) {
  loop_.Post([this, done = std::move(done), fn = std::move(fn)] {
    absl::Status st = fn();
    EndTurn();
    done(st);
  });
}

void Master::OnLoopUrgent(Done done, std::function<absl::Status()> fn) {
  loop_.PostUrgent([this, done = std::move(done), fn = std::move(fn)] {
    absl::Status st = fn();
    EndTurn();
    done(st);
  });
}

void Master::EndTurn() {
  DET_CHECK_ON_LOOP(loop_);
  // A pass may request another (a placement that failed at once requeues its task): a
  // few run here; beyond that the posted pass of RequestSchedule runs them.
  constexpr int kMaxPassesPerTurn = 4;
  for (int i = 0; schedule_requested_ && i < kMaxPassesPerTurn; ++i) {
    schedule_requested_ = false;
    SchedulePass();
  }
  if (logs_.HasPendingEvents()) logs_.FlushEvents();
}

// ---------------------------------------------------------------------------------------
// User API.

void Master::GetMasterInfo(const Caller&, const v1::GetMasterInfoRequest&,
                           v1::GetMasterInfoResponse* resp, Done done) {
  OnLoop(std::move(done), [this, resp] {
    resp->set_version(kVersion);
    resp->set_cluster_id(cluster_id_);
    resp->set_cluster_name(config_.cluster_name);
    resp->set_start_time_ms(start_time_ms_);
    resp->set_database(config_.db_path);
    resp->set_scheduler(config_.scheduler_fit);
    return absl::OkStatus();
  });
}

void Master::GetMasterStats(const Caller&, const v1::GetMasterStatsRequest&,
                            v1::GetMasterStatsResponse* resp, Done done) {
  OnLoop(std::move(done), [this, resp] {
    *resp = counters_;
    resp->set_log_lines_stored_total(logs_.lines_stored_total());
    resp->set_api_calls_authenticated_total(users_.authenticated());
    resp->set_api_calls_rejected_total(users_.rejected());
    resp->set_uptime_ms(clock_.NowMs() - start_time_ms_);
    views::CountCluster(agents_.List(), ExperimentRows(), resp);
    return absl::OkStatus();
  });
}

void Master::CreateExperiment(const Caller& caller, const v1::CreateExperimentRequest& req,
                              v1::CreateExperimentResponse* resp, Done done) {
  OnLoop(std::move(done), [this, &req, resp, owner = caller.user.username()]() -> absl::Status {
    std::string file = req.config_path().empty() ? "config" : req.config_path();
    std::random_device rd;
    config::ConfigInput input;
    input.config_yaml = req.config_yaml();
    input.config_path = file;
    input.template_name = req.template_();
    input.overrides.assign(req.config_overrides().begin(), req.config_overrides().end());
    ASSIGN_OR_RETURN(config::ParsedExperiment parsed,
                     config::ParseExperimentConfig(input, templates_.Lookup(), rd()));
    const config::ExperimentConfig& c = parsed.config;
    if (!FindPool(c.resources.resource_pool)) {
      std::vector<std::string> names;
      for (const auto& p : config_.resource_pools) names.push_back(p.name);
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": resources.resource_pool: unknown pool '", c.resources.resource_pool,
          "' (the master has ", absl::StrJoin(names, ", "), ")"));
    }
    if (std::string why = NeverFits(c.resources.resource_pool, c.resources.slots_per_trial);
        !why.empty() && !req.force()) {
      return absl::FailedPreconditionError(absl::StrCat(
          file, ": resources.slots_per_trial: ", c.resources.slots_per_trial,
          " can never be scheduled: ", why, " (submit with --force to queue it anyway)"));
    }
    int64_t context_bytes = 0;
    for (const auto& f : req.context()) context_bytes += static_cast<int64_t>(f.content().size());
    if (context_bytes > kMaxContextBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model context: ", req.context_size(), " files of ", context_bytes,
          " bytes in all, over the master's limit of ", kMaxContextBytes >> 20,
          " MiB; keep data sets and checkpoints out of the context directory"));
    }
    v1::ModelContext context;
    for (const auto& f : req.context()) *context.add_files() = f;

    v1::Experiment e;
    e.set_name(c.name);
    e.set_description(c.description);
    e.set_owner(owner);
    e.set_state(v1::STATE_ACTIVE);
    e.set_config_yaml(parsed.effective_yaml);
    e.set_start_time_ms(clock_.NowMs());
    e.set_searcher(c.searcher.name);
    e.set_experiment_seed(c.experiment_seed);
    ASSIGN_OR_RETURN(std::unique_ptr<searcher::Searcher> search, searcher::NewSearcher(c));
    e.set_num_trials(search->PlannedTrials());
    e.set_priority(c.resources.priority);
    e.set_resource_pool(c.resources.resource_pool);
    e.set_slots_per_trial(c.resources.slots_per_trial);
    for (const auto& w : parsed.warnings) e.add_warnings(w);
    // The searcher's first trials, stored with the experiment in one transaction.
    std::vector<v1::Trial> trials;
    for (const searcher::TrialRequest& r : search->NextTrials()) {
      v1::Trial& t = trials.emplace_back();
      t.set_state(v1::STATE_QUEUED);
      t.set_seed(r.seed);
      t.set_hparams_json(r.hparams_json);
      t.set_target_batches(r.target_batches);
      t.mutable_search()->set_bracket(r.bracket);
    }
    ASSIGN_OR_RETURN(int64_t id,
                     store_->InsertExperiment(e, context.SerializeAsString(), &trials));
    e.set_id(id);
    counters_.set_experiments_created_total(counters_.experiments_created_total() + 1);
    ExperimentState& es = experiments_[id];
    es.experiment = e;
    es.config = c;
    es.config_json = parsed.effective_json;
    es.searcher = std::move(search);
    for (auto& t : trials) {
      es.trial_ids.push_back(t.id());
      trials_[t.id()].trial = std::move(t);
    }
    Logger("master")->info("experiment {} created: {} ({} searcher, {} trial(s), {} slot(s) each{})",
                           id, c.name, c.searcher.name, e.num_trials(), c.resources.slots_per_trial,
                           parsed.template_name.empty() ? "" : ", template " + parsed.template_name);
    for (const auto& w : parsed.warnings) TrialEvent(es.trial_ids[0], "warning: " + w);
    *resp->mutable_experiment() = e;
    for (const auto& w : parsed.warnings) resp->add_warnings(w);
    RequestSchedule();
    return absl::OkStatus();
  });
}

void Master::ListExperiments(const Caller&, const v1::ListExperimentsRequest& req,
                             v1::ListExperimentsResponse* resp, Done done) {
  OnLoop(std::move(done), [this, &req, resp] {
    const std::set<int> states(req.states().begin(), req.states().end());
    int matched = 0;
    for (const auto& [id, es] : experiments_) {
      const v1::Experiment& e = es.experiment;
      if (!states.empty() && !states.count(e.state())) continue;
      if (!req.name().empty() && e.name().find(req.name()) == std::string::npos) continue;
      if (!req.user().empty() && e.owner() != req.user()) continue;
      if (matched++ < req.offset()) continue;
      if (req.limit() > 0 && resp->experiments_size() >= req.limit()) continue;
      *resp->add_experiments() = e;
    }
    resp->set_total(matched);
    return absl::OkStatus();
  });
}

void Master::GetExperiment(const Caller&, const v1::GetExperimentRequest& req,
                           v1::GetExperimentResponse* resp, Done done) {
  OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    auto it = experiments_.find(req.id());
    if (it == experiments_.end()) {
      return absl::NotFoundError(absl::StrCat("experiment ", req.id(), " not found"));
    }
    *resp->mutable_experiment() = it->second.experiment;
    for (int64_t tid : it->second.trial_ids) *resp->add_trials() = TrialView(trials_.at(tid));
    return absl::OkStatus();
  });
}

void Master::KillExperiment(const Caller&, const v1::KillExperimentRequest& req,
                            v1::KillExperimentResponse*, Done done) {
  OnLoop(std::move(done), [this, &req]() -> absl::Status {
    auto it = experiments_.find(req.id());
    if (it == experiments_.end()) {
      return absl::NotFoundError(absl::StrCat("experiment ", req.id(), " not found"));
    }
    ExperimentState& es = it->second;
    if (Terminal(es.experiment.state())) return absl::OkStatus();
    v1::Experiment updated = es.experiment;
    updated.set_state(v1::STATE_STOPPING);
    RETURN_IF_ERROR(PersistExperiment(es, updated));
    Logger("master")->info("experiment {}: kill requested", req.id());
    for (int64_t tid : es.trial_ids) {
      TrialState& t = trials_.at(tid);
      if (Terminal(t.trial.state())) continue;
      if (t.trial.allocation().id().empty()) {
        FinishTrial(t, v1::STATE_CANCELED, "");
      } else {
        KillAllocation(t, "experiment killed");
      }
    }
    UpdateExperiment(es);
    return absl::OkStatus();
  });
}

absl::StatusOr<Master::ExperimentState*> Master::MoveExperiment(int64_t id, v1::State from,
                                                               v1::State to) {
  auto it = experiments_.find(id);
  if (it == experiments_.end()) {
    return absl::NotFoundError(absl::StrCat("experiment ", id, " not found"));
  }
  ExperimentState& es = it->second;
  if (es.experiment.state() == to) return nullptr;
  if (es.experiment.state() != from) {
    return absl::FailedPreconditionError(absl::StrCat(
        "experiment ", id, " is ", StateName(es.experiment.state()), ", not ", StateName(from)));
  }
  v1::Experiment updated = es.experiment;
  updated.set_state(to);
  RETURN_IF_ERROR(PersistExperiment(es, std::move(updated)));
  Logger("master")->info("experiment {}: {}", id, StateName(to));
  return &es;
}

void Master::PauseExperiment(const Caller&, const v1::PauseExperimentRequest& req,
                             v1::PauseExperimentResponse*, Done done) {
  OnLoop(std::move(done), [this, &req]() -> absl::Status {
    ASSIGN_OR_RETURN(ExperimentState * moved,
                     MoveExperiment(req.id(), v1::STATE_ACTIVE, v1::STATE_PAUSED));
    if (!moved) return absl::OkStatus();  // Already PAUSED.
    ExperimentState& es = *moved;
    for (int64_t tid : es.trial_ids) {
      TrialState& t = trials_.at(tid);
      if (t.trial.state() == v1::STATE_QUEUED) {
        v1::Trial paused = t.trial;
        paused.set_state(v1::STATE_PAUSED);
        RETURN_IF_ERROR(PersistTrial(t, std::move(paused)));
        waiting_reason_.erase(tid);
        TrialEvent(tid, "experiment paused");
      } else if (!t.trial.allocation().id().empty()) {
        KillAllocation(t, "experiment paused");  // Workers checkpoint on SIGTERM.
      }
    }
    UpdateExperiment(es);
    return absl::OkStatus();
  });
}

void Master::ActivateExperiment(const Caller&, const v1::ActivateExperimentRequest& req,
                                v1::ActivateExperimentResponse*, Done done) {
  OnLoop(std::move(done), [this, &req]() -> absl::Status {
    ASSIGN_OR_RETURN(ExperimentState * moved,
                     MoveExperiment(req.id(), v1::STATE_PAUSED, v1::STATE_ACTIVE));
    if (!moved) return absl::OkStatus();  // Already ACTIVE.
    ExperimentState& es = *moved;
    for (int64_t tid : es.trial_ids) {
      TrialState& t = trials_.at(tid);
      if (t.trial.state() != v1::STATE_PAUSED) continue;
      v1::Trial queued = t.trial;
      queued.set_state(v1::STATE_QUEUED);
      RETURN_IF_ERROR(PersistTrial(t, std::move(queued)));
      TrialEvent(tid, absl::StrCat("experiment activated; queued on ",
                                   es.experiment.slots_per_trial(), " slot(s)"));
    }
    // Trials the searcher asked for while the experiment was paused.
    if (absl::Status st = CreateSearcherTrials(es); !st.ok()) {
      Logger("master")->error("experiment {}: {}", req.id(), st.ToString());
    }
    UpdateExperiment(es);
    RequestSchedule();
    return absl::OkStatus();
  });
}

void Master::SetExperimentSlots(const Caller&, const v1::SetExperimentSlotsRequest& req,
                                v1::SetExperimentSlotsResponse* resp, Done done) {
  OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    auto it = experiments_.find(req.id());
    if (it == experiments_.end()) {
      return absl::NotFoundError(absl::StrCat("experiment ", req.id(), " not found"));
    }
    ExperimentState& es = it->second;
    if (es.experiment.state() != v1::STATE_PAUSED) {
      return absl::FailedPreconditionError(absl::StrCat(
          "experiment ", req.id(), " is ", StateName(es.experiment.state()),
          ": pause it first (det experiment pause ", req.id(), ")"));
    }
    for (int64_t tid : es.trial_ids) {
      if (!trials_.at(tid).trial.allocation().id().empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "experiment ", req.id(), ": trial ", tid, " is still stopping; try again shortly"));
      }
    }
    int slots = req.slots_per_trial();
    if (slots < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("slots_per_trial: expected an integer >= 1, got ", slots));
    }
    int64_t global = es.config.global_batch_size;
    if (global > 0 && global % slots != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "slots_per_trial ", slots, " does not divide global_batch_size ", global,
          ": the same global batch could not be kept (use a divisor of ", global, ")"));
    }
    if (std::string why = NeverFits(es.experiment.resource_pool(), slots);
        !why.empty() && !req.force()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "slots_per_trial ", slots, " can never be scheduled: ", why, " (use --force)"));
    }
    config::ConfigInput input;
    input.config_yaml = es.experiment.config_yaml();
    input.config_path = absl::StrCat("experiment ", req.id());
    input.overrides.push_back(absl::StrCat("resources.slots_per_trial=", slots));
    auto no_template = [](const std::string& name) -> absl::StatusOr<std::string> {
      return absl::NotFoundError(absl::StrCat("template ", name, " not found"));
    };
    ASSIGN_OR_RETURN(config::ParsedExperiment parsed,
                     config::ParseExperimentConfig(
                         input, no_template, static_cast<uint32_t>(es.experiment.experiment_seed())));
    v1::Experiment updated = es.experiment;
    updated.set_config_yaml(parsed.effective_yaml);
    updated.set_slots_per_trial(slots);
    RETURN_IF_ERROR(PersistExperiment(es, updated));
    es.config = parsed.config;
    es.config_json = parsed.effective_json;
    for (int64_t tid : es.trial_ids) {
      TrialEvent(tid, absl::StrCat("slots_per_trial set to ", slots));
    }
    *resp->mutable_experiment() = updated;
    return absl::OkStatus();
  });
}

void Master::GetTrial(const Caller&, const v1::GetTrialRequest& req, v1::GetTrialResponse* resp,
                      Done done) {
  OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    ASSIGN_OR_RETURN(TrialState * t, FindTrial(req.id()));
    *resp->mutable_trial() = TrialView(*t);
    std::set<std::string> agents;
    for (const auto& r : t->trial.allocation().ranks()) agents.insert(r.agent_id());
    for (const auto& agent_id : agents) {
      ASSIGN_OR_RETURN(auto samples, store_->GetSystemMetrics(agent_id, kTrialSystemMetricsSamples));
      for (auto& m : samples) *resp->add_system_metrics() = std::move(m);
    }
    return absl::OkStatus();
  });
}

void Master::GetTrialMetrics(const Caller&, const v1::GetTrialMetricsRequest& req,
                             v1::GetTrialMetricsResponse* resp, Done done) {
  OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    RETURN_IF_ERROR(FindTrial(req.trial_id()).status());
    ASSIGN_OR_RETURN(auto rows, store_->GetMetrics(req.trial_id(), req.group()));
    rows = DownsampleMetrics(std::move(rows), req.max_points());
    for (auto& m : rows) *resp->add_metrics() = std::move(m);
    return absl::OkStatus();
  });
}

void Master::ListCheckpoints(const Caller&, const v1::ListCheckpointsRequest& req,
                             v1::ListCheckpointsResponse* resp, Done done) {
  OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    auto it = experiments_.find(req.experiment_id());
    if (it == experiments_.end()) {
      return absl::NotFoundError(absl::StrCat("experiment ", req.experiment_id(), " not found"));
    }
    const auto& ids = it->second.trial_ids;
    if (req.trial_id() != 0 && std::find(ids.begin(), ids.end(), req.trial_id()) == ids.end()) {
      return absl::NotFoundError(
          absl::StrCat("trial ", req.trial_id(), " is not a trial of experiment ", req.experiment_id()));
    }
    std::vector<v1::Checkpoint> all;
    for (int64_t tid : ids) {
      if (req.trial_id() != 0 && tid != req.trial_id()) continue;
      ASSIGN_OR_RETURN(auto cs, store_->GetCheckpoints(tid));
      all.insert(all.end(), cs.begin(), cs.end());
    }
    std::stable_sort(all.begin(), all.end(), [](const v1::Checkpoint& a, const v1::Checkpoint& b) {
      return a.report_time_ms() < b.report_time_ms();
    });
    for (auto& c : all) {
      c.set_experiment_id(req.experiment_id());
      if (c.state() == v1::STATE_UNSPECIFIED) c.set_state(v1::STATE_COMPLETED);
      *resp->add_checkpoints() = std::move(c);
    }
    return absl::OkStatus();
  });
}

void Master::GetTrialLogs(const Caller&, const v1::GetTrialLogsRequest& req,
                          v1::GetTrialLogsResponse* resp, Done done) {
  Post([this, &req, resp, done = std::move(done)]() mutable {
    logs_.Read(req, resp, std::move(done), /*no_wait=*/shutting_down_);
  });
}

void Master::ListAgents(const Caller&, const v1::ListAgentsRequest&, v1::ListAgentsResponse* resp,
                        Done done) {
  OnLoop(std::move(done), [this, resp] {
    for (auto& a : agents_.List()) *resp->add_agents() = std::move(a);
    return absl::OkStatus();
  });
}

void Master::EnableAgent(const Caller&, const v1::EnableAgentRequest& req,
                         v1::EnableAgentResponse* resp, Done done) {
  OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    ASSIGN_OR_RETURN(*resp->mutable_agent(), agents_.SetEnabled(req.agent_id(), true));
    RequestSchedule();
    return absl::OkStatus();
  });
}

void Master::DisableAgent(const Caller&, const v1::DisableAgentRequest& req,
                          v1::DisableAgentResponse* resp, Done done) {
  OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    ASSIGN_OR_RETURN(*resp->mutable_agent(), agents_.SetEnabled(req.agent_id(), false));
    if (req.drain()) return absl::OkStatus();
    // Not draining: its runs stop and are rescheduled elsewhere, not counted as restarts.
    for (auto& [tid, t] : trials_) {
      bool on_agent = false;
      for (const auto& r : t.trial.allocation().ranks()) on_agent |= r.agent_id() == req.agent_id();
      if (!on_agent) continue;
      t.lost = true;
      KillAllocation(t, absl::StrCat("agent ", req.agent_id(), " disabled"));
    }
    return absl::OkStatus();
  });
}

void Master::ListJobs(const Caller&, const v1::ListJobsRequest& req, v1::ListJobsResponse* resp,
                      Done done) {
  OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    if (!req.resource_pool().empty() && !FindPool(req.resource_pool())) {
      return absl::NotFoundError(absl::StrCat("resource pool '", req.resource_pool(), "' not found"));
    }
    for (auto& j : views::Jobs(ExperimentRows(), req.resource_pool())) *resp->add_jobs() = std::move(j);
    return absl::OkStatus();
  });
}

void Master::UpdateJobPriority(const Caller&, const v1::UpdateJobPriorityRequest& req,
                               v1::UpdateJobPriorityResponse*, Done done) {
  OnLoop(std::move(done), [this, &req]() -> absl::Status {
    if (req.priority() < 1 || req.priority() > 99) {
      return absl::InvalidArgumentError(
          absl::StrCat("priority: expected an integer in [1, 99], got ", req.priority()));
    }
    auto it = experiments_.find(req.experiment_id());
    if (it == experiments_.end()) {
      return absl::NotFoundError(absl::StrCat("job ", req.experiment_id(), " not found"));
    }
    v1::Experiment updated = it->second.experiment;
    updated.set_priority(req.priority());
    RETURN_IF_ERROR(PersistExperiment(it->second, std::move(updated)));
    Logger("master")->info("experiment {}: priority set to {}", req.experiment_id(), req.priority());
    RequestSchedule();
    return absl::OkStatus();
  });
}

void Master::ListTasks(const Caller&, const v1::ListTasksRequest&, v1::ListTasksResponse* resp,
                       Done done) {
  OnLoop(std::move(done), [this, resp] {
    for (const views::ExperimentRow& row : ExperimentRows()) {
      for (const views::TrialRow& t : row.trials) {
        if (t.trial->allocation().id().empty()) continue;
        *resp->add_tasks() = views::TrialTask(t, row.experiment->resource_pool());
      }
    }
    // Tasks in trial-id order, as before the views were split out.
    std::stable_sort(resp->mutable_tasks()->begin(), resp->mutable_tasks()->end(),
                     [](const v1::Task& a, const v1::Task& b) { return a.trial_id() < b.trial_id(); });
    int ended = 0;
    for (const auto& [id, g] : gc_tasks_) ended += Terminal(g.task.state());
    for (const auto& [id, g] : gc_tasks_) {
      if (Terminal(g.task.state()) && ended-- > kEndedGcTasksListed) continue;
      *resp->add_tasks() = views::GcTask(g.task, g.pending_reason);
    }
    return absl::OkStatus();
  });
}

void Master::ListResourcePools(const Caller&, const v1::ListResourcePoolsRequest&,
                               v1::ListResourcePoolsResponse* resp, Done done) {
  OnLoop(std::move(done), [this, resp] {
    for (auto& p : views::ResourcePools(config_.resource_pools, agents_.List(), ExperimentRows())) {
      *resp->add_pools() = std::move(p);
    }
    return absl::OkStatus();
  });
}

std::vector<views::ExperimentRow> Master::ExperimentRows() const {
  std::vector<views::ExperimentRow> rows;
  rows.reserve(experiments_.size());
  for (const auto& [id, es] : experiments_) {
    views::ExperimentRow& row = rows.emplace_back();
    row.experiment = &es.experiment;
    for (int64_t tid : es.trial_ids) {
      const TrialState& t = trials_.at(tid);
      auto w = waiting_reason_.find(tid);
      row.trials.push_back({&t.trial, t.killing, w == waiting_reason_.end() ? nullptr : &w->second});
    }
  }
  return rows;
}

void Master::SetTemplate(const Caller&, const v1::SetTemplateRequest& req,
                         v1::SetTemplateResponse* resp, Done done) {
  OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    bool created = false;
    ASSIGN_OR_RETURN(*resp->mutable_template_(),
                     templates_.Set(req.name(), req.config_yaml(), req.config_path(), &created));
    resp->set_created(created);
    Logger("master")->info("template {} {}", req.name(), created ? "created" : "replaced");
    return absl::OkStatus();
  });
}

void Master::ListTemplates(const Caller&, const v1::ListTemplatesRequest&,
                           v1::ListTemplatesResponse* resp, Done done) {
  OnLoop(std::move(done), [this, resp]() -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<v1::Template> all, templates_.List());
    for (auto& t : all) *resp->add_templates() = std::move(t);
    return absl::OkStatus();
  });
}

void Master::GetTemplate(const Caller&, const v1::GetTemplateRequest& req,
                         v1::GetTemplateResponse* resp, Done done) {
  OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    ASSIGN_OR_RETURN(*resp->mutable_template_(), templates_.Get(req.name()));
    return absl::OkStatus();
  });
}

void Master::RemoveTemplate(const Caller&, const v1::RemoveTemplateRequest& req,
                            v1::RemoveTemplateResponse*, Done done) {
  OnLoop(std::move(done), [this, &req]() -> absl::Status {
    RETURN_IF_ERROR(templates_.Remove(req.name()));
    Logger("master")->info("template {} removed", req.name());
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------------
// Agent channel.

void Master::Register(const v1::RegisterRequest& req, v1::RegisterResponse* resp, Done done) {
  OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    std::string pool = req.resource_pool().empty() ? "default" : req.resource_pool();
    if (!FindPool(pool)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "agent ", req.agent_id(), ": resource_pool '", pool,
          "' is not defined in the master's resource_pools"));
    }
    ASSIGN_OR_RETURN(std::string session, agents_.Register(req));
    resp->set_session_id(session);
    resp->set_heartbeat_interval_ms(
        static_cast<int32_t>(absl::ToInt64Milliseconds(std::min(absl::Seconds(5), config_.agent_timeout / 3))));
    const std::string& agent_id = req.agent_id();
    std::set<std::string> running(req.running_allocations().begin(), req.running_allocations().end());
    // What the agent still runs and we want: reattach. What we do not want: kill.
    for (const auto& alloc_id : running) {
      auto gc = gc_allocations_.find(alloc_id);
      if (gc != gc_allocations_.end() && gc_tasks_.at(gc->second).task.agent_id() == agent_id) {
        GcTaskState& g = gc_tasks_.at(gc->second);
        g.unattached = false;
        TrialEvent(g.task.trial_id(), absl::StrCat("agent ", agent_id,
                                                   " reattached checkpoint garbage collection ", alloc_id));
        continue;
      }
      auto at = allocation_trial_.find(alloc_id);
      TrialState* t = at == allocation_trial_.end() ? nullptr : &trials_.at(at->second);
      if (t && t->unattached.erase(agent_id)) {
        for (const auto& r : t->trial.allocation().ranks()) {
          if (r.agent_id() == agent_id) {
            agents_.SetSlotsUsed(agent_id, {r.slot_ids().begin(), r.slot_ids().end()}, alloc_id);
          }
        }
        TrialEvent(t->trial.id(), absl::StrCat("agent ", agent_id, " reattached"));
        continue;
      }
      // Unknown, or its ranks on this agent already count as exited (lost): stop them.
      bool ours_exited = true;
      if (t) {
        for (const auto& r : t->trial.allocation().ranks()) {
          ours_exited &= r.agent_id() != agent_id || t->exits.count(r.rank()) > 0;
        }
      }
      if (ours_exited) resp->add_kill_allocations(alloc_id);
    }
    // Runs placed on this agent that it no longer has: their processes are gone.
    for (auto& [tid, t] : trials_) {
      const v1::Allocation& a = t.trial.allocation();
      if (a.id().empty() || running.count(a.id())) continue;
      bool on_agent = false;
      for (const auto& r : a.ranks()) on_agent |= r.agent_id() == agent_id;
      if (!on_agent) continue;
      t.unattached.erase(agent_id);
      t.lost = true;
      ExitRanksOn(t, [&](const std::string& agent) { return agent == agent_id; },
                  "agent restarted without it");
    }
    std::vector<int64_t> gone;
    for (const auto& [alloc_id, id] : gc_allocations_) {
      if (gc_tasks_.at(id).task.agent_id() == agent_id && !running.count(alloc_id)) gone.push_back(id);
    }
    for (int64_t id : gone) {
      EndCheckpointGc(gc_tasks_.at(id), v1::STATE_QUEUED,
                      absl::StrCat("lost: agent ", agent_id, " restarted without it"));
    }
    RequestSchedule();
    return absl::OkStatus();
  });
}

void Master::Heartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse*, Done done) {
  OnLoopUrgent(std::move(done), [this, &req]() -> absl::Status {
    RETURN_IF_ERROR(agents_.Touch(req.agent_id(), req.session_id()));
    if (req.system_metrics_size() == 0) return absl::OkStatus();
    std::vector<v1::SystemMetrics> samples(req.system_metrics().begin(), req.system_metrics().end());
    for (auto& m : samples) m.set_agent_id(req.agent_id());
    // An error makes the agent keep the samples and send them again.
    return store_->AddSystemMetrics(
        samples, clock_.NowMs() - absl::ToInt64Milliseconds(kSystemMetricsRetention));
  });
}

void Master::PollCommands(const v1::PollCommandsRequest& req, v1::PollCommandsResponse* resp,
                          Done done) {
  Post([this, &req, resp, done = std::move(done)]() mutable {
    if (shutting_down_) {
      done(absl::UnavailableError("master is shutting down"));
      return;
    }
    auto wait = std::clamp(absl::Milliseconds(req.wait_ms()), absl::ZeroDuration(), kMaxPollWait);
    agents_.Poll(req.agent_id(), req.session_id(), wait,
                 [resp, done = std::move(done)](absl::Status st, std::vector<v1::AgentCommand> cmds) {
                   for (auto& c : cmds) *resp->add_commands() = std::move(c);
                   done(st);
                 });
  });
}

void Master::ReportLaunched(const v1::ReportLaunchedRequest& req, v1::ReportLaunchedResponse*,
                            Done done) {
  OnLoop(std::move(done), [this, &req]() -> absl::Status {
    RETURN_IF_ERROR(agents_.Touch(req.agent_id(), req.session_id()));
    auto at = allocation_trial_.find(req.allocation_id());
    if (at == allocation_trial_.end()) return absl::OkStatus();
    TrialState& t = trials_.at(at->second);
    if (t.trial.state() == v1::STATE_STARTING) {
      v1::Trial running = t.trial;
      running.set_state(v1::STATE_RUNNING);
      running.mutable_allocation()->set_state(v1::STATE_RUNNING);
      RETURN_IF_ERROR(PersistAllocation(running.allocation(), t.token));
      RETURN_IF_ERROR(PersistTrial(t, std::move(running)));
      UpdateExperiment(experiments_.at(t.trial.experiment_id()));
    }
    TrialEvent(t.trial.id(), absl::StrCat("agent ", req.agent_id(), " started rank(s) ",
                                          absl::StrJoin(req.ranks(), ", ")));
    return absl::OkStatus();
  });
}

void Master::ReportExit(const v1::ReportExitRequest& req, v1::ReportExitResponse*, Done done) {
  OnLoop(std::move(done), [this, &req]() -> absl::Status {
    RETURN_IF_ERROR(agents_.Touch(req.agent_id(), req.session_id()));
    std::string how = req.signal() != 0 ? absl::StrCat("killed by signal ", req.signal())
                                        : absl::StrCat("exit code ", req.exit_code());
    if (!req.message().empty()) absl::StrAppend(&how, " (", req.message(), ")");
    bool abnormal = req.signal() != 0 || req.exit_code() != 0;
    if (auto gc = gc_allocations_.find(req.allocation_id()); gc != gc_allocations_.end()) {
      GcTaskState& g = gc_tasks_.at(gc->second);
      if (g.task.agent_id() != req.agent_id()) return absl::OkStatus();
      if (req.agent_stopping()) {
        EndCheckpointGc(g, v1::STATE_QUEUED,
                        absl::StrCat("stopped: agent ", req.agent_id(), " is shutting down"));
      } else if (!abnormal) {
        EndCheckpointGc(g, v1::STATE_COMPLETED, "");
      } else {
        EndCheckpointGc(g, v1::STATE_ERROR,
                        g.last_error_line.empty() ? how : absl::StrCat(how, ": ", g.last_error_line));
      }
      return absl::OkStatus();
    }
    auto at = allocation_trial_.find(req.allocation_id());
    if (at == allocation_trial_.end()) return absl::OkStatus();  // Already ended.
    TrialState& t = trials_.at(at->second);
    if (req.agent_stopping()) t.lost = true;
    OnRankExit(t, req.rank(), how, abnormal);
    return absl::OkStatus();
  });
}

void Master::ShipLogs(const v1::ShipLogsRequest& req, v1::ShipLogsResponse*, Done done) {
  OnLoop(std::move(done), [this, &req]() -> absl::Status {
    RETURN_IF_ERROR(agents_.Touch(req.agent_id(), req.session_id()));
    std::vector<v1::LogLine> lines;
    std::set<int64_t> touched;
    for (const auto& l : req.lines()) {
      auto at = allocation_trial_.find(l.allocation_id());
      auto gc = gc_allocations_.find(l.allocation_id());
      // Lines of runs already ended are still stored against their trial.
      if (at == allocation_trial_.end() && gc == gc_allocations_.end() &&
          trials_.count(l.trial_id()) == 0) {
        continue;
      }
      v1::LogLine line = l;
      line.set_agent_id(req.agent_id());
      if (at != allocation_trial_.end()) line.set_trial_id(at->second);
      if (gc != gc_allocations_.end()) {
        // A checkpoint GC task's output goes to the log of the trial that started it.
        GcTaskState& g = gc_tasks_.at(gc->second);
        line.set_trial_id(g.task.trial_id());
        if (l.stream() == "stderr") g.last_error_line = l.message();
      }
      touched.insert(line.trial_id());
      lines.push_back(std::move(line));
    }
    if (req.dropped() > 0 && !lines.empty()) {
      v1::LogLine note = lines.front();
      note.set_stream("agent");
      note.set_message(absl::StrCat("[", req.dropped(), " log lines dropped while the master was unreachable]"));
      lines.insert(lines.begin(), note);
    }
    return logs_.AddLines(&lines, {touched.begin(), touched.end()});
  });
}

// ---------------------------------------------------------------------------------------
// Worker channel.

absl::StatusOr<Master::TrialState*> Master::AuthorizeWorker(const v1::WorkerAuth& auth) {
  auto at = allocation_trial_.find(auth.allocation_id());
  if (at == allocation_trial_.end()) {
    return absl::PermissionDeniedError(
        absl::StrCat("allocation ", auth.allocation_id(), " is not running"));
  }
  TrialState& t = trials_.at(at->second);
  if (auth.token().size() != t.token.size() || auth.token() != t.token) {
    return absl::PermissionDeniedError("worker token does not match its allocation");
  }
  return &t;
}

void Master::ReportMetrics(const v1::ReportMetricsRequest& req, v1::ReportMetricsResponse*,
                           Done done) {
  Post([this, &req, done = std::move(done)]() mutable {
    absl::Status st = [&]() -> absl::Status {
      ASSIGN_OR_RETURN(TrialState * t, AuthorizeWorker(req.auth()));
      if (req.trial_id() != t->trial.id()) {
        return absl::PermissionDeniedError(
            absl::StrCat("allocation ", req.auth().allocation_id(), " may report only for trial ",
                         t->trial.id(), ", not ", req.trial_id()));
      }
      for (const auto& m : req.metrics()) {
        if (m.group().empty()) return absl::InvalidArgumentError("metrics.group: must not be empty");
      }
      for (const auto& m : req.metrics()) {
        v1::Metrics& row = pending_metrics_.rows.emplace_back(m);
        row.set_trial_id(t->trial.id());
        row.set_run_id(t->trial.run_id());
        if (row.report_time_ms() == 0) row.set_report_time_ms(clock_.NowMs());
      }
      return absl::OkStatus();
    }();
    if (!st.ok()) {
      done(st);
      return;
    }
    pending_metrics_.acks.push_back(std::move(done));
    pending_metrics_.ack_rows.push_back(static_cast<size_t>(req.metrics_size()));
    if (!pending_metrics_.flush_posted) {
      pending_metrics_.flush_posted = true;
      Post([this] { FlushMetrics(); });
    }
  });
}

void Master::FlushMetrics() {
  DET_CHECK_ON_LOOP(loop_);
  PendingMetrics batch = std::move(pending_metrics_);
  pending_metrics_ = PendingMetrics();
  if (batch.rows.size() > kMaxRowsPerFlush) {
    // Keep transactions short so nothing waits long behind one; the rest goes next.
    size_t keep_acks = 0, rows = 0;
    for (; keep_acks < batch.acks.size() && rows < kMaxRowsPerFlush; ++keep_acks) {
      rows += batch.ack_rows[keep_acks];
    }
    pending_metrics_.rows.assign(std::make_move_iterator(batch.rows.begin() + rows),
                                 std::make_move_iterator(batch.rows.end()));
    pending_metrics_.acks.assign(std::make_move_iterator(batch.acks.begin() + keep_acks),
                                 std::make_move_iterator(batch.acks.end()));
    pending_metrics_.ack_rows.assign(batch.ack_rows.begin() + keep_acks, batch.ack_rows.end());
    batch.rows.resize(rows);
    batch.acks.resize(keep_acks);
    batch.ack_rows.resize(keep_acks);
    if (!pending_metrics_.acks.empty()) {
      pending_metrics_.flush_posted = true;
      Post([this] { FlushMetrics(); });
    }
  }
  // The trials' summaries as they will be once the rows are stored.
  std::map<int64_t, v1::Trial> updated;
  for (const v1::Metrics& m : batch.rows) {
    auto t = trials_.find(m.trial_id());
    if (t == trials_.end()) continue;
    auto [it, inserted] = updated.try_emplace(m.trial_id(), t->second.trial);
    ApplyToSummaries(m, &it->second);
  }
  std::vector<v1::Trial> trials;
  for (const auto& [id, t] : updated) trials.push_back(t);
  absl::Status st = store_->AddMetrics(trials, batch.rows);
  if (st.ok()) {
    counters_.set_metric_rows_stored_total(counters_.metric_rows_stored_total() +
                                           static_cast<int64_t>(batch.rows.size()));
    std::set<int64_t> experiments;
    for (auto& [id, u] : updated) {
      v1::Trial& live = trials_.at(id).trial;
      *live.mutable_training_summary() = u.training_summary();
      *live.mutable_validation_summary() = u.validation_summary();
      *live.mutable_timings_summary() = u.timings_summary();
      live.set_total_batches(u.total_batches());
      experiments.insert(live.experiment_id());
    }
    for (const v1::Metrics& m : batch.rows) {
      if (m.group() == "validation") SearcherValidation(m);
    }
    for (int64_t e : experiments) UpdateExperiment(experiments_.at(e));
  } else {
    Logger("master")->error("cannot store {} metric rows: {}", batch.rows.size(), st.ToString());
  }
  // Acknowledged only now that the rows are stored (or refused with the reason).
  for (auto& ack : batch.acks) ack(st);
}

void Master::ReportCheckpoint(const v1::ReportCheckpointRequest& req,
                              v1::ReportCheckpointResponse*, Done done) {
  OnLoop(std::move(done), [this, &req]() -> absl::Status {
    ASSIGN_OR_RETURN(TrialState * t, AuthorizeWorker(req.auth()));
    v1::Checkpoint c = req.checkpoint();
    // Only a directory of its own in the experiment's checkpoint storage: garbage
    // collection later deletes what is registered here.
    const ExperimentState& es = experiments_.at(t->trial.experiment_id());
    nlohmann::json config = nlohmann::json::parse(es.config_json, nullptr, /*allow_exceptions=*/false);
    ASSIGN_OR_RETURN(std::string directory, CheckpointDirectory(config));
    RETURN_IF_ERROR(CheckReportedCheckpoint(c, directory));
    if (!c.metadata_json().empty()) {
      nlohmann::json metadata =
          nlohmann::json::parse(c.metadata_json(), nullptr, /*allow_exceptions=*/false);
      if (!metadata.is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint.metadata_json: expected a JSON object (or nothing), got '",
            c.metadata_json().substr(0, 80), c.metadata_json().size() > 80 ? "...'" : "'"));
      }
    }
    c.set_trial_id(t->trial.id());
    c.set_experiment_id(t->trial.experiment_id());
    c.set_state(v1::STATE_COMPLETED);
    if (c.report_time_ms() == 0) c.set_report_time_ms(clock_.NowMs());
    // A retry of a report whose checkpoint row was stored but whose trial update was
    // refused registers nothing twice.
    ASSIGN_OR_RETURN(std::vector<v1::Checkpoint> stored, store_->GetCheckpoints(t->trial.id()));
    const bool retry = std::any_of(stored.begin(), stored.end(), [&](const v1::Checkpoint& s) {
      return s.uuid() == c.uuid() && s.storage_path() == c.storage_path();
    });
    if (!retry) {
      if (absl::Status st = store_->AddCheckpoint(c); !st.ok()) {
        Logger("master")->error("trial {}: cannot store checkpoint {}: {}", t->trial.id(),
                                c.uuid(), st.ToString());
        return st;
      }
      counters_.set_checkpoints_stored_total(counters_.checkpoints_stored_total() + 1);
    }
    v1::Trial updated = t->trial;
    updated.set_latest_checkpoint(c.storage_path());
    RETURN_IF_ERROR(PersistTrial(*t, std::move(updated)));
    TrialEvent(t->trial.id(), absl::StrCat("checkpoint ", c.uuid(), " at batch ", c.total_batches()));
    return absl::OkStatus();
  });
}

void Master::Rendezvous(const v1::RendezvousRequest& req, v1::RendezvousResponse* resp,
                        Done done) {
  Post([this, &req, resp, done = std::move(done)]() mutable {
    auto t_or = AuthorizeWorker(req.auth());
    if (!t_or.ok()) {
      done(t_or.status());
      return;
    }
    TrialState& t = **t_or;
    int world = t.trial.allocation().ranks_size();
    if (req.auth().rank() < 0 || req.auth().rank() >= world) {
      done(absl::InvalidArgumentError(absl::StrCat("auth.rank: ", req.auth().rank(),
                                                   " is outside the world of ", world)));
      return;
    }
    const std::string key = req.key();  // `req` dies once its waiter is answered.
    std::map<int, std::string>& round = t.rendezvous[key];
    if (static_cast<int>(round.size()) < world) round[req.auth().rank()] = req.address();
    t.rendezvous_waiters.push_back(std::move(done));
    t.rendezvous_responses.push_back(resp);
    t.rendezvous_keys.push_back(key);
    if (static_cast<int>(round.size()) < world) return;
    for (size_t i = 0; i < t.rendezvous_waiters.size();) {
      if (t.rendezvous_keys[i] != key) {
        ++i;
        continue;
      }
      v1::RendezvousResponse* r = t.rendezvous_responses[i];
      r->set_ready(true);
      for (const auto& [rank, addr] : round) r->add_addresses(addr);
      Done waiter = std::move(t.rendezvous_waiters[i]);
      t.rendezvous_waiters.erase(t.rendezvous_waiters.begin() + i);
      t.rendezvous_responses.erase(t.rendezvous_responses.begin() + i);
      t.rendezvous_keys.erase(t.rendezvous_keys.begin() + i);
      waiter(absl::OkStatus());
    }
  });
}

void Master::ShouldPreempt(const v1::ShouldPreemptRequest& req, v1::ShouldPreemptResponse* resp,
                           Done done) {
  Post([this, &req, resp, done = std::move(done)]() mutable {
    const v1::WorkerAuth& auth = req.auth();
    if (auto ended = ended_allocations_.find(auth.allocation_id());
        ended != ended_allocations_.end() && !auth.token().empty() &&
        ended->second == auth.token()) {
      done(absl::FailedPreconditionError(
          absl::StrCat("allocation ", auth.allocation_id(), " has ended")));
      return;
    }
    auto t_or = AuthorizeWorker(auth);
    if (!t_or.ok()) {
      done(t_or.status());
      return;
    }
    TrialState& t = **t_or;
    if (t.killing || req.wait_ms() <= 0 || shutting_down_) {
      resp->set_preempt(t.killing);
      resp->set_reason(t.kill_reason);
      done(absl::OkStatus());
      return;
    }
    const int64_t trial_id = t.trial.id();
    auto wait = std::min(absl::Milliseconds(req.wait_ms()), kMaxPollWait);
    auto timer = PostAfter(wait, [this, trial_id, resp] {
      auto& waiters = trials_.at(trial_id).preempt_waiters;
      for (auto it = waiters.begin(); it != waiters.end(); ++it) {
        if (it->response != resp) continue;
        Done d = std::move(it->done);
        waiters.erase(it);
        d(absl::OkStatus());  // Not asked to stop within the wait.
        return;
      }
    });
    t.preempt_waiters.push_back({resp, std::move(done), timer});
  });
}

void Master::AnswerPreemptWaiters(TrialState& t, const absl::Status& status) {
  std::vector<TrialState::PreemptWaiter> waiters = std::move(t.preempt_waiters);
  t.preempt_waiters.clear();
  for (auto& w : waiters) {
    loop_.Cancel(w.timer);
    w.response->set_preempt(t.killing);
    w.response->set_reason(t.kill_reason);
    w.done(status);
  }
}

// ---------------------------------------------------------------------------------------
// Scheduling and the life of a trial.

void Master::RequestSchedule() {
  DET_CHECK_ON_LOOP(loop_);
  schedule_requested_ = true;
  // The pass runs at the end of the current turn (EndTurn); this posted turn only serves
  // a request made outside one.
  if (schedule_posted_) return;
  schedule_posted_ = true;
  Post([this] { schedule_posted_ = false; });
}

void Master::SchedulePass() {
  DET_CHECK_ON_LOOP(loop_);
  RequestIds ids;
  std::vector<scheduler::Request> queue;
  std::vector<scheduler::Running> running;
  for (const auto& [id, t] : trials_) {
    const ExperimentState& es = experiments_.at(t.trial.experiment_id());
    const v1::Experiment& e = es.experiment;
    if (t.trial.state() == v1::STATE_QUEUED) {
      queue.push_back({ids.Add(RequestId::Trial(id)), e.slots_per_trial(), e.priority(), id,
                       e.resource_pool()});
    } else if (!t.trial.allocation().id().empty() && !t.killing) {
      scheduler::Running r{ids.Add(RequestId::Trial(id)), e.priority(), id, e.resource_pool(), {}};
      std::map<std::string, std::vector<std::string>> shares;
      for (const auto& rank : t.trial.allocation().ranks()) {
        auto& slots = shares[rank.agent_id()];
        slots.insert(slots.end(), rank.slot_ids().begin(), rank.slot_ids().end());
      }
      for (auto& [agent, slots] : shares) r.agents.push_back({agent, std::move(slots)});
      running.push_back(std::move(r));
    }
  }
  // Checkpoint GC tasks: zero-slot requests in their experiment's pool.
  for (const auto& [id, g] : gc_tasks_) {
    if (g.task.state() != v1::STATE_QUEUED) continue;
    auto es = experiments_.find(g.task.experiment_id());
    int priority = es == experiments_.end() ? 42 : es->second.experiment.priority();
    queue.push_back({ids.Add(RequestId::Gc(id)), 0, priority, id, g.task.resource_pool()});
  }
  if (queue.empty()) return;
  auto fit = config_.scheduler_fit == "worst_fit" ? scheduler::Fit::kWorstFit
                                                  : scheduler::Fit::kBestFit;
  std::vector<scheduler::AgentView> view = agents_.SchedulerView();
  scheduler::Decision d = scheduler::Schedule(view, queue, fit);
  std::vector<std::string> preemptible;
  for (const auto& p : config_.resource_pools) {
    if (p.preemption) preemptible.push_back(p.name);
  }
  std::map<std::string, int> stopping_for;  // waiting request -> trials being preempted
  if (!preemptible.empty()) {
    for (const auto& [victim, beneficiary] :
         scheduler::SelectPreemptions(view, queue, running, d, fit, preemptible)) {
      TrialState& t = trials_.at(ids.At(victim).id);
      t.preempting = true;
      ++stopping_for[beneficiary];
      const auto* pool = FindPool(experiments_.at(t.trial.experiment_id()).experiment.resource_pool());
      KillAllocation(t, absl::StrCat("preempted by trial ", beneficiary),
                     pool ? pool->preemption_timeout : absl::ZeroDuration());
    }
  }
  for (auto [request, why] : d.waiting) {
    const RequestId& rid = ids.At(request);
    if (rid.kind == RequestId::Kind::kGc) {
      gc_tasks_.at(rid.id).pending_reason = why;
      continue;
    }
    if (stopping_for.count(request)) {
      why = absl::StrCat("waiting for ", stopping_for[request],
                         " less important trial(s) to stop (preempted)");
    }
    SetWaitingReason(rid.id, why, /*verbose=*/true);
  }
  for (const auto& p : d.placements) {
    const RequestId& rid = ids.At(p.request_id);
    if (rid.kind == RequestId::Kind::kGc) {
      StartCheckpointGc(gc_tasks_.at(rid.id), p.agents.at(0).agent_id);
      continue;
    }
    std::vector<AgentShare> agents;
    for (const auto& a : p.agents) agents.push_back({a.agent_id, a.slots});
    // torchrun's MASTER_PORT: a port of rank 0's agent no other open allocation holds.
    const std::string& chief_agent = agents.at(0).agent_id;
    auto chief = agents_.Chief(chief_agent);
    std::optional<int> port;
    if (chief.ok()) port = chief_ports_.Lowest(chief_agent, chief->port_first, chief->port_last);
    if (!port) {
      SetWaitingReason(
          rid.id, chief.ok() ? absl::StrCat("waiting for a chief port on agent ", chief_agent,
                                            ": all ", chief->port_last - chief->port_first + 1,
                                            " ports of its chief_port_range ", chief->port_first,
                                            "..", chief->port_last,
                                            " are held by running allocations")
                             : std::string(chief.status().message()));
      continue;
    }
    waiting_reason_.erase(rid.id);
    StartAllocation(trials_.at(rid.id), agents, chief->address, *port);
  }
}

void Master::SetWaitingReason(int64_t trial_id, const std::string& why, bool verbose) {
  std::string& reason = waiting_reason_[trial_id];
  if (reason == why) return;
  reason = why;
  TrialEvent(trial_id, "waiting: " + why, verbose);
}

const config::ResourcePoolConfig* Master::FindPool(const std::string& name) const {
  for (const auto& p : config_.resource_pools) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::string Master::NeverFits(const std::string& pool, int slots) const {
  if (slots == 0) return "";
  std::map<int, int> count_by_size;
  int total = 0;
  for (const auto& a : agents_.List()) {
    if (a.resource_pool() != pool || a.slots_size() == 0) continue;
    count_by_size[a.slots_size()]++;
    total += a.slots_size();
  }
  if (count_by_size.empty()) return "";  // No agents yet: it waits, and says why.
  int largest = count_by_size.rbegin()->first;
  if (slots <= largest) return "";
  std::string sizes;
  for (const auto& [size, count] : count_by_size) {
    if (slots % size == 0 && size * count >= slots) return "";
    absl::StrAppend(&sizes, sizes.empty() ? "" : ", ", count, " x ", size, "-slot");
  }
  if (slots > total) {
    return absl::StrCat("resource pool '", pool, "' has ", total, " slots in all (", sizes,
                        " agents)");
  }
  return absl::StrCat("agents in resource pool '", pool, "' are ", sizes,
                      "; a multi-agent trial must use a multiple of one agent size");
}

bool Master::StartAllocation(TrialState& t, const std::vector<AgentShare>& agents,
                             const std::string& chief_address, int chief_port) {
  DET_CHECK_ON_LOOP(loop_);
  ExperimentState& es = experiments_.at(t.trial.experiment_id());
  if (t.trial.run_id() > 0) {
    // This run starts from the latest checkpoint (or from scratch): what earlier runs
    // reported after it is superseded, so the curve keeps one value per batch.
    int64_t from = 0;
    auto checkpoints = store_->GetCheckpoints(t.trial.id());
    if (checkpoints.ok()) {
      for (const auto& c : *checkpoints) {
        if (!t.trial.latest_checkpoint().empty() && c.storage_path() == t.trial.latest_checkpoint()) {
          from = c.total_batches();
        }
      }
    }
    v1::Trial updated = t.trial;
    auto deleted = store_->SupersedeMetrics(&updated, t.trial.run_id(), from);
    if (!deleted.ok()) {
      Logger("master")->error("trial {}: cannot supersede metrics: {}", t.trial.id(),
                              deleted.status().ToString());
    } else if (*deleted > 0) {
      t.trial = std::move(updated);
      TrialEvent(t.trial.id(), absl::StrCat(*deleted, " metric rows reported after batch ", from,
                                            " by earlier runs superseded by run ", t.trial.run_id()));
    }
  }
  v1::Allocation a;
  a.set_id(absl::StrCat(t.trial.id(), ".", t.trial.run_id()));
  a.set_trial_id(t.trial.id());
  a.set_slots(es.config.resources.slots_per_trial);
  a.set_state(v1::STATE_STARTING);
  a.set_start_time_ms(clock_.NowMs());
  a.set_chief_address(chief_address);
  a.set_chief_port(chief_port);
  for (auto& r : PlaceRanks(agents)) *a.add_ranks() = std::move(r);
  // Stored before anything is launched: a run the store does not know is never started.
  const std::string token = RandomHex(24);
  v1::Trial started = t.trial;
  *started.mutable_allocation() = a;
  started.set_state(v1::STATE_STARTING);
  if (started.start_time_ms() == 0) started.set_start_time_ms(clock_.NowMs());
  absl::Status stored = PersistAllocation(a, token);
  if (stored.ok()) stored = PersistTrial(t, std::move(started));
  if (!stored.ok()) {
    waiting_reason_[t.trial.id()] =
        absl::StrCat("cannot store its allocation: ", stored.message());
    return false;
  }
  t.token = token;
  t.exits.clear();
  t.unattached.clear();
  t.killing = t.lost = t.preempting = false;
  t.kill_reason.clear();
  t.failure.clear();
  t.rendezvous.clear();
  allocation_trial_[a.id()] = t.trial.id();
  chief_ports_.Hold(agents.at(0).agent_id, chief_port, a.id());
  counters_.set_allocations_started_total(counters_.allocations_started_total() + 1);

  v1::ModelContext context;
  auto blob = store_->GetExperimentContext(es.experiment.id());
  if (blob.ok()) context.ParseFromString(*blob);
  LaunchInputs in;
  in.experiment_id = es.experiment.id();
  in.trial = t.trial;
  in.config_json = es.config_json;
  in.entrypoint = es.config.entrypoint;
  in.environment.insert(es.config.environment_variables.begin(),
                        es.config.environment_variables.end());
  in.max_restarts = es.config.max_restarts;
  in.token = t.token;
  in.context = &context;
  in.chief_address = chief_address;
  in.chief_port = chief_port;
  for (auto& [agent_id, launch] : BuildLaunchCommands(in, a, agents)) {
    for (const AgentShare& share : agents) {
      if (share.agent_id == agent_id) agents_.SetSlotsUsed(agent_id, share.slots, a.id());
    }
    v1::AgentCommand cmd;
    *cmd.mutable_launch() = std::move(launch);
    agents_.Send(agent_id, std::move(cmd));
  }
  std::vector<std::string> where;
  for (const AgentShare& share : agents) {
    where.push_back(absl::StrCat(share.agent_id, share.slots.empty() ? "" : absl::StrCat(" (slots ", absl::StrJoin(share.slots, ","), ")")));
  }
  TrialEvent(t.trial.id(), absl::StrCat("allocation ", a.id(), " scheduled on ",
                                        absl::StrJoin(where, ", "), "; chief ", chief_address, ":",
                                        chief_port));
  UpdateExperiment(es);
  return true;
}

void Master::KillAllocation(TrialState& t, const std::string& reason, absl::Duration grace) {
  if (t.killing) return;
  t.killing = true;
  t.kill_reason = reason;
  AnswerPreemptWaiters(t, absl::OkStatus());
  std::set<std::string> agents;
  for (const auto& r : t.trial.allocation().ranks()) agents.insert(r.agent_id());
  for (const auto& agent_id : agents) {
    v1::AgentCommand cmd;
    cmd.mutable_kill()->set_allocation_id(t.trial.allocation().id());
    cmd.mutable_kill()->set_reason(reason);
    cmd.mutable_kill()->set_grace_ms(static_cast<int32_t>(absl::ToInt64Milliseconds(grace)));
    if (!agents_.Send(agent_id, std::move(cmd))) {
      // Unreachable agent: its ranks count as gone.
      ExitRanksOn(t, [&](const std::string& agent) { return agent == agent_id; },
                  "agent unreachable");
    }
  }
  TrialEvent(t.trial.id(), absl::StrCat("stopping allocation ", t.trial.allocation().id(), ": ", reason));
}

void Master::OnRankExit(TrialState& t, int rank, const std::string& how, bool abnormal) {
  if (t.trial.allocation().id().empty() || t.exits.count(rank)) return;
  t.exits[rank] = how;
  TrialEvent(t.trial.id(), absl::StrCat("rank ", rank, " exited: ", how));
  if (abnormal && t.failure.empty()) {
    t.failure = absl::StrCat("rank ", rank, " ", how);
    KillAllocation(t, absl::StrCat("rank ", rank, " failed"));
  }
  if (static_cast<int>(t.exits.size()) >= t.trial.allocation().ranks_size()) EndAllocation(t);
}

void Master::EndAllocation(TrialState& t) {
  DET_CHECK_ON_LOOP(loop_);
  v1::Allocation* a = t.trial.mutable_allocation();
  ExperimentState& es = experiments_.at(t.trial.experiment_id());
  bool stopping = es.experiment.state() == v1::STATE_STOPPING;
  v1::State outcome = v1::STATE_COMPLETED;
  std::string error;
  const bool stopped_early = t.trial.search().stopped_early();
  if (stopping) {
    outcome = v1::STATE_CANCELED;
  } else if (es.experiment.state() == v1::STATE_PAUSED && t.killing) {
    outcome = v1::STATE_PAUSED;  // Resumes from its checkpoint when activated.
  } else if (stopped_early) {
    outcome = v1::STATE_COMPLETED;  // The searcher stopped it: done, with the length it has.
  } else if (t.lost || t.preempting) {
    outcome = v1::STATE_QUEUED;  // Rerun; losing an agent or a preemption is not the trial's fault.
  } else if (!t.failure.empty()) {
    if (t.trial.restarts() < es.config.max_restarts) {
      outcome = v1::STATE_QUEUED;
      t.trial.set_restarts(t.trial.restarts() + 1);
    } else {
      outcome = v1::STATE_ERROR;
      error = absl::StrCat(t.failure, "; max_restarts (", es.config.max_restarts, ") reached");
    }
  }
  a->set_state(t.failure.empty() || stopping || stopped_early ? v1::STATE_COMPLETED
                                                              : v1::STATE_ERROR);
  a->set_end_time_ms(clock_.NowMs());
  a->set_exit_reason(stopped_early ? "stopped early by the searcher"
                     : t.failure.empty() ? "all ranks exited normally"
                                         : t.failure);
  (void)PersistAllocation(*a, t.token);  // Logged; the runs have ended either way.
  agents_.ReleaseSlots(a->id());
  chief_ports_.Release(a->id());
  allocation_trial_.erase(a->id());
  ended_allocations_[a->id()] = t.token;
  AnswerPreemptWaiters(t, absl::FailedPreconditionError(
                              absl::StrCat("allocation ", a->id(), " has ended")));
  for (auto& d : t.rendezvous_waiters) d(absl::AbortedError("allocation ended"));
  t.rendezvous_waiters.clear();
  t.rendezvous_responses.clear();
  t.rendezvous_keys.clear();
  std::string alloc_id = a->id();
  t.last_allocation = *a;
  t.trial.clear_allocation();
  if (outcome == v1::STATE_PAUSED) {
    t.trial.set_run_id(t.trial.run_id() + 1);
    t.trial.set_state(v1::STATE_PAUSED);
    TrialEvent(t.trial.id(), absl::StrCat("allocation ", alloc_id, " stopped: experiment paused"));
    RecordTrial(t);
  } else if (outcome == v1::STATE_QUEUED) {
    t.trial.set_run_id(t.trial.run_id() + 1);
    t.trial.set_state(v1::STATE_QUEUED);
    TrialEvent(t.trial.id(),
               t.preempting ? absl::StrCat("allocation ", alloc_id, " preempted; requeued (not counted as a restart)")
               : t.lost ? absl::StrCat("allocation ", alloc_id, " lost; rescheduling (not counted as a restart)")
                      : absl::StrCat("allocation ", alloc_id, " failed: ", t.failure, "; restart ",
                                     t.trial.restarts(), " of ", es.config.max_restarts));
    RecordTrial(t);
    RequestSchedule();
  } else {
    FinishTrial(t, outcome, error);
  }
  UpdateExperiment(es);
  RequestSchedule();
}

void Master::FinishTrial(TrialState& t, v1::State state, const std::string& error) {
  t.trial.set_state(state);
  t.trial.set_end_time_ms(clock_.NowMs());
  t.trial.set_error(error);
  waiting_reason_.erase(t.trial.id());
  RecordTrial(t);
  TrialEvent(t.trial.id(), absl::StrCat("trial ", StateName(state),
                                        error.empty() ? "" : absl::StrCat(": ", error)));
  if (state == v1::STATE_COMPLETED && t.trial.total_batches() == 0 &&
      t.trial.training_summary().empty() && t.trial.validation_summary().empty()) {
    TrialEvent(t.trial.id(),
               absl::StrCat("trial ", t.trial.id(), " reported no metrics and no progress: its "
                            "workers exited normally without reporting a batch (does the "
                            "entrypoint report through det's harness?)"));
  }
  logs_.AnswerWaiters(t.trial.id());
  ExperimentState& es = experiments_.at(t.trial.experiment_id());
  if (es.searcher) {
    es.searcher->OnTrialEnded(TrialIndex(es, t.trial.id()));
    absl::Status st = CreateSearcherTrials(es);
    if (!st.ok()) Logger("master")->error("experiment {}: {}", es.experiment.id(), st.ToString());
  }
  UpdateExperiment(es);
  CollectCheckpoints(experiments_.at(t.trial.experiment_id()), t.trial.id());
}

void Master::CollectCheckpoints(ExperimentState& es, int64_t ended_trial) {
  auto policy = GcPolicyFromConfig(es.config_json);
  if (!policy.ok()) {
    Logger("master")->error("experiment {}: no checkpoint garbage collection: {}", es.experiment.id(),
                            policy.status().ToString());
    return;
  }
  // Without save_experiment_best only the ended trial's checkpoints are at stake; with it,
  // the ranking spans the experiment, which is collected once every trial has ended.
  bool all_ended = true;
  for (int64_t tid : es.trial_ids) all_ended = all_ended && Terminal(trials_.at(tid).trial.state());
  if (policy->save_experiment_best > 0 && !all_ended) return;
  std::vector<v1::Checkpoint> all;
  std::set<int64_t> ended;
  for (int64_t tid : es.trial_ids) {
    if (policy->save_experiment_best == 0 && tid != ended_trial) continue;
    auto cs = store_->GetCheckpoints(tid);
    if (!cs.ok()) {
      Logger("master")->error("trial {}: cannot read checkpoints: {}", tid, cs.status().ToString());
      return;
    }
    all.insert(all.end(), cs->begin(), cs->end());
    if (Terminal(trials_.at(tid).trial.state())) ended.insert(tid);
  }
  std::vector<const v1::CheckpointGcTask*> tasks;
  for (const auto& [id, g] : gc_tasks_) tasks.push_back(&g.task);
  std::vector<std::string> to_delete = NotYetCollected(CheckpointsToDelete(all, ended, *policy), tasks);
  if (to_delete.empty()) return;
  const std::set<std::string> doomed(to_delete.begin(), to_delete.end());
  v1::CheckpointGcTask task;
  task.set_experiment_id(es.experiment.id());
  task.set_trial_id(ended_trial);
  task.set_resource_pool(es.experiment.resource_pool());
  task.set_state(v1::STATE_QUEUED);
  task.set_create_time_ms(clock_.NowMs());
  for (const auto& c : all) {
    if (!doomed.count(c.uuid())) continue;
    v1::Checkpoint* k = task.add_checkpoints();
    k->set_uuid(c.uuid());
    k->set_trial_id(c.trial_id());
    k->set_experiment_id(es.experiment.id());
    k->set_total_batches(c.total_batches());
    k->set_storage_path(c.storage_path());
  }
  absl::StatusOr<int64_t> id = store_->InsertCheckpointGcTask(task);
  if (!id.ok()) {
    Logger("master")->error("experiment {}: cannot store a checkpoint GC task: {}", es.experiment.id(),
                            id.status().ToString());
    TrialEvent(ended_trial,
               absl::StrCat("checkpoint garbage collection not started: ", id.status().message()));
    return;
  }
  task.set_id(*id);
  GcTaskState& g = gc_tasks_[*id];
  g.task = std::move(task);
  TrialEvent(ended_trial,
             absl::StrCat("checkpoint garbage collection ", RequestId::Gc(*id).Key(), " queued: ",
                          doomed.size(), " checkpoint(s) to delete on an agent of resource pool '",
                          g.task.resource_pool(), "'"));
  RequestSchedule();
}

void Master::StartCheckpointGc(GcTaskState& g, const std::string& agent_id) {
  v1::CheckpointGcTask running = g.task;
  running.set_state(v1::STATE_RUNNING);
  running.set_agent_id(agent_id);
  running.set_start_time_ms(clock_.NowMs());
  running.clear_error();
  // Stored before it is launched; else it stays queued and says why.
  if (absl::Status st = PersistGcTask(g, std::move(running)); !st.ok()) {
    g.pending_reason = absl::StrCat("cannot store its start: ", st.message());
    return;
  }
  v1::CheckpointGcTask& t = g.task;
  g.unattached = false;
  g.pending_reason.clear();
  g.last_error_line.clear();
  const std::string alloc_id = GcAllocationId(t);
  gc_allocations_[alloc_id] = t.id();

  v1::AgentCommand cmd;
  v1::LaunchCommand* l = cmd.mutable_launch();
  l->set_allocation_id(alloc_id);
  l->set_trial_id(t.trial_id());
  l->set_experiment_id(t.experiment_id());
  v1::RankPlacement* r = l->add_ranks();
  r->set_rank(0);
  r->set_agent_id(agent_id);
  r->set_local_rank(0);
  l->set_world_size(1);
  l->set_num_agents(1);
  (*l->mutable_env())["DET_EXPERIMENT_ID"] = absl::StrCat(t.experiment_id());
  (*l->mutable_env())["DET_ALLOCATION_ID"] = alloc_id;
  *l->mutable_checkpoint_gc()->mutable_checkpoints() = t.checkpoints();
  TrialEvent(t.trial_id(),
             absl::StrCat("checkpoint garbage collection ", alloc_id, " scheduled on ", agent_id,
                          " (0 slots): deleting ", t.checkpoints_size(), " checkpoint(s)"));
  if (!agents_.Send(agent_id, std::move(cmd))) {
    EndCheckpointGc(g, v1::STATE_QUEUED, absl::StrCat("not started: agent ", agent_id, " is unreachable"));
  }
}

void Master::EndCheckpointGc(GcTaskState& g, v1::State outcome, const std::string& why) {
  v1::CheckpointGcTask& t = g.task;
  const std::string alloc_id = GcAllocationId(t);
  const std::string agent_id = t.agent_id();
  gc_allocations_.erase(alloc_id);
  g.unattached = false;
  if (outcome == v1::STATE_QUEUED) {
    // Deleting again what the lost attempt already deleted is harmless.
    t.set_state(v1::STATE_QUEUED);
    t.set_attempt(t.attempt() + 1);
    t.clear_agent_id();
    t.clear_start_time_ms();
    (void)PersistGcTask(g, t);  // Logged; the attempt is gone either way.
    TrialEvent(t.trial_id(),
               absl::StrCat("checkpoint garbage collection ", alloc_id, " ", why, "; requeued"));
    RequestSchedule();
    return;
  }
  t.set_state(outcome);
  t.set_end_time_ms(clock_.NowMs());
  if (outcome == v1::STATE_ERROR) t.set_error(why);
  // With COMPLETED, its checkpoints become DELETED in the same write. Should it fail, the
  // stored task stays RUNNING and a restarted master runs it again.
  (void)PersistGcTask(g, t);
  if (outcome == v1::STATE_COMPLETED) {
    for (const v1::Checkpoint& c : t.checkpoints()) {
      TrialEvent(c.trial_id(), absl::StrCat("checkpoint ", c.uuid(), " (batch ", c.total_batches(),
                                            ") deleted by garbage collection"));
    }
    TrialEvent(t.trial_id(),
               absl::StrCat("checkpoint garbage collection ", alloc_id, " completed on ", agent_id));
  } else {
    Logger("master")->error("checkpoint garbage collection {} failed on {}: {}", alloc_id, agent_id, why);
    TrialEvent(t.trial_id(),
               absl::StrCat("checkpoint garbage collection ", alloc_id, " failed on ", agent_id, ": ", why));
  }
}

absl::Status Master::PersistGcTask(GcTaskState& g, v1::CheckpointGcTask updated) {
  absl::Status written = store_->UpdateCheckpointGcTask(updated);
  std::string what = absl::StrCat("checkpoint GC task ", updated.id());
  return WriteThenKeep(std::move(written), what, &g.task, std::move(updated));
}

int Master::TrialIndex(const ExperimentState& es, int64_t trial_id) {
  auto it = std::find(es.trial_ids.begin(), es.trial_ids.end(), trial_id);
  return it == es.trial_ids.end() ? -1 : static_cast<int>(it - es.trial_ids.begin());
}

absl::Status Master::RebuildSearcher(ExperimentState& es) {
  std::vector<searcher::TrialRecord> records;
  for (int64_t tid : es.trial_ids) {
    const v1::Trial& t = trials_.at(tid).trial;
    searcher::TrialRecord& r = records.emplace_back();
    r.bracket = t.search().bracket();
    r.rung_metrics.assign(t.search().rung_metrics().begin(), t.search().rung_metrics().end());
    r.stopped = t.search().stopped_early();
    r.ended = Terminal(t.state());
  }
  auto search = searcher::NewSearcher(es.config, std::move(records));
  if (!search.ok()) {
    return absl::DataLossError(absl::StrCat("experiment ", es.experiment.id(),
                                            ": cannot rebuild its searcher: ",
                                            search.status().message()));
  }
  es.searcher = *std::move(search);
  return absl::OkStatus();
}

absl::Status Master::CreateSearcherTrials(ExperimentState& es) {
  // Only an active experiment grows (a paused one catches up when activated).
  if (!es.searcher || es.experiment.state() != v1::STATE_ACTIVE) return absl::OkStatus();
  for (const searcher::TrialRequest& r : es.searcher->NextTrials()) {
    v1::Trial t;
    t.set_experiment_id(es.experiment.id());
    t.set_state(v1::STATE_QUEUED);
    t.set_seed(r.seed);
    t.set_hparams_json(r.hparams_json);
    t.set_target_batches(r.target_batches);
    t.mutable_search()->set_bracket(r.bracket);
    absl::StatusOr<int64_t> id = store_->InsertTrial(t);
    if (!id.ok()) {
      // The searcher counted trials that do not exist: start it again from those that do.
      absl::Status rebuilt = RebuildSearcher(es);
      return absl::Status(id.status().code(),
                          absl::StrCat("cannot create trial ", r.index, " of the search: ",
                                       id.status().message(),
                                       rebuilt.ok() ? "" : absl::StrCat("; ", rebuilt.message())));
    }
    t.set_id(*id);
    es.trial_ids.push_back(*id);
    trials_[*id].trial = t;
    TrialEvent(*id, absl::StrCat("created by the ", es.config.searcher.name, " searcher (trial ",
                                 r.index + 1, " of ", es.searcher->PlannedTrials(), ")"));
  }
  RequestSchedule();
  return absl::OkStatus();
}

void Master::SearcherValidation(const v1::Metrics& m) {
  auto t_it = trials_.find(m.trial_id());
  if (t_it == trials_.end()) return;
  TrialState& t = t_it->second;
  ExperimentState& es = experiments_.at(t.trial.experiment_id());
  if (!es.searcher || Terminal(t.trial.state())) return;
  if (t.trial.search().stopped_early()) {
    // Still reporting: the stop did not reach the run (the master restarted meanwhile).
    if (!t.trial.allocation().id().empty()) KillAllocation(t, "stopped early by the searcher");
    return;
  }
  const std::string& metric = es.config.searcher.metric;
  auto value = m.values().find(metric);
  if (value == m.values().end()) {
    if (!t.searcher_metric_missing) {
      t.searcher_metric_missing = true;
      TrialEvent(t.trial.id(), absl::StrCat("warning: the validation metrics lack searcher.metric '",
                                            metric, "'; the searcher cannot judge this trial"));
    }
    return;
  }
  const int index = TrialIndex(es, t.trial.id());
  if (index < 0) return;
  searcher::Decision d = es.searcher->OnValidation(index, m.total_batches(), value->second);
  const searcher::TrialRecord& r = es.searcher->Record(index);
  v1::TrialSearch* s = t.trial.mutable_search();
  if (r.rung_metrics.size() == static_cast<size_t>(s->rung_metrics_size()) && !d.stop) return;
  s->mutable_rung_metrics()->Assign(r.rung_metrics.begin(), r.rung_metrics.end());
  if (d.stop) {
    s->set_stopped_early(true);
    s->set_stop_reason(d.reason);
  }
  RecordTrial(t);
  if (!d.stop) return;
  TrialEvent(t.trial.id(), d.reason);
  if (!t.trial.allocation().id().empty()) {
    KillAllocation(t, "stopped early by the searcher");
  } else {
    FinishTrial(t, v1::STATE_COMPLETED, "");
  }
}

void Master::UpdateExperiment(ExperimentState& es) {
  v1::Experiment updated = es.experiment;
  double progress = 0;
  int done = 0, completed = 0;
  for (int64_t tid : es.trial_ids) {
    const v1::Trial& t = trials_.at(tid).trial;
    if (Terminal(t.state())) {
      ++done;
      completed += t.state() == v1::STATE_COMPLETED;
      progress += 1;
    } else if (t.target_batches() > 0) {
      progress += std::min(1.0, static_cast<double>(t.total_batches()) / t.target_batches());
    }
  }
  int n = static_cast<int>(es.trial_ids.size());
  // Trials the searcher has yet to create count as not started.
  const int planned = std::max(n, es.searcher ? es.searcher->PlannedTrials() : 0);
  updated.set_progress(planned ? progress / planned : 0);
  const bool search_done = !es.searcher || es.searcher->Done() ||
                           updated.state() == v1::STATE_STOPPING;
  if (!Terminal(updated.state()) && n > 0 && done == n && search_done) {
    if (updated.state() == v1::STATE_STOPPING) {
      updated.set_state(v1::STATE_CANCELED);
    } else if (completed > 0) {
      updated.set_state(v1::STATE_COMPLETED);
    } else {
      updated.set_state(v1::STATE_ERROR);
      updated.set_error("every trial failed");
    }
    updated.set_end_time_ms(clock_.NowMs());
    Logger("master")->info("experiment {} {}", updated.id(), StateName(updated.state()));
  }
  bool persist = updated.state() != es.experiment.state() ||
                 std::abs(updated.progress() - es.experiment.progress()) >= 0.01 ||
                 updated.progress() == 1.0;
  if (persist && updated.SerializeAsString() != es.experiment.SerializeAsString()) {
    absl::Status st = store_->UpdateExperiment(updated);
    if (!st.ok()) {
      Logger("master")->error("experiment {}: cannot persist: {}", updated.id(), st.ToString());
      return;
    }
  }
  es.experiment = std::move(updated);
}

void Master::AgentDisconnected(const std::string& agent_id) {
  int generation = ++agent_disconnects_[agent_id];
  std::string wait = absl::FormatDuration(config_.agent_reconnect_wait);
  std::vector<std::string> allocations;
  for (auto& [tid, t] : trials_) {
    const v1::Allocation& a = t.trial.allocation();
    bool on_agent = false;
    for (const auto& r : a.ranks()) on_agent |= r.agent_id() == agent_id;
    if (!on_agent) continue;
    t.unattached.insert(agent_id);
    allocations.push_back(a.id());
    TrialEvent(tid, absl::StrCat("agent ", agent_id, " stopped answering; its workers may still run: "
                                 "waiting up to ", wait, " (agent_reconnect_wait) for it to return"));
  }
  std::vector<std::string> gc_allocations;
  for (const auto& [alloc_id, id] : gc_allocations_) {
    GcTaskState& g = gc_tasks_.at(id);
    if (g.task.agent_id() != agent_id) continue;
    g.unattached = true;
    gc_allocations.push_back(alloc_id);
    TrialEvent(g.task.trial_id(),
               absl::StrCat("agent ", agent_id, " stopped answering during checkpoint garbage collection ",
                            alloc_id, ": waiting up to ", wait, " (agent_reconnect_wait) for it to return"));
  }
  if (allocations.empty() && gc_allocations.empty()) return;
  PostAfter(config_.agent_reconnect_wait, [this, agent_id, generation, allocations,
                                                 gc_allocations, wait] {
    if (agent_disconnects_[agent_id] != generation) return;  // Lost again since: a later timer.
    for (const auto& id : gc_allocations) {
      auto gc = gc_allocations_.find(id);
      if (gc == gc_allocations_.end()) continue;  // Ended meanwhile.
      GcTaskState& g = gc_tasks_.at(gc->second);
      if (!g.unattached) continue;  // It came back and reattached.
      EndCheckpointGc(g, v1::STATE_QUEUED,
                      absl::StrCat("lost: agent ", agent_id, " did not return within ", wait,
                                   " (agent_reconnect_wait)"));
    }
    for (const auto& id : allocations) {
      auto at = allocation_trial_.find(id);
      if (at == allocation_trial_.end()) continue;
      TrialState& t = trials_.at(at->second);
      if (!t.unattached.erase(agent_id)) continue;  // It came back and reattached.
      t.lost = true;
      TrialEvent(t.trial.id(), absl::StrCat("agent ", agent_id, " did not return within ", wait,
                                            " (agent_reconnect_wait)"));
      ExitRanksOn(t, [&](const std::string& agent) { return agent == agent_id; }, "agent lost");
    }
  });
}

void Master::ExitRanksOn(TrialState& t, const std::function<bool(const std::string&)>& on_agent,
                         const std::string& how) {
  // OnRankExit may end the allocation (and clear it): walk a copy, stop when it changes.
  const v1::Allocation allocation = t.trial.allocation();
  for (const auto& r : allocation.ranks()) {
    if (t.trial.allocation().id() != allocation.id()) return;
    if (on_agent(r.agent_id())) OnRankExit(t, r.rank(), how, true);
  }
}

void Master::CheckAgents() {
  if (shutting_down_) return;
  for (const auto& id : agents_.ExpireSilent()) AgentDisconnected(id);
  PostAfter(kAgentCheckPeriod, [this] { CheckAgents(); });
}

void Master::TrialEvent(int64_t trial_id, const std::string& message, bool verbose) {
  logs_.Event(trial_id, message, verbose);
}

absl::Status Master::PersistExperiment(ExperimentState& es, v1::Experiment updated) {
  absl::Status written = store_->UpdateExperiment(updated);
  std::string what = absl::StrCat("experiment ", updated.id());
  return WriteThenKeep(std::move(written), what, &es.experiment, std::move(updated));
}

absl::Status Master::PersistTrial(TrialState& t, v1::Trial updated) {
  absl::Status written = store_->UpdateTrial(updated);
  std::string what = absl::StrCat("trial ", updated.id());
  return WriteThenKeep(std::move(written), what, &t.trial, std::move(updated));
}

void Master::RecordTrial(TrialState& t) { (void)PersistTrial(t, t.trial); }

absl::Status Master::PersistAllocation(const v1::Allocation& allocation, const std::string& token) {
  absl::Status st = store_->UpsertAllocation(allocation, token);
  if (!st.ok()) {
    Logger("master")->error("allocation {}: cannot persist: {}", allocation.id(), st.ToString());
  }
  return st;
}

absl::StatusOr<Master::TrialState*> Master::FindTrial(int64_t id) {
  auto it = trials_.find(id);
  if (it == trials_.end()) return absl::NotFoundError(absl::StrCat("trial ", id, " not found"));
  return &it->second;
}

v1::Trial Master::TrialView(const TrialState& t) const {
  v1::Trial view = t.trial;
  if (view.allocation().id().empty() && !t.last_allocation.id().empty()) {
    *view.mutable_allocation() = t.last_allocation;
  }
  auto w = waiting_reason_.find(t.trial.id());
  if (t.trial.state() == v1::STATE_QUEUED && w != waiting_reason_.end()) {
    view.set_pending_reason(w->second);
  }
  return view;
}

}  // namespace det::master
