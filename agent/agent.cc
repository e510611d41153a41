#include "agent/agent.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging/logging.h"
#include "common/process/line_reader.h"
#include "common/rpc/rpc.h"

namespace det::agent {
namespace {

constexpr int64_t kMaxBufferedLines = 100000;
constexpr int kMaxLinesPerBatch = 1000;
constexpr absl::Duration kPollWait = absl::Seconds(20);
constexpr absl::Duration kMaxBackoff = absl::Seconds(5);
// After a worker exits, how long to keep reading output its descendants may still write.
constexpr absl::Duration kDrainAfterExit = absl::Seconds(2);

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

}  // namespace

Agent::Agent(config::AgentConfig config, MasterClient& client, std::vector<v1::Slot> slots)
    : config_(std::move(config)), client_(client), slots_(std::move(slots)) {
  launch_context_.agent_id = config_.agent_id;
  launch_context_.master_address = config_.master;
  launch_context_.slot_type = slots_.empty() ? "cpu" : slots_[0].type();
  launch_context_.worker_path = config_.worker_path;
  heartbeat_interval_ = config_.heartbeat_interval;
}

Agent::~Agent() {
  Stop();
  if (poller_.joinable()) poller_.join();
  if (outbox_thread_.joinable()) outbox_thread_.join();
}

void Agent::Stop() {
  absl::MutexLock l(&mu_);
  stopping_ = true;
}

bool Agent::SleepOrStop(absl::Duration d) {
  absl::MutexLock l(&mu_);
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  return mu_.AwaitWithTimeout(absl::Condition(&stopping), d);
}

std::string Agent::Session() {
  absl::MutexLock l(&mu_);
  return session_;
}

void Agent::SessionLost(const std::string& stale_session) {
  absl::MutexLock l(&mu_);
  if (session_ == stale_session) session_.clear();
}

bool Agent::RegisterOnce() {
  v1::RegisterRequest req;
  req.set_agent_id(config_.agent_id);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  req.set_hostname(host);
  req.set_cluster_secret(config_.cluster_secret);
  req.set_version("0.1.0");
  req.set_resource_pool(config_.resource_pool);
  for (const auto& s : slots_) *req.add_slots() = s;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [id, a] : allocations_) req.add_running_allocations(id);
  }
  auto resp = client_.Register(req);
  if (!resp.ok()) {
    Logger("agent")->warn("cannot register with the master: {}", resp.status().ToString());
    if (absl::IsUnauthenticated(resp.status())) {
      Logger("agent")->error("the master refused this agent: {}", std::string(resp.status().message()));
    }
    return false;
  }
  for (const auto& id : resp->kill_allocations()) Kill(id, "the master no longer runs it");
  absl::MutexLock l(&mu_);
  session_ = resp->session_id();
  if (resp->heartbeat_interval_ms() > 0) {
    heartbeat_interval_ = absl::Milliseconds(resp->heartbeat_interval_ms());
  }
  Logger("agent")->info("agent {} joined master {} with {} {} slot(s), {} running allocation(s)",
                        config_.agent_id, config_.master, slots_.size(),
                        launch_context_.slot_type, req.running_allocations_size());
  return true;
}

