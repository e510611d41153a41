#include "agent/agent.h"

#include <signal.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/allocations/restore.h"
#include "agent/supervisor/supervision.h"
#include "common/logging/logging.h"

namespace det::agent {
namespace {

constexpr absl::Duration kMaxBackoff = absl::Seconds(5);
// The outbox's wait for a session or an item.
constexpr absl::Duration kOutboxIdle = absl::Milliseconds(200);
// After stopping the workers on shutdown, how long to try to deliver their exits.
constexpr absl::Duration kShutdownDelivery = absl::Seconds(5);
// How often the shutdown looks for allocations it can forget.
constexpr absl::Duration kShutdownTick = absl::Milliseconds(50);

LaunchContext MakeLaunchContext(const config::AgentConfig& config,
                                const std::vector<v1::Slot>& slots, const AgentOptions& options) {
  LaunchContext c;
  c.agent_id = config.agent_id;
  c.master_address = config.master;
  c.slot_type = slots.empty() ? "cpu" : slots[0].type();
  c.worker_path = config.worker_path;
  c.worker_python = options.python ? options.python->path : config.worker_python;
  c.python_path = config.python_path ? *config.python_path : DefaultPythonPath(options.shim_path);
  c.cpu_count = UsableCpuCount();
  c.task_user = options.task_user;
  c.task_user_name = options.task_user_name;
  return c;
}

}  // namespace

Agent::Agent(config::AgentConfig config, MasterClient& client, std::vector<v1::Slot> slots,
             AgentOptions options)
    : config_(std::move(config)),
      client_(client),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : real_clock_),
      launcher_(options_.launcher != nullptr ? *options_.launcher : shim_launcher_),
      launch_context_(MakeLaunchContext(config_, slots, options_)),
      stop_(clock_, options_.max_real_wait),
      session_(config_, client_, slots, options_.python),
      outbox_(config_.agent_id, client_, clock_),
      starter_({config_.agent_id, config_.work_dir, options_.shim_path, options_.python}, launcher_,
               client_, session_, stop_),
      poller_(config_.agent_id, client_, session_, *this, stop_) {}

Agent::~Agent() {
  Stop();
  StopThreads();
}

void Agent::Stop() {
  stop_.Stop();
  outbox_.Wake();
}

void Agent::Detach() {
  stop_.Detach();
  outbox_.Wake();
}

void Agent::StopThreads() {
  client_.Shutdown();
  outbox_.Wake();
  if (poller_thread_.joinable()) poller_thread_.join();
  if (outbox_thread_.joinable()) outbox_thread_.join();
  if (metrics_thread_.joinable()) metrics_thread_.join();
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
  session_.LoadCredential();
  poller_thread_ = std::thread([this] { poller_.Run(); });
  outbox_thread_ = std::thread([this] { OutboxLoop(); });
  if (options_.sampler != nullptr && options_.system_metrics_period > absl::ZeroDuration()) {
    metrics_thread_ = std::thread([this] { MetricsLoop(); });
  }
  absl::Status refused = SessionLoop();
  if (stop_.detaching()) {
    // Supervisors see the detach and return; the workers keep running.
    for (std::thread& t : allocations_.TakeSupervisors()) t.join();
    StopThreads();
    Logger("agent")->info(
        "agent {} exited, leaving {} allocation(s) running for the next agent process",
        config_.agent_id, allocations_.size());
    return absl::OkStatus();
  }
  Shutdown();
  StopThreads();
  if (refused.ok()) Logger("agent")->info("agent {} stopped", config_.agent_id);
  return refused;
}

absl::Status Agent::SessionLoop() {
  absl::Duration backoff = absl::Milliseconds(200);
  while (!stop_.stopping()) {
    std::string session = session_.id();
    if (session.empty()) {
      absl::StatusOr<std::vector<std::string>> gone = session_.Register(allocations_.ids());
      if (gone.ok()) {
        for (const auto& id : *gone) StopAllocation(id, "the master no longer runs it");
        backoff = absl::Milliseconds(200);
        continue;
      }
      // With workers of a previous agent process still running, keep trying: an operator
      // may be fixing the secret, and giving up would strand them.
      if (absl::IsUnauthenticated(gone.status()) && allocations_.empty()) {
        stop_.Stop();
        return gone.status();
      }
      if (stop_.SleepOrStop(backoff)) break;
      backoff = std::min(backoff * 2, kMaxBackoff);
      continue;
    }
    absl::Duration interval = session_.heartbeat_interval();
    absl::Status st = session_.Heartbeat(session, metrics_);
    if (absl::IsNotFound(st)) continue;
    ReapFinished(/*even_if_unreported=*/false);
    if (stop_.SleepOrStop(st.ok() ? interval : std::min(interval, absl::Seconds(1)))) break;
  }
  return absl::OkStatus();
}

void Agent::Shutdown() {
  for (const auto& id : allocations_.ids()) {
    StopAllocation(id, "agent shutting down", absl::ZeroDuration(), /*agent_stopping=*/true);
  }
  // Workers exit within kill_grace (then SIGKILL); their exits get kShutdownDelivery more
  // to reach the master, unless there is no session to deliver them on.
  absl::Time delivery_deadline = absl::InfiniteFuture();
  while (!allocations_.empty()) {
    if (allocations_.AllExited() && delivery_deadline == absl::InfiniteFuture()) {
      delivery_deadline = clock_.Now() + kShutdownDelivery;
    }
    bool give_up = session_.id().empty() || clock_.Now() > delivery_deadline;
    ReapFinished(/*even_if_unreported=*/give_up);
    stop_.Sleep(kShutdownTick);
  }
}

