// det-slurm-launcher: one rank of a det run on Slurm, started by srun for each task of the
// run's batch job (master/slurm, docs/slurm.md). It does for its rank what det-agent does
// for the ranks of its node: fetches the model context by the allocation's id, writes the
// launch files, starts the entrypoint with the agent's environment contract
// (agent/launcher/launcher.h, ranks from slurm_rank.h), ships its output to the master,
// reports its exit, and exits as the worker did. SIGTERM and SIGINT (scancel) go to the
// worker's process group. It talks to the master as the trial's Slurm agent, with the
// session the batch script gives it; the settings come from the script's environment
// (master/slurm/batch_job.h) and are not passed on to the worker.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <deque>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "agent/launcher/launcher.h"
#include "agent/master_client/master_client.h"
#include "agent/python/python_finder.h"
#include "agent/slurm_launcher/slurm_rank.h"
#include "common/process/subprocess.h"
#include "master/slurm/batch_job.h"

namespace det::agent {
namespace {

namespace s = master::slurm;

// How long the launcher waits for the master to start the run (it does so once squeue shows
// the job running).
constexpr absl::Duration kStartWait = absl::Minutes(10);
// Lines kept for the master while it cannot take them; older ones are dropped (counted).
constexpr size_t kMaxBufferedLines = 10000;

void Say(const std::string& message) {
  std::fprintf(stderr, "det-slurm-launcher: %s\n", message.c_str());
  std::fflush(stderr);
}

[[noreturn]] void Fail(const std::string& message) {
  Say(message);
  std::exit(2);
}

std::string Env(const std::map<std::string, std::string>& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

// Output lines of the worker, shipped in batches by one thread.
class LogShipper {
 public:
  LogShipper(MasterClient& client, v1::ShipLogsRequest header)
      : client_(client), header_(std::move(header)) {}

  void Add(v1::LogLine line) {
    absl::MutexLock lock(&mu_);
    if (lines_.size() >= kMaxBufferedLines) {
      lines_.pop_front();
      ++dropped_;
    }
    lines_.push_back(std::move(line));
  }

  bool Pending() {
    absl::MutexLock lock(&mu_);
    return !lines_.empty();
  }

  // Ships what is buffered; false when the master refused the session for good.
  bool Flush() {
    v1::ShipLogsRequest req = header_;
    {
      absl::MutexLock lock(&mu_);
      if (lines_.empty() || refused_) return !refused_;
      for (auto& l : lines_) *req.add_lines() = l;
      req.set_dropped(dropped_);
    }
    absl::Status st = client_.ShipLogs(req);
    absl::MutexLock lock(&mu_);
    if (st.ok()) {
      lines_.erase(lines_.begin(), lines_.begin() + std::min<size_t>(req.lines_size(), lines_.size()));
      dropped_ = 0;
    } else if (absl::IsNotFound(st) || absl::IsPermissionDenied(st)) {
      // The master restarted (a new session) or no longer knows the run: the lines stay in
      // Slurm's output file only.
      Say(absl::StrCat("the master no longer takes this rank's output (", st.ToString(),
                       "): it goes to Slurm's output file only"));
      refused_ = true;
      lines_.clear();
    }
    return !refused_;
  }

 private:
  MasterClient& client_;
  const v1::ShipLogsRequest header_;
  absl::Mutex mu_;
  std::deque<v1::LogLine> lines_ ABSL_GUARDED_BY(mu_);
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  bool refused_ ABSL_GUARDED_BY(mu_) = false;
};

// Reads `fd` line by line until EOF: each line to `echo` (Slurm's output file) and `ship`.
void Pump(int fd, FILE* echo, const v1::LogLine& proto, LogShipper& ship) {
  std::string pending;
  char buf[8192];
  auto emit = [&](std::string text) {
    std::fprintf(echo, "%s\n", text.c_str());
    v1::LogLine line = proto;
    line.set_time_ms(absl::ToUnixMillis(absl::Now()));
    line.set_message(std::move(text));
    ship.Add(std::move(line));
  };
  while (true) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, n);
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      emit(pending.substr(0, nl));
      pending.erase(0, nl + 1);
    }
  }
  if (!pending.empty()) emit(pending);
  std::fflush(echo);
}

