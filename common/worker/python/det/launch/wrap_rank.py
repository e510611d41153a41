"""`python3 -m det.launch.wrap_rank RANK [--] COMMAND [ARGS...]` (Determined's
determined.launch.wrap_rank): runs COMMAND as the worker of rank RANK, so that its log lines
can be told apart by rank.

det's agent already records, with every line a process writes, the RANK of the slot process
it started; when RANK is that rank the command is exec'd in place and its lines carry it.
When a process starts workers of other ranks (a launcher of its own, Determined's
one-container-per-node shape), their lines are prefixed `[rank=RANK] ` as Determined's
wrap_rank does. The exit code is COMMAND's."""

import os
import subprocess
import sys
import threading
from typing import IO, List, Mapping, Tuple

USAGE = "usage: python3 -m det.launch.wrap_rank RANK [--] COMMAND [ARGS...]"


class WrapRankError(Exception):
    pass


def parse(argv: List[str]) -> Tuple[int, List[str]]:
    """(rank, command) of the arguments; WrapRankError naming what is wrong."""
    if not argv:
        raise WrapRankError(USAGE)
    try:
        rank = int(argv[0])
    except ValueError:
        raise WrapRankError(f"det.launch.wrap_rank: RANK: expected an integer >= 0, got "
                            f"{argv[0]!r}\n{USAGE}") from None
    if rank < 0:
        raise WrapRankError(f"det.launch.wrap_rank: RANK: expected an integer >= 0, got {rank}"
                            f"\n{USAGE}")
    cmd = argv[1:]
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise WrapRankError(f"det.launch.wrap_rank: no COMMAND after RANK\n{USAGE}")
    return rank, cmd


def _copy(src: IO[bytes], dst: IO[bytes], prefix: bytes) -> None:
    for line in iter(src.readline, b""):
        dst.write(prefix + line)
        dst.flush()


def run_prefixed(rank: int, cmd: List[str]) -> int:
    """Runs `cmd` with its stdout and stderr lines prefixed `[rank=RANK] `; its exit code."""
    prefix = f"[rank={rank}] ".encode()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    threads = [threading.Thread(target=_copy, args=(proc.stdout, sys.stdout.buffer, prefix)),
               threading.Thread(target=_copy, args=(proc.stderr, sys.stderr.buffer, prefix))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return proc.wait()


def main(argv: List[str], env: Mapping[str, str]) -> int:
    try:
        rank, cmd = parse(argv)
    except WrapRankError as e:
        print(e, file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        if env.get("RANK") == str(rank):
            os.execvp(cmd[0], cmd)
        return run_prefixed(rank, cmd)
    except OSError as e:
        print(f"det.launch.wrap_rank: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], os.environ))
