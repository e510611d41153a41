// det-load: drives a running master over real gRPC with many simulated agents and workers.
//
//   det-load --master HOST:PORT --secret S [--token T] [--mode ingest|latency|queue]
//            [--agents 1000] [--workers 200] [--seconds 60] [--rows-per-report 500]
//            [--readers 4] [--pool load] [--trials 100000]
//
// --token (or DET_USER_TOKEN) authenticates the user-API calls.
// Mode latency: the time from CreateExperiment to every rank RUNNING, for 1 and 8 slots,
// on the real agents of pool "default" (one with >= 8 slots must be there).
// Mode queue: `--agents` agents register and `--trials` trials are queued in pool
// `--pool` (which has no agents), for measuring the master's memory.
// Mode ingest (default):
// `--agents` agents register and heartbeat (pool "default"); `--workers` more agents with
// one slot each join pool `--pool` and poll for commands. One experiment of `--workers`
// trials is submitted to that pool; each launch a fake agent receives starts a thread that
// reports training metrics with the allocation's real token, `--rows-per-report` rows per
// call, as fast as the master acknowledges. `--readers` threads time ListExperiments.
// Prints rows acknowledged per second, read latency percentiles, and checks that every
// acknowledged row is stored. Bounded in time; loopback only.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/rpc/rpc.h"
#include "proto/agent.grpc.pb.h"
#include "proto/api.grpc.pb.h"
#include "proto/worker.grpc.pb.h"

