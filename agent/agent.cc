#include "agent/agent.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "agent/checkpoint_gc/checkpoint_gc.h"
#include "agent/net/local_address.h"
#include "agent/supervisor/file_tailer.h"
#include "common/logging/logging.h"
#include "common/rpc/rpc.h"

namespace det::agent {
namespace {

constexpr int64_t kMaxBufferedLines = 100000;
// Supervisors stop reading worker output while the outbox holds this many lines, and read
// about this many lines at a time, so that worker output never overflows the outbox.
constexpr int64_t kReadPauseLines = 30000;
constexpr int kMaxLinesPerRead = 10000;
constexpr int kMaxLinesPerBatch = 1000;
// A batch stays far below the 4 MiB the master receives in one message (lines are cut at
// 64 KiB, so 1000 of them could be 64 MiB).
constexpr size_t kMaxBatchBytes = 1 << 20;
constexpr size_t kMaxBufferedSamples = 720;
constexpr absl::Duration kPollWait = absl::Seconds(20);
constexpr absl::Duration kMaxBackoff = absl::Seconds(5);
// How often a supervisor looks for new output and for its worker's exit.
constexpr absl::Duration kSuperviseTick = absl::Milliseconds(100);
// After stopping the workers on shutdown, how long to try to deliver their exits.
constexpr absl::Duration kShutdownDelivery = absl::Seconds(5);
constexpr const char* kStreams[2] = {"stdout", "stderr"};

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

void RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) Logger("agent")->warn("cannot remove {}: {}", path, ec.message());
}

// The credential the master issued to this agent id (proto/agent.proto): under
// work_dir/run (0700), mode 0600, so that no worker can read it and take the id over.
std::string CredentialPath(const std::string& work_dir) {
  return work_dir + "/run/agent_credential";
}

std::string ReadCredential(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return std::string(absl::StripAsciiWhitespace(text.str()));
}

absl::Status WriteCredential(const std::string& path, const std::string& credential) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", strerror(errno)));
  }
  return WritePrivateFile(path, credential + "\n");
}

// A credential this agent proposes at its first registration: 32 bytes of the kernel's
// random generator, hex. Kept before it is sent, so that an answer lost on the way (or a
// crash right after) does not leave the master holding a credential the agent never saw.
absl::StatusOr<std::string> NewCredential() {
  unsigned char raw[32];
  size_t got = 0;
  while (got < sizeof(raw)) {
    ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InternalError(absl::StrCat("getrandom: ", strerror(errno)));
    got += static_cast<size_t>(n);
  }
  std::string hex;
  for (unsigned char b : raw) absl::StrAppend(&hex, absl::Hex(b, absl::kZeroPad2));
  return hex;
}

}  // namespace

Agent::Agent(config::AgentConfig config, MasterClient& client, std::vector<v1::Slot> slots,
             AgentOptions options)
    : config_(std::move(config)),
      client_(client),
      slots_(std::move(slots)),
      options_(std::move(options)),
      contexts_(config_.work_dir + "/contexts") {
  launch_context_.agent_id = config_.agent_id;
  launch_context_.master_address = config_.master;
  launch_context_.slot_type = slots_.empty() ? "cpu" : slots_[0].type();
  launch_context_.worker_path = config_.worker_path;
  launch_context_.worker_python = options_.python ? options_.python->path : config_.worker_python;
  launch_context_.python_path =
      config_.python_path ? *config_.python_path : DefaultPythonPath(options_.shim_path);
  launch_context_.cpu_count = UsableCpuCount();
  launch_context_.task_user = options_.task_user;
  launch_context_.task_user_name = options_.task_user_name;
  heartbeat_interval_ = config_.heartbeat_interval;
}

Agent::~Agent() {
  Stop();
  StopThreads();
}

void Agent::Stop() {
  absl::MutexLock l(&mu_);
  stopping_ = true;
}

