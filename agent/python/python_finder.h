// Which Python interpreter runs an agent's Python workers. agent.yaml's `worker_python`
// names one; without it the agent looks for an interpreter that can import torch, in the
// places users keep one (PATH, venvs and conda under /opt and the agent user's home, the
// system's), says at start which one it chose and why, and reports it to the master
// (`det agent list --json`: worker_python, worker_torch). An experiment can name its own
// (`environment.python`), which wins over both.
#ifndef DET_AGENT_PYTHON_PYTHON_FINDER_H_
#define DET_AGENT_PYTHON_PYTHON_FINDER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace det::agent {

struct PythonCandidate {
  std::string path;
  // Where it was found, for people: "PATH", "a venv under /opt", "conda", "the system".
  std::string where;
};

// The places searched, in order, without duplicates (by path): `python3` in each directory
// of `path_env`; /opt/*/{.venv,venv}/bin/python3; conda's /opt/{conda,miniconda3,
// anaconda3,miniforge3}/bin/python3; `home`'s .venv, venv, miniconda3, anaconda3 and
// miniforge3; /usr/local/bin/python3 and /usr/bin/python3. Only files that exist and are
// executable are returned (`root` prefixes every absolute path looked at, for tests; the
// returned paths do not carry it).
std::vector<PythonCandidate> PythonCandidates(const std::string& path_env,
                                              const std::string& home,
                                              const std::string& root = "");

// Runs `python` and returns torch's version (e.g. "2.11.0+cu130"), or an error saying why
// it cannot import torch (or cannot run at all).
using TorchProbe = std::function<absl::StatusOr<std::string>(const std::string& python)>;

// The real probe: `python -c SCRIPT` (no shell, killed after `timeout`), where SCRIPT finds
// torch's package on the interpreter's path and reads its version without importing it
// (fast, no CUDA initialisation); the error carries the last line the interpreter printed
// ("ModuleNotFoundError: No module named 'torch'").
TorchProbe SubprocessTorchProbe(absl::Duration timeout);

struct PythonChoice {
  // The interpreter Python workers run with; empty when no candidate runs at all.
  std::string path;
  // torch's version under it; empty when it cannot import torch.
  std::string torch_version;
  // Why this one, for the agent's log: "agent.yaml worker_python", "found on PATH", ...
  std::string reason;
  // Every candidate tried before it and why it was passed over ("PATH /x/python3: No module
  // named 'torch'").
  std::vector<std::string> rejected;

  bool has_torch() const { return !torch_version.empty(); }
  // One line for the agent's log and for trial logs.
  std::string Describe() const;
};

// `configured` (agent.yaml worker_python) when set: it is used whatever the probe says (the
// probe only fills in torch_version). Otherwise the first candidate that imports torch;
// else the first that runs at all (torch_version empty); else none (path empty).
PythonChoice ChooseWorkerPython(const std::string& configured,
                                const std::vector<PythonCandidate>& candidates,
                                const TorchProbe& probe);

// The message a Python entrypoint's ranks fail with when this agent has no interpreter
// for it, naming what was tried and the two settings that fix it.
std::string NoPythonMessage(const std::string& agent_id, const PythonChoice& choice,
                            bool needs_torch);

// True for the entrypoints that need torch by construction: det's torch launcher
// (`python3 -m det.launch.torch_distributed ...`) and det's Trial runner
// (`python3 -m det.pytorch.run ...`).
bool EntrypointNeedsTorch(const std::vector<std::string>& entrypoint);

// True when argv[0] is `python3` or `python`: the entrypoints the agent's interpreter runs.
bool IsPythonEntrypoint(const std::vector<std::string>& entrypoint);

}  // namespace det::agent

#endif  // DET_AGENT_PYTHON_PYTHON_FINDER_H_
