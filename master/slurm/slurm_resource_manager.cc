#include "master/slurm/slurm_resource_manager.h"

#include <unistd.h>

#include <random>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging/logging.h"
#include "master/allocations/launch_command.h"
#include "master/loop/on_loop.h"
#include "master/views/views.h"

namespace det::master {
namespace {

constexpr char kAgentPrefix[] = "slurm-trial-";
// Polls a submitted job may go unlisted by squeue before it counts as gone.
constexpr int kUnlistedPolls = 3;

std::string RandomCredential() {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < 32; ++i) absl::StrAppend(&out, absl::Hex(rd() & 0xff, absl::kZeroPad2));
  return out;
}

// The launcher's default path: beside this det-master.
std::string DefaultLauncher() {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "det-slurm-launcher";
  std::string path(self, n);
  return path.substr(0, path.rfind('/') + 1) + "det-slurm-launcher";
}

// The first host of a Slurm node list ("n[1-3],m2" -> "n1").
std::string FirstNode(const std::string& nodes) {
  std::string first = nodes.substr(0, nodes.find(','));
  size_t open = first.find('[');
  if (open == std::string::npos) return first;
  std::string range = nodes.substr(open + 1);
  size_t end = range.find_first_of("-,]");
  return first.substr(0, open) + range.substr(0, end);
}

}  // namespace

SlurmResourceManager::SlurmResourceManager(const config::MasterConfig& config, Clock& clock,
                                           Turns& turns, AgentManager& agents, LogManager& logs,
                                           ExperimentRegistry& registry, TrialManager& trials,
                                           AllocationManager& allocations,
                                           std::unique_ptr<slurm::SlurmClient> client)
    : config_(config),
      slurm_(*config.slurm),
      turns_(turns),
      loop_(turns.loop()),
      agents_(agents),
      logs_(logs),
      registry_(registry),
      trial_manager_(trials),
      allocations_(allocations),
      client_(std::move(client)),
      launcher_(config.slurm->launcher.empty() ? DefaultLauncher() : config.slurm->launcher),
      slurm_thread_(clock) {
  slurm_thread_.Start();
}

SlurmResourceManager::~SlurmResourceManager() { slurm_thread_.Stop(); }

std::string SlurmResourceManager::AgentId(int64_t trial_id) {
  return absl::StrCat(kAgentPrefix, trial_id);
}

bool SlurmResourceManager::IsSlurmAgent(const std::string& agent_id) {
  return absl::StartsWith(agent_id, kAgentPrefix);
}

void SlurmResourceManager::SetWaitingReason(int64_t trial_id, const std::string& why) {
  if (!trial_manager_.SetWaitingReason(trial_id, why)) return;
  logs_.Event(trial_id, "waiting: " + why, /*verbose=*/true);
}

absl::StatusOr<std::string> SlurmResourceManager::RegisterAgent(int64_t trial_id, int slots) {
  DET_CHECK_ON_LOOP(loop_);
  const std::string id = AgentId(trial_id);
  SlurmAgent& known = slurm_agents_[trial_id];
  if (known.credential.empty()) {
    // Registered by an earlier master (or never): enrolled afresh.
    absl::Status reset = agents_.ResetCredential(id, "the Slurm resource manager");
    if (!reset.ok() && !absl::IsNotFound(reset)) {
      Logger("slurm")->warn("agent {}: {}", id, reset.ToString());
    }
    known.credential = RandomCredential();
  }
  v1::RegisterRequest req;
  req.set_agent_id(id);
  req.set_hostname("slurm");
  req.set_cluster_secret(config_.cluster_secret);
  req.set_resource_pool("slurm");
  req.set_agent_credential(known.credential);
  for (int i = 0; i < slots; ++i) {
    v1::Slot* s = req.add_slots();
    s->set_id(absl::StrCat(i));
    s->set_type(slurm_.slot_type);
    s->set_enabled(true);
  }
  absl::StatusOr<AgentManager::Admission> admitted = agents_.Register(req, "slurm");
  if (!admitted.ok()) {
    slurm_agents_.erase(trial_id);
    return admitted.status();
  }
  known.session_id = admitted->session_id;
  return known.session_id;
}