void Agent::Detach() {
  absl::MutexLock l(&mu_);
  detaching_ = true;
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

void Agent::StopThreads() {
  client_.Shutdown();
  if (poller_.joinable()) poller_.join();
  if (outbox_thread_.joinable()) outbox_thread_.join();
  if (metrics_thread_.joinable()) metrics_thread_.join();
}

absl::Status Agent::RegisterOnce() {
  v1::RegisterRequest req;
  req.set_agent_id(config_.agent_id);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  req.set_hostname(host);
  req.set_cluster_secret(config_.cluster_secret);
  {
    absl::MutexLock l(&mu_);
    req.set_agent_credential(credential_);
  }
  req.set_version("0.1.0");
  req.set_resource_pool(config_.resource_pool);
  if (options_.python) {
    req.set_worker_python(options_.python->path);
    req.set_worker_torch_version(options_.python->torch_version);
  } else {
    req.set_worker_python(config_.worker_python);
  }
  std::string advertise = config_.advertise_address;
  if (advertise.empty()) {
    absl::StatusOr<std::string> route = LocalAddressTowards(config_.master);
    if (route.ok()) {
      advertise = *route;
    } else {
      Logger("agent")->warn(
          "cannot tell which address other agents reach this one at ({}); set "
          "advertise_address in agent.yaml",
          route.status().ToString());
    }
  }
  req.set_advertise_address(advertise);
  std::string interface;
  if (!advertise.empty()) {
    absl::StatusOr<std::string> held = InterfaceHolding(advertise);
    if (held.ok()) {
      interface = *held;
    } else {
      Logger("agent")->warn(
          "workers of trials across agents get no GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME: {}",
          held.status().ToString());
    }
  }
  req.set_chief_port_first(config_.chief_port_first);
  req.set_chief_port_last(config_.chief_port_last);
  for (const auto& s : slots_) *req.add_slots() = s;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [id, a] : allocations_) req.add_running_allocations(id);
  }
  auto resp = client_.Register(req);
  if (!resp.ok()) {
    if (absl::IsUnauthenticated(resp.status()) || absl::IsAlreadyExists(resp.status()) ||
        absl::IsPermissionDenied(resp.status())) {
      Logger("agent")->error("the master at {} refused agent {}: {}", config_.master,
                             config_.agent_id, std::string(resp.status().message()));
    } else {
      Logger("agent")->warn("cannot register with the master: {}", resp.status().ToString());
    }
    return resp.status();
  }
  for (const auto& id : resp->kill_allocations()) Kill(id, "the master no longer runs it");
  if (!resp->agent_credential().empty() && resp->agent_credential() != req.agent_credential()) {
    // Kept for the next registration (this process's or a restarted one's).
    absl::Status kept = WriteCredential(CredentialPath(config_.work_dir), resp->agent_credential());
    if (!kept.ok()) {
      Logger("agent")->error("cannot keep the agent credential (this process keeps it in "
                             "memory; a restarted agent will be refused until an admin runs "
                             "det agent reset-credential {}): {}",
                             config_.agent_id, kept.ToString());
    }
  }
  absl::MutexLock l(&mu_);
  if (!resp->agent_credential().empty()) credential_ = resp->agent_credential();
  session_ = resp->session_id();
  launch_context_.advertise_address = advertise;
  launch_context_.network_interface = interface;
  if (resp->heartbeat_interval_ms() > 0) {
    heartbeat_interval_ = absl::Milliseconds(resp->heartbeat_interval_ms());
  }
  Logger("agent")->info(
      "agent {} joined master {} with {} {} slot(s), {} running allocation(s); advertised as "
      "{} (interface {}), chief ports {}-{}",
      config_.agent_id, config_.master, slots_.size(), launch_context_.slot_type,
      req.running_allocations_size(), advertise, interface.empty() ? "unknown" : interface,
      config_.chief_port_first,
      config_.chief_port_last);
  return absl::OkStatus();
}

