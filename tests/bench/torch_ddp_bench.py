"""The same plain PyTorch DDP script (torch_ddp_train.py) under det and under torchrun, and
det.pytorch's deterministic mode against plain DDP, as Markdown tables.

  1. det vs torchrun, 1, 2 and 4 ranks on one machine: launch-to-first-step (from the
     launch command to the moment every rank is ready to train) and samples/s (first step
     to last step), the median of --reps runs each, alternating the launchers; det/torchrun
     ratio of samples/s (target >= 98%). det: a private local cluster (det deploy local
     cluster-up, 1 agent with 4 CPU slots) from bazel-bin/deploy/bin, entrypoint
     `python3 torch_ddp_train.py` (the agent runs it with its worker_python). torchrun:
     `python3 torch_run.py --nnodes 1 --rdzv_backend c10d --rdzv_endpoint 127.0.0.1:PORT
     --nproc_per_node N` (what --standalone does, on a free port instead of its fixed
     29400), torchrun's own main() with Debian 12's Python 3.11 bug patched (`python3 -m
     torch.distributed.run` itself dies there; see torch_run.py).
  2. Deterministic mode's cost: the script's --mode deterministic (ElasticSampler +
     DeterministicDDP, micro-batches of --micro-batch, which divides every per-rank batch)
     against --mode ddp, both under torchrun, 1, 2 and 4 ranks (target <= 30% more time
     per step), for each model of --models: `cnn`, the Core API example's CNN with its
     sizes (common/worker/python/examples/fashion_mnist_cnn, global batch 64, Adam), and
     `mlp`, an MLP 784-128-10 (SGD).

  3. A summary: both side by side, per rank count.

Besides samples/s each run reports the ranks' CPU share (the CPU seconds all ranks used
between their first and last step over those seconds x the machine's cores) and samples per
CPU second of the ranks: on a shared machine samples/s follows the CPU the ranks get, the
latter what they did with it. det rows also give det-master's and det-agent's own CPU
seconds per run. A run that fails is retried (RETRIES times); every failed attempt's output
is printed at the end.

Every process gets WORKER_ENV (one intra-op thread; glibc malloc keeping freed memory) and
calls torch.set_num_threads(1).
With --probe, one short run under each launcher first prints what the ranks got from it
(threads, CPU affinity, nice, cgroup, autogroup, stdio, parent processes) and how their
environments differ.

Usage: [DET_TEST_PYTHON=/path/python3] python3 tests/bench/torch_ddp_bench.py [--reps 3] [--steps 600]
       [--ranks 1,2,4] [--micro-batch 16] [--models cnn,mlp] [--skip det,cost] [--probe]
       [--bin-dir DIR]
Expects bazel-bin/deploy/bin built (tests/bench/run.sh builds it), or --bin-dir; without it
the det column says why it is missing.
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
import uuid

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BENCH = os.path.join(ROOT, "tests", "bench")
TRAIN = os.path.join(BENCH, "torch_ddp_train.py")
TORCHRUN = os.path.join(BENCH, "torch_run.py")
BIN = os.path.join(ROOT, "bazel-bin", "deploy", "bin")
PYTHON = os.environ.get("DET_TEST_PYTHON", "/usr/bin/python3")  # the interpreter with torch
RUN_TIMEOUT_S = 300
# Every process, under both launchers and in both modes: one intra-op thread, and glibc
# malloc keeping freed memory instead of returning it to the kernel after each step (by
# default it may trim or unmap the gradients' 400 KB buffers and fault them in again every
# step, depending on the heap's layout, which made runs of the same command differ 2-4x).
WORKER_ENV = {"OMP_NUM_THREADS": "1", "MALLOC_TRIM_THRESHOLD_": "268435456",
              "MALLOC_MMAP_THRESHOLD_": "67108864"}
# The det package under torchrun: the built bundle (with deterministic mode's native
# fixed-point library, as det's agents give workers), else the source tree (the torch/numpy
# fallback: the same bits, slower; the cost table says which).
BUNDLE = os.path.join(ROOT, "bazel-bin", "deploy", "python")
SOURCE_PACKAGE = os.path.join(ROOT, "common", "worker", "python")

FIRST = re.compile(r"BENCH first_step_unix=([0-9.]+)")
DONE = re.compile(r"BENCH steps=\d+ samples=\d+ seconds=([0-9.]+) samples_per_s=([0-9.]+)"
                  r" worker_cpu_s=([0-9.]+) voluntary_switches=(\d+) involuntary_switches=(\d+)")
# A run that fails is retried this many times (each failure is kept and printed at the end).
RETRIES = 2


class Run:
    """One run's figures: launch to first step (s), samples/s, and the share of the
    machine's CPU time the ranks used between their first and last step."""

    def __init__(self, launch, sps, cpu_share, switches_per_s=(float("nan"), float("nan"))):
        self.launch, self.sps, self.cpu_share = launch, sps, cpu_share
        # All ranks' (voluntary, involuntary) context switches per second of training: a
        # rank waiting in a collective switches voluntarily; one preempted by another
        # runnable thread (a launcher's, a daemon's, another rank) involuntarily.
        self.voluntary_per_s, self.involuntary_per_s = switches_per_s
        # Samples per CPU second of the ranks: what the ranks did with the CPU they got,
        # independent of how much other load on the machine left them.
        self.per_cpu_s = sps / (cpu_share * os.cpu_count()) if cpu_share > 0 else float("nan")