void SlurmResourceManager::Restore(const std::string& cluster_id) {
  DET_CHECK_ON_LOOP(loop_);
  prefix_ = slurm::JobNamePrefix(cluster_id);
  for (const auto& [allocation_id, trial_id] : registry_.allocation_trial) {
    TrialState& t = registry_.trials.at(trial_id);
    const v1::Allocation& a = t.trial.allocation();
    if (a.ranks_size() == 0 || !IsSlurmAgent(a.ranks(0).agent_id())) continue;
    absl::StatusOr<std::string> session = RegisterAgent(trial_id, a.slots());
    if (!session.ok()) {
      Logger("slurm")->error("trial {}: cannot register its Slurm agent again: {}", trial_id,
                             session.status().ToString());
      continue;
    }
    allocations_.ReattachOrKill(AgentId(trial_id), allocation_id);
    Job& job = jobs_[trial_id];
    job.allocation_id = allocation_id;
    job.token = t.token;
    job.started = true;
  }
}

void SlurmResourceManager::Serve(const std::string& master_address) {
  turns_.Post([this, master_address] {
    master_address_ = slurm_.master_address.empty() ? master_address : slurm_.master_address;
    Logger("slurm")->info("Slurm resource manager: jobs named {}*, reaching the master at {}, "
                          "launcher {}", prefix_, master_address_, launcher_);
    Poll();
    turns_.RequestSchedule();
  });
}

void SlurmResourceManager::SchedulePass() {
  DET_CHECK_ON_LOOP(loop_);
  if (master_address_.empty() || registry_.shutting_down) return;
  for (auto& [id, t] : registry_.trials) {
    auto job = jobs_.find(id);
    // (`killing` belongs to a run: a queued trial has none.)
    const bool wants_run = t.trial.state() == v1::STATE_QUEUED;
    if (job == jobs_.end()) {
      if (wants_run) Submit(t);
      continue;
    }
    // A pending job of a trial that no longer waits (paused, killed, completed).
    if (!wants_run && !job->second.started && !job->second.submitting && !job->second.cancelled &&
        !job->second.job_id.empty()) {
      Cancel(job->second.job_id, id, "its trial no longer waits");
      job->second.cancelled = true;
    }
  }
}

void SlurmResourceManager::Submit(TrialState& t) {
  const int64_t trial_id = t.trial.id();
  const ExperimentState& es = registry_.experiments.at(t.trial.experiment_id());
  const int slots = es.config.resources.slots_per_trial;
  absl::StatusOr<slurm::JobShape> shape = slurm::ShapeOf(slots, slurm_);
  if (!shape.ok()) {
    SetWaitingReason(trial_id, std::string(shape.status().message()));
    return;
  }
  absl::StatusOr<std::string> session = RegisterAgent(trial_id, slots);
  if (!session.ok()) {
    SetWaitingReason(trial_id, absl::StrCat("cannot register its Slurm agent: ",
                                            session.status().message()));
    return;
  }
  const std::string token = AllocationManager::NewToken();
  absl::StatusOr<LaunchInputs> in = allocations_.LaunchInputsFor(t, "", 0, token);
  if (!in.ok()) {
    SetWaitingReason(trial_id, std::string(in.status().message()));
    return;
  }
  AgentShare share{AgentId(trial_id), {}};
  for (int i = 0; i < slots; ++i) share.slots.push_back(absl::StrCat(i));
  v1::Allocation a;
  a.set_id(absl::StrCat(trial_id, ".", t.trial.run_id()));
  a.set_trial_id(trial_id);
  for (auto& r : PlaceRanks({share})) *a.add_ranks() = std::move(r);
  std::vector<std::pair<std::string, v1::LaunchCommand>> launches =
      BuildLaunchCommands(*in, a, {share});
  slurm::LauncherSettings settings{master_address_, share.agent_id, *session, launcher_};
  absl::StatusOr<slurm::BatchJob> batch =
      slurm::MakeBatchJob(slurm_, *shape, prefix_ + a.id(), settings,
                          launches.at(0).second.SerializeAsString());
  if (!batch.ok()) {
    SetWaitingReason(trial_id, absl::StrCat("cannot write its Slurm job: ", batch.status().message()));
    return;
  }
  // The experiment owner's linked OS user (det user link-with-agent-user): only root may
  // submit a job as another user.
  if (const v1::AgentUserGroup& user = in->task_user; !user.agent_user().empty()) {
    if (geteuid() != 0) {
      SetWaitingReason(trial_id, absl::StrCat(
          "its owner is linked to the OS user '", user.agent_user(), "', and det-master (uid ",
          geteuid(), ") is not root: only root may submit Slurm jobs as another user"));
      return;
    }
    batch->sbatch_args.push_back(absl::StrCat("--uid=", user.agent_uid()));
    batch->sbatch_args.push_back(absl::StrCat("--gid=", user.agent_gid()));
  }
  Job& job = jobs_[trial_id];
  job = Job{};
  job.allocation_id = a.id();
  job.token = token;
  job.submitting = true;
  SetWaitingReason(trial_id, "submitting its Slurm job");
  OnSlurmThread([this, trial_id, allocation_id = a.id(), batch = *std::move(batch)] {
    absl::StatusOr<std::string> id = client_->Submit(batch.sbatch_args, batch.script);
    turns_.Post([this, trial_id, allocation_id, id] { OnSubmitted(trial_id, allocation_id, id); });
  });
}

