"""What det's Trial runner costs: the same model and data trained by a hand-written torch
loop and as a det.pytorch.PyTorchTrial under det.pytorch.Trainer, on 1 and 2 ranks, samples/s
side by side (target: the runner costs at most 3%).

Both sides train the Core API example's CNN shape (common/worker/python/examples/
fashion_mnist_cnn: conv 32, conv 64, max-pool, dense 128, 10 classes) with Adam on synthetic
Fashion-MNIST-shaped data (--records records of 1x28x28, generated from a fixed seed), global
batch --batch split among the ranks, Gloo DDP on loopback for 2 ranks, one intra-op thread
per rank. The hand loop: torch DataLoader + DistributedSampler(shuffle=True), DDP, forward,
cross entropy, backward, step, zero_grad, loss.item(). The Trial: det.pytorch.DataLoader
(shuffle=True: det's elastic order), context.wrap_model/wrap_optimizer, context.backward,
context.step_optimizer, {"loss": loss} returned; Trainer.fit in local mode (no master; the
runner's loop, timers, metric reduction across ranks, stop checks as on a cluster), training
reports every 100 batches. Each side times --steps batches after --warmup batches: from the
moment batch `warmup` starts training (its data fetched) to the moment batch
`warmup + steps` does, so every timed cycle holds one fetch, one step and what the loop does
between steps (the final validation and checkpoint of fit() come after and are not timed).
The sides alternate, --reps runs each; the table gives the median samples/s of rank 0 and
the Trial/hand ratio, and rank 0's CPU time per timed batch (median; all its threads),
which a loaded machine disturbs less than samples/s: what each side computes, not what it
waits. A second table splits rank 0's time per batch: the main thread's CPU in the step
(the hand loop's forward .. loss.item(), the Trial's train_batch) and between steps (the
fetch and the loop or the runner), the other threads' CPU (Gloo's and DDP's), and the wall
time between steps that is not on the main thread's CPU (waiting for the other rank).

Like for like, except what the Trial must do by contract (docs/performance.md, "PyTorchTrial
under the Trainer vs a hand-written loop", measures each): det's elastic order (every rank
computes the epoch's global order, so that any rank count resumes mid-epoch at the next
batch; DistributedSampler draws a randperm), one stop check after every batch (on 2 ranks
a 2-flag tensor all-reduce, which runs while the rank fetches its next batch: a preemption
or set_stop_requested on any rank stops every rank after the same batch), the phases'
timers (dataloader_next, to_device, train_batch, from_device) and the loss turned into a
number (the hand loop's loss.item()). The model, data, batch, optimizer, DDP settings
(torch's defaults on both sides) and collation are the same.

Usage: [DET_TEST_PYTHON=/usr/bin/python3] python3 tests/bench/trial_runner_bench.py
           [--reps 3] [--steps 200] [--warmup 10] [--ranks 1,2] [--batch 64]
           [--det-path bazel-bin/deploy/python]
Needs the det package (bazel build //deploy:python, or --det-path).
"""

import argparse
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYTHON = os.environ.get("DET_TEST_PYTHON", "/usr/bin/python3")  # the interpreter with torch
WORKER_ENV = {"OMP_NUM_THREADS": "1", "MALLOC_TRIM_THRESHOLD_": "268435456",
              "MALLOC_MMAP_THRESHOLD_": "67108864"}
RUN_TIMEOUT_S = 600


# -- the worker side (one rank; run as `trial_runner_bench.py --worker hand|trial`) ----------

def _model():
    import torch
    from torch import nn
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(),
                         nn.Linear(128, 10), nn.LogSoftmax(dim=1)).to(torch.float32)


def _data(records):
    import torch
    g = torch.Generator().manual_seed(0)
    x = torch.rand(records, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (records,), generator=g)
    return torch.utils.data.TensorDataset(x, y)


