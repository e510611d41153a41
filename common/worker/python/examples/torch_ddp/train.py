#!/usr/bin/env python3
"""Plain PyTorch DistributedDataParallel training that knows nothing of det.

It reads the launch contract torchrun gives (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT, ...) through init_process_group's env:// method, so the same file runs under
`torchrun --nproc_per_node=N train.py` and as a det entrypoint (`python3 train.py`, see
configs/examples/torch-ddp.yaml). It picks its device by itself: NCCL on cuda:LOCAL_RANK when
torch sees a CUDA device (cuda:0 when CUDA_VISIBLE_DEVICES shows it one GPU, as det's CUDA
slots do), Gloo on the CPU otherwise (CUDA_VISIBLE_DEVICES empty, as on det's CPU slots, or
no CUDA in torch).

Data: Fashion-MNIST from IDX files (--data-dir, e.g. Debian's dataset-fashion-mnist in
/usr/share/datasets/fashion-mnist), or without --data-dir a small synthetic classification
problem generated from --seed (the same on every rank).

Prints, per rank: its place in the job, its backend and device, then its final loss and a
hash of the final parameters (DDP keeps them identical on every rank, so every rank prints
the same hash).
"""
import argparse
import gc
import gzip
import hashlib
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def read_idx(path):
    """An IDX file (gzipped or not) as a numpy array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def fashion_mnist(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    names = os.listdir(data_dir)

    def find(kind):
        for suffix in ("", ".gz"):
            name = "%s-%s-idx%d-ubyte%s" % (prefix, kind, 3 if kind == "images" else 1, suffix)
            if name in names:
                return os.path.join(data_dir, name)
        raise FileNotFoundError("no %s %s file in %s" % (prefix, kind, data_dir))

    images = read_idx(find("images")).reshape(-1, 784).astype(np.float32) / 255.0
    labels = read_idx(find("labels")).astype(np.int64)
    return TensorDataset(torch.from_numpy(images), torch.from_numpy(labels))


def synthetic(seed, records, features=32, classes=4):
    """Training and test points labelled by one random linear teacher: learnable, and
    identical on every rank."""
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(features, classes, generator=g)

    def points(n):
        x = torch.randn(n, features, generator=g)
        return TensorDataset(x, (x @ teacher).argmax(dim=1))

    return points(records), points(1024)


def params_sha256(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def pick_device():
    """(backend, device): NCCL on a GPU when this process may use one, else Gloo on the CPU.

    A GPU is used when torch has CUDA and CUDA_VISIBLE_DEVICES, if set, names a device (det
    sets it empty on CPU slots and to the rank's GPU on CUDA slots; torchrun leaves it
    alone). The rank takes cuda:LOCAL_RANK among the devices it sees, cuda:0 when it sees one.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return "gloo", torch.device("cpu")
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return "gloo", torch.device("cpu")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    return "nccl", torch.device("cuda", local_rank % torch.cuda.device_count())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="Fashion-MNIST IDX files; default: synthetic data")
    parser.add_argument("--records", type=int, default=4096, help="synthetic training records")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=0, help="stop after this many steps")
    parser.add_argument("--global-batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    start = time.time()
    backend, device = pick_device()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    # env://: MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE come from the launcher.
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    env = os.environ.get
    print("rank %d: world_size=%d local_rank=%s local_world_size=%s group_rank=%s "
          "group_world_size=%s master=%s:%s pid=%d" %
          (rank, world, env("LOCAL_RANK"), env("LOCAL_WORLD_SIZE"), env("GROUP_RANK"),
           env("GROUP_WORLD_SIZE"), env("MASTER_ADDR"), env("MASTER_PORT"), os.getpid()),
          flush=True)
    print("rank %d: backend=%s device=%s" % (rank, backend, device), flush=True)
    if args.global_batch_size % world != 0:
        raise SystemExit("--global-batch-size %d is not divisible by the world size %d" %
                         (args.global_batch_size, world))

    torch.manual_seed(args.seed)
    if args.data_dir:
        train, test = fashion_mnist(args.data_dir, "train"), fashion_mnist(args.data_dir, "test")
    else:
        train, test = synthetic(args.seed, args.records)
    features = train.tensors[0].shape[1]
    classes = int(train.tensors[1].max()) + 1
    model = nn.Sequential(nn.Linear(features, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, classes)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                  else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True,
                                 seed=args.seed, drop_last=True)
    loader = DataLoader(train, batch_size=args.global_batch_size // world, sampler=sampler,
                        drop_last=True)

    step, loss = 0, torch.tensor(float("nan"), device=device)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss = loss_fn(ddp(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            if rank == 0 and step % 100 == 0:
                print("rank 0: epoch %d step %d loss %.4f" % (epoch, step, loss.item()), flush=True)
            if args.max_steps and step >= args.max_steps:
                break
        if args.max_steps and step >= args.max_steps:
            break

    # Accuracy on the test set, each rank a shard, the counts summed.
    model.eval()
    with torch.no_grad():
        shard = range(rank, len(test), world)
        x, y = test.tensors[0][shard].to(device), test.tensors[1][shard].to(device)
        counts = torch.tensor([float((model(x).argmax(dim=1) == y).sum()), float(len(shard))],
                              device=device)
    dist.all_reduce(counts)
    mean_loss = loss.detach().clone()
    dist.all_reduce(mean_loss)
    print("rank %d: steps=%d final_loss=%.6f mean_final_loss=%.6f test_accuracy=%.4f "
          "params_sha256=%s seconds=%.1f" %
          (rank, step, loss.item(), mean_loss.item() / world, counts[0] / counts[1],
           params_sha256(model), time.time() - start), flush=True)
    # DDP (its reducer) goes before the process group, with no collective in flight: torch
    # 1.13 can deadlock at exit when DDP's last reference destroys a Gloo group while a Gloo
    # worker thread still releases a collective's tensors.
    ddp = optimizer = None
    gc.collect()
    # NCCL's barrier is told its device: torch 2.x warns when it has to guess it.
    if backend == "nccl":
        dist.barrier(device_ids=[device.index])
    else:
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