void SlurmResourceManager::OnSubmitted(int64_t trial_id, const std::string& allocation_id,
                                       const absl::StatusOr<std::string>& job_id) {
  DET_CHECK_ON_LOOP(loop_);
  auto it = jobs_.find(trial_id);
  if (it == jobs_.end() || it->second.allocation_id != allocation_id) {
    if (job_id.ok()) Cancel(*job_id, trial_id, "its run is no longer wanted");
    return;
  }
  if (!job_id.ok()) {
    jobs_.erase(it);
    SetWaitingReason(trial_id, absl::StrCat("cannot submit its Slurm job: ", job_id.status().message()));
    Logger("slurm")->warn("trial {}: sbatch failed: {}", trial_id, job_id.status().ToString());
    return;
  }
  it->second.job_id = *job_id;
  it->second.submitting = false;
  logs_.Event(trial_id, absl::StrCat("run ", allocation_id, " submitted as Slurm job ", *job_id));
  SetWaitingReason(trial_id, absl::StrCat("Slurm job ", *job_id, " submitted"));
  turns_.RequestSchedule();  // Its trial may have stopped waiting meanwhile.
}

void SlurmResourceManager::Poll() {
  DET_CHECK_ON_LOOP(loop_);
  if (registry_.shutting_down) return;
  // Slurm agents of open runs and queued jobs stay connected while this manager lives.
  for (const auto& [trial_id, job] : jobs_) {
    auto agent = slurm_agents_.find(trial_id);
    if (agent != slurm_agents_.end()) (void)agents_.Touch(AgentId(trial_id), agent->second.session_id);
  }
  if (!poll_in_flight_) {
    poll_in_flight_ = true;
    OnSlurmThread([this] {
      auto jobs = client_->Jobs();
      auto nodes = client_->Nodes();
      turns_.Post([this, jobs = std::move(jobs), nodes = std::move(nodes)] {
        OnNodes(nodes);
        OnJobs(jobs);
      });
    });
  }
  turns_.PostAfter(slurm_.poll_interval, [this] { Poll(); });
}

v1::Agent SlurmResourceManager::NodeAgent(const slurm::NodeInfo& node) {
  v1::Agent a;
  a.set_id(node.name);
  a.set_hostname(node.name);
  a.set_resource_pool(absl::StrJoin(node.partitions, ","));
  a.set_external_state(node.state);
  a.set_external_cpus(node.cpus);
  a.set_external_gpus(node.gpus);
  // Reachable and taking work as far as Slurm says: not down, drained/draining, failing or
  // powered off (sinfo appends "*" to a node that does not respond).
  const bool unreachable = absl::StrContains(node.state, "*") ||
                           absl::StartsWith(node.state, "down") ||
                           absl::StartsWith(node.state, "fail") ||
                           absl::StrContains(node.state, "powered");
  const bool draining = absl::StartsWith(node.state, "drain");
  a.set_connected(!unreachable);
  a.set_enabled(!unreachable && !draining);
  a.set_draining(draining);
  // Its slots: one per GPU, else one per CPU (what a det-agent on it would offer).
  const bool gpu = node.gpus > 0;
  for (int i = 0; i < (gpu ? node.gpus : node.cpus); ++i) {
    v1::Slot* s = a.add_slots();
    s->set_id(absl::StrCat(i));
    s->set_type(gpu ? "cuda" : "cpu");
    s->set_enabled(a.enabled());
  }
  return a;
}

void SlurmResourceManager::OnNodes(const absl::StatusOr<std::vector<slurm::NodeInfo>>& nodes) {
  DET_CHECK_ON_LOOP(loop_);
  if (!nodes.ok()) {
    // The last list stays: a node's state is at most a few polls old.
    Logger("slurm")->warn("sinfo failed: {}", nodes.status().ToString());
    return;
  }
  std::vector<v1::Agent> listed;
  for (const slurm::NodeInfo& n : *nodes) listed.push_back(NodeAgent(n));
  agents_.SetExternalNodes(std::move(listed), &SlurmResourceManager::IsSlurmAgent);
}