def parse(output, what, launch):
    first, done = FIRST.search(output), DONE.search(output)
    if not first or not done:
        raise RuntimeError(f"{what}: no BENCH lines in its output:\n{output[-3000:]}")
    seconds = float(done.group(1))
    return Run(float(first.group(1)) - launch, float(done.group(2)),
               float(done.group(3)) / (seconds * os.cpu_count()),
               (int(done.group(4)) / seconds, int(done.group(5)) / seconds))


FAILURES = []  # (what, output tail) of every failed attempt


def retried(what, attempt):
    """attempt() until it succeeds, at most 1 + RETRIES times; failures are recorded."""
    for i in range(1 + RETRIES):
        try:
            return attempt()
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
            FAILURES.append((f"{what}, attempt {i + 1}", str(e)))
            print(f"[{what}: attempt {i + 1} failed: {str(e).strip().splitlines()[0]}]",
                  file=sys.stderr, flush=True)
    raise RuntimeError(f"{what}: failed {1 + RETRIES} times in a row")


def det_package():
    """Where torchrun's ranks import det from (see BUNDLE)."""
    if os.path.exists(os.path.join(BUNDLE, "det", "pytorch", "_fixed_point.so")):
        return BUNDLE
    return SOURCE_PACKAGE


def torchrun(ranks, steps, mode="ddp", micro=16, model="mlp", extra=()):
    env = dict(os.environ, **WORKER_ENV,
               PYTHONPATH=det_package())

    def attempt():
        # What --standalone does, on a free port instead of its fixed 29400 (another
        # torchrun, or anything else on the machine holding 29400, fails the launch).
        cmd = [PYTHON, TORCHRUN, "--nnodes", "1", "--rdzv_backend", "c10d",
               "--rdzv_endpoint", f"127.0.0.1:{free_port()}", "--rdzv_id", str(uuid.uuid4()),
               "--nproc_per_node", str(ranks), TRAIN,
               "--steps", str(steps), "--mode", mode, "--micro-batch", str(micro),
               "--model", model, *extra]
        launch = time.time()
        # A session of its own, as det's workers are in det-agent's: with the kernel's
        # autogroup scheduling (kernel.sched_autogroup_enabled) a session's processes share
        # one CPU share, and this benchmark's session may hold other work of whoever
        # started it.
        p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                           timeout=RUN_TIMEOUT_S, start_new_session=True)
        out = p.stdout + p.stderr
        if p.returncode != 0:
            raise RuntimeError(f"torchrun {ranks} ranks exited {p.returncode}:\n{out[-3000:]}")
        run = parse(out, f"torchrun {ranks} ranks", launch)
        run.output = out
        return run

    return retried(f"torchrun {model} {mode} {ranks} ranks", attempt)


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
                            "--master-port", str(self.port), "--bin-dir", BIN,
                            # Workers as this user: bazel-bin is where no task user reaches.
                            "--no-task-user"],
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

    def run(self, ranks, steps, extra=""):
        config = os.path.join(self.work, f"torch-ddp-{ranks}.yaml")
        with open(config, "w") as f:
            f.write(f"""name: torch-ddp-bench-{ranks}
entrypoint: python3 torch_ddp_train.py --steps {steps}{extra}
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
        daemons = self.daemon_pids()
        before = sum(cpu_seconds_of(pid) for pid in daemons)
        launch = time.time()
        p = self.det("experiment", "create", config, self.context, "--follow")
        out = p.stdout + p.stderr
        if p.returncode != 0:
            raise RuntimeError(f"det {ranks} ranks: experiment create exited {p.returncode}:\n"
                               f"{out[-3000:]}")
        run = parse(out, f"det {ranks} ranks", launch)
        run.output = out
        # det-master's and det-agent's own CPU seconds over the whole run (launch to exit).
        run.daemon_cpu_s = sum(cpu_seconds_of(pid) for pid in daemons) - before
        return run

    def daemon_pids(self):
        run_dir = os.path.join(self.data, "run")
        pids = []
        for name in sorted(os.listdir(run_dir)) if os.path.isdir(run_dir) else []:
            if name.endswith(".pid"):
                try:
                    with open(os.path.join(run_dir, name)) as f:
                        pids.append(int(f.read().strip()))
                except (OSError, ValueError):
                    pass
        return pids


def cpu_seconds_of(pid):
    """User + system CPU seconds of process `pid` itself (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def fmt(x, digits=1):
    return "n/a" if x != x else f"{x:,.{digits}f}"


def load():
    return os.getloadavg()[0]


def cell(xs, digits, scale=1.0, suffix=""):
    """median (min-max) of xs x scale, or n/a."""
    if not xs:
        return "n/a"
    xs = [x * scale for x in xs]
    return (f"{fmt(median(xs), digits)}{suffix} ({fmt(min(xs), digits)}-"
            f"{fmt(max(xs), digits)}{suffix})")


def set_bin(path):
    global BIN
    BIN = os.path.abspath(path)


PROBE = re.compile(r"PROBE (\d+) (\{.*\})\s*$", re.M)
# Variables that differ from run to run or name the launcher's own bookkeeping.
PER_RUN = ("TORCHELASTIC_RUN_ID", "MASTER_PORT", "DET_", "TORCHELASTIC_ERROR_FILE",
           "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT", "LOCAL_RANK",
           "RANK", "GROUP_RANK", "ROLE_RANK", "HOME")


def probe(args, cluster):
    """One short run under each launcher at the largest rank count with --probe: prints
    what the ranks got from each launcher (docs/pytorch-data-and-determinism.md)."""
    ranks = max(args.ranks)
    outputs = {"torchrun": torchrun(ranks, 2, extra=("--probe",)).output}
    if cluster is not None:
        outputs["det"] = retried(f"det {ranks} ranks probe",
                                 lambda: cluster.run(ranks, 2, " --probe")).output
    facts = {}
    for who, out in outputs.items():
        import json
        facts[who] = {int(r): json.loads(j) for r, j in PROBE.findall(out)}
        if len(facts[who]) != ranks:
            print(f"probe: {who}: {len(facts[who])} PROBE lines of {ranks} ranks\n")
    print(f"## What the ranks get from each launcher ({ranks} ranks)\n")
    keys = [k for k in next(iter(facts["torchrun"].values()), {}) if k != "environ"]
    print("| | " + " | ".join(facts) + " |")
    print("| --- |" + " --- |" * len(facts))
    for k in keys:
        cells = []
        for who in facts:
            values = sorted({json.dumps(f.get(k)) for f in facts[who].values()})
            cells.append(" / ".join(v.replace("|", "/").replace("\\n", "; ")[:200]
                                    for v in values))
        print(f"| {k} | " + " | ".join(cells) + " |")
    print()
    if len(facts) == 2:
        env = {who: facts[who].get(0, {}).get("environ", {}) for who in facts}
        t, d = env["torchrun"], env["det"]
        print("Environment of rank 0, where it differs (per-run values left out):\n")
        for name in sorted(set(t) | set(d)):
            if name.startswith(PER_RUN) or t.get(name) == d.get(name):
                continue
            print(f"- {name}: torchrun {t.get(name, '(unset)')!r}, det {d.get(name, '(unset)')!r}"[:300])
        print()


def det_vs_torchrun(args, work, skip_runs=False):
    """{ranks: {"torchrun": [Run], "det": [Run], "load": load after}}, and why det was not
    measured (None when it was). With args.probe, probe() first."""
    cluster, det_error = None, None
    if not os.path.exists(os.path.join(BIN, "det")):
        det_error = f"{BIN}/det is missing: build //deploy:bin"
    else:
        cluster = DetCluster(work)
        try:
            cluster.start()
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
            det_error, cluster = str(e), None
    rows = {}
    try:
        if args.probe:
            probe(args, cluster)
        for ranks in [] if skip_runs else args.ranks:
            row = rows[ranks] = {"torchrun": [], "det": []}
            for rep in range(args.reps):
                order = ("torchrun", "det") if rep % 2 == 0 else ("det", "torchrun")
                for who in order:
                    if who == "torchrun":
                        row["torchrun"].append(torchrun(ranks, args.steps))
                    elif cluster is not None:
                        try:
                            row["det"].append(retried(
                                f"det {ranks} ranks",
                                lambda: cluster.run(ranks, args.steps)))
                        except RuntimeError as e:
                            det_error = f"{e}:\n{FAILURES[-1][1]}"
                            cluster.stop()
                            cluster = None
            row["load"] = load()
    finally:
        if cluster is not None:
            cluster.stop()
    return rows, det_error


def print_det_vs_torchrun(args, rows, det_error):
    print("## det vs torchrun: the same DDP script (torch_ddp_train.py)\n")
    print(f"{args.reps} runs each, alternating, {args.steps} steps of global batch 64, "
          f"medians (min-max). CPU share: the CPU seconds all ranks used from first to last "
          f"step over (those seconds x {os.cpu_count()} cores). det daemons: det-master's and "
          f"det-agent's own CPU seconds per run (launch to exit). Switches: all ranks' "
          f"voluntary / involuntary context switches per second of training.\n")
    print("| ranks | torchrun launch->first step (s) | det launch->first step (s) "
          "| torchrun samples/s | det samples/s | det/torchrun samples/s "
          "| torchrun CPU share | det CPU share | torchrun switches/s | det switches/s "
          "| det daemons CPU (s) | load after |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for ranks, row in rows.items():
        t, d = row["torchrun"], row["det"]
        ratio = median([r.sps for r in d]) / median([r.sps for r in t]) if d else float("nan")
        print(f"| {ranks} | {cell([r.launch for r in t], 2)} | {cell([r.launch for r in d], 2)} "
              f"| {cell([r.sps for r in t], 0)} | {cell([r.sps for r in d], 0)} "
              f"| {'n/a' if ratio != ratio else f'{100 * ratio:.1f}%'} "
              f"| {cell([r.cpu_share for r in t], 0, 100, '%')} "
              f"| {cell([r.cpu_share for r in d], 0, 100, '%')} "
              f"| {switches(t)} | {switches(d)} "
              f"| {cell([r.daemon_cpu_s for r in d], 2)} | {row['load']:.1f} |")
    if det_error:
        print(f"\ndet: not measured: {det_error.strip().splitlines()[0]}")
        print("\n```\n" + det_error.strip()[-2000:] + "\n```")
    print()


def switches(runs):
    """Median voluntary / involuntary context switches per second of `runs`."""
    if not runs:
        return "n/a"
    return (f"{median([r.voluntary_per_s for r in runs]):,.0f} / "
            f"{median([r.involuntary_per_s for r in runs]):,.0f}")


def deterministic_cost(args, model):
    """{ranks: {"ddp": [Run], "deterministic": [Run], "load": load after}} for `model`."""
    rows = {}
    for ranks in args.ranks:
        row = rows[ranks] = {"ddp": [], "deterministic": []}
        for rep in range(args.reps):
            order = ("ddp", "deterministic") if rep % 2 == 0 else ("deterministic", "ddp")
            for mode in order:
                row[mode].append(torchrun(ranks, args.steps, mode, args.micro_batch, model))
        row["load"] = load()
    return rows


def cost(row, what="sps"):
    """Deterministic mode's extra time per step over plain DDP (medians), in percent; with
    what="per_cpu_s", its extra CPU time of the ranks per sample."""
    ddp = median([getattr(r, what) for r in row["ddp"]])
    det = median([getattr(r, what) for r in row["deterministic"]])
    return 100 * (ddp / det - 1)


MODELS = {"cnn": "the Core API example's CNN (Adam)", "mlp": "MLP 784-128-10 (SGD)"}


def print_deterministic_cost(args, model, rows):
    print(f"## Deterministic mode vs plain DDP: {MODELS[model]} (under torchrun, micro-batch "
          f"{args.micro_batch})\n")
    native = det_package() == BUNDLE
    print(f"{args.reps} runs each, alternating, {args.steps} steps of global batch 64, medians "
          f"(min-max); det package: "
          + (f"{BUNDLE} (native fixed-point library)" if native else
             f"{SOURCE_PACKAGE} (no native library: the torch/numpy fallback; build "
             f"//deploy:python)") + "\n")
    print("| ranks | micro-batches per rank | DDP samples/s | deterministic samples/s "
          "| extra time per step | extra CPU per sample | DDP CPU share "
          "| deterministic CPU share | load after |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for ranks, row in rows.items():
        print(f"| {ranks} | {64 // ranks // args.micro_batch} "
              f"| {cell([r.sps for r in row['ddp']], 0)} "
              f"| {cell([r.sps for r in row['deterministic']], 0)} | {cost(row):+.0f}% "
              f"| {cost(row, 'per_cpu_s'):+.0f}% "
              f"| {cell([r.cpu_share for r in row['ddp']], 0, 100, '%')} "
              f"| {cell([r.cpu_share for r in row['deterministic']], 0, 100, '%')} "
              f"| {row['load']:.1f} |")
    print()


def print_summary(args, launch_rows, cost_rows):
    print("## Summary (medians)\n")
    print("| ranks | launch->first step torchrun / det (s) | samples/s torchrun / det "
          "| det/torchrun | det/torchrun per CPU second of the ranks |"
          + "".join(f" deterministic mode's cost, {m}: time / CPU per sample |"
                    for m in cost_rows))
    print("| --- | --- | --- | --- | --- |" + " --- |" * len(cost_rows))
    for ranks in args.ranks:
        launch, sps, ratio, per_cpu = "n/a", "n/a", "n/a", "n/a"
        row = launch_rows.get(ranks)
        if row and row["torchrun"] and row["det"]:
            t, d = row["torchrun"], row["det"]
            launch = (f"{median([r.launch for r in t]):.2f} / "
                      f"{median([r.launch for r in d]):.2f}")
            ts, ds = median([r.sps for r in t]), median([r.sps for r in d])
            sps = f"{ts:,.0f} / {ds:,.0f}"
            ratio = f"{100 * ds / ts:.1f}%"
            dc, tc = median([r.per_cpu_s for r in d]), median([r.per_cpu_s for r in t])
            per_cpu = f"{100 * dc / tc:.1f}%"
        extra = [f"{cost(rows[ranks]):+.0f}% / {cost(rows[ranks], 'per_cpu_s'):+.0f}%"
                 if ranks in rows else "n/a" for rows in cost_rows.values()]
        print(f"| {ranks} | {launch} | {sps} | {ratio} | {per_cpu} |"
              + "".join(f" {e} |" for e in extra))
    print()
    if FAILURES:
        print(f"{len(FAILURES)} failed attempt(s), retried:\n")
        for what, output in FAILURES:
            print(f"- {what}:\n\n```\n{output.strip()[-1500:]}\n```\n")
    else:
        print("No run failed.\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--models", default="cnn,mlp",
                        help="comma-separated models of the cost table: cnn, mlp")
    parser.add_argument("--skip", default="", help="comma-separated: det, cost")
    parser.add_argument("--probe", action="store_true",
                        help="first print what the ranks get from each launcher")
    parser.add_argument("--bin-dir", default=BIN, help="det's binaries (det deploy local)")
    args = parser.parse_args()
    set_bin(args.bin_dir)
    args.models = [m for m in args.models.split(",") if m]
    for m in args.models:
        if m not in MODELS:
            sys.exit(f"torch_ddp_bench: --models: unknown model {m!r} (cnn, mlp)")
    args.ranks = [int(r) for r in args.ranks.split(",")]
    skip = set(filter(None, args.skip.split(",")))
    for r in args.ranks:
        if 64 % r or (64 // r) % args.micro_batch:
            sys.exit(f"torch_ddp_bench: --micro-batch {args.micro_batch} must divide the "
                     f"per-rank batch 64/{r}")
    print(f"machine: {os.cpu_count()} cores, load {load():.1f}; torch from {PYTHON}; every "
          f"worker's environment: " + " ".join(f"{k}={v}" for k, v in WORKER_ENV.items()) + "\n")
    launch_rows, cost_rows = {}, {}
    with tempfile.TemporaryDirectory(prefix="torch-ddp-bench-") as work:
        if args.probe or "det" not in skip:
            launch_rows, det_error = det_vs_torchrun(args, work, skip_runs="det" in skip)
            if "det" not in skip:
                print_det_vs_torchrun(args, launch_rows, det_error)
        if "cost" not in skip:
            for model in args.models:
                cost_rows[model] = deterministic_cost(args, model)
                print_deterministic_cost(args, model, cost_rows[model])
    print_summary(args, launch_rows, cost_rows)


if __name__ == "__main__":
    main()
