#include "agent/supervisor/shim.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace det::agent {
namespace {

constexpr int kGracefulSignals[] = {SIGTERM, SIGINT, SIGHUP};
constexpr char kRunAsFlag[] = "--run-as";

// "UID:GID".
std::optional<RunAs> ParseRunAs(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  uint32_t uid = 0, gid = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &uid) || !absl::SimpleAtoi(parts[1], &gid)) {
    return std::nullopt;
  }
  return RunAs{static_cast<uid_t>(uid), static_cast<gid_t>(gid)};
}

}  // namespace

std::vector<std::string> ShimArgv(const std::string& shim_path, const std::string& exit_file,
                                  const std::vector<std::string>& argv,
                                  const std::optional<RunAs>& run_as) {
  std::vector<std::string> out = {shim_path, kWorkerShimFlag, exit_file};
  if (run_as) {
    out.push_back(kRunAsFlag);
    out.push_back(absl::StrCat(run_as->uid, ":", run_as->gid));
  }
  out.push_back("--");
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

absl::Status WriteExitFile(const std::string& path, const ExitStatus& status) {
  std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", tmp));
  std::string text = absl::StrCat("exit_code=", status.exit_code, " signal=", status.signal, "\n");
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok &= fsync(fd) == 0;
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<ExitStatus> ReadExitFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no exit file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  ExitStatus status;
  bool have_code = false, have_signal = false;
  for (absl::string_view field :
       absl::StrSplit(absl::StripSuffix(text, "\n"), ' ', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&field, "exit_code="))
      have_code = absl::SimpleAtoi(field, &status.exit_code);
    if (absl::ConsumePrefix(&field, "signal="))
      have_signal = absl::SimpleAtoi(field, &status.signal);
  }
  if (!have_code || !have_signal) {
    return absl::DataLossError(
        absl::StrCat("exit file ", path, " is malformed: \"", ss.str(), "\""));
  }
  return status;
}

int RunWorkerShim(const std::vector<std::string>& args) {
  std::optional<RunAs> run_as;
  size_t dashes = 1;
  if (args.size() >= 3 && args[1] == kRunAsFlag) {
    run_as = ParseRunAs(args[2]);
    dashes = run_as ? 3 : args.size();
  }
  if (args.size() < dashes + 2 || args[dashes] != "--" || args[0].empty() ||
      args[dashes + 1].empty()) {
    fprintf(stderr, "usage: det-agent %s EXIT_FILE [%s UID:GID] -- PROGRAM [ARGS...]\n",
            kWorkerShimFlag, kRunAsFlag);
    return 2;
  }
  const std::string& exit_file = args[0];
  std::vector<std::string> argv_storage(args.begin() + dashes + 1, args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  // Ignored before fork(), so that no graceful stop can hit the shim before it waits; the
  // child restores the defaults before exec.
  for (int sig : kGracefulSignals) signal(sig, SIG_IGN);
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    fprintf(stderr, "det-agent: worker shim: pipe2: %s\n", strerror(errno));
    WriteExitFile(exit_file, {127, 0}).IgnoreError();
    return 127;
  }
  pid_t pid = fork();
  if (pid == 0) {
    for (int sig : kGracefulSignals) signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int error = run_as ? SwitchToUser(*run_as) : 0;
    if (error != 0) {
      fprintf(stderr, "det-agent: cannot run the worker as uid %u gid %u: %s\n", run_as->uid,
              run_as->gid, strerror(error));
      _exit(126);
    }
    execvp(argv[0], argv.data());
    error = errno;
    while (write(report[1], &error, sizeof(error)) < 0 && errno == EINTR) {
    }
    _exit(127);
  }
  close(report[1]);
  if (pid < 0) {
    fprintf(stderr, "det-agent: worker shim: fork: %s\n", strerror(errno));
    WriteExitFile(exit_file, {127, 0}).IgnoreError();
    return 127;
  }
  int exec_error = 0;
  ssize_t n;
  do {
    n = read(report[0], &exec_error, sizeof(exec_error));
  } while (n < 0 && errno == EINTR);
  close(report[0]);

  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ExitStatus exit;
  if (n == static_cast<ssize_t>(sizeof(exec_error))) {
    const char* path = getenv("PATH");
    std::string where = argv_storage[0].find('/') == std::string::npos
                            ? absl::StrCat(" (searched PATH \"", path ? path : "", "\")")
                            : "";
    fprintf(stderr, "det-agent: cannot execute \"%s\": %s%s\n", argv_storage[0].c_str(),
            strerror(exec_error), where.c_str());
    exit.exit_code = 127;
  } else if (WIFSIGNALED(status)) {
    exit.signal = WTERMSIG(status);
  } else {
    exit.exit_code = WEXITSTATUS(status);
  }
  if (absl::Status st = WriteExitFile(exit_file, exit); !st.ok()) {
    fprintf(stderr, "det-agent: worker shim: %s\n", std::string(st.message()).c_str());
  }
  return exit.signal != 0 ? 128 + exit.signal : exit.exit_code;
}

}  // namespace det::agent