void Agent::Run() {
  poller_ = std::thread([this] { PollLoop(); });
  outbox_thread_ = std::thread([this] { OutboxLoop(); });
  absl::Duration backoff = absl::Milliseconds(200);
  while (true) {
    std::string session = Session();
    absl::Duration interval;
    {
      absl::MutexLock l(&mu_);
      if (stopping_) break;
      interval = heartbeat_interval_;
    }
    if (session.empty()) {
      if (RegisterOnce()) {
        backoff = absl::Milliseconds(200);
      } else if (SleepOrStop(backoff)) {
        break;
      } else {
        backoff = std::min(backoff * 2, kMaxBackoff);
      }
      continue;
    }
    v1::HeartbeatRequest hb;
    hb.set_agent_id(config_.agent_id);
    hb.set_session_id(session);
    absl::Status st = client_.Heartbeat(hb);
    if (absl::IsNotFound(st)) {
      Logger("agent")->warn("master does not know this session ({}); registering again", std::string(st.message()));
      SessionLost(session);
      continue;
    }
    if (!st.ok()) Logger("agent")->warn("heartbeat failed: {}", st.ToString());
    ReapFinished(/*even_if_unreported=*/false);
    if (SleepOrStop(st.ok() ? interval : std::min(interval, absl::Seconds(1)))) break;
  }
  // Shutting down: stop every worker and let the outbox report their exits.
  std::vector<std::string> ids;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [id, a] : allocations_) ids.push_back(id);
  }
  {
    // Kill() checks stopping_ only for new launches; allow it here.
    for (const auto& id : ids) Kill(id, "agent shutting down");
  }
  // Give the outbox a moment to deliver the exits.
  absl::Time deadline = absl::Now() + absl::Seconds(5);
  for (bool done = false; !done;) {
    ReapFinished(/*even_if_unreported=*/absl::Now() > deadline);
    {
      absl::MutexLock l(&mu_);
      done = allocations_.empty() && (outbox_.empty() || session_.empty() || absl::Now() > deadline);
    }
    if (!done) absl::SleepFor(absl::Milliseconds(50));
  }
  {
    absl::MutexLock l(&mu_);
    outbox_.clear();
  }
  client_.Shutdown();
  if (poller_.joinable()) poller_.join();
  if (outbox_thread_.joinable()) outbox_thread_.join();
  Logger("agent")->info("agent {} stopped", config_.agent_id);
}

void Agent::PollLoop() {
  absl::Duration backoff = absl::Milliseconds(200);
  while (true) {
    {
      absl::MutexLock l(&mu_);
      if (stopping_) return;
    }
    std::string session = Session();
    if (session.empty()) {
      if (SleepOrStop(absl::Milliseconds(100))) return;
      continue;
    }
    v1::PollCommandsRequest req;
    req.set_agent_id(config_.agent_id);
    req.set_session_id(session);
    req.set_wait_ms(static_cast<int32_t>(absl::ToInt64Milliseconds(kPollWait)));
    auto resp = client_.PollCommands(req);
    if (!resp.ok()) {
      if (absl::IsNotFound(resp.status())) SessionLost(session);
      if (SleepOrStop(backoff)) return;
      backoff = std::min(backoff * 2, kMaxBackoff);
      continue;
    }
    backoff = absl::Milliseconds(200);
    for (const auto& cmd : resp->commands()) {
      if (cmd.has_launch()) Launch(cmd.launch());
      if (cmd.has_kill()) Kill(cmd.kill().allocation_id(), cmd.kill().reason());
    }
  }
}

void Agent::Enqueue(Outgoing item) {
  absl::MutexLock l(&mu_);
  if (item.line) {
    if (outbox_lines_ >= kMaxBufferedLines) {
      // Drop the oldest buffered line, never a report.
      for (auto it = outbox_.begin(); it != outbox_.end(); ++it) {
        if (it->line) {
          outbox_.erase(it);
          --outbox_lines_;
          ++dropped_lines_;
          break;
        }
      }
    }
    ++outbox_lines_;
  }
  outbox_.push_back(std::move(item));
}

void Agent::OutboxLoop() {
  absl::Duration backoff = absl::Milliseconds(100);
  while (true) {
    std::vector<Outgoing> batch;
    std::string session;
    int64_t dropped = 0;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || (!outbox_.empty() && !session_.empty());
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(200));
      if (stopping_ && outbox_.empty()) return;
      if (outbox_.empty() || session_.empty()) continue;
      session = session_;
      // Consecutive log lines go in one batch; a report goes alone.
      if (outbox_.front().line) {
        for (auto it = outbox_.begin(); it != outbox_.end() && it->line &&
                                        static_cast<int>(batch.size()) < kMaxLinesPerBatch;
             ++it) {
          batch.push_back(*it);
        }
        dropped = dropped_lines_;
      } else {
        batch.push_back(outbox_.front());
      }
    }
    absl::Status st;
    if (batch[0].line) {
      v1::ShipLogsRequest req;
      req.set_agent_id(config_.agent_id);
      req.set_session_id(session);
      req.set_dropped(dropped);
      for (auto& o : batch) *req.add_lines() = *o.line;
      st = client_.ShipLogs(req);
    } else if (batch[0].launched) {
      v1::ReportLaunchedRequest req = *batch[0].launched;
      req.set_agent_id(config_.agent_id);
      req.set_session_id(session);
      st = client_.ReportLaunched(req);
    } else {
      v1::ReportExitRequest req = *batch[0].exit;
      req.set_agent_id(config_.agent_id);
      req.set_session_id(session);
      st = client_.ReportExit(req);
    }
    if (st.ok() || (!rpc::IsTransient(st) && !absl::IsNotFound(st))) {
      if (!st.ok()) Logger("agent")->error("master rejected a report: {}", st.ToString());
      absl::MutexLock l(&mu_);
      for (size_t i = 0; i < batch.size(); ++i) {
        if (outbox_.front().line) --outbox_lines_;
        outbox_.pop_front();
      }
      if (batch[0].line) dropped_lines_ -= dropped;
      backoff = absl::Milliseconds(100);
      continue;
    }
    if (absl::IsNotFound(st)) SessionLost(session);
    if (SleepOrStop(backoff)) absl::SleepFor(std::min(backoff, absl::Milliseconds(100)));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

