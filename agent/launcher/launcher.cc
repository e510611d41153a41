#include "agent/launcher/launcher.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace det::agent {
namespace {

absl::Status MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      std::string partial = path.substr(0, i);
      if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::PermissionDeniedError(
            absl::StrCat("cannot create directory '", partial, "': ", strerror(errno)));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string SafeName(const std::string& id) {
  std::string out;
  for (char c : id) out.push_back(isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ? c : '_');
  return out.empty() || out[0] == '.' ? "_" + out : out;
}

namespace {

bool IsLaunchFileVariable(const std::string& name) {
  for (const char* v : kLaunchFileVariables) {
    if (name == v) return true;
  }
  return false;
}

}  // namespace

std::string LaunchFilesDir(const std::string& allocation_work_dir) {
  std::filesystem::path dir(allocation_work_dir);
  return (dir.parent_path() / "launch" / dir.filename()).string();
}

absl::Status WriteLaunchFiles(const std::string& allocation_work_dir,
                              const v1::LaunchCommand& launch) {
  const std::string dir = LaunchFilesDir(allocation_work_dir);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create directory '", dir, "': ", strerror(errno)));
  }
  for (const char* name : kLaunchFileVariables) {
    auto it = launch.env().find(name);
    if (it == launch.env().end()) continue;
    if (auto st = WritePrivateFile(absl::StrCat(dir, "/", name), it->second); !st.ok()) return st;
  }
  return absl::OkStatus();
}

EnvironmentVariables WorkerEnvironment(const v1::LaunchCommand& launch,
                                       const v1::RankPlacement& rank, const LaunchContext& ctx,
                                       const std::string& work_dir,
                                       const EnvironmentVariables& base) {
  EnvironmentVariables overrides;
  for (const auto& [k, v] : launch.env()) {
    if (!IsLaunchFileVariable(k)) overrides.emplace_back(k, v);
  }
  // After the launch's variables: an experiment's environment_variables cannot redirect them.
  for (const char* name : kLaunchFileVariables) {
    if (launch.env().count(name)) {
      overrides.emplace_back(absl::StrCat(name, "_FILE"),
                             absl::StrCat(LaunchFilesDir(work_dir), "/", name));
    }
  }
  int local_world = 0;
  for (const auto& r : launch.ranks()) local_world += r.agent_id() == rank.agent_id();
  std::string slots = absl::StrJoin(rank.slot_ids(), ",");
  std::string path;
  for (const auto& dir : ctx.worker_path) absl::StrAppend(&path, dir, ":");
  std::string base_pythonpath;
  for (const auto& [k, v] : base) {
    if (k == "PATH") absl::StrAppend(&path, v);
    if (k == "PYTHONPATH") base_pythonpath = v;
  }
  if (path.empty() || path.back() == ':') absl::StrAppend(&path, "/usr/local/bin:/usr/bin:/bin");
  auto launch_env = [&](const std::string& name) -> const std::string* {
    auto it = launch.env().find(name);
    return it == launch.env().end() ? nullptr : &it->second;
  };
  std::vector<std::string> pythonpath = {work_dir};
  pythonpath.insert(pythonpath.end(), ctx.python_path.begin(), ctx.python_path.end());
  const std::string* launch_pythonpath = launch_env("PYTHONPATH");
  const std::string& inherited = launch_pythonpath ? *launch_pythonpath : base_pythonpath;
  if (!inherited.empty()) pythonpath.push_back(inherited);

  overrides.insert(overrides.end(), {
      {"RANK", absl::StrCat(rank.rank())},
      {"WORLD_SIZE", absl::StrCat(launch.world_size())},
      {"LOCAL_RANK", absl::StrCat(rank.local_rank())},
      {"LOCAL_WORLD_SIZE", absl::StrCat(local_world)},
      {"CROSS_RANK", absl::StrCat(launch.agent_rank())},
      {"CROSS_SIZE", absl::StrCat(launch.num_agents())},
      {"GROUP_RANK", absl::StrCat(launch.agent_rank())},
      {"GROUP_WORLD_SIZE", absl::StrCat(launch.num_agents())},
      {"ROLE_RANK", absl::StrCat(rank.rank())},
      {"ROLE_WORLD_SIZE", absl::StrCat(launch.world_size())},
      {"ROLE_NAME", "default"},
      {"TORCHELASTIC_RESTART_COUNT", absl::StrCat(launch.restart_count())},
      {"TORCHELASTIC_MAX_RESTARTS", absl::StrCat(launch.max_restarts())},
      {"DET_MASTER", ctx.master_address},
      {"DET_AGENT_ID", ctx.agent_id},
      {"DET_SLOT_IDS", slots},
      {"DET_SLOT_TYPE", ctx.slot_type},
      // CPU workers see no GPU; GPU workers see exactly their slots.
      {"CUDA_VISIBLE_DEVICES", ctx.slot_type == "cuda" ? slots : ""},
      {"PATH", path},
      {"PWD", work_dir},
      {"PYTHONPATH", absl::StrJoin(pythonpath, ":")},
  });
  if (ctx.task_user) {
    overrides.emplace_back("HOME", work_dir);
    if (!ctx.task_user_name.empty()) {
      overrides.emplace_back("USER", ctx.task_user_name);
      overrides.emplace_back("LOGNAME", ctx.task_user_name);
    }
  }
  if (!launch.chief_address().empty()) overrides.emplace_back("MASTER_ADDR", launch.chief_address());
  if (launch.chief_port() > 0) overrides.emplace_back("MASTER_PORT", absl::StrCat(launch.chief_port()));
  if (!launch.run_id().empty()) overrides.emplace_back("TORCHELASTIC_RUN_ID", launch.run_id());
  if (!ctx.worker_python.empty()) overrides.emplace_back("DET_PYTHON", ctx.worker_python);
  auto set_anywhere = [&](const std::string& name) {
    if (launch_env(name) != nullptr) return true;
    for (const auto& kv : base) {
      if (kv.first == name) return true;
    }
    return false;
  };
  if (launch.num_agents() > 1) {
    const std::pair<const char*, const std::string*> network[] = {
        {"DET_COLLECTIVE_HOST", &ctx.advertise_address},
        {"GLOO_SOCKET_IFNAME", &ctx.network_interface},
        {"NCCL_SOCKET_IFNAME", &ctx.network_interface},
    };
    for (const auto& [name, value] : network) {
      if (!value->empty() && !set_anywhere(name)) overrides.emplace_back(name, *value);
    }
  }
  if (launch_env("OMP_NUM_THREADS") == nullptr) {
    int threads = std::max(1, ctx.cpu_count / std::max(1, local_world));
    overrides.emplace_back("OMP_NUM_THREADS", absl::StrCat(threads));
  }
  // Not inherited: the secret, and what the contract sets only for some launches.
  static const absl::flat_hash_set<std::string>* const kNotInherited =
      new absl::flat_hash_set<std::string>({"DET_CLUSTER_SECRET", "MASTER_ADDR", "MASTER_PORT",
                                            "TORCHELASTIC_RUN_ID", "DET_PYTHON"});
  EnvironmentVariables clean;
  for (const auto& kv : base) {
    if (!kNotInherited->contains(kv.first)) clean.push_back(kv);
  }
  return MergeEnvironment(std::move(clean), overrides);
}

