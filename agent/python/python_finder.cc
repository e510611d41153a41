#include "agent/python/python_finder.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/process/subprocess.h"

namespace det::agent {
namespace {

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

// The entries of `dir` that are directories (links to them included), sorted.
std::vector<std::string> Subdirectories(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (stat((dir + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) out.push_back(name);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// The last 64 KiB of `path` ("" when it cannot be read).
std::string ReadFileTail(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() > (1 << 16)) text.erase(0, text.size() - (1 << 16));
  return text;
}

std::string LastLine(absl::string_view text) {
  text = absl::StripTrailingAsciiWhitespace(text);
  size_t nl = text.rfind('\n');
  return std::string(nl == absl::string_view::npos ? text : text.substr(nl + 1));
}

// Finds torch's package and reads its version.py without importing torch: tens of
// milliseconds instead of seconds, and no CUDA initialisation in the agent's start.
constexpr char kFindTorch[] = R"PY(import importlib.util, os, re, sys
s = importlib.util.find_spec("torch")
if s is None:
    sys.exit("ModuleNotFoundError: No module named 'torch'")
v = None
for d in s.submodule_search_locations or []:
    try:
        with open(os.path.join(d, "version.py")) as f:
            m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", f.read())
    except OSError:
        continue
    if m:
        v = m.group(1)
        break
print(v or "unknown")
)PY";

}  // namespace

std::vector<PythonCandidate> PythonCandidates(const std::string& path_env,
                                              const std::string& home,
                                              const std::string& root) {
  std::vector<PythonCandidate> out;
  std::set<std::string> seen;
  auto add = [&](const std::string& path, const std::string& where) {
    if (path.empty() || path[0] != '/' || seen.count(path)) return;
    if (!IsExecutableFile(root + path)) return;
    seen.insert(path);
    out.push_back({path, where});
  };
  for (absl::string_view dir : absl::StrSplit(path_env, ':', absl::SkipEmpty())) {
    add(absl::StrCat(absl::StripSuffix(dir, "/"), "/python3"), "PATH");
  }
  for (const std::string& sub : Subdirectories(root + "/opt")) {
    for (const char* venv : {".venv", "venv"}) {
      add(absl::StrCat("/opt/", sub, "/", venv, "/bin/python3"), "a venv under /opt");
    }
  }
  for (const char* conda : {"conda", "miniconda3", "anaconda3", "miniforge3"}) {
    add(absl::StrCat("/opt/", conda, "/bin/python3"), "conda");
  }
  if (!home.empty() && home != "/") {
    for (const char* venv : {".venv", "venv"}) {
      add(absl::StrCat(home, "/", venv, "/bin/python3"), "a venv in the agent user's home");
    }
    for (const char* conda : {"miniconda3", "anaconda3", "miniforge3"}) {
      add(absl::StrCat(home, "/", conda, "/bin/python3"), "conda");
    }
  }
  add("/usr/local/bin/python3", "the system");
  add("/usr/bin/python3", "the system");
  return out;
}

TorchProbe SubprocessTorchProbe(absl::Duration timeout) {
  return [timeout](const std::string& python) -> absl::StatusOr<std::string> {
    // Output goes to files, not pipes: a chatty import (warnings) cannot block the child
    // while the agent waits for it with a timeout.
    char dir_template[] = "/tmp/det-python-probe-XXXXXX";
    if (mkdtemp(dir_template) == nullptr) {
      return absl::InternalError(absl::StrCat("cannot create a temporary directory: ",
                                              strerror(errno)));
    }
    const std::string dir = dir_template;
    SpawnOptions options;
    options.argv = {python, "-c", kFindTorch};
    options.env = CurrentEnvironment();
    options.stdout_mode = SpawnOptions::Output::kFile;
    options.stdout_path = dir + "/out";
    options.stderr_mode = SpawnOptions::Output::kFile;
    options.stderr_path = dir + "/err";
    auto cleanup = [&dir]() {
      unlink((dir + "/out").c_str());
      unlink((dir + "/err").c_str());
      rmdir(dir.c_str());
    };
    absl::StatusOr<std::unique_ptr<Subprocess>> child = Subprocess::Spawn(options);
    if (!child.ok()) {
      cleanup();
      return child.status();
    }
    absl::StatusOr<ExitStatus> status = (*child)->WaitFor(timeout);
    if (!status.ok()) {
      (*child)->Terminate(absl::ZeroDuration()).IgnoreError();
      cleanup();
      return absl::DeadlineExceededError(
          absl::StrCat("looking for torch did not finish in ", absl::FormatDuration(timeout)));
    }
    std::string out = ReadFileTail(dir + "/out");
    std::string err = ReadFileTail(dir + "/err");
    cleanup();
    if (!status->ok()) {
      std::string why = LastLine(err);
      return absl::FailedPreconditionError(
          why.empty() ? absl::StrCat("looking for torch failed: ", status->ToString()) : why);
    }
    std::string version = LastLine(out);
    if (version.empty()) return absl::FailedPreconditionError("torch printed no version");
    return version;
  };
}

std::string PythonChoice::Describe() const {
  if (path.empty()) {
    return absl::StrCat("no Python interpreter found (tried: ",
                        rejected.empty() ? "nothing" : absl::StrJoin(rejected, "; "), ")");
  }
  std::string text = absl::StrCat(path, " (", reason, ", ",
                                  has_torch() ? absl::StrCat("torch ", torch_version)
                                              : "cannot import torch",
                                  ")");
  if (!rejected.empty()) absl::StrAppend(&text, "; passed over: ", absl::StrJoin(rejected, "; "));
  return text;
}

PythonChoice ChooseWorkerPython(const std::string& configured,
                                const std::vector<PythonCandidate>& candidates,
                                const TorchProbe& probe) {
  PythonChoice choice;
  if (!configured.empty()) {
    choice.path = configured;
    choice.reason = "agent.yaml worker_python";
    absl::StatusOr<std::string> version = probe(configured);
    if (version.ok()) choice.torch_version = *version;
    else choice.rejected.push_back(absl::StrCat(configured, ": ", version.status().message()));
    return choice;
  }
  const PythonCandidate* first_running = nullptr;
  std::vector<std::string> rejected;
  for (const PythonCandidate& c : candidates) {
    absl::StatusOr<std::string> version = probe(c.path);
    if (version.ok()) {
      choice.path = c.path;
      choice.torch_version = *version;
      choice.reason = absl::StrCat("found in ", c.where);
      choice.rejected = std::move(rejected);
      return choice;
    }
    // NotFound / PermissionDenied / DeadlineExceeded: it does not run; anything else ran
    // and only lacks torch.
    bool runs = version.status().code() == absl::StatusCode::kFailedPrecondition;
    if (runs && first_running == nullptr) first_running = &c;
    rejected.push_back(absl::StrCat(c.where, " ", c.path, ": ", version.status().message()));
  }
  if (first_running != nullptr) {
    choice.path = first_running->path;
    choice.reason = absl::StrCat("found in ", first_running->where, "; no interpreter has torch");
  }
  choice.rejected = std::move(rejected);
  return choice;
}

std::string NoPythonMessage(const std::string& agent_id, const PythonChoice& choice,
                            bool needs_torch) {
  return absl::StrCat(
      "agent ", agent_id, ": ",
      needs_torch ? "no Python interpreter that can import torch" : "no Python interpreter",
      " for this entrypoint (", choice.Describe(),
      "); set worker_python in the agent's agent.yaml, or environment.python in the "
      "experiment config, to an interpreter that has it");
}

bool IsPythonEntrypoint(const std::vector<std::string>& entrypoint) {
  return !entrypoint.empty() && (entrypoint[0] == "python3" || entrypoint[0] == "python");
}

bool EntrypointNeedsTorch(const std::vector<std::string>& entrypoint) {
  if (entrypoint.size() < 3 || entrypoint[1] != "-m") return false;
  return entrypoint[2] == "det.launch.torch_distributed" || entrypoint[2] == "det.pytorch.run";
}

}  // namespace det::agent
