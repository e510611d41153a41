#include "deploy/local/local_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cli/api_client.h"
#include "cli/auth_store.h"
#include "common/process/subprocess.h"
#include "common/status/status_macros.h"

namespace det::deploy {

using cli::ApiClient;
using cli::ApiClientOptions;
using cli::AuthFilePath;
using cli::CliContext;
using cli::ResolveToken;
using cli::SaveSession;

namespace {

namespace fs = std::filesystem;

constexpr char kMasterBinary[] = "det-master";
constexpr char kAgentBinary[] = "det-agent";
constexpr char kWorkerBinary[] = "det-fashion-mnist";
constexpr char kBuildHint[] = "build it with `bazel build //deploy:bin`";
// How long cluster-up waits for the master and the agents.
constexpr absl::Duration kStartTimeout = absl::Seconds(60);
constexpr absl::Duration kStartPoll = absl::Milliseconds(250);
// Deadline of each call while waiting for the master.
constexpr absl::Duration kProbeDeadline = absl::Seconds(2);
// How long cluster-down waits after SIGTERM before SIGKILL.
constexpr absl::Duration kStopGrace = absl::Seconds(10);
constexpr absl::Duration kStopPoll = absl::Milliseconds(100);
// Lines of a log shown when a daemon does not come up.
constexpr int kLogTailLines = 20;
constexpr int kSecretBytes = 32;

std::string Quote(const std::string& s) {
  std::string quoted = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

std::string ErrnoText() { return std::strerror(errno); }

absl::Status WriteFile(const std::string& path, const std::string& content, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot write '", path, "': ", ErrnoText()));
  bool ok = ::fchmod(fd, mode) == 0;
  size_t written = 0;
  while (ok && written < content.size()) {
    ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ok = false;
    else written += static_cast<size_t>(n);
  }
  std::string error = ok ? "" : ErrnoText();
  if (::close(fd) != 0 && ok) {
    ok = false;
    error = ErrnoText();
  }
  if (!ok) return absl::InternalError(absl::StrCat("cannot write '", path, "': ", error));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read '", path, "': ", ErrnoText()));
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

absl::Status MakeDir(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot create directory '", path, "': ", ec.message()));
  }
  return absl::OkStatus();
}

// The last `lines` lines of the file from byte `offset` on.
std::string Tail(const std::string& path, std::streamoff offset, int lines) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(offset);
  std::deque<std::string> last;
  for (std::string line; std::getline(in, line);) {
    last.push_back(std::move(line));
    if (static_cast<int>(last.size()) > lines) last.pop_front();
  }
  std::string text;
  for (const std::string& line : last) absl::StrAppend(&text, line, "\n");
  return text;
}

std::streamoff FileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<std::streamoff>(st.st_size) : 0;
}

}  // namespace