void Agent::OutboxLoop() {
  // After Stop(), the outbox runs until the allocations are gone (their exits reported or
  // given up on); after Detach(), it ends at once: the next agent process ships the rest.
  while (!stop_.detaching() && !(stop_.stopping() && allocations_.empty())) {
    std::string session = session_.id();
    if (session.empty()) {
      outbox_.AwaitWake(kOutboxIdle);
      continue;
    }
    if (!outbox_.AwaitItems(kOutboxIdle)) continue;
    Outbox::SendResult sent = outbox_.SendNext(session);
    switch (sent.result) {
      case Outbox::Result::kEmpty:
        break;
      case Outbox::Result::kDelivered:
        allocations_.Delivered(sent.delivered);
        // An accepted exit, or the last lines of an allocation whose exits went ahead of
        // them, may finish its allocation: clean it up now.
        if (!sent.delivered[0].launched) ReapFinished(/*even_if_unreported=*/false);
        break;
      case Outbox::Result::kSessionLost:
        session_.Lost(session);
        [[fallthrough]];
      case Outbox::Result::kRetrying:
      case Outbox::Result::kNotDue:
        stop_.SleepOrDetach(outbox_.next_attempt() - clock_.Now());
        break;
    }
  }
}

void Agent::MetricsLoop() {
  MetricsCollector collector(config_.agent_id, *options_.sampler, clock_, metrics_);
  collector.Prime();
  while (!stop_.SleepOrStop(options_.system_metrics_period)) collector.SampleOnce();
}

void Agent::ReportLaunched(const std::string& allocation_id, const std::vector<int>& ranks) {
  if (ranks.empty()) return;
  Outgoing o;
  v1::ReportLaunchedRequest& launched = o.launched.emplace();
  launched.set_allocation_id(allocation_id);
  for (int r : ranks) launched.add_ranks(r);
  outbox_.Enqueue(std::move(o));
}

void Agent::Restore() {
  for (RestoredAllocation& r : RestoreAllocations(config_.work_dir, launcher_)) {
    Allocation& a = *r.allocation;
    allocations_.Add(r.allocation);
    Logger("agent")->info(
        "allocation {}: re-adopted from a previous agent process: {}", a.id(),
        r.adopted.empty() ? "nothing left to watch" : absl::StrJoin(r.adopted, ", "));
    for (int i = 0; i < a.size(); ++i) {
      if (a.exited(i)) continue;
      outbox_.AgentLine(a.launch(), a.rank(i),
                        absl::StrCat("agent restarted; watching the worker again (pid ",
                                     a.process(i)->pid(), ")"));
    }
    if (!r.launched_reported) ReportLaunched(a.id(), r.running);
    if (a.stopping().killing) {
      for (int i = 0; i < a.size(); ++i) {
        if (!a.exited(i)) a.process(i)->SignalGroup(SIGTERM).IgnoreError();
      }
    }
    StartSupervisors(a);
  }
}

void Agent::Launch(const v1::LaunchCommand& launch) {
  const std::string& id = launch.allocation_id();
  if (stop_.stopping() || allocations_.Contains(id)) return;
  LaunchContext context = launch_context_;
  Session::Address address = session_.address();
  context.advertise_address = address.advertise_address;
  context.network_interface = address.network_interface;
  AllocationStarter::Result started = starter_.Start(launch, std::move(context));
  Allocation& a = *started.allocation;
  allocations_.Add(started.allocation);
  // Recorded before the master hears of the launch: a restarted agent finds the workers.
  a.Persist();
  ReportLaunched(id, started.started);
  if (!started.status.ok()) {
    // Ranks that never started exit at once; the others are stopped.
    const std::string why(started.status.message());
    for (int i = 0; i < a.size(); ++i) {
      if (a.process(i) != nullptr) continue;
      outbox_.AgentLine(launch, a.rank(i), absl::StrCat("cannot start worker: ", why));
      Outgoing o;
      v1::ReportExitRequest& exit = o.exit.emplace();
      exit.set_allocation_id(id);
      exit.set_rank(a.rank(i));
      exit.set_exit_code(127);
      exit.set_message(why);
      outbox_.Enqueue(std::move(o));
    }
    if (!started.started.empty()) StopAllocation(id, "another rank could not start");
  }
  StartSupervisors(a);
}

void Agent::Kill(const std::string& allocation_id, const std::string& reason,
                 absl::Duration grace) {
  StopAllocation(allocation_id, reason, grace);
}

void Agent::StopAllocation(const std::string& allocation_id, const std::string& reason,
                           absl::Duration grace, bool agent_stopping) {
  allocations_.Kill(allocation_id, reason,
                    clock_.Now() + (grace > absl::ZeroDuration() ? grace : config_.kill_grace),
                    agent_stopping);
}

void Agent::StartSupervisors(Allocation& a) {
  SupervisionOptions options;
  options.kill_grace = config_.kill_grace;
  for (int i = 0; i < a.size(); ++i) {
    if (a.process(i) == nullptr || a.exited(i)) continue;
    a.AddSupervisor(std::thread(
        [this, &a, i, options] { Supervision(a, i, outbox_, clock_, stop_, options).Run(); }));
  }
}

void Agent::ReapFinished(bool even_if_unreported) {
  std::vector<std::shared_ptr<Allocation>> done = allocations_.TakeFinished(
      even_if_unreported, [this](const std::string& id) { return outbox_.HasLinesOf(id); });
  for (auto& a : done) {
    for (std::thread& t : a->TakeSupervisors()) t.join();
    RemoveTree(a->run_dir());
    RemoveTree(a->work_dir());
    RemoveTree(LaunchFilesDir(a->work_dir()));
    Logger("agent")->info("allocation {}: finished and cleaned up", a->id());
  }
}

}  // namespace det::agent