void Agent::AgentLine(const v1::LaunchCommand& launch, int rank, const std::string& message) {
  Logger("agent")->info("allocation {} rank {}: {}", launch.allocation_id(), rank, message);
  v1::LogLine line;
  line.set_trial_id(launch.trial_id());
  line.set_allocation_id(launch.allocation_id());
  line.set_rank(rank);
  line.set_stream("agent");
  line.set_time_ms(NowMs());
  line.set_message(message);
  Enqueue({line, std::nullopt, std::nullopt});
}

void Agent::Launch(const v1::LaunchCommand& launch) {
  const std::string& id = launch.allocation_id();
  {
    absl::MutexLock l(&mu_);
    if (stopping_ || allocations_.count(id)) return;
  }
  std::string dir = absl::StrCat(config_.work_dir, "/", SafeName(id));
  absl::Status st = WriteContext(dir, launch.context());
  auto alloc = std::make_unique<Allocation>();
  alloc->launch = launch;
  alloc->launch.clear_context();  // Written to disk; no need to keep it in memory.
  std::vector<int> started;
  EnvironmentVariables base = CurrentEnvironment();
  for (const auto& r : launch.ranks()) {
    auto w = std::make_unique<Worker>();
    w->rank = r;
    if (st.ok()) {
      SpawnOptions opts;
      opts.argv.assign(launch.argv().begin(), launch.argv().end());
      opts.env = WorkerEnvironment(launch, r, launch_context_, base);
      opts.cwd = dir;
      auto proc = Subprocess::Spawn(opts);
      if (proc.ok()) {
        w->process = std::move(*proc);
        started.push_back(r.rank());
        Logger("agent")->info("allocation {}: rank {} started as pid {}: {}", id, r.rank(),
                              w->process->pid(), absl::StrJoin(opts.argv, " "));
      } else {
        st = proc.status();
      }
    }
    alloc->workers.push_back(std::move(w));
  }
  Allocation* a = alloc.get();
  {
    absl::MutexLock l(&mu_);
    allocations_[id] = std::move(alloc);
  }
  if (!started.empty()) {
    v1::ReportLaunchedRequest launched;
    launched.set_allocation_id(id);
    for (int r : started) launched.add_ranks(r);
    Enqueue({std::nullopt, launched, std::nullopt});
  }
  if (!st.ok()) {
    // Ranks that never started exit at once; the others are stopped.
    for (auto& w : a->workers) {
      if (w->process) continue;
      AgentLine(launch, w->rank.rank(), absl::StrCat("cannot start worker: ", st.message()));
      v1::ReportExitRequest exit;
      exit.set_allocation_id(id);
      exit.set_rank(w->rank.rank());
      exit.set_exit_code(127);
      exit.set_message(std::string(st.message()));
      Enqueue({std::nullopt, std::nullopt, exit});
      absl::MutexLock l(&mu_);
      w->exited = true;
      ++a->reported_exits;
    }
    if (!started.empty()) Kill(id, "another rank could not start");
  }
  absl::MutexLock l(&mu_);
  for (auto& w : a->workers) {
    if (w->process) w->supervisor = std::thread([this, a, wp = w.get()] { Supervise(a, wp); });
  }
}

void Agent::Kill(const std::string& allocation_id, const std::string& reason) {
  absl::MutexLock l(&mu_);
  auto it = allocations_.find(allocation_id);
  if (it == allocations_.end() || it->second->killing) return;
  Allocation& a = *it->second;
  a.killing = true;
  a.kill_deadline = absl::Now() + config_.kill_grace;
  Logger("agent")->info("allocation {}: stopping ({})", allocation_id, reason);
  for (auto& w : a.workers) {
    if (w->process && !w->exited) w->process->SignalGroup(SIGTERM).IgnoreError();
  }
}