class _Clock:
    """Times batches warmup .. warmup + steps: the moment each starts training; wall clock
    and this process's CPU time (all its threads: what it computed, not what it waited).
    Within them, step_begin() .. step_end() brackets each batch's step (the hand loop's
    forward .. loss.item(); the Trial's train_batch): the main thread's CPU and the wall
    time inside the steps, the rest being between them (the fetch, the loop or the runner,
    waits)."""

    def __init__(self, warmup, steps):
        self.warmup, self.steps = warmup, steps
        self.start = self.end = self.cpu_start = self.cpu_end = None
        self.main_start = self.main_end = None
        self.step_wall = self.step_cpu = 0.0
        self._timing = False

    def at_batch(self, batch_idx):
        if batch_idx == self.warmup:
            self.start, self.cpu_start = time.perf_counter(), time.process_time()
            self.main_start = time.thread_time()
        elif batch_idx == self.warmup + self.steps:
            self.end, self.cpu_end = time.perf_counter(), time.process_time()
            self.main_end = time.thread_time()
        self._timing = self.warmup <= batch_idx < self.warmup + self.steps

    def step_begin(self):
        if self._timing:
            self._wall, self._cpu = time.perf_counter(), time.thread_time()

    def step_end(self):
        if self._timing:
            self.step_wall += time.perf_counter() - self._wall
            self.step_cpu += time.thread_time() - self._cpu

    def result(self, global_batch):
        seconds = self.end - self.start
        per_batch = 1000 / self.steps
        return {"seconds": seconds, "samples_per_s": self.steps * global_batch / seconds,
                "cpu_ms_per_batch": per_batch * (self.cpu_end - self.cpu_start),
                "main_cpu_ms_per_batch": per_batch * (self.main_end - self.main_start),
                "step_cpu_ms_per_batch": per_batch * self.step_cpu,
                "step_wall_ms_per_batch": per_batch * self.step_wall,
                "wall_ms_per_batch": per_batch * seconds}


def _hand(args, rank, world):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    torch.manual_seed(1)
    model = _model()
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = _data(args.records)
    sampler = torch.utils.data.distributed.DistributedSampler(
        data, num_replicas=world, rank=rank, shuffle=True, seed=1, drop_last=True) \
        if world > 1 else torch.utils.data.RandomSampler(data)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch // world, sampler=sampler,
                                         drop_last=True)
    clock = _Clock(args.warmup, args.steps)
    model.train()

    def batches():
        for epoch in itertools.count():
            if world > 1:
                sampler.set_epoch(epoch)
            yield from loader

    for batch_idx, (x, y) in enumerate(batches()):
        clock.at_batch(batch_idx)
        if batch_idx == args.warmup + args.steps:
            break
        clock.step_begin()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss.item()
        clock.step_end()
    if world > 1:
        dist.barrier()
    return clock