absl::Status Agent::Run() {
  // Allocation directories are reachable by their task user, listable by nobody; records
  // and worker output are the agent's alone.
  if (absl::Status st = PrepareWorkRoot(config_.work_dir); !st.ok()) {
    Logger("agent")->warn("work_dir: {}", st.ToString());
  }
  if (absl::Status st = CheckUserCanReach(config_.work_dir, launch_context_.task_user); !st.ok()) {
    Logger("agent")->warn("workers will fail to start: {}; put work_dir where it can",
                          std::string(st.message()));
  }
  Restore();
  {
    std::string credential = ReadCredential(CredentialPath(config_.work_dir));
    if (credential.empty()) {
      // Not enrolled yet (or the file is lost: then the master refuses this id until an
      // admin runs det agent reset-credential, and enrols it with this one).
      absl::StatusOr<std::string> fresh = NewCredential();
      if (fresh.ok()) {
        credential = *fresh;
        absl::Status kept = WriteCredential(CredentialPath(config_.work_dir), credential);
        if (!kept.ok()) {
          Logger("agent")->error("cannot keep the agent credential (this process keeps it in "
                                 "memory; a restarted agent will be refused until an admin "
                                 "runs det agent reset-credential {}): {}",
                                 config_.agent_id, kept.ToString());
        }
      } else {
        Logger("agent")->warn("cannot make an agent credential ({}); the master issues one",
                              fresh.status().ToString());
      }
    }
    absl::MutexLock l(&mu_);
    credential_ = std::move(credential);
  }
  poller_ = std::thread([this] { PollLoop(); });
  outbox_thread_ = std::thread([this] { OutboxLoop(); });
  if (options_.sampler != nullptr && options_.system_metrics_period > absl::ZeroDuration()) {
    metrics_thread_ = std::thread([this] { MetricsLoop(); });
  }
  absl::Status refused;
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
      absl::Status st = RegisterOnce();
      if (st.ok()) {
        backoff = absl::Milliseconds(200);
        continue;
      }
      if (absl::IsUnauthenticated(st)) {
        absl::MutexLock l(&mu_);
        // With workers of a previous agent process still running, keep trying: an operator
        // may be fixing the secret, and giving up would strand them.
        if (allocations_.empty()) {
          refused = st;
          stopping_ = true;
          break;
        }
      }
      if (SleepOrStop(backoff)) break;
      backoff = std::min(backoff * 2, kMaxBackoff);
      continue;
    }
    v1::HeartbeatRequest hb;
    hb.set_agent_id(config_.agent_id);
    hb.set_session_id(session);
    {
      absl::MutexLock l(&mu_);
      for (const auto& m : metrics_) *hb.add_system_metrics() = m;
    }
    absl::Status st = client_.Heartbeat(hb);
    if (absl::IsNotFound(st)) {
      Logger("agent")->warn("master does not know this session ({}); registering again",
                            std::string(st.message()));
      SessionLost(session);
      continue;
    }
    if (st.ok() && hb.system_metrics_size() > 0) {
      int64_t sent_until = hb.system_metrics(hb.system_metrics_size() - 1).time_ms();
      absl::MutexLock l(&mu_);
      while (!metrics_.empty() && metrics_.front().time_ms() <= sent_until) metrics_.pop_front();
    }
    if (!st.ok()) Logger("agent")->warn("heartbeat failed: {}", st.ToString());
    ReapFinished(/*even_if_unreported=*/false);
    if (SleepOrStop(st.ok() ? interval : std::min(interval, absl::Seconds(1)))) break;
  }

  bool detaching;
  {
    absl::MutexLock l(&mu_);
    detaching = detaching_;
  }
  if (detaching) {
    // Supervisors see detaching_ and return; the workers keep running.
    std::vector<std::thread> supervisors;
    {
      absl::MutexLock l(&mu_);
      for (auto& [id, a] : allocations_) {
        for (auto& w : a->workers) {
          if (w->supervisor.joinable()) supervisors.push_back(std::move(w->supervisor));
        }
      }
    }
    for (auto& t : supervisors) t.join();
    StopThreads();
    size_t left;
    {
      absl::MutexLock l(&mu_);
      left = allocations_.size();
    }
    Logger("agent")->info(
        "agent {} exited, leaving {} allocation(s) running for the next agent "
        "process",
        config_.agent_id, left);
    return absl::OkStatus();
  }

  // Shutting down: stop every worker and let the outbox report their exits.
  std::vector<std::string> ids;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [id, a] : allocations_) ids.push_back(id);
  }
  for (const auto& id : ids) {
    Kill(id, "agent shutting down", absl::ZeroDuration(), /*agent_stopping=*/true);
  }
  // Workers exit within kill_grace (then SIGKILL); their exits get kShutdownDelivery more
  // to reach the master, unless there is no session to deliver them on.
  absl::Time delivery_deadline = absl::InfiniteFuture();
  while (true) {
    bool give_up;
    {
      absl::MutexLock l(&mu_);
      if (allocations_.empty()) break;
      bool all_exited = true;
      for (const auto& [id, a] : allocations_) {
        for (const auto& w : a->workers) all_exited &= w->exited;
      }
      if (all_exited && delivery_deadline == absl::InfiniteFuture()) {
        delivery_deadline = absl::Now() + kShutdownDelivery;
      }
      give_up = session_.empty() || absl::Now() > delivery_deadline;
    }
    ReapFinished(/*even_if_unreported=*/give_up);
    absl::SleepFor(absl::Milliseconds(50));
  }
  StopThreads();
  if (refused.ok()) Logger("agent")->info("agent {} stopped", config_.agent_id);
  return refused;
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
      if (cmd.has_kill()) {
        Kill(cmd.kill().allocation_id(), cmd.kill().reason(),
             absl::Milliseconds(cmd.kill().grace_ms()));
      }
    }
  }
}

