"""One rank of deterministic_test's training: an MLP with dropout on synthetic data, fed by
ElasticSampler and trained by DeterministicDDP over Gloo.

Usage: ddp_test_worker.py --store FILE --out FILE --steps N [--stop-after K --save CKPT]
       [--resume CKPT]; RANK and WORLD_SIZE come from the environment (as under torchrun).
Rank 0 writes --out: {"first_step", "losses" (float.hex of each step's global loss),
"params" (sha256 of the final parameters' bytes)}.
"""

import argparse
import hashlib
import json
import os

import torch
import torch.distributed as dist

from det.pytorch import ElasticSampler, deterministic_ddp

SAMPLES, FEATURES, CLASSES = 1024, 32, 10
GLOBAL_BATCH, MICRO_BATCH = 32, 4


def synthetic_data():
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, CLASSES, generator=g)
    y = (x @ w + 0.5 * torch.randn(SAMPLES, CLASSES, generator=g)).argmax(dim=1)
    return torch.utils.data.TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--stop-after", type=int)
    parser.add_argument("--save")
    parser.add_argument("--resume")
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method=f"file://{args.store}", rank=rank,
                            world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(),
                                torch.nn.Dropout(0.1), torch.nn.Linear(64, CLASSES))
    ddp = deterministic_ddp(model, GLOBAL_BATCH, MICRO_BATCH, rng_seed=99)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sampler = ElasticSampler(SAMPLES, GLOBAL_BATCH, seed=7, num_canonical_nodes=2)
    step = 0
    if args.resume:
        ckpt = torch.load(args.resume)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        sampler.load_state_dict(ckpt["sampler"])
        step = ckpt["step"]
    first_step = step
    loader = torch.utils.data.DataLoader(synthetic_data(), batch_size=sampler.per_rank_batch,
                                         sampler=sampler)
    end = args.stop_after if args.stop_after is not None else args.steps
    losses = []
    model.train()
    while step < end:
        for x, y in loader:
            loss = ddp.backward((x, y), lambda a, b: torch.nn.functional.cross_entropy(ddp(a), b),
                                step=step)
            opt.step()
            losses.append(float.hex(loss))
            step += 1
            if step == end:
                break
    if args.save and rank == 0:
        tmp = args.save + ".tmp"
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                    "sampler": sampler.state_dict(), "step": step}, tmp)
        os.replace(tmp, args.save)
    if rank == 0:
        h = hashlib.sha256()
        for p in model.parameters():
            h.update(p.detach().numpy().tobytes())
        with open(args.out, "w") as f:
            json.dump({"first_step": first_step, "losses": losses, "params": h.hexdigest()}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
