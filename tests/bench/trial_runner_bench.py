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
the Trial/hand ratio.

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
    """Times batches warmup .. warmup + steps: the moment each starts training."""

    def __init__(self, warmup, steps):
        self.warmup, self.steps = warmup, steps
        self.start = self.end = None

    def at_batch(self, batch_idx):
        if batch_idx == self.warmup:
            self.start = time.perf_counter()
        elif batch_idx == self.warmup + self.steps:
            self.end = time.perf_counter()

    def result(self, global_batch):
        seconds = self.end - self.start
        return {"seconds": seconds, "samples_per_s": self.steps * global_batch / seconds}


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
        loss = F.nll_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss.item()
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
            x, y = batch
            loss = F.nll_loss(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
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


def worker(args):
    import torch
    torch.set_num_threads(1)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=["hand", "trial"], help=argparse.SUPPRESS)
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
          "Trial / hand | runs (hand; trial) |")
    print("| --- | --- | --- | --- | --- |")
    for w in ranks:
        got = {"hand": [], "trial": []}
        for _ in range(args.reps):
            for mode in ("hand", "trial"):  # Alternating: both see the same machine.
                got[mode].append(run_once(args, mode, w)["samples_per_s"])
        hand, trial = statistics.median(got["hand"]), statistics.median(got["trial"])
        runs = "; ".join(", ".join(f"{v:.0f}" for v in got[m]) for m in ("hand", "trial"))
        print(f"| {w} | {hand:.1f} | {trial:.1f} | {100 * trial / hand:.1f}% | {runs} |",
              flush=True)
    print()
    print(f"load average after: {' '.join(open('/proc/loadavg').read().split()[:3])}")


if __name__ == "__main__":
    sys.exit(main())