void Agent::MetricsLoop() {
  SystemSampler& sampler = *options_.sampler;
  sampler.Sample(absl::Now()).IgnoreError();  // Primes the counters.
  bool warned = false;
  while (!SleepOrStop(options_.system_metrics_period)) {
    absl::StatusOr<v1::SystemMetrics> m = sampler.Sample(absl::Now());
    if (!m.ok()) {
      if (!warned) Logger("agent")->warn("cannot sample system metrics: {}", m.status().ToString());
      warned = true;
      continue;
    }
    m->set_agent_id(config_.agent_id);
    absl::MutexLock l(&mu_);
    metrics_.push_back(*std::move(m));
    while (metrics_.size() > kMaxBufferedSamples) metrics_.pop_front();
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
  bool done = false;
  while (!done) {
    std::vector<Outgoing> batch;
    std::string session;
    int64_t dropped = 0;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return (stopping_ && allocations_.empty()) || (!outbox_.empty() && !session_.empty());
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(200));
      // After Stop(), the outbox runs until the allocations are gone (their exits reported
      // or given up on); after Detach(), at once: the next agent process ships the rest.
      if (detaching_ || (stopping_ && allocations_.empty())) return;
      if (outbox_.empty() || session_.empty()) continue;
      session = session_;
      // Consecutive log lines go in one batch; a report goes alone.
      if (outbox_.front().line) {
        size_t bytes = 0;
        for (auto it = outbox_.begin();
             it != outbox_.end() && it->line && static_cast<int>(batch.size()) < kMaxLinesPerBatch;
             ++it) {
          bytes += it->line->ByteSizeLong();
          if (!batch.empty() && bytes > kMaxBatchBytes) break;
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
      {
        absl::MutexLock l(&mu_);
        for (size_t i = 0; i < batch.size(); ++i) {
          if (outbox_.front().line) --outbox_lines_;
          outbox_.pop_front();
        }
        if (batch[0].line) {
          // Lines the master refused for good are counted as dropped: the count goes with
          // the next batch (ShipLogsRequest.dropped), never lost without a word.
          if (st.ok()) {
            dropped_lines_ -= dropped;
          } else {
            dropped_lines_ += static_cast<int64_t>(batch.size());
          }
        }
        Delivered(batch);
      }
      backoff = absl::Milliseconds(100);
      // An accepted exit, or the last lines of an allocation whose exits went ahead of them,
      // may finish its allocation: clean it up now.
      if (!batch[0].launched) ReapFinished(/*even_if_unreported=*/false);
      continue;
    }
    if (absl::IsNotFound(st)) SessionLost(session);
    if (batch[0].line && !absl::IsNotFound(st)) {
      Logger("agent")->warn("cannot ship {} log lines (kept; sending them again in {}): {}",
                            batch.size(), absl::FormatDuration(backoff), st.ToString());
      // The first report queued behind lines the master cannot take goes next: a worker's
      // exit frees its slot even while the master cannot store its last lines (a full
      // database). Reports keep their order among themselves; the lines follow.
      absl::MutexLock l(&mu_);
      auto report = std::find_if(outbox_.begin(), outbox_.end(),
                                 [](const Outgoing& o) { return !o.line; });
      if (report != outbox_.end() && report != outbox_.begin()) {
        Outgoing o = std::move(*report);
        outbox_.erase(report);
        outbox_.push_front(std::move(o));
      }
    }
    {
      absl::MutexLock l(&mu_);
      done = detaching_;
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

void Agent::Delivered(const std::vector<Outgoing>& batch) {
  std::set<Allocation*> touched;
  for (const Outgoing& o : batch) {
    const std::string& id = o.line       ? o.line->allocation_id()
                            : o.launched ? o.launched->allocation_id()
                                         : o.exit->allocation_id();
    auto it = allocations_.find(id);
    if (it == allocations_.end()) continue;
    Allocation& a = *it->second;
    int rank = o.line ? o.line->rank() : o.exit ? o.exit->rank() : -1;
    for (auto& w : a.workers) {
      if (w->rank.rank() != rank) continue;
      if (o.line && o.stream >= 0)
        w->shipped[o.stream] = std::max(w->shipped[o.stream], o.end_offset);
      if (o.exit) w->exit_reported = true;
    }
    if (o.launched) a.launched_reported = true;
    touched.insert(&a);
  }
  for (Allocation* a : touched) Persist(*a);
}

void Agent::Persist(const Allocation& a) {
  AllocationRecord r;
  r.launch = a.launch;
  r.launched_reported = a.launched_reported;
  r.killing = a.killing;
  r.kill_deadline_ms = a.killing ? absl::ToUnixMillis(a.kill_deadline) : 0;
  r.agent_stopping = a.agent_stopping;
  for (const auto& w : a.workers) {
    WorkerRecord& wr = r.workers.emplace_back();
    wr.rank = w->rank.rank();
    if (w->process) {
      wr.pid = w->process->pid();
      wr.start_ticks = w->process->start_ticks();
    }
    wr.shipped[0] = w->shipped[0];
    wr.shipped[1] = w->shipped[1];
    wr.exit_reported = w->exit_reported;
  }
  absl::Status st = WriteAllocationRecord(a.run_dir, r);
  if (!st.ok()) {
    Logger("agent")->warn("allocation {}: cannot write its record: {}", a.launch.allocation_id(),
                          st.ToString());
  }
}

void Agent::AgentLine(const v1::LaunchCommand& launch, int rank, const std::string& message) {
  Logger("agent")->info("allocation {} rank {}: {}", launch.allocation_id(), rank, message);
  Outgoing o;
  v1::LogLine& line = o.line.emplace();
  line.set_trial_id(launch.trial_id());
  line.set_allocation_id(launch.allocation_id());
  line.set_rank(rank);
  line.set_stream("agent");
  line.set_time_ms(NowMs());
  line.set_message(message);
  Enqueue(std::move(o));
}

void Agent::Restore() {
  std::string run_root = config_.work_dir + "/run";
  std::error_code ec;
  std::vector<std::string> dirs;
  for (const auto& entry : std::filesystem::directory_iterator(run_root, ec)) {
    if (entry.is_directory(ec)) dirs.push_back(entry.path().string());
  }
  std::sort(dirs.begin(), dirs.end());
  for (const std::string& run_dir : dirs) {
    absl::StatusOr<AllocationRecord> rec = ReadAllocationRecord(run_dir);
    if (!rec.ok()) {
      Logger("agent")->warn("ignoring {}: {}", run_dir, rec.status().ToString());
      RemoveTree(run_dir);
      continue;
    }
    const std::string id = rec->launch.allocation_id();
    auto a = std::make_unique<Allocation>();
    a->launch = rec->launch;
    a->run_dir = run_dir;
    a->work_dir = absl::StrCat(config_.work_dir, "/", SafeName(id));
    a->launched_reported = rec->launched_reported;
    a->agent_stopping = rec->agent_stopping;
    a->killing = rec->killing;
    if (a->killing) a->kill_deadline = absl::FromUnixMillis(rec->kill_deadline_ms);
    std::vector<std::string> adopted;
    std::vector<int> running;
    for (const auto& r : a->launch.ranks()) {
      auto w = std::make_unique<Worker>();
      w->rank = r;
      for (const WorkerRecord& wr : rec->workers) {
        if (wr.rank != r.rank()) continue;
        w->shipped[0] = wr.shipped[0];
        w->shipped[1] = wr.shipped[1];
        w->exit_reported = wr.exit_reported;
        if (wr.pid > 0) {
          w->process =
              WorkerProcess::Adopt(wr.pid, wr.start_ticks, RankExitPath(run_dir, r.rank()));
        }
      }
      w->exited = w->exit_reported || !w->process;
      if (!w->exited) {
        running.push_back(r.rank());
        bool alive = !w->process->Wait(absl::ZeroDuration()).has_value();
        adopted.push_back(absl::StrCat("rank ", r.rank(), " (pid ", w->process->pid(),
                                       alive ? ", running" : ", exited", ")"));
      }
      a->workers.push_back(std::move(w));
    }
    Allocation* ap = a.get();
    {
      absl::MutexLock l(&mu_);
      allocations_[id] = std::move(a);
    }
    Logger("agent")->info("allocation {}: re-adopted from a previous agent process: {}", id,
                          adopted.empty() ? "nothing left to watch" : absl::StrJoin(adopted, ", "));
    for (const auto& w : ap->workers) {
      if (w->exited) continue;
      AgentLine(
          ap->launch, w->rank.rank(),
          absl::StrCat("agent restarted; watching the worker again (pid ", w->process->pid(), ")"));
    }
    if (!ap->launched_reported && !running.empty()) {
      Outgoing o;
      v1::ReportLaunchedRequest& launched = o.launched.emplace();
      launched.set_allocation_id(id);
      for (int r : running) launched.add_ranks(r);
      Enqueue(std::move(o));
    }
    absl::MutexLock l(&mu_);
    for (auto& w : ap->workers) {
      if (w->exited) continue;
      if (ap->killing) w->process->SignalGroup(SIGTERM).IgnoreError();
      StartSupervisor(ap, w.get());
    }
  }
}

void Agent::Launch(const v1::LaunchCommand& launch) {
  const std::string& id = launch.allocation_id();
  LaunchContext launch_context;
  {
    absl::MutexLock l(&mu_);
    if (stopping_ || allocations_.count(id)) return;
    launch_context = launch_context_;
  }
  auto alloc = std::make_unique<Allocation>();
  alloc->work_dir = absl::StrCat(config_.work_dir, "/", SafeName(id));
  alloc->run_dir = absl::StrCat(config_.work_dir, "/run/", SafeName(id));
  // Leftovers of an allocation of the same id (an earlier cluster's) must not be mixed in.
  RemoveTree(alloc->run_dir);
  RemoveTree(alloc->work_dir);
  RemoveTree(LaunchFilesDir(alloc->work_dir));
  // The experiment owner's linked OS user, if any, replaces the default task user.
  absl::Status st = UseLaunchTaskUser(launch, geteuid(), getegid(), &launch_context);
  // The experiment's interpreter (environment.python) wins over the agent's; without one, a
  // Python entrypoint needs the agent to have found an interpreter (with torch, for det's
  // torch launcher and Trial runner).
  if (!launch.python().empty()) {
    launch_context.worker_python = launch.python();
  } else if (st.ok() && options_.python && !launch.has_checkpoint_gc()) {
    std::vector<std::string> entrypoint(launch.argv().begin(), launch.argv().end());
    bool needs_torch = EntrypointNeedsTorch(entrypoint);
    if ((IsPythonEntrypoint(entrypoint) && options_.python->path.empty()) ||
        (needs_torch && !options_.python->has_torch())) {
      st = absl::FailedPreconditionError(
          NoPythonMessage(config_.agent_id, *options_.python, needs_torch));
    }
  }
  v1::ModelContext context;
  if (st.ok() && launch.has_model_context()) {
    absl::StatusOr<v1::ModelContext> fetched = ModelContext(launch);
    if (fetched.ok()) context = *std::move(fetched);
    st = fetched.status();
  }
  if (st.ok()) st = WriteContext(alloc->work_dir, context.files());
  context.Clear();  // Written to disk; no need to keep it in memory.
  std::error_code ec;
  std::filesystem::create_directories(alloc->run_dir, ec);
  if (st.ok() && ec) {
    st = absl::PermissionDeniedError(
        absl::StrCat("cannot create directory '", alloc->run_dir, "': ", ec.message()));
  }
  std::vector<std::string> argv =
      WorkerArgv({launch.argv().begin(), launch.argv().end()}, launch_context);
  if (st.ok() && launch.has_checkpoint_gc()) {
    // A checkpoint GC task: this binary deletes the checkpoints, supervised as a worker.
    std::string spec_file = alloc->work_dir + "/checkpoint-gc.json";
    st = WriteCheckpointGcSpec(spec_file, launch.checkpoint_gc());
    argv = CheckpointGcArgv(options_.shim_path, spec_file);
  }
  // The trial spec, hyperparameters and config go by file (they may exceed what one
  // environment string may hold).
  if (st.ok()) st = WriteLaunchFiles(alloc->work_dir, launch);
  // Last: the allocation's files become its task user's, readable by no other.
  if (st.ok()) st = HandOverWorkDir(alloc->work_dir, launch_context.task_user);
  if (st.ok()) st = HandOverWorkDir(LaunchFilesDir(alloc->work_dir), launch_context.task_user);
  alloc->launch = launch;
  std::vector<int> started;
  EnvironmentVariables base = CurrentEnvironment();
  for (const auto& r : launch.ranks()) {
    auto w = std::make_unique<Worker>();
    w->rank = r;
    if (st.ok()) {
      WorkerSpec spec;
      spec.shim_path = options_.shim_path;
      spec.argv = argv;
      spec.env = WorkerEnvironment(launch, r, launch_context, alloc->work_dir, base);
      spec.cwd = alloc->work_dir;
      spec.stdout_path = RankOutputPath(alloc->run_dir, r.rank(), 0);
      spec.stderr_path = RankOutputPath(alloc->run_dir, r.rank(), 1);
      spec.exit_path = RankExitPath(alloc->run_dir, r.rank());
      spec.run_as = launch_context.task_user;
      if (spec.argv.empty()) {
        st = absl::InvalidArgumentError("the launch has an empty entrypoint");
      } else if (auto proc = WorkerProcess::Start(spec); proc.ok()) {
        w->process = *std::move(proc);
        started.push_back(r.rank());
        Logger("agent")->info("allocation {}: rank {} started (shim pid {}): {}", id, r.rank(),
                              w->process->pid(), absl::StrJoin(spec.argv, " "));
      } else {
        st = proc.status();
      }
    }
    w->exited = !w->process;
    alloc->workers.push_back(std::move(w));
  }
  Allocation* a = alloc.get();
  {
    absl::MutexLock l(&mu_);
    allocations_[id] = std::move(alloc);
    // Recorded before the master hears of the launch: a restarted agent finds the workers.
    Persist(*a);
  }
  if (!started.empty()) {
    Outgoing o;
    v1::ReportLaunchedRequest& launched = o.launched.emplace();
    launched.set_allocation_id(id);
    for (int r : started) launched.add_ranks(r);
    Enqueue(std::move(o));
  }
  if (!st.ok()) {
    // Ranks that never started exit at once; the others are stopped.
    for (auto& w : a->workers) {
      if (w->process) continue;
      AgentLine(launch, w->rank.rank(), absl::StrCat("cannot start worker: ", st.message()));
      Outgoing o;
      v1::ReportExitRequest& exit = o.exit.emplace();
      exit.set_allocation_id(id);
      exit.set_rank(w->rank.rank());
      exit.set_exit_code(127);
      exit.set_message(std::string(st.message()));
      Enqueue(std::move(o));
    }
    if (!started.empty()) Kill(id, "another rank could not start");
  }
  absl::MutexLock l(&mu_);
  for (auto& w : a->workers) {
    if (w->process) StartSupervisor(a, w.get());
  }
}

absl::StatusOr<v1::ModelContext> Agent::ModelContext(const v1::LaunchCommand& launch) {
  return contexts_.Get(launch.model_context(), [&]() -> absl::StatusOr<v1::GetModelContextResponse> {
    v1::GetModelContextRequest req;
    req.set_agent_id(config_.agent_id);
    req.set_allocation_id(launch.allocation_id());
    absl::StatusOr<v1::GetModelContextResponse> resp;
    for (int attempt = 1;; ++attempt) {
      req.set_session_id(Session());
      resp = client_.GetModelContext(req);
      if (resp.ok() || !rpc::IsTransient(resp.status()) || attempt == 3 ||
          SleepOrStop(absl::Seconds(1))) {
        return resp;
      }
    }
  });
}

void Agent::Kill(const std::string& allocation_id, const std::string& reason, absl::Duration grace,
                 bool agent_stopping) {
  absl::MutexLock l(&mu_);
  auto it = allocations_.find(allocation_id);
  if (it == allocations_.end()) return;
  Allocation& a = *it->second;
  a.agent_stopping |= agent_stopping;
  if (a.killing) {
    Persist(a);
    return;
  }
  a.killing = true;
  a.kill_deadline = absl::Now() + (grace > absl::ZeroDuration() ? grace : config_.kill_grace);
  Logger("agent")->info("allocation {}: stopping ({})", allocation_id, reason);
  for (auto& w : a.workers) {
    if (w->process && !w->exited) w->process->SignalGroup(SIGTERM).IgnoreError();
  }
  Persist(a);
}

void Agent::StartSupervisor(Allocation* a, Worker* w) {
  w->supervisor = std::thread([this, a, w] { Supervise(a, w); });
}

void Agent::Supervise(Allocation* a, Worker* w) {
  const v1::LaunchCommand& launch = a->launch;
  const int rank = w->rank.rank();
  int64_t from[2];
  {
    absl::MutexLock l(&mu_);
    from[0] = w->shipped[0];
    from[1] = w->shipped[1];
  }
  FileTailer out(RankOutputPath(a->run_dir, rank, 0), from[0]);
  FileTailer err(RankOutputPath(a->run_dir, rank, 1), from[1]);
  FileTailer* tailers[2] = {&out, &err};
  // Reads new output while the outbox has room (the file keeps the rest: nothing is lost
  // and memory stays bounded); true once both files were read to their end.
  auto ship = [&](bool final) {
    {
      absl::MutexLock l(&mu_);
      if (outbox_lines_ >= kReadPauseLines) return false;
    }
    bool at_end = true;
    for (int i = 0; i < 2; ++i) {
      tailers[i]->Poll(final, kMaxLinesPerRead, [&](std::string_view text, int64_t end) {
        Outgoing o;
        v1::LogLine& line = o.line.emplace();
        line.set_trial_id(launch.trial_id());
        line.set_allocation_id(launch.allocation_id());
        line.set_rank(rank);
        line.set_stream(kStreams[i]);
        line.set_time_ms(NowMs());
        line.set_message(std::string(text));
        o.stream = i;
        o.end_offset = end;
        Enqueue(std::move(o));
      });
      at_end &= tailers[i]->at_end();
    }
    return at_end;
  };
  std::optional<WorkerExit> exit;
  bool sigkilled = false;
  absl::Time next_term = absl::InfinitePast();
  while (true) {
    ship(/*final=*/false);
    exit = w->process->Wait(kSuperviseTick);
    if (exit) break;
    bool kill_now, term_now = false;
    {
      absl::MutexLock l(&mu_);
      if (detaching_) return;  // The worker runs on; the next agent process watches it.
      kill_now = a->killing && absl::Now() > a->kill_deadline && !sigkilled;
      // SIGTERM again every second of the grace period: one sent while the shim was still
      // starting its worker reached no worker.
      if (a->killing && !kill_now && absl::Now() >= next_term) {
        term_now = next_term != absl::InfinitePast();
        next_term = absl::Now() + absl::Seconds(1);
      }
    }
    if (term_now) w->process->SignalGroup(SIGTERM).IgnoreError();
    if (kill_now) {
      Logger("agent")->warn(
          "allocation {} rank {}: still running after the grace period; "
          "SIGKILL",
          launch.allocation_id(), rank);
      w->process->SignalGroup(SIGKILL).IgnoreError();
      sigkilled = true;
    }
  }
  // The worker and its process group are gone: whatever they wrote is complete.
  while (!ship(/*final=*/true)) {
    absl::MutexLock l(&mu_);
    if (detaching_) return;
    auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return detaching_ || outbox_lines_ < kReadPauseLines;
    };
    mu_.AwaitWithTimeout(absl::Condition(&room), kSuperviseTick);
  }

  v1::ReportExitRequest report;
  report.set_allocation_id(launch.allocation_id());
  report.set_rank(rank);
  report.set_exit_code(exit->status.exit_code);
  report.set_signal(exit->status.signal);
  report.set_message(exit->note);
  bool killing;
  {
    absl::MutexLock l(&mu_);
    report.set_agent_stopping(a->agent_stopping);
    killing = a->killing;
  }
  AgentLine(launch, rank,
            absl::StrCat("worker exited: ", exit->status.ToString(),
                         exit->note.empty() ? "" : absl::StrCat(" (", exit->note, ")")));
  Outgoing o;
  o.exit = report;
  Enqueue(std::move(o));
  {
    absl::MutexLock l(&mu_);
    w->exited = true;
  }
  // One failed rank stops the others of its allocation on this agent.
  if (!exit->status.ok() && !killing) {
    Kill(launch.allocation_id(), absl::StrCat("rank ", rank, " failed"));
  }
}

void Agent::ReapFinished(bool even_if_unreported) {
  std::vector<std::unique_ptr<Allocation>> done;
  {
    absl::MutexLock l(&mu_);
    for (auto it = allocations_.begin(); it != allocations_.end();) {
      bool finished = true;
      for (const auto& w : it->second->workers) {
        finished &= w->exited && (w->exit_reported || even_if_unreported);
      }
      // Lines still queued (their exits went ahead of them) keep the run dir: an agent
      // restarted before they ship sends them again from the workers' output files.
      for (auto o = outbox_.begin(); finished && !even_if_unreported && o != outbox_.end(); ++o) {
        finished = !(o->line && o->line->allocation_id() == it->first);
      }
      if (finished) {
        done.push_back(std::move(it->second));
        it = allocations_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& a : done) {
    for (auto& w : a->workers) {
      if (w->supervisor.joinable()) w->supervisor.join();
    }
    RemoveTree(a->run_dir);
    RemoveTree(a->work_dir);
    RemoveTree(LaunchFilesDir(a->work_dir));
    Logger("agent")->info("allocation {}: finished and cleaned up", a->launch.allocation_id());
  }
}

}  // namespace det::agent