void Agent::Supervise(Allocation* a, Worker* w) {
  const v1::LaunchCommand& launch = a->launch;
  int rank = w->rank.rank();
  Subprocess& p = *w->process;
  LineSplitter splitters[2];
  const char* streams[2] = {"stdout", "stderr"};
  pollfd fds[2] = {{p.stdout_fd(), POLLIN, 0}, {p.stderr_fd(), POLLIN, 0}};
  auto emit = [&](int i, std::string_view text) {
    v1::LogLine line;
    line.set_trial_id(launch.trial_id());
    line.set_allocation_id(launch.allocation_id());
    line.set_rank(rank);
    line.set_stream(streams[i]);
    line.set_time_ms(NowMs());
    line.set_message(std::string(text));
    Enqueue({line, std::nullopt, std::nullopt});
  };
  std::optional<ExitStatus> exit;
  absl::Time drain_deadline = absl::InfiniteFuture();
  bool sigkilled = false;
  char buf[65536];
  while (true) {
    int open = (fds[0].fd >= 0) + (fds[1].fd >= 0);
    if (open > 0) {
      ::poll(fds, 2, 100);
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = read(fds[i].fd, buf, sizeof(buf));
        if (n > 0) {
          splitters[i].Feed(std::string_view(buf, n), [&](std::string_view l) { emit(i, l); });
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          splitters[i].Flush([&](std::string_view l) { emit(i, l); });
          fds[i].fd = -1;
        }
      }
    }
    if (!exit) {
      exit = p.TryWait();
      if (exit) drain_deadline = absl::Now() + kDrainAfterExit;
    }
    if (exit && (open == 0 || absl::Now() > drain_deadline)) break;
    if (open == 0 && !exit) {
      auto st = p.WaitFor(absl::Milliseconds(100));
      if (st.ok()) exit = *st;
    }
    bool kill_now;
    {
      absl::MutexLock l(&mu_);
      kill_now = a->killing && absl::Now() > a->kill_deadline && !sigkilled;
    }
    if (kill_now && !exit) {
      p.SignalGroup(SIGKILL).IgnoreError();
      sigkilled = true;
    }
  }
  for (int i = 0; i < 2; ++i) splitters[i].Flush([&](std::string_view l) { emit(i, l); });
  // Nothing of the group may outlive the worker.
  p.Terminate(absl::ZeroDuration()).IgnoreError();

  v1::ReportExitRequest report;
  report.set_allocation_id(launch.allocation_id());
  report.set_rank(rank);
  report.set_exit_code(exit->exit_code);
  report.set_signal(exit->signal);
  AgentLine(launch, rank, absl::StrCat("worker exited: ", exit->ToString()));
  Enqueue({std::nullopt, std::nullopt, report});
  bool failed = !exit->ok();
  bool killing;
  {
    absl::MutexLock l(&mu_);
    w->exited = true;
    ++a->reported_exits;
    killing = a->killing;
  }
  // One failed rank stops the others of its allocation on this agent.
  if (failed && !killing) Kill(launch.allocation_id(), absl::StrCat("rank ", rank, " failed"));
}

void Agent::ReapFinished(bool even_if_unreported) {
  std::vector<std::unique_ptr<Allocation>> done;
  {
    absl::MutexLock l(&mu_);
    for (auto it = allocations_.begin(); it != allocations_.end();) {
      Allocation& a = *it->second;
      if (a.reported_exits == static_cast<int>(a.workers.size())) {
        // Keep it listed as running until the outbox has delivered its reports.
        bool pending = false;
        for (const auto& o : outbox_) {
          if (even_if_unreported) break;
          pending |= (o.exit && o.exit->allocation_id() == it->first) ||
                     (o.launched && o.launched->allocation_id() == it->first);
        }
        if (!pending) {
          done.push_back(std::move(it->second));
          it = allocations_.erase(it);
          continue;
        }
      }
      ++it;
    }
  }
  for (auto& a : done) {
    for (auto& w : a->workers) {
      if (w->supervisor.joinable()) w->supervisor.join();
    }
  }
}

}  // namespace det::agent