namespace det::load {
namespace {

struct Flags {
  std::string master;
  std::string secret;
  std::string token;
  std::string mode = "ingest";
  int trials = 100000;
  std::string pool = "load";
  int agents = 1000;
  int workers = 200;
  int seconds = 60;
  int rows_per_report = 500;
  int readers = 4;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    bool ok = true;
    if (k == "--master") f->master = v;
    else if (k == "--secret") f->secret = v;
    else if (k == "--token") f->token = v;
    else if (k == "--mode") f->mode = v;
    else if (k == "--trials") ok = absl::SimpleAtoi(v, &f->trials);
    else if (k == "--pool") f->pool = v;
    else if (k == "--agents") ok = absl::SimpleAtoi(v, &f->agents);
    else if (k == "--workers") ok = absl::SimpleAtoi(v, &f->workers);
    else if (k == "--seconds") ok = absl::SimpleAtoi(v, &f->seconds);
    else if (k == "--rows-per-report") ok = absl::SimpleAtoi(v, &f->rows_per_report);
    else if (k == "--readers") ok = absl::SimpleAtoi(v, &f->readers);
    else ok = false;
    if (!ok) {
      std::fprintf(stderr, "det-load: bad flag %s %s\n", k.c_str(), v.c_str());
      return false;
    }
  }
  if (f->token.empty() && std::getenv("DET_USER_TOKEN")) f->token = std::getenv("DET_USER_TOKEN");
  if (f->master.empty()) std::fprintf(stderr, "det-load: --master HOST:PORT is required\n");
  return !f->master.empty();
}

std::string g_token;  // Set once in main, before any thread starts.

template <typename Fn>
grpc::Status Call(absl::Duration timeout, Fn fn) {
  auto ctx = rpc::Context(timeout);
  if (!g_token.empty()) ctx->AddMetadata("authorization", "Bearer " + g_token);
  return fn(ctx.get());
}

struct Stats {
  std::atomic<int64_t> rows_acked{0};
  std::atomic<int64_t> report_errors{0};
  std::atomic<int64_t> heartbeats{0};
  std::atomic<int64_t> heartbeat_errors{0};
  absl::Mutex mu;
  std::vector<double> read_ms ABSL_GUARDED_BY(mu);
  std::map<int64_t, int64_t> acked_by_trial ABSL_GUARDED_BY(mu);
};

// Reports metrics for one launched trial until `deadline`.
void Worker(v1::WorkerService::Stub* stub, const v1::LaunchCommand& launch, int rows,
            absl::Time deadline, Stats* stats) {
  v1::ReportMetricsRequest req;
  req.mutable_auth()->set_allocation_id(launch.allocation_id());
  req.mutable_auth()->set_token(launch.env().at("DET_ALLOCATION_TOKEN"));
  req.set_trial_id(launch.trial_id());
  // The rows are built once and only their batch and loss change from one report to the
  // next, so that this process spends its CPU on the calls, not on building them.
  std::vector<double*> losses;
  for (int i = 0; i < rows; ++i) {
    v1::Metrics* m = req.add_metrics();
    m->set_group("training");
    (*m->mutable_values())["accuracy"] = 0.5;
    losses.push_back(&(*m->mutable_values())["loss"]);
  }
  int64_t batch = 0, acked = 0;
  while (absl::Now() < deadline) {
    for (int i = 0; i < rows; ++i) {
      req.mutable_metrics(i)->set_total_batches(++batch);
      *losses[static_cast<size_t>(i)] = 1.0 / static_cast<double>(batch);
    }
    v1::ReportMetricsResponse resp;
    grpc::Status st = Call(absl::Seconds(30), [&](grpc::ClientContext* c) {
      return stub->ReportMetrics(c, req, &resp);
    });
    if (st.ok()) {
      acked += rows;
      stats->rows_acked += rows;
    } else {
      stats->report_errors++;
    }
  }
  absl::MutexLock l(&stats->mu);
  stats->acked_by_trial[launch.trial_id()] += acked;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

// Median of the time from CreateExperiment to all ranks running, for `slots` slots.
double CreateToRunningMs(v1::Api::Stub* api, int slots, int repeats) {
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    v1::CreateExperimentRequest create;
    create.set_config_path("latency.yaml");
    create.set_config_yaml(absl::StrCat(
        "name: latency\nentrypoint: [sleep, '30']\nsearcher: {name: single, metric: x, "
        "max_length: {batches: 1}}\nmax_restarts: 0\nresources: {slots_per_trial: ", slots, "}\n"));
    v1::CreateExperimentResponse created;
    absl::Time t0 = absl::Now();
    grpc::Status st = Call(absl::Seconds(30), [&](grpc::ClientContext* c) {
      return api->CreateExperiment(c, create, &created);
    });
    if (!st.ok()) {
      std::fprintf(stderr, "det-load: create: %s\n", st.error_message().c_str());
      return -1;
    }
    while (absl::Now() - t0 < absl::Seconds(60)) {
      v1::GetExperimentRequest g;
      g.set_id(created.experiment().id());
      v1::GetExperimentResponse e;
      Call(absl::Seconds(10), [&](grpc::ClientContext* c) { return api->GetExperiment(c, g, &e); });
      if (e.trials_size() > 0 && e.trials(0).state() == v1::STATE_RUNNING) break;
      absl::SleepFor(absl::Milliseconds(2));
    }
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    v1::KillExperimentRequest k;
    k.set_id(created.experiment().id());
    v1::KillExperimentResponse kr;
    Call(absl::Seconds(30), [&](grpc::ClientContext* c) { return api->KillExperiment(c, k, &kr); });
    absl::SleepFor(absl::Seconds(1));  // Let the slots free before the next one.
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int Run(const Flags& f) {
  auto channel = rpc::MakeChannel(f.master);
  auto agents = v1::AgentService::NewStub(channel);
  auto api = v1::Api::NewStub(channel);
  auto workers = v1::WorkerService::NewStub(channel);
  Stats stats;
  absl::Time start = absl::Now();
  if (f.mode == "latency") {
    for (int slots : {1, 8}) {
      double ms = CreateToRunningMs(api.get(), slots, 5);
      std::printf("| create to all ranks running | %d slot(s), real det-agent, CPU slots | %.0f ms median of 5 | |\n",
                  slots, ms);
      if (ms < 0) return 1;
    }
    return 0;
  }

  // Heartbeating agents, registered up front.
  std::vector<std::pair<std::string, std::string>> sessions;  // agent id, session
  auto register_agent = [&](const std::string& id, const std::string& pool, int slots) {
    v1::RegisterRequest r;
    r.set_agent_id(id);
    r.set_hostname("load");
    r.set_cluster_secret(f.secret);
    r.set_resource_pool(pool);
    for (int s = 0; s < slots; ++s) {
      v1::Slot* slot = r.add_slots();
      slot->set_id(absl::StrCat(s));
      slot->set_type("cpu");
    }
    v1::RegisterResponse resp;
    grpc::Status st = Call(absl::Seconds(30), [&](grpc::ClientContext* c) {
      return agents->Register(c, r, &resp);
    });
    if (!st.ok()) {
      std::fprintf(stderr, "det-load: register %s: %s\n", id.c_str(), st.error_message().c_str());
      return std::string();
    }
    return resp.session_id();
  };
  for (int i = 0; i < f.agents; ++i) {
    std::string id = absl::StrCat("load-agent-", i);
    std::string session = register_agent(id, "default", 8);
    if (session.empty()) return 1;
    sessions.push_back({id, session});
  }
  absl::Duration register_time = absl::Now() - start;
  std::printf("registered %d agents in %.2f s\n", f.agents, absl::ToDoubleSeconds(register_time));
  if (f.mode == "queue") {
    constexpr int kPerExperiment = 1000;
    for (int made = 0; made < f.trials; made += kPerExperiment) {
      v1::CreateExperimentRequest create;
      create.set_config_path("queue.yaml");
      create.set_config_yaml(absl::StrCat(
          "name: queued\nentrypoint: simulated\nsearcher:\n  name: random\n  metric: loss\n"
          "  max_concurrent_trials: ", kPerExperiment, "\n"
          "  max_trials: ", std::min(kPerExperiment, f.trials - made),
          "\n  max_length: {batches: 100}\nhyperparameters:\n  x: {type: double, minval: 0, maxval: 1}\n"
          "resources:\n  resource_pool: ", f.pool, "\n"));
      create.set_force(true);
      v1::CreateExperimentResponse created;
      grpc::Status st = Call(absl::Seconds(120), [&](grpc::ClientContext* c) {
        return api->CreateExperiment(c, create, &created);
      });
      if (!st.ok()) {
        std::fprintf(stderr, "det-load: create: %s\n", st.error_message().c_str());
        return 1;
      }
    }
    std::printf("queued %d trials in %.1f s\n", f.trials, absl::ToDoubleSeconds(absl::Now() - start));
    return 0;
  }

  // Worker agents: one slot each, in their own pool, polling for launches.
  absl::Time deadline = absl::Now() + absl::Seconds(f.seconds);
  std::vector<std::thread> threads;
  std::atomic<int> launched{0};
  for (int i = 0; i < f.workers; ++i) {
    std::string id = absl::StrCat("load-worker-", i);
    std::string session = register_agent(id, f.pool, 1);
    if (session.empty()) return 1;
    threads.emplace_back([&, id, session] {
      while (absl::Now() < deadline) {
        v1::PollCommandsRequest p;
        p.set_agent_id(id);
        p.set_session_id(session);
        p.set_wait_ms(1000);
        v1::PollCommandsResponse resp;
        grpc::Status st = Call(absl::Seconds(30), [&](grpc::ClientContext* c) {
          return agents->PollCommands(c, p, &resp);
        });
        if (!st.ok()) continue;
        for (const auto& cmd : resp.commands()) {
          if (!cmd.has_launch()) continue;
          launched++;
          v1::ReportLaunchedRequest l;
          l.set_agent_id(id);
          l.set_session_id(session);
          l.set_allocation_id(cmd.launch().allocation_id());
          l.add_ranks(0);
          v1::ReportLaunchedResponse lr;
          Call(absl::Seconds(30), [&](grpc::ClientContext* c) { return agents->ReportLaunched(c, l, &lr); });
          Worker(workers.get(), cmd.launch(), f.rows_per_report, deadline, &stats);
          return;
        }
      }
    });
  }
  // Heartbeats for everyone, from a few threads.
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      while (absl::Now() < deadline) {
        for (size_t i = t; i < sessions.size() && absl::Now() < deadline; i += 4) {
          v1::HeartbeatRequest h;
          h.set_agent_id(sessions[i].first);
          h.set_session_id(sessions[i].second);
          v1::HeartbeatResponse resp;
          grpc::Status st = Call(absl::Seconds(10), [&](grpc::ClientContext* c) {
            return agents->Heartbeat(c, h, &resp);
          });
          (st.ok() ? stats.heartbeats : stats.heartbeat_errors)++;
        }
        absl::SleepFor(absl::Seconds(2));
      }
    });
  }
  // The experiment whose trials the workers run.
  v1::CreateExperimentRequest create;
  create.set_config_path("load.yaml");
  create.set_config_yaml(absl::StrCat(
      "name: load\nentrypoint: simulated\nsearcher:\n  name: random\n  metric: loss\n"
      "  max_concurrent_trials: ", f.workers, "\n  max_trials: ", f.workers, "\n  max_length: {batches: 1000000000}\n"
      "hyperparameters:\n  x: {type: double, minval: 0, maxval: 1}\n"
      "max_restarts: 0\nresources:\n  slots_per_trial: 1\n  resource_pool: ", f.pool, "\n"));
  v1::CreateExperimentResponse created;
  grpc::Status st = Call(absl::Seconds(60), [&](grpc::ClientContext* c) {
    return api->CreateExperiment(c, create, &created);
  });
  if (!st.ok()) {
    std::fprintf(stderr, "det-load: create experiment: %s\n", st.error_message().c_str());
    return 1;
  }
  int64_t experiment_id = created.experiment().id();
  absl::Time measure_start = absl::Now();
  // Readers: what `det experiment list` does.
  for (int r = 0; r < f.readers; ++r) {
    threads.emplace_back([&] {
      while (absl::Now() < deadline) {
        v1::ListExperimentsRequest req;
        v1::ListExperimentsResponse resp;
        absl::Time t0 = absl::Now();
        grpc::Status s = Call(absl::Seconds(10), [&](grpc::ClientContext* c) {
          return api->ListExperiments(c, req, &resp);
        });
        double ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
        if (s.ok()) {
          absl::MutexLock l(&stats.mu);
          stats.read_ms.push_back(ms);
        }
        absl::SleepFor(absl::Milliseconds(20));
      }
    });
  }
  int64_t last = 0;
  absl::Time last_t = measure_start;
  while (absl::Now() < deadline) {
    absl::SleepFor(absl::Seconds(5));
    int64_t rows = stats.rows_acked.load();
    absl::Time now = absl::Now();
    std::fprintf(stderr, "  %3.0f s: %d trials launched, %.0f rows/s, %lld report errors\n",
                 absl::ToDoubleSeconds(now - measure_start), launched.load(),
                 (rows - last) / absl::ToDoubleSeconds(now - last_t),
                 static_cast<long long>(stats.report_errors.load()));
    last = rows;
    last_t = now;
  }
  for (auto& t : threads) t.join();
  double seconds = absl::ToDoubleSeconds(absl::Now() - measure_start);