absl::StatusOr<std::string> ReadOrCreateSecret(const std::string& path) {
  if (::access(path.c_str(), F_OK) == 0) {
    ASSIGN_OR_RETURN(std::string secret, ReadFile(path));
    secret = std::string(absl::StripAsciiWhitespace(secret));
    if (secret.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cluster secret file '", path, "' is empty; remove it to make a new one"));
    }
    return secret;
  }
  std::ifstream random("/dev/urandom", std::ios::binary);
  unsigned char bytes[kSecretBytes];
  if (!random.read(reinterpret_cast<char*>(bytes), sizeof(bytes))) {
    return absl::InternalError("cannot read /dev/urandom");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string secret;
  for (unsigned char b : bytes) {
    secret += kHex[b >> 4];
    secret += kHex[b & 15];
  }
  RETURN_IF_ERROR(WriteFile(path, secret + "\n", 0600));
  return secret;
}

namespace {

std::string SelfDir() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "" : self.parent_path().string();
}

// Running and not a zombie. Falls back to kill(pid, 0) where /proc is not readable.
bool IsRunning(pid_t pid) {
  if (pid <= 0) return false;
  std::ifstream stat_file(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat_line;
  if (stat_file && std::getline(stat_file, stat_line)) {
    size_t paren = stat_line.rfind(')');
    if (paren != std::string::npos && paren + 2 < stat_line.size()) {
      char state = stat_line[paren + 2];
      return state != 'Z' && state != 'X';
    }
  }
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

// Whether the command line of `pid` mentions `needle`; true where it cannot be read.
bool CommandLineMentions(pid_t pid, const std::string& needle) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"), std::ios::binary);
  if (!in) return true;
  std::ostringstream content;
  content << in.rdbuf();
  return absl::StrContains(content.str(), needle);
}

// One daemon of a local cluster, by its pid file stem ("master", "agent-0").
struct Daemon {
  std::string name;
  std::string pid_file;
  std::string config;
  std::string log;
  pid_t pid = 0;
};

Daemon DaemonNamed(const std::string& dir, const std::string& name) {
  Daemon d;
  d.name = name;
  d.pid_file = absl::StrCat(dir, "/run/", name, ".pid");
  d.config = absl::StrCat(dir, "/", name, ".yaml");
  d.log = absl::StrCat(dir, "/logs/", name, ".log");
  return d;
}

std::string Describe(const Daemon& d) {
  return d.name == "master" ? std::string("master") : absl::StrCat("agent local-", d.name);
}

// The parent of `pid` from /proc/PID/stat; 0 when it cannot be read.
pid_t ParentPid(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses; it ends at the last ')'.
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> fields =
      absl::StrSplit(stat.substr(close + 1), ' ', absl::SkipEmpty());
  int ppid = 0;
  return fields.size() > 1 && absl::SimpleAtoi(fields[1], &ppid) ? ppid : 0;
}

// The daemon of `dir` that process `pid` runs, from its command line: a det-master or
// det-agent program (or a script of that name) given `--config PATH` where PATH, resolved
// against the process's working directory, is `dir`/master.yaml or `dir`/agent-*.yaml.
// Finds daemons a person restarted by hand (with a relative config path, say), whose
// pids no pid file holds.
std::optional<Daemon> DaemonOfProcess(pid_t pid, const fs::path& dir) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"), std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream content;
  content << in.rdbuf();
  std::vector<std::string> args = absl::StrSplit(content.str(), '\0', absl::SkipEmpty());
  bool is_daemon = false;
  std::string config;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string program = fs::path(args[i]).filename().string();
    if (program == "det-master" || program == "det-agent") is_daemon = true;
    if (!is_daemon) continue;
    if (args[i] == "--config" && i + 1 < args.size()) {
      config = args[i + 1];
    } else if (absl::StartsWith(args[i], "--config=")) {
      config = args[i].substr(strlen("--config="));
    }
  }
  if (config.empty()) return std::nullopt;
  std::error_code ec;
  fs::path path(config);
  if (path.is_relative()) {
    fs::path cwd = fs::read_symlink(absl::StrCat("/proc/", pid, "/cwd"), ec);
    if (ec) return std::nullopt;
    path = cwd / path;
  }
  path = fs::weakly_canonical(path, ec);
  if (ec || path.parent_path() != dir || path.extension() != ".yaml") return std::nullopt;
  const std::string name = path.stem().string();
  if (name != "master" && !absl::StartsWith(name, "agent-")) return std::nullopt;
  Daemon d = DaemonNamed(dir.string(), name);
  d.pid = pid;
  return d;
}

// Daemons of `dir`: those its pid files in `dir`/run name (live processes started with
// their config; stale pid files are removed) and any other running det-master/det-agent
// whose --config is one of `dir`'s configs. Agents first (by name), the master last.
std::vector<Daemon> FindRunningDaemons(const std::string& dir, std::ostream& out) {
  std::vector<Daemon> running;
  std::error_code ec;
  fs::directory_iterator it(absl::StrCat(dir, "/run"), ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const fs::path& path = it->path();
    if (path.extension() != ".pid") continue;
    Daemon d = DaemonNamed(dir, path.stem().string());
    absl::StatusOr<std::string> text = ReadFile(d.pid_file);
    int pid = 0;
    if (text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &pid) &&
        IsRunning(pid) && CommandLineMentions(pid, d.config)) {
      d.pid = pid;
      running.push_back(std::move(d));
    } else {
      out << "Removed stale pid file " << d.pid_file << '\n';
      ::unlink(d.pid_file.c_str());
    }
  }
  const fs::path canonical_dir = fs::weakly_canonical(dir, ec);
  std::vector<Daemon> found;
  fs::directory_iterator proc("/proc", ec);
  for (; !ec && proc != fs::directory_iterator(); proc.increment(ec)) {
    int pid = 0;
    if (!absl::SimpleAtoi(proc->path().filename().string(), &pid) || pid == ::getpid()) continue;
    std::optional<Daemon> d = DaemonOfProcess(pid, canonical_dir);
    if (d.has_value() && IsRunning(pid)) found.push_back(*std::move(d));
  }
  // A daemon's child between fork and exec still shows the daemon's command line: only
  // processes whose parent is not a daemon of `dir` are daemons.
  std::set<pid_t> daemon_pids;
  for (const Daemon& d : running) daemon_pids.insert(d.pid);
  for (const Daemon& d : found) daemon_pids.insert(d.pid);
  for (Daemon& d : found) {
    if (std::any_of(running.begin(), running.end(),
                    [&d](const Daemon& r) { return r.pid == d.pid; }) ||
        daemon_pids.count(ParentPid(d.pid)) > 0) {
      continue;
    }
    running.push_back(std::move(d));
  }
  std::sort(running.begin(), running.end(), [](const Daemon& a, const Daemon& b) {
    bool a_master = a.name == "master", b_master = b.name == "master";
    if (a_master != b_master) return b_master;
    return a.name != b.name ? a.name < b.name : a.pid < b.pid;
  });
  return running;
}