absl::Status PrepareWorkRoot(const std::string& work_dir) {
  const std::string run = work_dir + "/run";
  const std::string launch = work_dir + "/launch";
  for (const auto& [dir, mode] :
       {std::pair{work_dir, 0711}, std::pair{launch, 0711}, std::pair{run, 0700}}) {
    if (auto st = MakeDirs(dir); !st.ok()) return st;
    if (chmod(dir.c_str(), mode) != 0) {
      return absl::PermissionDeniedError(
          absl::StrFormat("cannot set the mode of '%s' to %04o: %s", dir, mode, strerror(errno)));
    }
  }
  return absl::OkStatus();
}

absl::Status HandOverWorkDir(const std::string& dir, const std::optional<RunAs>& user) {
  if (chmod(dir.c_str(), 0700) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot set the mode of '", dir, "' to 0700: ", strerror(errno)));
  }
  if (!user) return absl::OkStatus();
  auto give = [&](const std::string& path) -> absl::Status {
    if (lchown(path.c_str(), user->uid, user->gid) != 0) {
      return absl::PermissionDeniedError(absl::StrCat("cannot give '", path, "' to uid ",
                                                      user->uid, ": ", strerror(errno)));
    }
    return absl::OkStatus();
  };
  if (auto st = give(dir); !st.ok()) return st;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (auto st = give(it->path().string()); !st.ok()) return st;
  }
  if (ec) {
    return absl::PermissionDeniedError(absl::StrCat("cannot walk '", dir, "': ", ec.message()));
  }
  return absl::OkStatus();
}

