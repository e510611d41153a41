"""`python3 -m det.launch.torch_distributed [--] python3 train.py ARGS...`
`python3 -m det.launch.torch_distributed --trial MODULE:CLASS` (Determined's Trial form)

Determined's torch_distributed launcher starts torchrun; det's agent already starts one
process per slot with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...), so this launcher checks that environment
and execs the script in place: a leading python/python3/pythonX.Y runs as this interpreter
(sys.executable). `--trial MODULE:CLASS` trains that PyTorchTrial with det's Trial runner
(`python3 -m det.pytorch.run MODULE:CLASS`), as Determined's launcher did. Outside a det allocation it runs the script as a single process (RANK 0 of
1, MASTER_ADDR 127.0.0.1 and a free MASTER_PORT)."""

import os
import re
import socket
import sys
from typing import List, Mapping, MutableMapping

REQUIRED = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]
USAGE = ("usage: python3 -m det.launch.torch_distributed [--] COMMAND [ARGS...]\n"
         "       python3 -m det.launch.torch_distributed --trial MODULE:CLASS")


class LaunchError(Exception):
    pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_environment(env: MutableMapping[str, str]) -> None:
    """Fills a single-process environment off-cluster; inside an allocation, LaunchError
    naming what is missing."""
    if not env.get("DET_MASTER"):
        defaults = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                    "MASTER_ADDR": "127.0.0.1"}
        for k, v in defaults.items():
            env.setdefault(k, v)
        env.setdefault("MASTER_PORT", str(_free_port()))
        return
    missing = [k for k in REQUIRED if not env.get(k)]
    if missing:
        raise LaunchError("det.launch.torch_distributed: the det agent did not set "
                          f"{', '.join(missing)} (an agent older than the torchrun launch "
                          "contract?)")


def command(argv: List[str], executable: str) -> List[str]:
    """The command to exec for the launcher's arguments `argv`."""
    args = list(argv)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        raise LaunchError(USAGE)
    if args[0].startswith("-"):
        if args[0] == "--trial" or args[0].startswith("--trial="):
            return _trial_command(args, executable)
        raise LaunchError(f"det.launch.torch_distributed: unknown option {args[0]} (the agent "
                          "starts one process per slot, so torchrun's options do not apply); "
                          + USAGE)
    if re.fullmatch(r"python(3(\.\d+)?)?", os.path.basename(args[0])):
        return [executable] + args[1:]
    return args


def _trial_command(args: List[str], executable: str) -> List[str]:
    """`--trial MODULE:CLASS` (or `--trial=MODULE:CLASS`) as det's Trial runner command."""
    spec = args[0].partition("=")[2] if args[0].startswith("--trial=") else (
        args[1] if len(args) > 1 else "")
    rest = args[1:] if args[0].startswith("--trial=") else args[2:]
    module, sep, cls = spec.partition(":")
    if not (module and sep and cls):
        raise LaunchError("det.launch.torch_distributed: --trial needs MODULE:CLASS (e.g. "
                          f"--trial model_def:MNistTrial), got {spec!r}\n" + USAGE)
    if rest:
        raise LaunchError("det.launch.torch_distributed: --trial takes nothing after "
                          f"MODULE:CLASS, got {' '.join(rest)}\n" + USAGE)
    return [executable, "-m", "det.pytorch.run", spec]


def main(argv: List[str], env: MutableMapping[str, str]) -> None:
    try:
        check_environment(env)
        cmd = command(argv, sys.executable)
    except LaunchError as e:
        print(e, file=sys.stderr)
        sys.exit(2)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(cmd[0], cmd, dict(env))
    except OSError as e:
        print(f"det.launch.torch_distributed: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr)
        sys.exit(127)


if __name__ == "__main__":
    main(sys.argv[1:], os.environ)