  // Every acknowledged row must be stored.
  int64_t stored = 0, missing_trials = 0;
  v1::GetExperimentRequest g;
  g.set_id(experiment_id);
  v1::GetExperimentResponse exp;
  Call(absl::Seconds(60), [&](grpc::ClientContext* c) { return api->GetExperiment(c, g, &exp); });
  std::map<int64_t, int64_t> acked_by_trial;
  {
    absl::MutexLock l(&stats.mu);
    acked_by_trial = stats.acked_by_trial;
  }
  for (const auto& t : exp.trials()) {
    auto it = t.training_summary().find("loss");
    int64_t count = it == t.training_summary().end() ? 0 : it->second.count();
    stored += count;
    if (count < acked_by_trial[t.id()]) ++missing_trials;
  }
  std::vector<double> reads;
  {
    absl::MutexLock l(&stats.mu);
    reads = stats.read_ms;
  }
  int64_t acked = stats.rows_acked.load();
  std::printf("| metrics ingestion | %d agents heartbeating, %d workers x %d rows/report, %d readers | %.0f rows/s for %.0f s | %lld acked, %lld stored, %lld trials missing rows, %lld report errors |\n",
              f.agents, f.workers, f.rows_per_report, f.readers, acked / seconds, seconds,
              static_cast<long long>(acked), static_cast<long long>(stored),
              static_cast<long long>(missing_trials),
              static_cast<long long>(stats.report_errors.load()));
  std::printf("| experiment list latency | under that load | p50 %.1f ms, p99 %.1f ms | %zu calls |\n",
              Percentile(reads, 0.5), Percentile(reads, 0.99), reads.size());
  std::printf("| heartbeats | %d agents | %lld ok, %lld failed | |\n", f.agents,
              static_cast<long long>(stats.heartbeats.load()),
              static_cast<long long>(stats.heartbeat_errors.load()));
  // Stop the simulated trials.
  v1::KillExperimentRequest k;
  k.set_id(experiment_id);
  v1::KillExperimentResponse kr;
  Call(absl::Seconds(30), [&](grpc::ClientContext* c) { return api->KillExperiment(c, k, &kr); });
  return missing_trials == 0 ? 0 : 1;
}

}  // namespace
}  // namespace det::load

int main(int argc, char** argv) {
  det::load::Flags flags;
  if (!det::load::ParseFlags(argc, argv, &flags)) return 2;
  det::load::g_token = flags.token;
  return det::load::Run(flags);
}