absl::Status UseLaunchTaskUser(const v1::LaunchCommand& launch, uid_t agent_uid,
                               gid_t agent_gid, LaunchContext* ctx) {
  const v1::AgentUserGroup& link = launch.task_user();
  if (link.agent_user().empty()) return absl::OkStatus();
  const std::string who = absl::StrCat("'", link.agent_user(), "' (uid ", link.agent_uid(),
                                       ", group '", link.agent_group(), "' gid ",
                                       link.agent_gid(), "), the OS user linked to the "
                                       "experiment's owner");
  if (link.agent_uid() == 0 || link.agent_gid() == 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("refusing to run the workers as ", who, ": uid and gid 0 are root's"));
  }
  constexpr int64_t kMaxId = 4294967294;  // (uid_t)-1 means "no change".
  if (link.agent_uid() < 0 || link.agent_uid() > kMaxId || link.agent_gid() < 0 ||
      link.agent_gid() > kMaxId) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot run the workers as ", who, ": ids must be 1 to ", kMaxId));
  }
  const RunAs user{static_cast<uid_t>(link.agent_uid()), static_cast<gid_t>(link.agent_gid())};
  if (user.uid == agent_uid && user.gid == agent_gid) {
    ctx->task_user.reset();  // Already that user: nothing to switch.
    ctx->task_user_name.clear();
    return absl::OkStatus();
  }
  if (agent_uid != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot run the workers as ", who, ": this agent runs as uid ", agent_uid,
        ", not root, and cannot switch users (run det-agent as root)"));
  }
  ctx->task_user = user;
  ctx->task_user_name = link.agent_user();
  return absl::OkStatus();
}

absl::Status CheckUserCanReach(const std::string& path, const std::optional<RunAs>& user) {
  if (!user) return absl::OkStatus();
  SpawnOptions opts;
  opts.argv = {"/usr/bin/test", "-x", path};
  opts.stdout_mode = opts.stderr_mode = SpawnOptions::Output::kNull;
  opts.cwd = "/";
  opts.run_as = user;
  absl::StatusOr<std::unique_ptr<Subprocess>> child = Subprocess::Spawn(opts);
  if (!child.ok()) return child.status();
  absl::StatusOr<ExitStatus> done = (*child)->Wait();
  if (!done.ok()) return done.status();
  if (!done->ok()) {
    return absl::PermissionDeniedError(
        absl::StrCat("uid ", user->uid, " (the task user) cannot reach '", path,
                     "': a directory on the way is not searchable by it"));
  }
  return absl::OkStatus();
}

std::vector<std::string> WorkerArgv(const std::vector<std::string>& entrypoint,
                                    const LaunchContext& ctx) {
  std::vector<std::string> argv = entrypoint;
  if (!argv.empty() && !ctx.worker_python.empty() &&
      (argv[0] == "python3" || argv[0] == "python")) {
    argv[0] = ctx.worker_python;
  }
  return argv;
}

std::vector<std::string> DefaultPythonPath(const std::string& agent_binary) {
  std::filesystem::path dir =
      (std::filesystem::path(agent_binary).parent_path() / ".." / "python").lexically_normal();
  std::error_code ec;
  if (agent_binary.empty() || !std::filesystem::is_directory(dir, ec)) return {};
  std::string text = dir.string();
  if (text.size() > 1 && text.back() == '/') text.pop_back();
  return {text};
}

int UsableCpuCount() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
}

absl::Status WritePrivateFile(const std::string& path, absl::string_view data) {
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", strerror(errno)));
  bool ok = fchmod(fd, 0600) == 0;
  for (size_t off = 0; ok && off < data.size();) {
    ssize_t n = write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) off += static_cast<size_t>(n);
  }
  ok = ok && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = strerror(errno);
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", why));
  }
  return absl::OkStatus();
}

absl::Status WriteContext(const std::string& dir,
                          const google::protobuf::RepeatedPtrField<v1::ContextFile>& files) {
  if (auto st = MakeDirs(dir); !st.ok()) return st;
  for (const auto& f : files) {
    std::vector<std::string> parts = absl::StrSplit(f.path(), '/', absl::SkipEmpty());
    bool bad = f.path().empty() || f.path()[0] == '/' || parts.empty();
    for (const auto& p : parts) bad |= p == ".." || p == ".";
    if (bad) {
      return absl::InvalidArgumentError(
          absl::StrCat("context file '", f.path(), "': path must be relative and inside the context"));
    }
    std::string path = absl::StrCat(dir, "/", absl::StrJoin(parts, "/"));
    std::string parent = path.substr(0, path.rfind('/'));
    if (auto st = MakeDirs(parent); !st.ok()) return st;
    mode_t mode = (f.mode() & 0777) ? (f.mode() & 0777) : 0644;
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode | S_IWUSR);
    if (fd < 0) return absl::PermissionDeniedError(absl::StrCat("cannot write '", path, "': ", strerror(errno)));
    const std::string& data = f.content();
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = write(fd, data.data() + off, data.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        close(fd);
        return absl::ResourceExhaustedError(absl::StrCat("cannot write '", path, "': ", strerror(errno)));
      }
      off += n;
    }
    close(fd);
  }
  return absl::OkStatus();
}

}  // namespace det::agent
