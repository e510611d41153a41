"""A plain PyTorch DDP training script for gpu_bench.py: the same file under det and under
torchrun. It knows nothing of det: it starts from the launcher's environment (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), as under torchrun.

Device: NCCL on cuda:LOCAL_RANK when torch sees a CUDA device (cuda:0 when
CUDA_VISIBLE_DEVICES shows one GPU, as on det's CUDA slots), else Gloo on the CPU (as
common/worker/python/examples/torch_ddp/train.py picks it).

Model: --model cnn (default), the Core API example's CNN shape (conv 32, conv 64, both
strided, 128 hidden, dropout 0.25, Adam lr 0.002), or --model mlp (784-128-10, SGD); global
batch 64 split over the ranks. Fashion-MNIST from --data-dir, held on the device; each epoch
a seeded permutation split over the ranks (DistributedSampler's contract, without the
DataLoader's per-sample Python cost that would make CPU noise the measurement).

Rank 0 prints the lines of tests/bench/torch_ddp_train.py (torch_ddp_bench.py's parser reads
them too), plus the device:
  BENCH device=<cuda:0|cpu> backend=<nccl|gloo> torch=<version>
  BENCH first_step_unix=<time.time() when every rank is ready to train, before the warm-up>
  BENCH steps=<n> samples=<n> seconds=<after the warm-up, first to last step, synchronized>
        samples_per_s=<x> worker_cpu_s=<x> voluntary_switches=<n> involuntary_switches=<n>
"""

import argparse
import gc
import gzip
import os
import resource
import struct
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def pick_device():
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return "gloo", torch.device("cpu")
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return "gloo", torch.device("cpu")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    return "nccl", torch.device("cuda", local_rank % torch.cuda.device_count())


class Cnn(nn.Module):
    def __init__(self, filters1=32, filters2=64, hidden=128, dropout=0.25):
        super().__init__()
        self.conv1 = nn.Conv2d(1, filters1, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(filters1, filters2, 3, stride=2, padding=1)
        self.fc1 = nn.Linear(filters2 * 7 * 7, hidden)
        self.fc2 = nn.Linear(hidden, 10)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = self.dropout(torch.flatten(x, 1))
        return self.fc2(self.dropout(F.relu(self.fc1(x))))


def usage():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime, u.ru_nvcsw, u.ru_nivcsw


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=("cnn", "mlp"), default="cnn")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    backend, device = pick_device()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x = read_idx(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz"))
    x = x.to(torch.float32).div_(255.0)
    y = read_idx(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz")).to(torch.int64)
    if args.model == "cnn":
        x = x.reshape(-1, 1, 28, 28)
        model = Cnn()
    else:
        x = x.reshape(x.shape[0], -1)
        model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    x, y = x.to(device), y.to(device)
    model = model.to(device)
    net = nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None)
    if args.model == "cnn":
        opt = torch.optim.Adam(model.parameters(), lr=0.002)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    per_rank = args.global_batch // world
    steps_per_epoch = len(y) // args.global_batch
    gen = torch.Generator().manual_seed(0)

    def batches():
        epoch = 0
        while True:
            order = torch.randperm(len(y), generator=gen)[:steps_per_epoch * args.global_batch]
            order = order[rank::world].to(device)
            for i in range(steps_per_epoch):
                yield order[i * per_rank:(i + 1) * per_rank]
            epoch += 1

    def step(idx):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x[idx]), y[idx])
        loss.backward()
        opt.step()
        return loss

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    it = batches()
    dist.barrier()
    ready = time.time()
    if rank == 0:
        print(f"BENCH device={device} backend={backend} torch={torch.__version__}", flush=True)
        print(f"BENCH first_step_unix={ready:.6f}", flush=True)
    for _ in range(args.warmup):
        step(next(it))
    sync()
    dist.barrier()
    start = time.time()
    cpu0 = usage()
    for _ in range(args.steps):
        loss = step(next(it))
    sync()
    dist.barrier()
    seconds = time.time() - start
    cpu1 = usage()
    totals = torch.tensor([cpu1[i] - cpu0[i] for i in range(3)], dtype=torch.float64,
                          device=device)
    dist.all_reduce(totals)
    if rank == 0:
        samples = args.steps * args.global_batch
        print(f"BENCH steps={args.steps} samples={samples} seconds={seconds:.3f} "
              f"samples_per_s={samples / seconds:.1f} worker_cpu_s={float(totals[0]):.3f} "
              f"voluntary_switches={int(totals[1])} involuntary_switches={int(totals[2])} "
              f"final_loss={loss.item():.4f}", flush=True)
    net = opt = None
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
