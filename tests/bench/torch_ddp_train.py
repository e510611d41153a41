"""A plain PyTorch DDP training script for torch_ddp_bench.py: the example's MLP
(784-128-10) on Fashion-MNIST, global batch 64, SGD (lr 0.05, momentum 0.9), Gloo on CPU.
It knows nothing of det: it starts from the launcher's environment (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), as under torchrun.

--mode ddp: DistributedDataParallel + DistributedSampler (plain PyTorch).
--mode deterministic: det.pytorch's ElasticSampler + DeterministicDDP with --micro-batch
  (needs the det package on PYTHONPATH).

Rank 0 prints two lines:
  BENCH first_step_unix=<time.time() when every rank is ready to train>
  BENCH steps=<n> samples=<n> seconds=<first step to last step> samples_per_s=<x>
        worker_cpu_s=<CPU seconds (user + system) all ranks used between those moments>
"""

import argparse
import gzip
import os
import resource
import struct
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


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("ddp", "deterministic"), default="ddp")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x = read_idx(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz"))
    x = x.reshape(x.shape[0], -1).to(torch.float32).div_(255.0)
    y = read_idx(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz")).to(torch.int64)
    data = torch.utils.data.TensorDataset(x, y)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, 10))
    per_rank = args.global_batch // world
    if args.mode == "ddp":
        net = torch.nn.parallel.DistributedDataParallel(model)
        sampler = torch.utils.data.DistributedSampler(data, shuffle=True, drop_last=True, seed=0)
    else:
        from det.pytorch import ElasticSampler, deterministic_ddp
        net = deterministic_ddp(model, args.global_batch, args.micro_batch)
        sampler = ElasticSampler(len(data), args.global_batch, seed=0)
        # Build epoch 0's order (pure Python, 0.1-0.3 s once an epoch) before the clock
        # starts: a data-loading cost, not the mode's (DistributedSampler's permutation
        # takes about a millisecond).
        sampler.epoch_order(0)
    loader = torch.utils.data.DataLoader(data, batch_size=per_rank, sampler=sampler,
                                         drop_last=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.functional.cross_entropy
    dist.barrier()
    start = time.time()
    cpu_start = cpu_seconds()
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
                net.backward((xb, yb), lambda a, b: loss_fn(net(a), b))
            opt.step()
            step += 1
            if step == args.steps:
                break
        epoch += 1
    dist.barrier()
    seconds = time.time() - start
    # How much CPU the ranks got in the window (of seconds x cores): a launcher whose own
    # processes take CPU, or that places its workers worse, shows here.
    cpu = torch.tensor([cpu_seconds() - cpu_start], dtype=torch.float64)
    dist.all_reduce(cpu)
    if rank == 0:
        samples = args.steps * args.global_batch
        print(f"BENCH steps={args.steps} samples={samples} seconds={seconds:.3f} "
              f"samples_per_s={samples / seconds:.1f} worker_cpu_s={float(cpu):.3f}",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
