#include "master/server/master.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "common/logging/logging.h"
#include "common/status/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "master/api/grpc_services.h"
#include "master/scheduler/scheduler.h"
#include "master/store/sqlite_store.h"

namespace det::master {
namespace {

constexpr absl::Duration kAgentCheckPeriod = absl::Seconds(1);
constexpr absl::Duration kMaxPollWait = absl::Seconds(60);
constexpr int kMaxMessageBytes = 256 << 20;

std::string RandomHex(int bytes) {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < bytes; ++i) absl::StrAppend(&out, absl::Hex(rd() & 0xff, absl::kZeroPad2));
  return out;
}

// "COMPLETED" for STATE_COMPLETED.
std::string StateName(v1::State s) { return v1::State_Name(s).substr(6); }

bool Terminal(v1::State s) {
  return s == v1::STATE_COMPLETED || s == v1::STATE_CANCELED || s == v1::STATE_ERROR;
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

void Summarize(google::protobuf::Map<std::string, v1::MetricSummary>* summary,
               const v1::Metrics& m) {
  for (const auto& [name, value] : m.values()) {
    v1::MetricSummary& s = (*summary)[name];
    if (s.count() == 0 || value < s.min()) s.set_min(value);
    if (s.count() == 0 || value > s.max()) s.set_max(value);
    s.set_last(value);
    s.set_count(s.count() + 1);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Master>> Master::Start(const config::MasterConfig& config,
                                                      Clock& clock) {
  RETURN_IF_ERROR(MakeDirs(config.data_dir));
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteStore> store, SqliteStore::Open(config.db_path));
  std::unique_ptr<Master> m(new Master(config, clock, std::move(store)));
  RETURN_IF_ERROR(m->Restore());
  m->loop_.Start();
  m->loop_.Post([mp = m.get()] {
    mp->CheckAgents();
    mp->RequestSchedule();
  });
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
      start_time_ms_(clock.NowMs()) {}

Master::~Master() { Shutdown(); }

absl::Status Master::Restore() {
  ASSIGN_OR_RETURN(StoreSnapshot snap, store_->Load());
  cluster_id_ = snap.cluster_id;
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
    es.experiment = std::move(e);
  }
  for (auto& t : snap.trials) {
    auto e = experiments_.find(t.experiment_id());
    if (e == experiments_.end()) continue;
    e->second.trial_ids.push_back(t.id());
    TrialState& ts = trials_[t.id()];
    ts.trial = std::move(t);
  }
  for (auto& [allocation, token] : snap.open_allocations) {
    auto t = trials_.find(allocation.trial_id());
    if (t == trials_.end() || Terminal(t->second.trial.state())) continue;
    TrialState& ts = t->second;
    *ts.trial.mutable_allocation() = allocation;
    ts.token = token;
    allocation_trial_[allocation.id()] = ts.trial.id();
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
  loop_.PostAfter(config_.agent_reconnect_wait, [this] {
    for (auto& [id, ts] : trials_) {
      if (ts.unattached.empty()) continue;
      std::string agents = absl::StrJoin(ts.unattached, ", ");
      TrialEvent(id, absl::StrCat("agent(s) ", agents, " did not return after the master restarted"));
      ts.lost = true;
      std::set<std::string> gone = ts.unattached;
      ExitRanksOn(ts, [&](const std::string& agent) { return gone.count(agent) > 0; },
                  "agent did not return");
    }
  });
  for (auto& [id, es] : experiments_) UpdateExperiment(es);
  Logger("master")->info("restored {} experiments, {} trials, {} open allocations from {}",
                         experiments_.size(), trials_.size(), allocation_trial_.size(),
                         config_.db_path);
  return absl::OkStatus();
}

absl::Status Master::Serve() {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config_.grpc_listen, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  services_ = MakeGrpcServices(*this, *this, *this);
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
  return absl::OkStatus();
}

void Master::Shutdown() {
  if (!server_) return;
  loop_.RunSync([this] {
    shutting_down_ = true;
    absl::Status bye = absl::UnavailableError("master is shutting down");
    agents_.FailPolls(bye);
    for (auto& [id, waiters] : log_waiters_) {
      for (auto& w : waiters) {
        loop_.Cancel(w.timer);
        w.done(absl::OkStatus());
      }
    }
    log_waiters_.clear();
    for (auto& [id, ts] : trials_) {
      for (auto& d : ts.rendezvous_waiters) d(bye);
      ts.rendezvous_waiters.clear();
      ts.rendezvous_responses.clear();
    }
  });
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  server_->Wait();
  server_.reset();
  loop_.Stop();
  Logger("master")->info("det-master stopped");
}

void Master::OnLoop(Done done, std::function<absl::Status()> fn) {
  loop_.Post([done = std::move(done), fn = std::move(fn)] { done(fn()); });
}

// ---------------------------------------------------------------------------------------
// User API.

void Master::GetMasterInfo(const v1::GetMasterInfoRequest&, v1::GetMasterInfoResponse* resp,
                           Done done) {
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

void Master::CreateExperiment(const v1::CreateExperimentRequest& req,
                              v1::CreateExperimentResponse* resp, Done done) {
  OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    std::string file = req.config_path().empty() ? "config" : req.config_path();
    std::random_device rd;
    ASSIGN_OR_RETURN(config::ParsedExperiment parsed,
                     config::ParseExperimentConfig(req.config_yaml(), file, rd()));
    const config::ExperimentConfig& c = parsed.config;
    v1::ModelContext context;
    for (const auto& f : req.context()) *context.add_files() = f;

    v1::Experiment e;
    e.set_name(c.name);
    e.set_description(c.description);
    e.set_state(v1::STATE_ACTIVE);
    e.set_config_yaml(parsed.effective_yaml);
    e.set_start_time_ms(clock_.NowMs());
    e.set_searcher(c.searcher.name);
    e.set_experiment_seed(c.experiment_seed);
    e.set_num_trials(c.searcher.max_trials);
    for (const auto& w : parsed.warnings) e.add_warnings(w);
    int64_t target = c.searcher.max_length.Batches(c.BatchesPerEpoch());
    std::vector<v1::Trial> trials(c.searcher.max_trials);
    for (int i = 0; i < c.searcher.max_trials; ++i) {
      v1::Trial& t = trials[i];
      t.set_state(v1::STATE_QUEUED);
      t.set_seed(config::TrialSeed(static_cast<uint32_t>(c.experiment_seed), i));
      t.set_hparams_json(config::SampleHyperparameters(
          c.hyperparameters, (static_cast<uint64_t>(c.experiment_seed) << 20) + i));
      t.set_target_batches(target);
    }
    ASSIGN_OR_RETURN(int64_t id,
                     store_->InsertExperiment(e, context.SerializeAsString(), &trials));
    e.set_id(id);
    ExperimentState& es = experiments_[id];
    es.experiment = e;
    es.config = c;
    es.config_json = parsed.effective_json;
    for (auto& t : trials) {
      es.trial_ids.push_back(t.id());
      trials_[t.id()].trial = std::move(t);
    }
    Logger("master")->info("experiment {} created: {} ({} trial(s), {} slot(s) each)", id, c.name,
                           c.searcher.max_trials, c.resources.slots_per_trial);
    for (const auto& w : parsed.warnings) TrialEvent(es.trial_ids[0], "warning: " + w);
    *resp->mutable_experiment() = e;
    for (const auto& w : parsed.warnings) resp->add_warnings(w);
    RequestSchedule();
    return absl::OkStatus();
  });
}

void Master::ListExperiments(const v1::ListExperimentsRequest& req,
                             v1::ListExperimentsResponse* resp, Done done) {
  OnLoop(std::move(done), [this, &req, resp] {
    int skipped = 0;
    for (const auto& [id, es] : experiments_) {
      if (skipped++ < req.offset()) continue;
      if (req.limit() > 0 && resp->experiments_size() >= req.limit()) break;
      *resp->add_experiments() = es.experiment;
    }
    resp->set_total(static_cast<int32_t>(experiments_.size()));
    return absl::OkStatus();
  });
}

void Master::GetExperiment(const v1::GetExperimentRequest& req, v1::GetExperimentResponse* resp,
                           Done done) {
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

void Master::KillExperiment(const v1::KillExperimentRequest& req, v1::KillExperimentResponse*,
                            Done done) {
  OnLoop(std::move(done), [this, &req]() -> absl::Status {
    auto it = experiments_.find(req.id());
    if (it == experiments_.end()) {
      return absl::NotFoundError(absl::StrCat("experiment ", req.id(), " not found"));
    }
    ExperimentState& es = it->second;
    if (Terminal(es.experiment.state())) return absl::OkStatus();
    v1::Experiment updated = es.experiment;
    updated.set_state(v1::STATE_STOPPING);
    RETURN_IF_ERROR(store_->UpdateExperiment(updated));
    es.experiment = updated;
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

void Master::GetTrial(const v1::GetTrialRequest& req, v1::GetTrialResponse* resp, Done done) {
  OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    ASSIGN_OR_RETURN(TrialState * t, FindTrial(req.id()));
    *resp->mutable_trial() = TrialView(*t);
    return absl::OkStatus();
  });
}

void Master::GetTrialMetrics(const v1::GetTrialMetricsRequest& req,
                             v1::GetTrialMetricsResponse* resp, Done done) {
  OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    RETURN_IF_ERROR(FindTrial(req.trial_id()).status());
    ASSIGN_OR_RETURN(auto rows, store_->GetMetrics(req.trial_id(), req.group()));
    for (auto& m : rows) *resp->add_metrics() = std::move(m);
    return absl::OkStatus();
  });
}

absl::Status Master::FillLogs(const v1::GetTrialLogsRequest& req, v1::GetTrialLogsResponse* resp) {
  ASSIGN_OR_RETURN(TrialState * t, FindTrial(req.trial_id()));
  int limit = req.limit() > 0 ? std::min(req.limit(), 5000) : 1000;
  std::optional<int> rank;
  if (req.has_rank()) rank = req.rank();
  ASSIGN_OR_RETURN(auto lines, store_->GetLogs(req.trial_id(), req.after_id(), limit, rank));
  resp->clear_lines();
  for (auto& l : lines) *resp->add_lines() = std::move(l);
  resp->set_done(Terminal(t->trial.state()) && resp->lines_size() < limit);
  return absl::OkStatus();
}

void Master::GetTrialLogs(const v1::GetTrialLogsRequest& req, v1::GetTrialLogsResponse* resp,
                          Done done) {
  loop_.Post([this, &req, resp, done = std::move(done)]() mutable {
    absl::Status st = FillLogs(req, resp);
    if (!st.ok() || resp->lines_size() > 0 || resp->done() || req.wait_ms() <= 0 ||
        shutting_down_) {
      done(st);
      return;
    }
    int64_t trial_id = req.trial_id();
    auto wait = std::min(absl::Milliseconds(req.wait_ms()), kMaxPollWait);
    auto timer = loop_.PostAfter(wait, [this, trial_id, resp] {
      auto& waiters = log_waiters_[trial_id];
      for (auto it = waiters.begin(); it != waiters.end(); ++it) {
        if (it->response != resp) continue;
        Done d = std::move(it->done);
        waiters.erase(it);
        d(absl::OkStatus());
        return;
      }
    });
    log_waiters_[trial_id].push_back({&req, resp, std::move(done), timer});
  });
}

void Master::AnswerLogWaiters(int64_t trial_id) {
  auto it = log_waiters_.find(trial_id);
  if (it == log_waiters_.end()) return;
  std::vector<LogWaiter> waiters = std::move(it->second);
  log_waiters_.erase(it);
  for (auto& w : waiters) {
    loop_.Cancel(w.timer);
    w.done(FillLogs(*w.request, w.response));
  }
}

void Master::ListAgents(const v1::ListAgentsRequest&, v1::ListAgentsResponse* resp, Done done) {
  OnLoop(std::move(done), [this, resp] {
    for (auto& a : agents_.List()) *resp->add_agents() = std::move(a);
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------------
// Agent channel.

void Master::Register(const v1::RegisterRequest& req, v1::RegisterResponse* resp, Done done) {
  OnLoop(std::move(done), [this, &req, resp]() -> absl::Status {
    ASSIGN_OR_RETURN(std::string session, agents_.Register(req));
    resp->set_session_id(session);
    resp->set_heartbeat_interval_ms(
        static_cast<int32_t>(absl::ToInt64Milliseconds(std::min(absl::Seconds(5), config_.agent_timeout / 3))));
    const std::string& agent_id = req.agent_id();
    std::set<std::string> running(req.running_allocations().begin(), req.running_allocations().end());
    // What the agent still runs and we want: reattach. What we do not want: kill.
    for (const auto& alloc_id : running) {
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
      if (!t || t->exits.size() == static_cast<size_t>(t->trial.allocation().ranks_size())) {
        resp->add_kill_allocations(alloc_id);
      }
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
    RequestSchedule();
    return absl::OkStatus();
  });
}

void Master::Heartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse*, Done done) {
  OnLoop(std::move(done), [this, &req] { return agents_.Touch(req.agent_id(), req.session_id()); });
}

void Master::PollCommands(const v1::PollCommandsRequest& req, v1::PollCommandsResponse* resp,
                          Done done) {
  loop_.Post([this, &req, resp, done = std::move(done)]() mutable {
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
      t.trial.set_state(v1::STATE_RUNNING);
      v1::Allocation* a = t.trial.mutable_allocation();
      a->set_state(v1::STATE_RUNNING);
      PersistAllocation(t);
      PersistTrial(t);
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
    auto at = allocation_trial_.find(req.allocation_id());
    if (at == allocation_trial_.end()) return absl::OkStatus();  // Already ended.
    TrialState& t = trials_.at(at->second);
    std::string how = req.signal() != 0 ? absl::StrCat("killed by signal ", req.signal())
                                        : absl::StrCat("exit code ", req.exit_code());
    if (!req.message().empty()) absl::StrAppend(&how, " (", req.message(), ")");
    bool abnormal = req.signal() != 0 || req.exit_code() != 0;
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
      // Lines of runs already ended are still stored against their trial.
      if (at == allocation_trial_.end() && trials_.count(l.trial_id()) == 0) continue;
      v1::LogLine line = l;
      line.set_agent_id(req.agent_id());
      if (at != allocation_trial_.end()) line.set_trial_id(at->second);
      touched.insert(line.trial_id());
      lines.push_back(std::move(line));
    }
    if (req.dropped() > 0 && !lines.empty()) {
      v1::LogLine note = lines.front();
      note.set_stream("agent");
      note.set_message(absl::StrCat("[", req.dropped(), " log lines dropped while the master was unreachable]"));
      lines.insert(lines.begin(), note);
    }
    RETURN_IF_ERROR(store_->AddLogs(&lines));
    for (int64_t tid : touched) AnswerLogWaiters(tid);
    return absl::OkStatus();
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
  OnLoop(std::move(done), [this, &req]() -> absl::Status {
    ASSIGN_OR_RETURN(TrialState * t, AuthorizeWorker(req.auth()));
    if (req.trial_id() != t->trial.id()) {
      return absl::PermissionDeniedError(
          absl::StrCat("allocation ", req.auth().allocation_id(), " may report only for trial ",
                       t->trial.id(), ", not ", req.trial_id()));
    }
    v1::Trial updated = t->trial;
    std::vector<v1::Metrics> rows;
    for (const auto& m : req.metrics()) {
      if (m.group().empty()) return absl::InvalidArgumentError("metrics.group: must not be empty");
      v1::Metrics row = m;
      row.set_trial_id(updated.id());
      row.set_run_id(updated.run_id());
      if (row.report_time_ms() == 0) row.set_report_time_ms(clock_.NowMs());
      if (m.group() == "training") Summarize(updated.mutable_training_summary(), m);
      if (m.group() == "validation") Summarize(updated.mutable_validation_summary(), m);
      updated.set_total_batches(std::max(updated.total_batches(), m.total_batches()));
      rows.push_back(std::move(row));
    }
    RETURN_IF_ERROR(store_->AddMetrics(updated, rows));
    t->trial = std::move(updated);
    UpdateExperiment(experiments_.at(t->trial.experiment_id()));
    return absl::OkStatus();
  });
}

void Master::ReportCheckpoint(const v1::ReportCheckpointRequest& req,
                              v1::ReportCheckpointResponse*, Done done) {
  OnLoop(std::move(done), [this, &req]() -> absl::Status {
    ASSIGN_OR_RETURN(TrialState * t, AuthorizeWorker(req.auth()));
    v1::Checkpoint c = req.checkpoint();
    if (c.uuid().empty()) return absl::InvalidArgumentError("checkpoint.uuid: must not be empty");
    c.set_trial_id(t->trial.id());
    if (c.report_time_ms() == 0) c.set_report_time_ms(clock_.NowMs());
    RETURN_IF_ERROR(store_->AddCheckpoint(c));
    t->trial.set_latest_checkpoint(c.storage_path());
    PersistTrial(*t);
    TrialEvent(t->trial.id(), absl::StrCat("checkpoint ", c.uuid(), " at batch ", c.total_batches()));
    return absl::OkStatus();
  });
}

void Master::Rendezvous(const v1::RendezvousRequest& req, v1::RendezvousResponse* resp,
                        Done done) {
  loop_.Post([this, &req, resp, done = std::move(done)]() mutable {
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
    t.rendezvous[req.auth().rank()] = req.address();
    t.rendezvous_waiters.push_back(std::move(done));
    t.rendezvous_responses.push_back(resp);
    if (static_cast<int>(t.rendezvous.size()) < world) return;
    for (size_t i = 0; i < t.rendezvous_waiters.size(); ++i) {
      v1::RendezvousResponse* r = t.rendezvous_responses[i];
      r->set_ready(true);
      for (const auto& [rank, addr] : t.rendezvous) r->add_addresses(addr);
      t.rendezvous_waiters[i](absl::OkStatus());
    }
    t.rendezvous_waiters.clear();
    t.rendezvous_responses.clear();
  });
}

// ---------------------------------------------------------------------------------------
// Scheduling and the life of a trial.

void Master::RequestSchedule() {
  if (schedule_requested_) return;
  schedule_requested_ = true;
  loop_.Post([this] {
    schedule_requested_ = false;
    SchedulePass();
  });
}

void Master::SchedulePass() {
  std::vector<scheduler::Request> queue;
  for (const auto& [id, t] : trials_) {
    if (t.trial.state() != v1::STATE_QUEUED) continue;
    const auto& c = experiments_.at(t.trial.experiment_id()).config;
    queue.push_back({absl::StrCat(id), c.resources.slots_per_trial, c.resources.priority, id,
                     c.resources.resource_pool});
  }
  if (queue.empty()) return;
  auto fit = config_.scheduler_fit == "worst_fit" ? scheduler::Fit::kWorstFit
                                                  : scheduler::Fit::kBestFit;
  scheduler::Decision d = scheduler::Schedule(agents_.SchedulerView(), queue, fit);
  for (const auto& [request, why] : d.waiting) {
    int64_t tid = std::stoll(request);
    if (waiting_reason_[request] != why) {
      waiting_reason_[request] = why;
      TrialEvent(tid, "waiting: " + why);
    }
  }
  for (const auto& p : d.placements) {
    waiting_reason_.erase(p.request_id);
    std::vector<std::pair<std::string, std::vector<std::string>>> agents;
    for (const auto& a : p.agents) agents.push_back({a.agent_id, a.slots});
    StartAllocation(trials_.at(std::stoll(p.request_id)), agents);
  }
}

void Master::StartAllocation(
    TrialState& t, const std::vector<std::pair<std::string, std::vector<std::string>>>& agents) {
  ExperimentState& es = experiments_.at(t.trial.experiment_id());
  v1::Allocation a;
  a.set_id(absl::StrCat(t.trial.id(), ".", t.trial.run_id()));
  a.set_trial_id(t.trial.id());
  a.set_slots(es.config.resources.slots_per_trial);
  a.set_state(v1::STATE_STARTING);
  a.set_start_time_ms(clock_.NowMs());
  // Ranks are contiguous per agent; the first agent hosts rank 0.
  int rank = 0;
  for (const auto& [agent_id, slots] : agents) {
    int processes = std::max<int>(1, static_cast<int>(slots.size()));
    for (int local = 0; local < processes; ++local) {
      v1::RankPlacement* r = a.add_ranks();
      r->set_rank(rank++);
      r->set_agent_id(agent_id);
      r->set_local_rank(local);
      if (!slots.empty()) r->add_slot_ids(slots[local]);
    }
  }
  t.token = RandomHex(24);
  t.exits.clear();
  t.unattached.clear();
  t.killing = t.lost = false;
  t.failure.clear();
  t.rendezvous.clear();
  *t.trial.mutable_allocation() = a;
  t.trial.set_state(v1::STATE_STARTING);
  if (t.trial.start_time_ms() == 0) t.trial.set_start_time_ms(clock_.NowMs());
  PersistAllocation(t);
  PersistTrial(t);
  allocation_trial_[a.id()] = t.trial.id();

  v1::Experiment& e = es.experiment;
  std::map<std::string, std::string> env = {
      {"DET_EXPERIMENT_ID", absl::StrCat(e.id())},
      {"DET_TRIAL_ID", absl::StrCat(t.trial.id())},
      {"DET_TRIAL_RUN_ID", absl::StrCat(t.trial.run_id())},
      {"DET_TRIAL_SEED", absl::StrCat(t.trial.seed())},
      {"DET_HPARAMS", t.trial.hparams_json()},
      {"DET_EXPERIMENT_CONFIG", es.config_json},
      {"DET_TRIAL_TARGET_BATCHES", absl::StrCat(t.trial.target_batches())},
      {"DET_LATEST_CHECKPOINT", t.trial.latest_checkpoint()},
      {"DET_ALLOCATION_ID", a.id()},
      {"DET_ALLOCATION_TOKEN", t.token},
  };
  for (const auto& [k, v] : es.config.environment_variables) env.emplace(k, v);
  v1::ModelContext context;
  auto blob = store_->GetExperimentContext(e.id());
  if (blob.ok()) context.ParseFromString(*blob);

  int agent_rank = 0;
  for (const auto& [agent_id, slots] : agents) {
    agents_.SetSlotsUsed(agent_id, slots, a.id());
    v1::AgentCommand cmd;
    v1::LaunchCommand* l = cmd.mutable_launch();
    l->set_allocation_id(a.id());
    l->set_trial_id(t.trial.id());
    l->set_experiment_id(e.id());
    for (const auto& arg : es.config.entrypoint) l->add_argv(arg);
    l->mutable_env()->insert(env.begin(), env.end());
    for (const auto& r : a.ranks()) {
      if (r.agent_id() == agent_id) *l->add_ranks() = r;
    }
    l->set_world_size(a.ranks_size());
    l->set_num_agents(static_cast<int32_t>(agents.size()));
    l->set_agent_rank(agent_rank++);
    *l->mutable_context() = context.files();
    agents_.Send(agent_id, std::move(cmd));
  }
  std::vector<std::string> where;
  for (const auto& [agent_id, slots] : agents) {
    where.push_back(absl::StrCat(agent_id, slots.empty() ? "" : absl::StrCat(" (slots ", absl::StrJoin(slots, ","), ")")));
  }
  TrialEvent(t.trial.id(), absl::StrCat("allocation ", a.id(), " scheduled on ",
                                        absl::StrJoin(where, ", ")));
  UpdateExperiment(es);
}

void Master::KillAllocation(TrialState& t, const std::string& reason) {
  if (t.killing) return;
  t.killing = true;
  std::set<std::string> agents;
  for (const auto& r : t.trial.allocation().ranks()) agents.insert(r.agent_id());
  for (const auto& agent_id : agents) {
    v1::AgentCommand cmd;
    cmd.mutable_kill()->set_allocation_id(t.trial.allocation().id());
    cmd.mutable_kill()->set_reason(reason);
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
  v1::Allocation* a = t.trial.mutable_allocation();
  ExperimentState& es = experiments_.at(t.trial.experiment_id());
  bool stopping = es.experiment.state() == v1::STATE_STOPPING;
  v1::State outcome = v1::STATE_COMPLETED;
  std::string error;
  if (stopping) {
    outcome = v1::STATE_CANCELED;
  } else if (t.lost) {
    outcome = v1::STATE_QUEUED;  // Rerun; an agent's loss is not the trial's fault.
  } else if (!t.failure.empty()) {
    if (t.trial.restarts() < es.config.max_restarts) {
      outcome = v1::STATE_QUEUED;
      t.trial.set_restarts(t.trial.restarts() + 1);
    } else {
      outcome = v1::STATE_ERROR;
      error = absl::StrCat(t.failure, "; max_restarts (", es.config.max_restarts, ") reached");
    }
  }
  a->set_state(t.failure.empty() || stopping ? v1::STATE_COMPLETED : v1::STATE_ERROR);
  a->set_end_time_ms(clock_.NowMs());
  a->set_exit_reason(t.failure.empty() ? "all ranks exited normally" : t.failure);
  PersistAllocation(t);
  agents_.ReleaseSlots(a->id());
  allocation_trial_.erase(a->id());
  for (auto& d : t.rendezvous_waiters) d(absl::AbortedError("allocation ended"));
  t.rendezvous_waiters.clear();
  t.rendezvous_responses.clear();
  std::string alloc_id = a->id();
  t.trial.clear_allocation();
  if (outcome == v1::STATE_QUEUED) {
    t.trial.set_run_id(t.trial.run_id() + 1);
    t.trial.set_state(v1::STATE_QUEUED);
    TrialEvent(t.trial.id(),
               t.lost ? absl::StrCat("allocation ", alloc_id, " lost; rescheduling (not counted as a restart)")
                      : absl::StrCat("allocation ", alloc_id, " failed: ", t.failure, "; restart ",
                                     t.trial.restarts(), " of ", es.config.max_restarts));
    PersistTrial(t);
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
  waiting_reason_.erase(absl::StrCat(t.trial.id()));
  PersistTrial(t);
  TrialEvent(t.trial.id(), absl::StrCat("trial ", StateName(state),
                                        error.empty() ? "" : absl::StrCat(": ", error)));
  AnswerLogWaiters(t.trial.id());
  UpdateExperiment(experiments_.at(t.trial.experiment_id()));
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
  updated.set_progress(n ? progress / n : 0);
  if (!Terminal(updated.state()) && n > 0 && done == n) {
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

void Master::AgentLost(const std::string& agent_id, const std::string& why) {
  for (auto& [tid, t] : trials_) {
    bool on_agent = false;
    for (const auto& r : t.trial.allocation().ranks()) on_agent |= r.agent_id() == agent_id;
    if (!on_agent) continue;
    t.lost = true;
    ExitRanksOn(t, [&](const std::string& agent) { return agent == agent_id; }, why);
  }
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
  for (const auto& id : agents_.ExpireSilent()) AgentLost(id, "agent lost");
  loop_.PostAfter(kAgentCheckPeriod, [this] { CheckAgents(); });
}

void Master::TrialEvent(int64_t trial_id, const std::string& message) {
  Logger("master")->info("trial {}: {}", trial_id, message);
  std::vector<v1::LogLine> lines(1);
  lines[0].set_trial_id(trial_id);
  lines[0].set_rank(-1);
  lines[0].set_stream("master");
  lines[0].set_time_ms(clock_.NowMs());
  lines[0].set_message(message);
  absl::Status st = store_->AddLogs(&lines);
  if (!st.ok()) Logger("master")->error("trial {}: cannot store event: {}", trial_id, st.ToString());
  AnswerLogWaiters(trial_id);
}

void Master::PersistTrial(const TrialState& t) {
  absl::Status st = store_->UpdateTrial(t.trial);
  if (!st.ok()) Logger("master")->error("trial {}: cannot persist: {}", t.trial.id(), st.ToString());
}

void Master::PersistAllocation(const TrialState& t) {
  absl::Status st = store_->UpsertAllocation(t.trial.allocation(), t.token);
  if (!st.ok()) {
    Logger("master")->error("allocation {}: cannot persist: {}", t.trial.allocation().id(),
                            st.ToString());
  }
}

absl::StatusOr<Master::TrialState*> Master::FindTrial(int64_t id) {
  auto it = trials_.find(id);
  if (it == trials_.end()) return absl::NotFoundError(absl::StrCat("trial ", id, " not found"));
  return &it->second;
}

v1::Trial Master::TrialView(const TrialState& t) const {
  v1::Trial view = t.trial;
  auto w = waiting_reason_.find(absl::StrCat(t.trial.id()));
  if (t.trial.state() == v1::STATE_QUEUED && w != waiting_reason_.end()) {
    view.set_pending_reason(w->second);
  }
  return view;
}

}  // namespace det::master
