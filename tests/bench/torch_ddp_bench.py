"""The same plain PyTorch DDP script (torch_ddp_train.py) under det and under torchrun, and
det.pytorch's deterministic mode against plain DDP, as Markdown tables.

  1. det vs torchrun, 1, 2 and 4 ranks on one machine: launch-to-first-step (from the
     launch command to the moment every rank is ready to train) and samples/s (first step
     to last step), the median of --reps runs each, alternating the launchers; det/torchrun
     ratio of samples/s (target >= 98%). det: a private local cluster (det deploy local
     cluster-up, 1 agent with 4 CPU slots) from bazel-bin/deploy/bin, entrypoint
     `python3 torch_ddp_train.py` (the agent runs it with its worker_python). torchrun:
     `python3 torch_run.py --standalone --nproc_per_node N`, torchrun's own main() with
     Debian 12's Python 3.11 bug patched (`python3 -m torch.distributed.run` itself dies
     there; see torch_run.py).
  2. Deterministic mode's cost: the script's --mode deterministic (ElasticSampler +
     DeterministicDDP, micro-batches of --micro-batch, which divides every per-rank batch)
     against --mode ddp, both under torchrun, 1, 2 and 4 ranks (target <= 30% more time
     per step).

Every process gets WORKER_ENV (one intra-op thread; glibc malloc keeping freed memory) and
calls torch.set_num_threads(1).
Usage: /usr/bin/python3 tests/bench/torch_ddp_bench.py [--reps 3] [--steps 600]
       [--ranks 1,2,4] [--micro-batch 16] [--skip det,cost]
Expects bazel-bin/deploy/bin built (tests/bench/run.sh builds it); without it the det
column says why it is missing.
"""

import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BENCH = os.path.join(ROOT, "tests", "bench")
TRAIN = os.path.join(BENCH, "torch_ddp_train.py")
TORCHRUN = os.path.join(BENCH, "torch_run.py")
BIN = os.path.join(ROOT, "bazel-bin", "deploy", "bin")
PYTHON = "/usr/bin/python3"
RUN_TIMEOUT_S = 300
# Every process, under both launchers and in both modes: one intra-op thread, and glibc
# malloc keeping freed memory instead of returning it to the kernel after each step (by
# default it may trim or unmap the gradients' 400 KB buffers and fault them in again every
# step, depending on the heap's layout, which made runs of the same command differ 2-4x).
WORKER_ENV = {"OMP_NUM_THREADS": "1", "MALLOC_TRIM_THRESHOLD_": "268435456",
              "MALLOC_MMAP_THRESHOLD_": "67108864"}

FIRST = re.compile(r"BENCH first_step_unix=([0-9.]+)")
DONE = re.compile(r"BENCH steps=\d+ samples=\d+ seconds=([0-9.]+) samples_per_s=([0-9.]+)")


def parse(output, what):
    first, done = FIRST.search(output), DONE.search(output)
    if not first or not done:
        raise RuntimeError(f"{what}: no BENCH lines in its output:\n{output[-3000:]}")
    return float(first.group(1)), float(done.group(2))