absl::Status CheckPortFree(int port, const char* flag = "--master-port") {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::OkStatus();  // let the master report it
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int bind_errno = errno;
  ::close(fd);
  if (rc != 0 && bind_errno == EADDRINUSE) {
    return absl::FailedPreconditionError(absl::StrCat(
        "port ", port, " on 127.0.0.1 is already in use; choose another with ", flag));
  }
  return absl::OkStatus();
}

// SIGTERM to the daemons' process groups, SIGKILL to what is left after the grace, then
// removes their pid files and says what happened.
void StopDaemons(CliContext& ctx, const std::vector<Daemon>& daemons) {
  if (daemons.empty()) return;
  auto signal = [](const Daemon& d, int sig) {
    if (::kill(-d.pid, sig) != 0) ::kill(d.pid, sig);
  };
  for (const Daemon& d : daemons) signal(d, SIGTERM);
  const absl::Time deadline = ctx.now() + kStopGrace;
  auto any_running = [&] {
    return std::any_of(daemons.begin(), daemons.end(),
                       [](const Daemon& d) { return IsRunning(d.pid); });
  };
  while (any_running() && ctx.now() < deadline) ctx.sleep(kStopPoll);
  for (const Daemon& d : daemons) {
    if (IsRunning(d.pid)) {
      signal(d, SIGKILL);
      ctx.out << "Killed " << Describe(d) << " (pid " << d.pid << "): still running "
              << absl::FormatDuration(kStopGrace) << " after SIGTERM\n";
    } else {
      ctx.out << "Stopped " << Describe(d) << " (pid " << d.pid << ")\n";
    }
    ::unlink(d.pid_file.c_str());
  }
}

// Daemons started by one ClusterUp call; stopped unless Commit()ed.
class StartedDaemons {
 public:
  explicit StartedDaemons(CliContext& ctx) : ctx_(ctx) {}
  ~StartedDaemons() {
    if (committed_) return;
    for (auto it = started_.rbegin(); it != started_.rend(); ++it) {
      (void)it->process->Terminate(absl::Seconds(5));
      ::unlink(it->daemon.pid_file.c_str());
    }
    if (!started_.empty()) ctx_.err << "Stopped the daemons started so far.\n";
  }

  struct Started {
    Daemon daemon;
    std::unique_ptr<Subprocess> process;
    std::streamoff log_start = 0;
  };

  absl::StatusOr<Started*> Start(const std::string& binary, Daemon daemon,
                                 const std::string& cwd, const EnvironmentVariables& extra_env = {},
                                 const std::vector<std::string>& extra_args = {}) {
    SpawnOptions options;
    options.argv = {binary, "--config", daemon.config};
    options.argv.insert(options.argv.end(), extra_args.begin(), extra_args.end());
    options.env = CurrentEnvironment();
    for (const auto& [name, value] : extra_env) {
      bool replaced = false;
      for (auto& var : options.env) {
        if (var.first == name) {
          var.second = value;
          replaced = true;
        }
      }
      if (!replaced) options.env.emplace_back(name, value);
    }
    options.cwd = cwd;
    options.stdout_mode = SpawnOptions::Output::kFile;
    options.stderr_mode = SpawnOptions::Output::kFile;
    options.stdout_path = daemon.log;
    options.stderr_path = daemon.log;
    options.new_session = true;
    Started started;
    started.log_start = FileSize(daemon.log);
    ASSIGN_OR_RETURN(started.process, Subprocess::Spawn(options));
    daemon.pid = started.process->pid();
    started.daemon = std::move(daemon);
    started_.push_back(std::move(started));
    Started& s = started_.back();
    RETURN_IF_ERROR(WriteFile(s.daemon.pid_file, absl::StrCat(s.daemon.pid, "\n"), 0644));
    ctx_.out << "Started " << Describe(s.daemon) << " (pid " << s.daemon.pid << "), log "
             << s.daemon.log << '\n';
    return &s;
  }

  // Leaves the daemons running after this object and the CLI are gone.
  void Commit() {
    committed_ = true;
    for (Started& s : started_) s.process->Detach();
  }

 private:
  CliContext& ctx_;
  std::deque<Started> started_;
  bool committed_ = false;
};

// Writes the log tail of `s` to ctx.err and returns `error`.
absl::Status FailWithLog(CliContext& ctx, const StartedDaemons::Started& s,
                         absl::Status error) {
  std::string tail = Tail(s.daemon.log, s.log_start, kLogTailLines);
  ctx.err << "--- last lines of " << s.daemon.log << " ---\n"
          << (tail.empty() ? "(empty)\n" : tail) << "---\n";
  return error;
}