void SlurmResourceManager::OnJobs(const absl::StatusOr<std::vector<slurm::JobInfo>>& jobs) {
  DET_CHECK_ON_LOOP(loop_);
  poll_in_flight_ = false;
  if (!jobs.ok()) {
    Logger("slurm")->warn("squeue failed: {}", jobs.status().ToString());
    return;
  }
  // This master's jobs by id, and the newest by allocation (for runs found after a restart).
  std::map<std::string, const slurm::JobInfo*> by_id;
  std::map<std::string, const slurm::JobInfo*> by_allocation;
  for (const slurm::JobInfo& j : *jobs) {
    const std::string allocation = slurm::AllocationOfJob(prefix_, j.name);
    if (allocation.empty()) continue;
    by_id[j.id] = &j;
    const slurm::JobInfo*& newest = by_allocation[allocation];
    int64_t a = 0, b = 0;
    if (newest == nullptr ||
        (absl::SimpleAtoi(j.id, &a) && absl::SimpleAtoi(newest->id, &b) && a > b)) {
      newest = &j;
    }
  }
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    Job& job = it->second;
    if (job.job_id.empty() && !job.submitting) {
      auto found = by_allocation.find(job.allocation_id);
      if (found != by_allocation.end()) job.job_id = found->second->id;
    }
    const slurm::JobInfo* info = nullptr;
    if (!job.job_id.empty()) {
      auto found = by_id.find(job.job_id);
      if (found != by_id.end()) info = found->second;
    }
    if (job.submitting || Reconcile(it->first, job, info)) {
      ++it;
    } else {
      it = jobs_.erase(it);
      turns_.RequestSchedule();  // Its trial may wait for a job again.
    }
  }
  // Jobs of this master that no record claims (a run never stored before a restart, a
  // cancelled one still listed): cancelled unless ended.
  if (!polled_once_) {
    polled_once_ = true;
    std::map<std::string, bool> claimed;
    for (const auto& [trial_id, job] : jobs_) claimed[job.job_id] = true;
    for (const auto& [id, info] : by_id) {
      if (!claimed.count(id) && !slurm::Ended(info->state)) {
        Cancel(id, 0, "its run was never started by this master");
      }
    }
  }
}