int Run() {
  std::map<std::string, std::string> env;
  for (auto& [k, v] : CurrentEnvironment()) env[k] = v;
  // The launch, in base64 pieces.
  int64_t chunks = 0;
  if (!absl::SimpleAtoi(Env(env, s::kLaunchChunksEnv), &chunks) || chunks <= 0) {
    Fail(absl::StrCat(s::kLaunchChunksEnv, " is not set: det-slurm-launcher runs in det's Slurm jobs only"));
  }
  std::string encoded;
  for (int64_t i = 0; i < chunks; ++i) encoded += Env(env, absl::StrCat(s::kLaunchChunkEnvPrefix, i));
  std::string bytes;
  v1::LaunchCommand launch;
  if (!absl::Base64Unescape(encoded, &bytes) || !launch.ParseFromString(bytes)) {
    Fail("the launch in the job's environment is malformed");
  }
  const bool cuda = Env(env, s::kSlotTypeEnv) == "cuda";
  int first = 29500, last = 29999;
  std::vector<std::string> ports = absl::StrSplit(Env(env, s::kChiefPortsEnv), '-');
  if (ports.size() != 2 || !absl::SimpleAtoi(ports[0], &first) || !absl::SimpleAtoi(ports[1], &last)) {
    Fail(absl::StrCat(s::kChiefPortsEnv, " is malformed"));
  }
  absl::StatusOr<SlurmRank> me = RankFromSlurm(launch, env, cuda, first, last);
  if (!me.ok()) Fail(std::string(me.status().message()));
  const std::string agent_id = Env(env, s::kAgentIdEnv);
  const std::string session = Env(env, s::kSessionEnv);
  const std::string master = Env(env, s::kMasterEnv);
  const int rank = me->rank.rank();
  const std::string allocation = launch.allocation_id();

  std::unique_ptr<MasterClient> client = NewGrpcMasterClient(master);
  // The master starts the run once squeue shows the job running; until then the context is
  // refused.
  v1::GetModelContextRequest fetch;
  fetch.set_agent_id(agent_id);
  fetch.set_session_id(session);
  fetch.set_allocation_id(allocation);
  absl::StatusOr<v1::GetModelContextResponse> context;
  const absl::Time deadline = absl::Now() + kStartWait;
  while (true) {
    context = client->GetModelContext(fetch);
    if (context.ok() || absl::Now() > deadline) break;
    absl::SleepFor(absl::Milliseconds(250));  // Polling the master for the run's start.
  }
  if (!context.ok()) {
    Fail(absl::StrCat("cannot fetch the model context of allocation ", allocation, " from ",
                      master, ": ", context.status().ToString()));
  }
  v1::ModelContext files;
  if (!files.ParseFromString(context->model_context())) Fail("the model context is malformed");

  // <work_dir>/<job>-<rank>/<allocation>, as an agent's work dir holds its allocations.
  const std::string root = absl::StrCat(Env(env, s::kWorkDirEnv), "/", Env(env, "SLURM_JOB_ID"),
                                        "-", rank);
  const std::string dir = absl::StrCat(root, "/", SafeName(allocation));
  for (const absl::Status& st : {PrepareWorkRoot(root), WriteContext(dir, files.files()),
                                 WriteLaunchFiles(dir, me->launch)}) {
    if (!st.ok()) Fail(absl::StrCat("cannot prepare ", dir, ": ", st.ToString()));
  }
  LaunchContext ctx;
  ctx.agent_id = agent_id;
  ctx.master_address = master;
  ctx.slot_type = cuda ? "cuda" : "cpu";
  for (absl::string_view p : absl::StrSplit(Env(env, s::kWorkerPathEnv), ':', absl::SkipEmpty())) {
    ctx.worker_path.emplace_back(p);
  }
  ctx.worker_python = Env(env, s::kWorkerPythonEnv);
  if (!launch.python().empty()) ctx.worker_python = launch.python();
  if (ctx.worker_python.empty() && IsPythonEntrypoint({launch.argv().begin(), launch.argv().end()})) {
    ctx.worker_python = ChooseWorkerPython("", PythonCandidates(Env(env, "PATH"), Env(env, "HOME")),
                                           SubprocessTorchProbe(absl::Seconds(30)))
                            .path;
  }
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ctx.python_path = DefaultPythonPath(n > 0 ? std::string(self, n) : "");
  // The CPUs of this node's ranks (OMP_NUM_THREADS is this over its ranks).
  int64_t cpus_per_task = 0;
  ctx.cpu_count = absl::SimpleAtoi(Env(env, "SLURM_CPUS_PER_TASK"), &cpus_per_task) && cpus_per_task > 0
                      ? static_cast<int>(cpus_per_task) * std::max(1, me->launch.ranks_size())
                      : UsableCpuCount();
  // The base environment: the task's, less the launcher's settings (the session is a secret).
  EnvironmentVariables base;
  for (const auto& [k, v] : env) {
    if (absl::StartsWith(k, "DET_SLURM_")) continue;
    base.emplace_back(k, v);
  }
  SpawnOptions opts;
  opts.argv = WorkerArgv({launch.argv().begin(), launch.argv().end()}, ctx);
  opts.env = WorkerEnvironment(me->launch, me->rank, ctx, dir, base);
  opts.cwd = dir;

  // SIGTERM/SIGINT are taken by a thread (sigwait) and passed to the worker's group.
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stops, nullptr);

  v1::ShipLogsRequest header;
  header.set_agent_id(agent_id);
  header.set_session_id(session);
  LogShipper shipper(*client, header);
  auto spawned = Subprocess::Spawn(opts);
  v1::ReportExitRequest exit_req;
  exit_req.set_agent_id(agent_id);
  exit_req.set_session_id(session);
  exit_req.set_allocation_id(allocation);
  exit_req.set_rank(rank);
  if (!spawned.ok()) {
    Say(absl::StrCat("cannot start rank ", rank, ": ", spawned.status().ToString()));
    exit_req.set_exit_code(127);
    exit_req.set_message(std::string(spawned.status().message()));
    (void)client->ReportExit(exit_req);
    return 127;
  }
  Subprocess& worker = **spawned;
  v1::ReportLaunchedRequest launched;
  launched.set_agent_id(agent_id);
  launched.set_session_id(session);
  launched.set_allocation_id(allocation);
  launched.add_ranks(rank);
  if (absl::Status st = client->ReportLaunched(launched); !st.ok()) {
    Say(absl::StrCat("ReportLaunched: ", st.ToString()));
  }
  std::thread signals([&] {
    int sig = 0;
    while (sigwait(&stops, &sig) == 0) {
      if (sig == 0) continue;
      Say(absl::StrCat("signal ", sig, ": SIGTERM to rank ", rank));
      (void)worker.SignalGroup(SIGTERM);
    }
  });
  signals.detach();
  v1::LogLine proto;
  proto.set_trial_id(launch.trial_id());
  proto.set_allocation_id(allocation);
  proto.set_rank(rank);
  proto.set_agent_id(agent_id);
  v1::LogLine out_proto = proto, err_proto = proto;
  out_proto.set_stream("stdout");
  err_proto.set_stream("stderr");
  std::thread out([&] { Pump(worker.stdout_fd(), stdout, out_proto, shipper); });
  std::thread err([&] { Pump(worker.stderr_fd(), stderr, err_proto, shipper); });
  std::atomic<bool> done{false};
  std::thread ship([&] {
    while (!done.load()) {
      (void)shipper.Flush();
      absl::SleepFor(absl::Milliseconds(250));  // The shipping period.
    }
  });
  absl::StatusOr<ExitStatus> status = worker.Wait();
  out.join();
  err.join();
  done = true;
  ship.join();
  // The last lines, while the master takes them (a few tries through a short outage).
  for (int i = 0; i < 20 && shipper.Pending() && shipper.Flush(); ++i) {
    if (shipper.Pending()) absl::SleepFor(absl::Milliseconds(250));
  }
  ExitStatus how = status.ok() ? *status : ExitStatus{1, 0};
  exit_req.set_exit_code(how.exit_code);
  exit_req.set_signal(how.signal);
  if (absl::Status st = client->ReportExit(exit_req); !st.ok()) {
    Say(absl::StrCat("cannot report rank ", rank, "'s exit (", how.ToString(), ") to the master: ",
                     st.ToString(), "; the master reads the job's end from Slurm"));
  }
  return how.signal != 0 ? 128 + how.signal : how.exit_code;
}

}  // namespace
}  // namespace det::agent

int main() { return det::agent::Run(); }