def _trial(args, rank, world):
    import torch
    import torch.nn.functional as F
    from det import pytorch
    clock = _Clock(args.warmup, args.steps)

    class BenchTrial(pytorch.PyTorchTrial):
        def __init__(self, context):
            self.context = context
            torch.manual_seed(1)
            self.model = context.wrap_model(_model())
            self.opt = context.wrap_optimizer(torch.optim.Adam(self.model.parameters(),
                                                               lr=1e-3))

        def build_training_data_loader(self):
            return pytorch.DataLoader(_data(args.records), shuffle=True,
                                      batch_size=self.context.get_per_slot_batch_size())

        def build_validation_data_loader(self):
            return pytorch.DataLoader(_data(args.batch), batch_size=args.batch // world)

        def train_batch(self, batch, epoch_idx, batch_idx):
            clock.at_batch(batch_idx)
            clock.step_begin()
            x, y = batch
            loss = F.nll_loss(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            clock.step_end()
            return {"loss": loss}

        def evaluate_batch(self, batch, batch_idx):
            x, y = batch
            return {"validation_loss": F.nll_loss(self.model(x), y)}

    with tempfile.TemporaryDirectory() as storage, \
            pytorch.init(hparams={"global_batch_size": args.batch},
                         checkpoint_storage=storage) as context:
        trial = BenchTrial(context)
        # Batch warmup + steps starts (the clock stops there) and is the last.
        pytorch.Trainer(trial, context).fit(max_length=pytorch.Batch(args.warmup + args.steps + 1),
                                            reporting_period=pytorch.Batch(100))
        del trial
    return clock


def _stop_checks(args, rank):
    """The Trainer's stop check after a batch, alone, --steps times in a row on every rank:
    as det checks now (its preemption vote and set_stop_requested in one 2-flag tensor
    all-reduce) and as it checked before (should_preempt()'s object allgather, then an
    allgather of the stop flag); and the all-reduce with the fetch of a batch of the bench's
    data (--batch / 2 records): waited for, then the fetch (as before e34d2c7), or running
    while the batch is fetched (as the Trainer does now). Per check, wall and CPU
    milliseconds, 3 alternating rounds."""
    import torch
    import torch.distributed as dist
    from det import core
    from det.pytorch._harness import trainer
    dist.init_process_group("gloo")
    d = core.DistributedContext.from_torch_distributed()
    cpu = torch.device("cpu")
    loader = torch.utils.data.DataLoader(_data(args.records), batch_size=args.batch // 2,
                                         shuffle=True, drop_last=True)

    def endless():
        while True:
            yield from loader
    batches = endless()

    def check_then_fetch():
        trainer._any_rank(d, cpu, [preempt._vote(), False])
        next(batches)

    def check_during_fetch():
        wait, _ = trainer._start_any_rank(d, cpu, [preempt._vote(), False])
        next(batches)
        wait()
    with core.PreemptContext(None, d, core.PreemptMode.WorkersAskChief,
                             on_cluster=False) as preempt:
        checks = {
            "all_reduce": lambda: trainer._any_rank(d, cpu, [preempt._vote(), False]),
            "objects": lambda: preempt.should_preempt() or any(d.allgather(False)),
            "check_then_fetch": check_then_fetch,
            "check_during_fetch": check_during_fetch,
        }
        got = {name: [] for name in checks}
        for _ in range(3):
            for name, check in checks.items():
                dist.barrier()
                wall, cpu = time.perf_counter(), time.process_time()
                for _ in range(args.steps):
                    check()
                got[name].append((1000 * (time.perf_counter() - wall) / args.steps,
                                  1000 * (time.process_time() - cpu) / args.steps))
    dist.barrier()
    dist.destroy_process_group()
    return {name: [statistics.median(w for w, _ in v), statistics.median(c for _, c in v)]
            for name, v in got.items()}


def worker(args):
    import torch
    torch.set_num_threads(1)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if args.worker == "stopcheck":
        figures = _stop_checks(args, rank)
        if rank == 0:
            print("BENCH " + json.dumps(figures), flush=True)
        return
    if args.worker == "hand":
        import torch.distributed as dist
        if world > 1:
            dist.init_process_group("gloo")
        clock = _hand(args, rank, world)
        if world > 1:
            dist.destroy_process_group()
    else:
        clock = _trial(args, rank, world)  # det.pytorch.init() makes the process group.
    if rank == 0:
        print("BENCH " + json.dumps(clock.result(args.batch)), flush=True)


# -- the driver -------------------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_once(args, mode, world):
    """Rank 0's figures of one run of `mode` on `world` ranks."""
    with tempfile.TemporaryDirectory() as workdir:
        return _run_in(args, mode, world, workdir)


def _run_in(args, mode, world, workdir):
    port = str(_free_port())
    procs = []
    for rank in range(world):
        env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
        env.update(WORKER_ENV)
        env.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                    "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": port,
                    "PYTHONPATH": os.pathsep.join([args.det_path, env.get("PYTHONPATH", "")])})
        cmd = [PYTHON, os.path.abspath(__file__), "--worker", mode, "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--batch", str(args.batch),
               "--records", str(args.records)]
        # In an empty directory: fit()'s final checkpoint copies the working directory as
        # the model definition (code/).
        procs.append(subprocess.Popen(cmd, env=env, cwd=workdir, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=RUN_TIMEOUT_S)[0] for p in procs]
    for p, out in zip(procs, outs):
        if p.returncode != 0:
            raise RuntimeError(f"{mode} on {world} ranks failed (exit {p.returncode}):\n{out}")
    for line in outs[0].splitlines():
        if line.startswith("BENCH "):
            return json.loads(line[len("BENCH "):])
    raise RuntimeError(f"{mode} on {world} ranks printed no figures:\n{outs[0]}")