bool SlurmResourceManager::Reconcile(int64_t trial_id, Job& job, const slurm::JobInfo* info) {
  auto t_it = registry_.trials.find(trial_id);
  if (t_it == registry_.trials.end()) return false;
  TrialState& t = t_it->second;
  if (info == nullptr) {
    if (job.job_id.empty() && !polled_once_) return true;
    if (++job.unlisted_polls < kUnlistedPolls) return true;
  } else {
    job.unlisted_polls = 0;
    if (info->state != job.state) {
      job.state = info->state;
      logs_.Event(trial_id, absl::StrCat("Slurm job ", info->id, ": ", info->state,
                                         info->nodes.empty() ? "" : " on " + info->nodes),
                  /*verbose=*/true);
    }
  }
  const std::string state = info ? info->state : "no longer listed by squeue";
  const bool open = t.trial.allocation().id() == job.allocation_id;
  if (!job.started) {
    const bool wants_run = t.trial.state() == v1::STATE_QUEUED;
    if (info != nullptr && !slurm::Ended(state) && !slurm::Started(state)) {
      if (wants_run) {
        SetWaitingReason(trial_id, absl::StrCat("Slurm job ", info->id, " is pending (", info->reason, ")"));
      } else if (!job.cancelled) {
        Cancel(job.job_id, trial_id, "its trial no longer waits");
        job.cancelled = true;
      }
      return true;
    }
    if (info != nullptr && slurm::Started(state)) {
      if (!wants_run) {
        if (!job.cancelled) Cancel(job.job_id, trial_id, "its trial no longer waits");
        job.cancelled = true;
        return true;
      }
      AgentShare share{AgentId(trial_id), {}};
      const int slots = registry_.experiments.at(t.trial.experiment_id()).config.resources.slots_per_trial;
      for (int i = 0; i < slots; ++i) share.slots.push_back(absl::StrCat(i));
      int64_t id = 0;
      (void)absl::SimpleAtoi(job.job_id, &id);
      if (!allocations_.Start(t, {share}, FirstNode(info->nodes),
                              slurm::ChiefPort(id, slurm_.chief_port_first, slurm_.chief_port_last),
                              job.token)) {
        Cancel(job.job_id, trial_id, "its run could not be started");
        job.cancelled = true;
        return true;
      }
      if (t.trial.allocation().id() != job.allocation_id) {
        Logger("slurm")->error("trial {}: started allocation {} for Slurm job {} of allocation {}",
                               trial_id, t.trial.allocation().id(), job.job_id, job.allocation_id);
      }
      job.started = true;
      return true;
    }
    // Ended (or gone) before it ran: the trial, still queued, gets a new job.
    if (wants_run && !job.cancelled) {
      logs_.Event(trial_id, absl::StrCat("Slurm job ", job.job_id, " ended before it ran (",
                                         state, "): submitting another"));
    }
    turns_.RequestSchedule();
    return false;
  }
  if (!open) {
    // The run ended (its ranks reported): the record goes once Slurm is done with the job.
    return info != nullptr && !slurm::Ended(state);
  }
  if (info != nullptr && !slurm::Ended(state)) return true;
  // The job ended with ranks of its open run not reported: they count as exited the way
  // Slurm says the job ended.
  const bool completed = state == "COMPLETED";
  const std::string how = completed
                              ? absl::StrCat("exit code 0 (Slurm job ", job.job_id, " COMPLETED)")
                              : absl::StrCat("Slurm job ", job.job_id, " ended: ", state);
  const v1::Allocation allocation = t.trial.allocation();
  for (const auto& r : allocation.ranks()) {
    if (t.trial.allocation().id() != allocation.id()) break;
    if (t.exits.count(r.rank())) continue;
    v1::ReportExitRequest req;
    req.set_agent_id(r.agent_id());
    req.set_allocation_id(allocation.id());
    req.set_rank(r.rank());
    allocations_.OnExit(req, how, !completed);
  }
  return false;
}

void SlurmResourceManager::Launch(int64_t, const v1::Allocation&,
                                  std::vector<std::pair<std::string, v1::LaunchCommand>>) {}

void SlurmResourceManager::Kill(const v1::Allocation& allocation, const std::string& reason,
                                absl::Duration grace) {
  DET_CHECK_ON_LOOP(loop_);
  auto it = jobs_.find(allocation.trial_id());
  if (it == jobs_.end() || it->second.allocation_id != allocation.id() || it->second.job_id.empty()) {
    Logger("slurm")->warn("allocation {}: no Slurm job to stop ({})", allocation.id(), reason);
    return;
  }
  if (slurm::Ended(it->second.state)) return;  // Its ranks' exits are being recorded.
  const std::string job_id = it->second.job_id;
  const int64_t trial_id = allocation.trial_id();
  if (grace <= absl::ZeroDuration()) grace = slurm_.kill_grace;
  logs_.Event(trial_id, absl::StrCat("Slurm job ", job_id, ": SIGTERM to its tasks, cancelled after ",
                                     absl::FormatDuration(grace)));
  OnSlurmThread([this, job_id, trial_id] {
    absl::Status st = client_->Signal(job_id, "TERM");
    if (!st.ok()) {
      turns_.Post([this, trial_id, st] {
        logs_.Event(trial_id, absl::StrCat("cannot signal its Slurm job: ", st.message()));
      });
    }
  });
  turns_.PostAfter(grace, [this, trial_id, job_id, allocation_id = allocation.id()] {
    auto it = jobs_.find(trial_id);
    if (it == jobs_.end() || it->second.job_id != job_id) return;  // Ended meanwhile.
    Cancel(job_id, trial_id, absl::StrCat("allocation ", allocation_id, " did not stop in time"));
    it->second.cancelled = true;
  });
}

void SlurmResourceManager::Cancel(const std::string& job_id, int64_t trial_id,
                                  const std::string& why) {
  if (job_id.empty()) return;
  if (trial_id > 0) logs_.Event(trial_id, absl::StrCat("cancelling Slurm job ", job_id, ": ", why));
  Logger("slurm")->info("cancelling Slurm job {} (trial {}): {}", job_id, trial_id, why);
  OnSlurmThread([this, job_id] {
    absl::Status st = client_->Cancel(job_id);
    if (!st.ok()) Logger("slurm")->warn("scancel {}: {}", job_id, st.ToString());
  });
}

}  // namespace det::master
