"""deterministic_test's training script: det.pytorch's DeterministicDDP under det's Core API.

A small MLP with dropout on synthetic data, fed by ElasticSampler (fixed canonical nodes)
and trained by DeterministicDDP over Gloo on however many slots the trial has; it trains the
searcher's length, checkpoints when asked to stop (pause) and resumes from the latest
checkpoint. Rank 0 prints each step's global loss as `step K loss <float.hex>` and, at the
end, `params sha256 <hex>` of the final parameters' bytes: the test compares them across
slot counts and across a resize.

Hyperparameter `wait_after` (0: none): after training that step (not when resuming at it),
the workers wait there until should_preempt() says stop, so that a test pauses the trial at
a known step rather than racing it.
"""

import hashlib
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import det
from det.pytorch import ElasticSampler, deterministic_ddp

SAMPLES, FEATURES, CLASSES = 512, 16, 10
GLOBAL_BATCH, MICRO_BATCH = 32, 4


def synthetic_data():
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, CLASSES, generator=g)
    y = (x @ w + 0.5 * torch.randn(SAMPLES, CLASSES, generator=g)).argmax(dim=1)
    return x, y


def main():
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    distributed = det.core.DistributedContext.from_torch_distributed() if world > 1 else None
    info = det.get_cluster_info()
    wait_after = int((info.trial.hparams if info else {}).get("wait_after", 0))
    with det.core.init(distributed=distributed, searcher_length=8) as core:
        rank = core.distributed.rank
        print(f"rank {rank} of {core.distributed.size}", flush=True)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(),
                                    torch.nn.Dropout(0.1), torch.nn.Linear(32, CLASSES))
        ddp = deterministic_ddp(model, GLOBAL_BATCH, MICRO_BATCH, rng_seed=99)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        sampler = ElasticSampler(SAMPLES, GLOBAL_BATCH, seed=7, num_canonical_nodes=2)
        x_all, y_all = synthetic_data()
        step = 0
        if info and info.latest_checkpoint:
            with core.checkpoint.restore_path(info.latest_checkpoint) as path:
                state = torch.load(os.path.join(path, "state.pt"))
                model.load_state_dict(state["model"])
                opt.load_state_dict(state["optimizer"])
                sampler.load_state_dict(state["sampler"])
                step = state["step"]
            print(f"resumed from checkpoint {info.latest_checkpoint} at batch {step}", flush=True)

        def save():
            if rank == 0:
                with core.checkpoint.store_path({"steps_completed": step}) as (path, _):
                    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                                "sampler": sampler.state_dict(), "step": step},
                               os.path.join(path, "state.pt"))

        indices = iter(sampler)

        def next_batch():
            nonlocal indices
            idx = []
            while len(idx) < sampler.per_rank_batch:
                try:
                    idx.append(next(indices))
                except StopIteration:  # End of an epoch: the sampler stands at the next.
                    indices = iter(sampler)
            idx = torch.tensor(idx)
            return x_all[idx], y_all[idx]

        model.train()
        loss = float("nan")
        for op in core.searcher.operations():
            total = info.trial.to_batches(op.length) if info else op.length
            while step < total:
                x, y = next_batch()
                loss = ddp.backward((x, y), lambda a, b: F.cross_entropy(ddp(a), b), step=step)
                opt.step()
                step += 1
                if rank == 0:
                    print(f"step {step} loss {float.hex(loss)}", flush=True)
                    core.train.report_training_metrics(steps_completed=step,
                                                       metrics={"loss": loss})
                if step == wait_after:
                    print(f"waiting for preemption at batch {step}", flush=True)
                    while not core.preempt.should_preempt():
                        time.sleep(0.05)  # A collective per call: poll gently.
                if core.preempt.should_preempt():
                    print(f"asked to stop ({core.preempt.reason}) at batch {step}", flush=True)
                    save()
                    return
            save()
            if rank == 0:
                op.report_completed(loss)
        if rank == 0:
            h = hashlib.sha256()
            for p in model.parameters():
                h.update(p.detach().numpy().tobytes())
            print(f"params sha256 {h.hexdigest()}", flush=True)
    if world > 1:
        # No collective in flight when the group goes (torch 1.13 can deadlock at exit
        # otherwise: see examples/fashion_mnist_cnn/train.py).
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