def _print_breakdown(all_figures):
    """Where rank 0's time goes, per timed batch (medians of the runs): the main thread's
    CPU in the step and between steps, the other threads' (Gloo's, DDP's), and wall time in
    the step and between steps, of which not on the CPU (waiting: for the other rank, a
    collective, the scheduler on a loaded machine)."""
    def med(figures, key):
        return statistics.median(f[key] for f in figures)
    print()
    print("Rank 0, ms per timed batch (medians): main-thread CPU in the step (hand: forward .. "
          "loss.item(); Trial: train_batch) and between steps (the fetch, the loop or the "
          "runner); the other threads' CPU; wall time in the step and between steps, and of "
          "that not on the main thread's CPU")
    print()
    print("| ranks | side | CPU: step | CPU: between | CPU: other threads | CPU: all | "
          "wall: step | wall: between | between, off CPU |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (w, mode), figures in all_figures.items():
        step_cpu = med(figures, "step_cpu_ms_per_batch")
        between_cpu = statistics.median(f["main_cpu_ms_per_batch"] - f["step_cpu_ms_per_batch"]
                                        for f in figures)
        others = statistics.median(f["cpu_ms_per_batch"] - f["main_cpu_ms_per_batch"]
                                   for f in figures)
        step_wall = med(figures, "step_wall_ms_per_batch")
        between_wall = statistics.median(f["wall_ms_per_batch"] - f["step_wall_ms_per_batch"]
                                         for f in figures)
        off_cpu = statistics.median(
            f["wall_ms_per_batch"] - f["step_wall_ms_per_batch"] -
            (f["main_cpu_ms_per_batch"] - f["step_cpu_ms_per_batch"]) for f in figures)
        print(f"| {w} | {mode} | {step_cpu:.2f} | {between_cpu:.2f} | {others:.2f} | "
              f"{med(figures, 'cpu_ms_per_batch'):.2f} | {step_wall:.2f} | {between_wall:.2f} | "
              f"{off_cpu:.2f} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=["hand", "trial", "stopcheck"],
                        help=argparse.SUPPRESS)
    parser.add_argument("--stop-check", action="store_true",
                        help="also time the Trainer's stop check alone on 2 ranks (--steps "
                        "checks): now (one tensor all-reduce) and before (object collectives)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--batch", type=int, default=64, help="global batch size")
    parser.add_argument("--records", type=int, default=4096)
    parser.add_argument("--det-path", default=os.path.join(ROOT, "bazel-bin", "deploy", "python"))
    args = parser.parse_args()
    for name in ("reps", "steps", "warmup", "batch", "records"):
        if getattr(args, name) < (0 if name == "warmup" else 1):
            parser.error(f"--{name} must be a positive integer, got {getattr(args, name)}")
    if args.worker:
        worker(args)
        return
    try:
        ranks = [int(r) for r in args.ranks.split(",")]
    except ValueError:
        parser.error(f"--ranks must be a comma-separated list of integers, got {args.ranks!r}")
    for w in ranks:
        if w < 1 or args.batch % w:
            parser.error(f"--ranks: {w} ranks must be >= 1 and divide --batch {args.batch}")
    if args.records < args.batch:
        parser.error(f"--records ({args.records}) must be at least --batch ({args.batch})")
    if not os.path.isdir(os.path.join(args.det_path, "det")):
        parser.error(f"--det-path {args.det_path} holds no det package "
                     "(bazel build //deploy:python)")
    print(f"global batch {args.batch}, {args.steps} timed batches after {args.warmup}, "
          f"median of {args.reps} runs each, load average before: "
          f"{' '.join(open('/proc/loadavg').read().split()[:3])}")
    print()
    print("| ranks | hand-written loop samples/s | PyTorchTrial under Trainer samples/s | "
          "Trial / hand | runs (hand; trial) | rank 0 CPU ms/batch (hand; trial) |")
    print("| --- | --- | --- | --- | --- | --- |")
    all_figures = {}
    for w in ranks:
        got = {"hand": [], "trial": []}
        cpu = {"hand": [], "trial": []}
        for _ in range(args.reps):
            for mode in ("hand", "trial"):  # Alternating: both see the same machine.
                figures = run_once(args, mode, w)
                all_figures.setdefault((w, mode), []).append(figures)
                got[mode].append(figures["samples_per_s"])
                cpu[mode].append(figures["cpu_ms_per_batch"])
        hand, trial = statistics.median(got["hand"]), statistics.median(got["trial"])
        runs = "; ".join(", ".join(f"{v:.0f}" for v in got[m]) for m in ("hand", "trial"))
        cpus = "; ".join(f"{statistics.median(cpu[m]):.1f}" for m in ("hand", "trial"))
        print(f"| {w} | {hand:.1f} | {trial:.1f} | {100 * trial / hand:.1f}% | {runs} | "
              f"{cpus} |", flush=True)
    _print_breakdown(all_figures)
    if args.stop_check:
        figures = run_once(args, "stopcheck", 2)
        print()
        print("The stop check alone on 2 ranks (median of 3 rounds of --steps checks), ms per "
              "check, wall / CPU of rank 0: one 2-flag tensor all-reduce (now) "
              f"{figures['all_reduce'][0]:.3f} / {figures['all_reduce'][1]:.3f}; "
              "should_preempt() + allgather of the stop flag (before) "
              f"{figures['objects'][0]:.3f} / {figures['objects'][1]:.3f}. With the fetch of "
              "a batch: the all-reduce waited for, then the fetch "
              f"{figures['check_then_fetch'][0]:.3f} / {figures['check_then_fetch'][1]:.3f}; "
              "the all-reduce running during the fetch (the Trainer now) "
              f"{figures['check_during_fetch'][0]:.3f} / "
              f"{figures['check_during_fetch'][1]:.3f}")
    print()
    print(f"load average after: {' '.join(open('/proc/loadavg').read().split()[:3])}")


if __name__ == "__main__":
    sys.exit(main())
