"""det vs torchrun on one device: the same DDP script (bench_train.py, beside this file), one
rank, launched alternately by det (an experiment on a running det cluster) and by torchrun,
as tests/bench/torch_ddp_bench.py does on CPUs. Reports, per launcher, the median (and the
range) of samples/s (after a warm-up, first to last step, synchronized) and of launch to
first step (from the launch command to every rank ready to train), and det/torchrun.

Usage (run.sh runs it; the cluster must be up and the CLI logged in):
  PY gpu_bench.py --python PY --det DET_CLI --master HOST:PORT --data-dir DIR
                  [--device cuda|cpu] [--reps 2] [--steps 2000] [--model cnn]
                  [--deadline UNIX_TIME] [--json OUT.json] [--torch-run TORCH_RUN_PY]
Stops starting runs when the next one would end after --deadline (the estimate: the longest
run so far); the result says how many runs of each launcher it got.
"""

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "bench_train.py")
# As in tests/bench/torch_ddp_bench.py: one intra-op thread, glibc malloc keeping freed memory.
WORKER_ENV = {"OMP_NUM_THREADS": "1", "MALLOC_TRIM_THRESHOLD_": "268435456",
              "MALLOC_MMAP_THRESHOLD_": "67108864"}
FIRST = re.compile(r"BENCH first_step_unix=([0-9.]+)")
DONE = re.compile(r"BENCH steps=\d+ samples=\d+ seconds=([0-9.]+) samples_per_s=([0-9.]+)")
DEVICE = re.compile(r"BENCH device=(\S+) backend=(\S+) torch=(\S+)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse(out, what, launch):
    first, done, dev = FIRST.search(out), DONE.search(out), DEVICE.search(out)
    if not first or not done:
        raise RuntimeError(f"{what}: no BENCH lines in its output:\n{out[-3000:]}")
    return {"launch_s": float(first.group(1)) - launch, "sps": float(done.group(2)),
            "device": dev.group(1) if dev else "?", "backend": dev.group(2) if dev else "?"}


def torch_major(python):
    out = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                         capture_output=True, text=True, timeout=120).stdout.strip()
    return int(out.split(".")[0]) if out[:1].isdigit() else 0, out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", required=True)
    p.add_argument("--det", required=True)
    p.add_argument("--master", required=True)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--model", default="cnn")
    p.add_argument("--deadline", type=float, default=0)
    p.add_argument("--json", default="")
    p.add_argument("--torch-run", default="",
                   help="tests/bench/torch_run.py (torchrun with Debian 12's Python 3.11 fix), "
                        "used for torch 1.x")
    args = p.parse_args()
    major, version = torch_major(args.python)
    work = tempfile.mkdtemp(prefix="det-gpu-bench-")
    context = os.path.join(work, "context")
    os.makedirs(context)
    shutil.copy(TRAIN, context)
    train_args = ["--steps", str(args.steps), "--model", args.model, "--data-dir", args.data_dir]
    env = dict(os.environ, **WORKER_ENV)
    if args.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif not env.get("CUDA_VISIBLE_DEVICES"):
        env["CUDA_VISIBLE_DEVICES"] = "0"  # det's slot 0 is GPU 0 (one-GPU machines)
    config = os.path.join(work, "bench.yaml")
    with open(config, "w") as f:
        f.write(f"""name: gpu-bench
entrypoint: python3 bench_train.py {' '.join(train_args)}
hyperparameters:
  global_batch_size: 64
searcher:
  name: single
  metric: loss
  max_length:
    batches: {args.steps}
max_restarts: 0
resources:
  slots_per_trial: 1
environment:
  environment_variables:
""" + "".join(f'    {k}: "{v}"\n' for k, v in WORKER_ENV.items()))

    def remaining():
        return args.deadline - time.time() if args.deadline else 1e9

    def run(cmd, what, env):
        timeout = max(5.0, min(300.0, remaining()))
        launch = time.time()
        # A session of its own, as det's workers are in det-agent's.
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                           start_new_session=True)
        out = r.stdout + r.stderr
        if r.returncode != 0:
            raise RuntimeError(f"{what} exited {r.returncode}:\n{out[-3000:]}")
        res = parse(out, what, launch)
        res["wall_s"] = time.time() - launch
        return res

    def torchrun():
        launcher = ([args.python, args.torch_run] if major < 2 and args.torch_run
                    else [args.python, "-m", "torch.distributed.run"])
        cmd = launcher + ["--nnodes", "1", "--rdzv_backend", "c10d",
                          "--rdzv_endpoint", f"127.0.0.1:{free_port()}",
                          "--rdzv_id", str(uuid.uuid4()), "--nproc_per_node", "1",
                          TRAIN] + train_args
        return run(cmd, "torchrun", env)

    def det():
        cmd = [args.det, "-m", args.master, "experiment", "create", config, context, "--follow"]
        try:
            return run(cmd, "det", dict(os.environ))
        except (RuntimeError, subprocess.TimeoutExpired):
            kill_active()
            raise

    def kill_active():
        """Kills this benchmark's unfinished experiments (they would hold the slot)."""
        try:
            r = subprocess.run([args.det, "-m", args.master, "experiment", "list", "--json"],
                               capture_output=True, text=True, timeout=30)
            for e in json.loads(r.stdout).get("experiments", []):
                if e.get("name") == "gpu-bench" and e.get("state") in (
                        "STATE_ACTIVE", "STATE_PAUSED", "STATE_STOPPING_COMPLETED"):
                    subprocess.run([args.det, "-m", args.master, "experiment", "kill",
                                    str(e["id"])], capture_output=True, timeout=30)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass

    results = {"torchrun": [], "det": []}
    errors, failures = [], 0
    longest = 0.0
    for rep in range(args.reps):
        order = ("torchrun", "det") if rep % 2 == 0 else ("det", "torchrun")
        for who in order:
            if remaining() < max(longest * 1.2, 20):
                errors.append(f"out of time before {who} run {rep + 1}")
                break
            try:
                r = torchrun() if who == "torchrun" else det()
                longest = max(longest, r["wall_s"])
                results[who].append(r)
                print(f"{who} run {rep + 1}: {r['sps']:.0f} samples/s, launch to first step "
                      f"{r['launch_s']:.2f} s, {r['wall_s']:.1f} s in all, on {r['device']} "
                      f"({r['backend']})", flush=True)
            except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
                failures += 1
                errors.append(f"{who} run {rep + 1}: {str(e).strip()[:2000]}")
                print(f"{who} run {rep + 1} FAILED: {str(e).strip()[-2000:]}", flush=True)
        else:
            continue
        break

    def med(who, key):
        xs = [r[key] for r in results[who]]
        return statistics.median(xs) if xs else float("nan")

    t, d = med("torchrun", "sps"), med("det", "sps")
    out = {"torch": version, "model": args.model, "steps": args.steps,
           "runs": {k: len(v) for k, v in results.items()},
           "torchrun_sps": t, "det_sps": d, "ratio": d / t if t == t and d == d else None,
           "torchrun_launch_s": med("torchrun", "launch_s"), "det_launch_s": med("det", "launch_s"),
           "devices": sorted({r["device"] for v in results.values() for r in v}),
           "all": results, "failures": failures, "errors": errors}
    print("| launcher | runs | samples/s median (min-max) | launch to first step (s) |")
    print("| --- | --- | --- | --- |")
    for who in ("torchrun", "det"):
        xs = [r["sps"] for r in results[who]]
        ls = [r["launch_s"] for r in results[who]]
        rng = f" ({min(xs):.0f}-{max(xs):.0f})" if xs else ""
        print(f"| {who} | {len(xs)} | {med(who, 'sps'):.0f}{rng} | {med(who, 'launch_s'):.2f} |")
    if out["ratio"]:
        print(f"det/torchrun samples/s: {100 * out['ratio']:.1f}%")
    for e in errors:
        print("error: " + e.splitlines()[0])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    shutil.rmtree(work, ignore_errors=True)
    ok = results["torchrun"] and results["det"] and failures == 0
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
