"""A plain PyTorch DDP training script for torch_ddp_bench.py on Fashion-MNIST, global
batch 64, Gloo on CPU. It knows nothing of det: it starts from the launcher's environment
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as under torchrun.

--model mlp: an MLP 784-128-10, SGD (lr 0.05, momentum 0.9).
--model cnn: the Core API example's CNN (common/worker/python/examples/fashion_mnist_cnn:
  its model.py and data.py, imported from beside this script or from that directory) with
  its default hyperparameters (two convolutions, 128 hidden, dropout 0.25) and optimizer
  (Adam, lr 0.002).

--mode ddp: DistributedDataParallel + DistributedSampler (plain PyTorch).
--mode deterministic: det.pytorch's ElasticSampler + DeterministicDDP with --micro-batch
  (needs the det package on PYTHONPATH).

--probe: rank 0 prints `PROBE <json>`, what every rank got from its launcher (threads,
CPU affinity, nice, scheduler, cgroup, autogroup, its stdio, its parent processes, its
environment), before training.

Rank 0 prints two lines:
  BENCH first_step_unix=<time.time() when every rank is ready to train>
  BENCH steps=<n> samples=<n> seconds=<first step to last step> samples_per_s=<x>
        worker_cpu_s=<CPU seconds (user + system) all ranks used between those moments>
        voluntary_switches=<n> involuntary_switches=<n> (all ranks', the same window)
"""

import argparse
import gc
import gzip
import os
import resource
import struct
import sys
import time

import torch
import torch.distributed as dist


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def example_modules():
    """The CNN example's model and data modules: beside this script (a det context holds
    copies) or in the repository's example directory."""
    here = os.path.dirname(os.path.abspath(__file__))
    example = os.path.join(here, "..", "..", "common", "worker", "python", "examples",
                           "fashion_mnist_cnn")
    for d in (here, example):
        if os.path.exists(os.path.join(d, "model.py")):
            sys.path.insert(0, d)
            break
    import data
    import model
    return data, model


def launch_facts():
    """What this process got from its launcher, as a JSON-ready dict."""
    import stat

    def stdio(fd):
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            return "closed"
        if os.isatty(fd):
            return "tty"
        for kind, test in (("pipe", stat.S_ISFIFO), ("file", stat.S_ISREG),
                           ("socket", stat.S_ISSOCK), ("char", stat.S_ISCHR)):
            if test(mode):
                return kind
        return "other"

    def read(path):
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError as e:
            return f"({e.strerror})"

    parents, pid = [], os.getppid()
    for _ in range(4):
        if pid <= 1:
            break
        stat_line = read(f"/proc/{pid}/stat")
        cmd = read(f"/proc/{pid}/cmdline").replace("\0", " ").strip()
        parents.append(cmd[:120] or stat_line.split(" ")[1])
        try:
            pid = int(stat_line.rsplit(")", 1)[1].split()[1])
        except (IndexError, ValueError):
            break
    status = dict(line.split(":", 1) for line in read("/proc/self/status").splitlines()
                  if ":" in line)
    return {
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "nice": os.nice(0),
        "scheduler": os.sched_getscheduler(0),
        "cgroup": read("/proc/self/cgroup"),
        "autogroup": read("/proc/self/autogroup"),
        "oom_score_adj": read("/proc/self/oom_score_adj"),
        "stdio": [stdio(fd) for fd in (0, 1, 2)],
        "os_threads": int(status.get("Threads", "0")),
        "uid": os.getuid(),
        "session_leader": os.getsid(0) == os.getpid(),
        "parents": parents,
        "environ": dict(os.environ),
    }


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def context_switches():
    """(voluntary, involuntary) context switches of this process so far: a rank preempted
    by other runnable threads (a launcher's, a daemon's) counts involuntary ones."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw, usage.ru_nivcsw


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("ddp", "deterministic"), default="ddp")
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--probe", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    if args.model == "cnn":
        example_data, example_model = example_modules()
        x, y = example_data.load(args.data_dir, "train")
        model = example_model.Net()  # The example's defaults (configs/examples/torch-fashion-mnist.yaml).
    else:
        x = read_idx(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz"))
        x = x.reshape(x.shape[0], -1).to(torch.float32).div_(255.0)
        y = read_idx(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz")).to(torch.int64)
        model = torch.nn.Sequential(torch.nn.Linear(784, args.hidden), torch.nn.ReLU(),
                                    torch.nn.Linear(args.hidden, 10))
    data = torch.utils.data.TensorDataset(x, y)
    per_rank = args.global_batch // world
    if args.mode == "ddp":
        net = torch.nn.parallel.DistributedDataParallel(model)
        sampler = torch.utils.data.DistributedSampler(data, shuffle=True, drop_last=True, seed=0)
    else:
        from det.pytorch import ElasticSampler, deterministic_ddp
        # rng_seed: dropout (the CNN's) draws the same masks at every rank count.
        net = deterministic_ddp(model, args.global_batch, args.micro_batch, rng_seed=0)
        sampler = ElasticSampler(len(data), args.global_batch, seed=0)
        # Build epoch 0's order (pure Python, 0.1-0.3 s once an epoch) before the clock
        # starts: a data-loading cost, not the mode's (DistributedSampler's permutation
        # takes about a millisecond).
        sampler.epoch_order(0)
    loader = torch.utils.data.DataLoader(data, batch_size=per_rank, sampler=sampler,
                                         drop_last=True)
    if args.model == "cnn":
        opt = torch.optim.Adam(model.parameters(), lr=0.002)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.functional.cross_entropy
    if args.probe:
        import json
        facts = [None] * world
        dist.all_gather_object(facts, launch_facts())
        if rank == 0:
            for r, f in enumerate(facts):
                print(f"PROBE {r} " + json.dumps(f), flush=True)
    dist.barrier()
    start = time.time()
    cpu_start = cpu_seconds()
    switches_start = context_switches()
    if rank == 0:
        print(f"BENCH first_step_unix={start:.6f}", flush=True)
    step = 0
    epoch = 0
    while step < args.steps:
        if args.mode == "ddp":
            sampler.set_epoch(epoch)
        for xb, yb in loader:
            if args.mode == "ddp":
                opt.zero_grad()
                loss = loss_fn(net(xb), yb)
                loss.backward()
            else:
                net.backward((xb, yb), lambda a, b: loss_fn(net(a), b), step=step)
            opt.step()
            step += 1
            if step == args.steps:
                break
        epoch += 1
    dist.barrier()
    seconds = time.time() - start
    # How much CPU the ranks got in the window (of seconds x cores): a launcher whose own
    # processes take CPU, or that places its workers worse, shows here.
    switches = context_switches()
    totals = torch.tensor([cpu_seconds() - cpu_start, switches[0] - switches_start[0],
                           switches[1] - switches_start[1]], dtype=torch.float64)
    dist.all_reduce(totals)
    if rank == 0:
        samples = args.steps * args.global_batch
        print(f"BENCH steps={args.steps} samples={samples} seconds={seconds:.3f} "
              f"samples_per_s={samples / seconds:.1f} worker_cpu_s={float(totals[0]):.3f} "
              f"voluntary_switches={int(totals[1])} involuntary_switches={int(totals[2])}",
              flush=True)
    # DDP (its reducer) goes before the group, with no collective in flight: torch 1.13
    # deadlocks at exit when DDP's last reference destroys a Gloo group (holding the GIL)
    # while a Gloo worker still releases a collective's Python-owned tensor (waiting for the
    # GIL). Seen here: 2 of 2 torchrun 2-rank CNN runs hung at exit on 2026-11-26.
    net = opt = loss = None
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