// Sets the mode of `path` (made if missing) to `mode`.
absl::Status MakeDirWithMode(const std::string& path, mode_t mode) {
  RETURN_IF_ERROR(MakeDir(path));
  if (::chmod(path.c_str(), mode) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot set the mode of '", path, "': ", ErrnoText()));
  }
  return absl::OkStatus();
}

// The uid and gid of `task_user` (NAME or UID:GID, as det-agent --task-user takes it).
absl::StatusOr<RunAs> ResolveTaskUser(const std::string& task_user) {
  std::vector<std::string> ids = absl::StrSplit(task_user, ':');
  uint32_t uid = 0, gid = 0;
  if (ids.size() == 2 && absl::SimpleAtoi(ids[0], &uid) && absl::SimpleAtoi(ids[1], &gid)) {
    return RunAs{static_cast<uid_t>(uid), static_cast<gid_t>(gid)};
  }
  struct passwd* pw = ::getpwnam(task_user.c_str());
  if (pw == nullptr) {
    return absl::NotFoundError(absl::StrCat("--task-user: no OS user '", task_user, "'"));
  }
  return RunAs{pw->pw_uid, pw->pw_gid};
}

// Copies the file `from` (links followed) to `to` with mode 0755, replacing it atomically.
absl::Status CopyExecutable(const std::string& from, const std::string& to) {
  const std::string tmp = to + ".tmp";
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::copy_file(from, tmp, fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::permissions(tmp, static_cast<fs::perms>(0755), ec);
  if (!ec) fs::rename(tmp, to, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot copy '", from, "' to '", to, "': ",
                                            ec.message()));
  }
  return absl::OkStatus();
}