def torchrun(ranks, steps, mode="ddp", micro=16):
    env = dict(os.environ, **WORKER_ENV,
               PYTHONPATH=os.path.join(ROOT, "common", "harness", "python"))
    cmd = [PYTHON, TORCHRUN, "--standalone", "--nproc_per_node", str(ranks), TRAIN,
           "--steps", str(steps), "--mode", mode, "--micro-batch", str(micro)]
    launch = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    out = p.stdout + p.stderr
    if p.returncode != 0:
        raise RuntimeError(f"torchrun {ranks} ranks exited {p.returncode}:\n{out[-3000:]}")
    first, sps = parse(out, f"torchrun {ranks} ranks")
    return first - launch, sps


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DetCluster:
    """A private det cluster (1 agent, 4 CPU slots) in a temporary directory."""

    def __init__(self, work):
        self.work = work
        self.data = os.path.join(work, "cluster")
        self.env = dict(os.environ, HOME=os.path.join(work, "home"))
        os.makedirs(self.env["HOME"])
        self.port = free_port()
        self.master = f"127.0.0.1:{self.port}"
        self.context = os.path.join(work, "context")
        os.makedirs(self.context)
        shutil.copy(TRAIN, self.context)
        self.up = False

    def det(self, *args, timeout=RUN_TIMEOUT_S):
        return subprocess.run([os.path.join(BIN, "det"), "-m", self.master, *args], env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def start(self):
        p = subprocess.run([os.path.join(BIN, "det"), "deploy", "local", "cluster-up",
                            "--agents", "1", "--slots-per-agent", "4", "--data-dir", self.data,
                            "--master-port", str(self.port), "--bin-dir", BIN],
                           env=self.env, capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"det deploy local cluster-up failed:\n{p.stdout}{p.stderr}")
        self.up = True

    def stop(self):
        if self.up:
            self.up = False
            try:
                subprocess.run([os.path.join(BIN, "det"), "deploy", "local", "cluster-down",
                                "--data-dir", self.data], env=self.env, capture_output=True,
                               timeout=120)
            except (OSError, subprocess.TimeoutExpired) as e:
                # E.g. the binaries were rebuilt meanwhile: stop the daemons by their pid files.
                print(f"det deploy local cluster-down failed ({e}); stopping the daemons by "
                      f"their pid files", file=sys.stderr)
                run_dir = os.path.join(self.data, "run")
                for name in os.listdir(run_dir) if os.path.isdir(run_dir) else []:
                    if name.endswith(".pid"):
                        try:
                            with open(os.path.join(run_dir, name)) as f:
                                os.kill(int(f.read().strip()), signal.SIGTERM)
                        except (OSError, ValueError):
                            pass

    def run(self, ranks, steps):
        config = os.path.join(self.work, f"torch-ddp-{ranks}.yaml")
        with open(config, "w") as f:
            f.write(f"""name: torch-ddp-bench-{ranks}
entrypoint: python3 torch_ddp_train.py --steps {steps}
hyperparameters:
  global_batch_size: 64
searcher:
  name: single
  metric: loss
  max_length:
    batches: {steps}
max_restarts: 0
resources:
  slots_per_trial: {ranks}
environment:
  environment_variables:
""" + "".join(f'    {k}: "{v}"\n' for k, v in WORKER_ENV.items()))
        launch = time.time()
        p = self.det("experiment", "create", config, self.context, "--follow")
        out = p.stdout + p.stderr
        if p.returncode != 0:
            raise RuntimeError(f"det {ranks} ranks: experiment create exited {p.returncode}:\n"
                               f"{out[-3000:]}")
        first, sps = parse(out, f"det {ranks} ranks")
        return first - launch, sps


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def fmt(x, digits=1):
    return "n/a" if x != x else f"{x:,.{digits}f}"


def load():
    return os.getloadavg()[0]


def det_vs_torchrun(args, work):
    print("## det vs torchrun: the same DDP script (torch_ddp_train.py)\n")
    cluster, det_error = None, None
    if not os.path.exists(os.path.join(BIN, "det")):
        det_error = f"{BIN}/det is missing: build //deploy:bin"
    else:
        cluster = DetCluster(work)
        try:
            cluster.start()
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
            det_error, cluster = str(e), None
    rows = []
    try:
        for ranks in args.ranks:
            t, d = {"launch": [], "sps": []}, {"launch": [], "sps": []}
            for rep in range(args.reps):
                order = ("torchrun", "det") if rep % 2 == 0 else ("det", "torchrun")
                for who in order:
                    if who == "torchrun":
                        launch, sps = torchrun(ranks, args.steps)
                        t["launch"].append(launch)
                        t["sps"].append(sps)
                    elif cluster is not None:
                        try:
                            launch, sps = cluster.run(ranks, args.steps)
                            d["launch"].append(launch)
                            d["sps"].append(sps)
                        except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
                            det_error = str(e)
                            cluster.stop()
                            cluster = None
            rows.append((ranks, t, d, load()))
    finally:
        if cluster is not None:
            cluster.stop()
    print(f"{args.reps} runs each, {args.steps} steps of global batch 64, medians "
          f"(min-max)\n")
    print("| ranks | torchrun launch->first step (s) | det launch->first step (s) "
          "| torchrun samples/s | det samples/s | det/torchrun samples/s | load after |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for ranks, t, d, la in rows:
        def cell(xs, digits):
            if not xs:
                return "n/a"
            return f"{fmt(median(xs), digits)} ({fmt(min(xs), digits)}-{fmt(max(xs), digits)})"
        ratio = median(d["sps"]) / median(t["sps"]) if d["sps"] else float("nan")
        print(f"| {ranks} | {cell(t['launch'], 2)} | {cell(d['launch'], 2)} "
              f"| {cell(t['sps'], 0)} | {cell(d['sps'], 0)} "
              f"| {'n/a' if ratio != ratio else f'{100 * ratio:.1f}%'} | {la:.1f} |")
    if det_error:
        print(f"\ndet: not measured: {det_error.strip().splitlines()[0]}")
        print("\n```\n" + det_error.strip()[-2000:] + "\n```")
    print()


def deterministic_cost(args):
    print(f"## Deterministic mode vs plain DDP (under torchrun, micro-batch "
          f"{args.micro_batch})\n")
    print(f"{args.reps} runs each, {args.steps} steps of global batch 64, medians (min-max)\n")
    print("| ranks | micro-batches per rank | DDP samples/s | deterministic samples/s "
          "| extra time per step | load after |")
    print("| --- | --- | --- | --- | --- | --- |")
    for ranks in args.ranks:
        res = {"ddp": [], "deterministic": []}
        for rep in range(args.reps):
            order = ("ddp", "deterministic") if rep % 2 == 0 else ("deterministic", "ddp")
            for mode in order:
                res[mode].append(torchrun(ranks, args.steps, mode, args.micro_batch)[1])
        p, q = median(res["ddp"]), median(res["deterministic"])
        cells = [f"{fmt(median(v), 0)} ({fmt(min(v), 0)}-{fmt(max(v), 0)})"
                 for v in (res["ddp"], res["deterministic"])]
        print(f"| {ranks} | {64 // ranks // args.micro_batch} | {cells[0]} | {cells[1]} "
              f"| {100 * (p / q - 1):+.0f}% | {load():.1f} |")
    print()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--skip", default="", help="comma-separated: det, cost")
    args = parser.parse_args()
    args.ranks = [int(r) for r in args.ranks.split(",")]
    skip = set(filter(None, args.skip.split(",")))
    for r in args.ranks:
        if 64 % r or (64 // r) % args.micro_batch:
            sys.exit(f"torch_ddp_bench: --micro-batch {args.micro_batch} must divide the "
                     f"per-rank batch 64/{r}")
    print(f"machine: {os.cpu_count()} cores, load {load():.1f}; torch from {PYTHON}; every "
          f"worker's environment: " + " ".join(f"{k}={v}" for k, v in WORKER_ENV.items()) + "\n")
    with tempfile.TemporaryDirectory(prefix="torch-ddp-bench-") as work:
        if "det" not in skip:
            det_vs_torchrun(args, work)
        if "cost" not in skip:
            deterministic_cost(args)


if __name__ == "__main__":
    main()