// Copies the directory tree `from` (links followed) to `to`, directories 0755 and files
// 0644, replacing what was there.
absl::Status CopyTree(const std::string& from, const std::string& to) {
  const std::string tmp = to + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::copy(from, tmp, fs::copy_options::recursive, ec);
  for (fs::recursive_directory_iterator it(tmp, ec), end; !ec && it != end; it.increment(ec)) {
    fs::permissions(it->path(),
                    static_cast<fs::perms>(it->is_directory(ec) ? 0755 : 0644), ec);
  }
  if (!ec) fs::permissions(tmp, static_cast<fs::perms>(0755), ec);
  if (!ec) fs::remove_all(to, ec);
  if (!ec) fs::rename(tmp, to, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot copy '", from, "' to '", to, "': ",
                                            ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StagedBinaries> StageBinariesForTaskUser(const std::string& dir,
                                                        const StagedBinaries& found,
                                                        const std::optional<RunAs>& task_user,
                                                        const ReachCheck& can_reach) {
  if (!task_user || can_reach(found.agent, task_user).ok()) return found;
  const std::string bin = dir + "/bin";
  RETURN_IF_ERROR(MakeDirWithMode(bin, 0755));
  std::error_code ec;
  const fs::path agent = fs::canonical(found.agent, ec);
  if (ec) {
    return absl::NotFoundError(
        absl::StrCat("cannot resolve '", found.agent, "': ", ec.message()));
  }
  StagedBinaries staged;
  staged.agent = bin + "/" + agent.filename().string();
  RETURN_IF_ERROR(CopyExecutable(agent.string(), staged.agent));
  if (!found.worker.empty()) {
    staged.worker = bin + "/" + fs::path(found.worker).filename().string();
    RETURN_IF_ERROR(CopyExecutable(found.worker, staged.worker));
  }
  // det's Python package, where the agent looks for it: beside its binary's directory.
  const fs::path python = (agent.parent_path() / ".." / "python").lexically_normal();
  if (fs::is_directory(python, ec)) {
    staged.python = dir + "/python";
    RETURN_IF_ERROR(CopyTree(python.string(), staged.python));
  }
  return staged;
}

std::string EffectiveTaskUser(const ClusterUpOptions& options, uid_t euid) {
  if (options.task_user) return *options.task_user;
  return euid == 0 ? "nobody" : "";
}

std::string MasterYaml(const LocalClusterLayout& layout) {
  return absl::StrCat(
      "# Written by `det deploy local cluster-up`.\n",
      "grpc_listen: ", Quote(absl::StrCat("127.0.0.1:", layout.master_port)), "\n",
      layout.http_port > 0
          ? absl::StrCat("http_listen: ", Quote(absl::StrCat("127.0.0.1:", layout.http_port)), "\n")
          : "",
      "data_dir: ", Quote(layout.data_dir + "/master"), "\n",
      "cluster_secret: ", Quote(layout.cluster_secret), "\n",
      layout.master_cert_file.empty()
          ? ""
          : absl::StrCat("# Both ports over TLS; clients trust ", layout.ca_cert_file, ".\n",
                         "grpc_tls:\n  cert_file: ", Quote(layout.master_cert_file),
                         "\n  key_file: ", Quote(layout.master_key_file), "\n",
                         layout.http_port > 0
                             ? absl::StrCat("http_tls:\n  cert_file: ",
                                            Quote(layout.master_cert_file), "\n  key_file: ",
                                            Quote(layout.master_key_file), "\n")
                             : ""),
      "# Experiments that name no checkpoint_storage keep their checkpoints here, and no\n",
      "# experiment may keep them (nor its GC delete) anywhere else.\n",
      "checkpoint_storage:\n",
      "  type: shared_fs\n",
      "  host_path: ", Quote(layout.data_dir + "/checkpoints"), "\n",
      "checkpoint_storage_allowed_roots:\n",
      "  - ", Quote(layout.data_dir + "/checkpoints"), "\n");
}

std::string AgentYaml(const LocalClusterLayout& layout, int index) {
  std::string yaml = absl::StrCat(
      "# Written by `det deploy local cluster-up`.\n",
      "master: ", Quote(absl::StrCat("127.0.0.1:", layout.master_port)), "\n",
      "agent_id: ", Quote(absl::StrCat("local-agent-", index)), "\n",
      "slot_type: cpu\n",
      "slots: ", layout.slots_per_agent, "\n",
      "work_dir: ", Quote(absl::StrCat(layout.data_dir, "/agent-", index)), "\n",
      "worker_path:\n");
  for (const std::string& dir : layout.worker_path) {
    absl::StrAppend(&yaml, "  - ", Quote(dir), "\n");
  }
  absl::StrAppend(&yaml, "cluster_secret: ", Quote(layout.cluster_secret), "\n");
  if (!layout.ca_cert_file.empty()) {
    absl::StrAppend(&yaml, "master_cert_file: ", Quote(layout.ca_cert_file), "\n");
  }
  return yaml;
}

absl::Status MakeLocalTls(const std::string& dir, const std::string& openssl,
                          const std::string& log, LocalClusterLayout* layout) {
  RETURN_IF_ERROR(MakeDir(dir));
  if (::chmod(dir.c_str(), 0755) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot chmod '", dir, "': ", ErrnoText()));
  }
  const std::string ca_crt = dir + "/ca.crt", ca_key = dir + "/ca.key";
  const std::string crt = dir + "/master.crt", key = dir + "/master.key";
  const std::string csr = dir + "/master.csr", ext = dir + "/master.ext";
  auto run = [&](std::vector<std::string> args) -> absl::Status {
    SpawnOptions options;
    options.argv = {openssl};
    options.argv.insert(options.argv.end(), args.begin(), args.end());
    options.stdout_mode = SpawnOptions::Output::kFile;
    options.stderr_mode = SpawnOptions::Output::kFile;
    options.stdout_path = options.stderr_path = log;
    ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> p, Subprocess::Spawn(options));
    ASSIGN_OR_RETURN(ExitStatus exit, p->Wait());
    if (!exit.ok()) {
      return absl::InternalError(absl::StrCat(openssl, " ", args.front(), " ", args[1], " failed (",
                                              exit.ToString(), "); see ", log));
    }
    return absl::OkStatus();
  };
  bool have = true;
  for (const std::string& f : {ca_crt, ca_key, crt, key}) have = have && fs::exists(f);
  if (!have) {
    const std::vector<std::string> ec_key = {"-newkey", "ec", "-pkeyopt",
                                             "ec_paramgen_curve:prime256v1", "-nodes"};
    std::vector<std::string> ca = {"req", "-x509", "-days", "3650", "-subj", "/CN=det local CA",
                                   "-keyout", ca_key, "-out", ca_crt};
    ca.insert(ca.begin() + 2, ec_key.begin(), ec_key.end());
    RETURN_IF_ERROR(run(ca));
    std::vector<std::string> req = {"req", "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", csr};
    req.insert(req.begin() + 1, ec_key.begin(), ec_key.end());
    RETURN_IF_ERROR(run(req));
    RETURN_IF_ERROR(WriteFile(
        ext, "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n", 0644));
    RETURN_IF_ERROR(run({"x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key,
                         "-CAcreateserial", "-days", "825", "-extfile", ext, "-out", crt}));
  }
  for (auto [path, mode] : {std::pair{ca_key, 0600}, {key, 0600}, {ca_crt, 0644}, {crt, 0644}}) {
    if (::chmod(path.c_str(), mode) != 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot chmod '", path, "': ", ErrnoText()));
    }
  }
  layout->ca_cert_file = ca_crt;
  layout->master_cert_file = crt;
  layout->master_key_file = key;
  return absl::OkStatus();
}

absl::StatusOr<std::string> ResolveDataDir(const std::string& data_dir) {
  if (data_dir.empty()) return absl::InvalidArgumentError("--data-dir is empty");
  std::string path = data_dir;
  if (path == "~" || absl::StartsWith(path, "~/")) {
    const char* home = std::getenv("HOME");
    if (home == nullptr || *home == '\0') {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot expand '", data_dir, "': $HOME is not set"));
    }
    path = absl::StrCat(home, path.substr(1));
  }
  std::error_code ec;
  fs::path absolute = fs::absolute(path, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad data directory '", data_dir, "': ", ec.message()));
  }
  std::string normal = absolute.lexically_normal().string();
  while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  return normal;
}

absl::StatusOr<std::string> FindBinary(const std::string& name,
                                       const std::vector<std::string>& dirs,
                                       const std::string& path) {
  std::vector<std::string> search = dirs;
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    search.emplace_back(dir);
  }
  for (const std::string& dir : search) {
    std::string candidate = absl::StrCat(dir, "/", name);
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  std::string looked = absl::StrJoin(dirs, ", ");
  absl::StrAppend(&looked, looked.empty() ? "" : " and ", "$PATH");
  return absl::NotFoundError(
      absl::StrCat("cannot find ", name, " (looked in ", looked, "); ", kBuildHint));
}

absl::Status ClusterUp(CliContext& ctx, const ClusterUpOptions& options) {
  if (options.agents < 1) return absl::InvalidArgumentError("--agents must be at least 1");
  if (options.slots_per_agent < 1) {
    return absl::InvalidArgumentError("--slots-per-agent must be at least 1");
  }
  if (options.master_port < 1 || options.master_port > 65535) {
    return absl::InvalidArgumentError("--master-port must be in 1..65535");
  }
  ASSIGN_OR_RETURN(const std::string dir, ResolveDataDir(options.data_dir));

  std::vector<std::string> bin_dirs;
  if (!options.bin_dir.empty()) bin_dirs.push_back(options.bin_dir);
  if (std::string self = SelfDir(); !self.empty()) bin_dirs.push_back(self);
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env == nullptr ? "" : path_env;
  ASSIGN_OR_RETURN(const std::string master_binary, FindBinary(kMasterBinary, bin_dirs, path));
  ASSIGN_OR_RETURN(const std::string agent_binary, FindBinary(kAgentBinary, bin_dirs, path));
  absl::StatusOr<std::string> worker_binary = FindBinary(kWorkerBinary, bin_dirs, path);
  if (!worker_binary.ok()) {
    ctx.err << "det: warning: " << worker_binary.status().message()
            << "; the example experiments will not run\n";
  }

  // Trials run as the task user; it must not be root and cluster-up must be, to switch.
  const std::string task_user = EffectiveTaskUser(options, ::geteuid());
  std::optional<RunAs> task_ids;
  if (!task_user.empty()) {
    if (::geteuid() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--task-user ", task_user, ": cluster-up runs as uid ", ::geteuid(),
          ", not root, so its agents cannot switch users; leave --task-user out"));
    }
    ASSIGN_OR_RETURN(task_ids, ResolveTaskUser(task_user));
    if (task_ids->uid == 0 || task_ids->gid == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--task-user ", task_user, ": uid and gid 0 are root's; name an unprivileged user"));
    }
  }

  RETURN_IF_ERROR(MakeDirWithMode(dir, 0711));
  RETURN_IF_ERROR(MakeDirWithMode(dir + "/logs", 0700));
  RETURN_IF_ERROR(MakeDirWithMode(dir + "/run", 0700));
  std::vector<Daemon> running = FindRunningDaemons(dir, ctx.out);
  if (!running.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a cluster is already running in ", dir, " (", Describe(running.front()), " pid ",
        running.front().pid, "); stop it with `det deploy local cluster-down --data-dir ",
        dir, "`"));
  }
  RETURN_IF_ERROR(CheckPortFree(options.master_port));
  const int http_port = options.http_port > 0 ? options.http_port : options.master_port + 1;
  if (http_port > 65535 || http_port == options.master_port) {
    return absl::InvalidArgumentError("--http-port must be in 1..65535 and differ from --master-port");
  }
  RETURN_IF_ERROR(CheckPortFree(http_port, "--http-port"));

  LocalClusterLayout layout;
  layout.data_dir = dir;
  layout.master_port = options.master_port;
  layout.http_port = http_port;
  layout.slots_per_agent = options.slots_per_agent;
  ASSIGN_OR_RETURN(layout.cluster_secret, ReadOrCreateSecret(dir + "/cluster_secret"));
  // The password of the master's admin account, set on its first start.
  const std::string admin_password_file = dir + "/admin_password";
  ASSIGN_OR_RETURN(const std::string admin_password, ReadOrCreateSecret(admin_password_file));

  if (options.tls) {
    ASSIGN_OR_RETURN(const std::string openssl, FindBinary("openssl", {}, path));
    RETURN_IF_ERROR(MakeLocalTls(dir + "/tls", openssl, dir + "/logs/openssl.log", &layout));
    // This CLI (the login below) trusts the cluster's CA, as the agents and workers do.
    ::setenv("DET_MASTER_CERT_FILE", layout.ca_cert_file.c_str(), 1);
  }
  RETURN_IF_ERROR(MakeDir(dir + "/master"));
  // Every task user's trials write their checkpoints here: with one, anyone may add an
  // entry but only its owner may remove it, and no one lists them (01733, as /tmp without
  // the listing).
  RETURN_IF_ERROR(MakeDirWithMode(dir + "/checkpoints", task_ids ? 01733 : 0700));
  for (int i = 0; i < options.agents; ++i) RETURN_IF_ERROR(MakeDir(absl::StrCat(dir, "/agent-", i)));
  // The task user's trials run in D/agent-I and write to D/checkpoints: refuse a layout
  // where they could not (the agent would start, and every trial fail).
  if (task_ids) {
    if (!options.can_reach) return absl::InternalError("cluster-up: no reach check given");
    std::vector<std::string> reached = {dir + "/checkpoints"};
    for (int i = 0; i < options.agents; ++i) reached.push_back(absl::StrCat(dir, "/agent-", i));
    for (const std::string& path : reached) {
      if (absl::Status st = options.can_reach(path, task_ids); !st.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "trials run as the task user ", task_user, ", and ", st.message(),
            "; give a --data-dir under directories every user may search (e.g. "
            "/var/lib/det-local rather than under /root), or another --task-user"));
      }
    }
  }
  // The task user runs det-agent's own binary (checkpoint GC) and the example worker: where
  // it cannot reach them, the agents run copies under D/bin.
  ASSIGN_OR_RETURN(const StagedBinaries binaries,
                   StageBinariesForTaskUser(
                       dir, {agent_binary, worker_binary.ok() ? *worker_binary : ""}, task_ids,
                       options.can_reach));
  if (binaries.agent != agent_binary) {
    ctx.out << "Copied det-agent" << (binaries.worker.empty() ? "" : " and det-fashion-mnist")
            << " into " << dir << "/bin"
            << (binaries.python.empty() ? "" : absl::StrCat(", det's Python package into ",
                                                            binaries.python))
            << ": the task user " << task_user << " cannot reach " << agent_binary << '\n';
  }
  layout.worker_path = {
      fs::path(binaries.worker.empty() ? binaries.agent : binaries.worker).parent_path().string()};
  Daemon master = DaemonNamed(dir, "master");
  RETURN_IF_ERROR(WriteFile(master.config, MasterYaml(layout) + options.master_yaml_extra, 0600));
  std::vector<Daemon> agents;
  for (int i = 0; i < options.agents; ++i) {
    Daemon agent = DaemonNamed(dir, absl::StrCat("agent-", i));
    RETURN_IF_ERROR(WriteFile(agent.config, AgentYaml(layout, i), 0600));
    agents.push_back(std::move(agent));
  }
  const std::vector<std::string> agent_args =
      task_user.empty() ? std::vector<std::string>{}
                        : std::vector<std::string>{"--task-user", task_user};

  StartedDaemons started(ctx);
  ASSIGN_OR_RETURN(StartedDaemons::Started * master_process,
                   started.Start(master_binary, master, dir,
                                 {{"DET_ADMIN_PASSWORD", admin_password}}));
  const std::string address = absl::StrCat("127.0.0.1:", options.master_port);
  ApiClientOptions probe_options;
  probe_options.deadline = kProbeDeadline;
  // Also gRPC's shortest connect timeout, which a TLS connection does not meet: gRPC's
  // own backoff then.
  probe_options.max_reconnect_backoff = options.tls ? absl::ZeroDuration() : kStartPoll;
  // https:// for --tls: TLS or nothing, never plaintext.
  const std::string scheme = options.tls ? "https://" : "";
  ASSIGN_OR_RETURN(std::unique_ptr<ApiClient> api,
                   ApiClient::Create(scheme + address, probe_options));
  const absl::Time deadline = ctx.now() + kStartTimeout;

  // The master first: the agents only retry connecting to it. Logging in as admin tells
  // that it answers and gives the token this CLI keeps (~/.det/auth.json).
  std::string token;
  bool logged_in = false;
  while (true) {
    if (std::optional<ExitStatus> exit = master_process->process->TryWait()) {
      return FailWithLog(ctx, *master_process,
                         absl::InternalError(absl::StrCat("det-master exited (",
                                                          exit->ToString(), ")")));
    }
    absl::StatusOr<v1::LoginResponse> login = api->Login("admin", admin_password);
    if (login.ok()) {
      token = login->token();
      logged_in = true;
      break;
    }
    if (login.status().code() == absl::StatusCode::kUnauthenticated) {
      // The admin password was changed after the first start: use an earlier login.
      ctx.err << "det: warning: cannot log in as admin with the password in "
              << admin_password_file << " (changed since?); log in with `det user login`\n";
      absl::StatusOr<std::string> stored = ResolveToken(address);
      if (stored.ok()) token = *stored;
      break;
    }
    if (ctx.now() >= deadline) {
      return FailWithLog(ctx, *master_process,
                         absl::DeadlineExceededError(absl::StrCat(
                             "the master did not answer at ", address, " within ",
                             absl::FormatDuration(kStartTimeout))));
    }
    ctx.sleep(kStartPoll);
  }

  if (logged_in) {
    absl::StatusOr<std::string> auth_file = AuthFilePath();
    absl::Status saved = auth_file.ok() ? SaveSession(*auth_file, address, {"admin", token})
                                        : auth_file.status();
    if (!saved.ok()) ctx.err << "det: warning: cannot keep the session: " << saved.message() << "\n";
  }
  probe_options.token = token;
  ASSIGN_OR_RETURN(api, ApiClient::Create(scheme + address, probe_options));

  std::vector<StartedDaemons::Started*> agent_processes;
  for (size_t i = 0; i < agents.size(); ++i) {
    ASSIGN_OR_RETURN(StartedDaemons::Started * agent,
                     started.Start(binaries.agent, agents[i], dir, {}, agent_args));
    agent_processes.push_back(agent);
  }
  while (true) {
    for (StartedDaemons::Started* agent : agent_processes) {
      if (std::optional<ExitStatus> exit = agent->process->TryWait()) {
        return FailWithLog(ctx, *agent,
                           absl::InternalError(absl::StrCat(
                               "det-agent ", agent->daemon.name, " exited (",
                               exit->ToString(), ")")));
      }
    }
    std::set<std::string> connected;
    if (token.empty()) break;  // Not logged in: cannot list the agents.
    if (absl::StatusOr<v1::ListAgentsResponse> list = api->ListAgents(); list.ok()) {
      for (const v1::Agent& agent : list->agents()) {
        if (agent.connected()) connected.insert(agent.id());
      }
    }
    std::vector<StartedDaemons::Started*> missing;
    for (StartedDaemons::Started* agent : agent_processes) {
      if (!connected.count(absl::StrCat("local-", agent->daemon.name))) {
        missing.push_back(agent);
      }
    }
    if (missing.empty()) break;
    if (ctx.now() >= deadline) {
      for (size_t i = 1; i < missing.size(); ++i) {
        (void)FailWithLog(ctx, *missing[i], absl::OkStatus());
      }
      return FailWithLog(
          ctx, *missing.front(),
          absl::DeadlineExceededError(absl::StrCat(
              missing.size(), " of ", agent_processes.size(),
              " agents did not connect to the master within ",
              absl::FormatDuration(kStartTimeout), " (first: local-",
              missing.front()->daemon.name, ")")));
    }
    ctx.sleep(kStartPoll);
  }

  started.Commit();
  ctx.out << "Cluster is up in " << dir << ": " << options.agents << " agent(s) with "
          << options.slots_per_agent << " cpu slot(s) each.\n"
          << "Master: " << scheme << address << '\n'
          << "Web page: " << (options.tls ? "https" : "http") << "://127.0.0.1:" << http_port
          << "/\n"
          << (logged_in ? absl::StrCat("Logged in as admin (password in ", admin_password_file,
                                       ")\n")
                        : std::string())
          << "Use it with: export DET_MASTER=" << scheme << address
          << (options.tls ? absl::StrCat(" DET_MASTER_CERT_FILE=", layout.ca_cert_file) : "")
          << '\n';
  if (task_ids) {
    ctx.out << "Trials run as the OS user " << task_user << " (uid " << task_ids->uid
            << "), or as the OS user their owner is linked to (det user "
               "link-with-agent-user); --task-user picks another.\n";
  } else if (::geteuid() == 0) {
    ctx.err << "det: warning: trials run as root (--no-task-user): every det user of this "
               "cluster can read its secrets and act as root on this machine\n";
  }
  return absl::OkStatus();
}

absl::Status ClusterDown(CliContext& ctx, const std::string& data_dir) {
  ASSIGN_OR_RETURN(const std::string dir, ResolveDataDir(data_dir));
  std::vector<Daemon> running = FindRunningDaemons(dir, ctx.out);
  if (running.empty()) {
    ctx.out << "No local cluster is running in " << dir << '\n';
    return absl::OkStatus();
  }
  std::vector<Daemon> agents, master;
  for (Daemon& d : running) (d.name == "master" ? master : agents).push_back(std::move(d));
  StopDaemons(ctx, agents);
  StopDaemons(ctx, master);
  return absl::OkStatus();
}

}  // namespace det::deploy
