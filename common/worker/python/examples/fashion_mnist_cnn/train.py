"""A Core API PyTorch training script: a CNN on Fashion-MNIST under det.

Run by det (entrypoint `python3 train.py`, or
`python3 -m det.launch.torch_distributed python3 train.py`) on any number of slots: one
process per slot, DDP over Gloo (NCCL on GPUs), det's elastic sampler so that every rank
count dividing the global batch sees the same global batches; reports training and
validation metrics and timings, checkpoints after each validation and when asked to stop
(pause, preemption, searcher), resumes from the latest checkpoint, and trains for the length
the searcher asks. Off-cluster (`python3 train.py`), it trains one process and prints what
it would report."""

import gc
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import det
from det.pytorch import ElasticSampler

import data
import model

DEFAULTS = {"global_batch_size": 64, "learning_rate": 0.002, "filters1": 32, "filters2": 64,
            "hidden": 128, "dropout": 0.25}
OFF_CLUSTER_EPOCHS = 1
REPORT_EVERY = 100  # batches between training-metric reports


class Trainer:
    def __init__(self, core: det.core.Context, hparams: dict, seed: int, data_dir: str) -> None:
        self.core = core
        self.dist = core.distributed
        self.info = det.get_cluster_info()
        self.device = torch.device("cuda", self.dist.local_rank) \
            if os.environ.get("DET_SLOT_TYPE") == "cuda" and torch.cuda.is_available() \
            else torch.device("cpu")
        self.global_batch = int(hparams["global_batch_size"])
        if self.global_batch % self.dist.size:
            raise ValueError(f"hyperparameters.global_batch_size {self.global_batch} is not a "
                             f"multiple of the {self.dist.size} ranks")
        self.lr = float(hparams["learning_rate"])
        torch.manual_seed(seed)
        self.train_x, self.train_y = data.load(data_dir, "train")
        self.test_x, self.test_y = data.load(data_dir, "t10k")
        net = model.Net(int(hparams["filters1"]), int(hparams["filters2"]), int(hparams["hidden"]),
                        float(hparams["dropout"])).to(self.device)
        self.net = net
        self.ddp = torch.nn.parallel.DistributedDataParallel(net) if self.dist.size > 1 else net
        self.opt = torch.optim.Adam(net.parameters(), lr=self.lr)
        self.sampler = ElasticSampler(len(self.train_y), self.global_batch, seed=seed,
                                      rank=self.dist.rank, world_size=self.dist.size)
        self.indices = iter(self.sampler)
        self.steps = 0
        self.saved_at = -1
        self.last_validation = None
        self.batches_per_epoch = len(self.train_y) // self.global_batch

    # -- data --------------------------------------------------------------------------

    def next_batch(self):
        per_rank = self.sampler.per_rank_batch
        idx = []
        while len(idx) < per_rank:
            try:
                idx.append(next(self.indices))
            except StopIteration:  # End of the epoch: the sampler stands at the next one.
                self.indices = iter(self.sampler)
        idx = torch.tensor(idx)
        return self.train_x[idx], self.train_y[idx]

    # -- checkpoints -------------------------------------------------------------------

    def save(self) -> None:
        if self.dist.rank != 0 or self.saved_at == self.steps:
            return
        self.saved_at = self.steps
        meta = {"steps_completed": self.steps, "epoch": self.sampler.epoch}
        with self.core.checkpoint.store_path(meta) as (path, storage_id):
            torch.save({"model": self.net.state_dict(), "optimizer": self.opt.state_dict(),
                        "rng": torch.get_rng_state()}, os.path.join(path, "state.pt"))
            with open(os.path.join(path, "sampler.json"), "w") as f:
                json.dump(self.sampler.state_dict(), f)
        print(f"checkpoint {storage_id} at batch {self.steps}", flush=True)

    def restore(self, storage_id: str) -> None:
        with self.core.checkpoint.restore_path(storage_id) as path:
            # Onto the CPU first: the RNG state must stay a CPU ByteTensor (map_location=cuda
            # would move it and set_rng_state refuses it); load_state_dict copies the model's
            # and the optimizer's tensors onto their parameters' device.
            state = torch.load(os.path.join(path, "state.pt"), map_location="cpu")
            self.net.load_state_dict(state["model"])
            self.opt.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["rng"])
            with open(os.path.join(path, "sampler.json")) as f:
                self.sampler.load_state_dict(json.load(f))
            self.indices = iter(self.sampler)
            self.steps = self.core.checkpoint.get_metadata(storage_id)["steps_completed"]
            self.saved_at = self.steps
        print(f"resumed from checkpoint {storage_id} at batch {self.steps}", flush=True)

    # -- training ----------------------------------------------------------------------

    def reduce(self, values: torch.Tensor) -> torch.Tensor:
        if self.dist.size > 1:
            dist.all_reduce(values)
        return values

    def validate(self) -> dict:
        self.net.eval()
        n = len(self.test_y)
        lo, hi = n * self.dist.rank // self.dist.size, n * (self.dist.rank + 1) // self.dist.size
        with torch.no_grad():
            x, y = self.test_x[lo:hi].to(self.device), self.test_y[lo:hi].to(self.device)
            out = self.net(x)
            sums = torch.tensor([F.cross_entropy(out, y, reduction="sum").item(),
                                 (out.argmax(1) == y).sum().item(), float(hi - lo)],
                                dtype=torch.float64)
        self.net.train()
        sums = self.reduce(sums)
        return {"validation_loss": (sums[0] / sums[2]).item(),
                "accuracy": (sums[1] / sums[2]).item()}

    def train(self, total_batches: int, validation_period: int) -> bool:
        """Trains up to batch `total_batches`; False when asked to stop first."""
        train = self.core.train
        loss_sum, group = torch.zeros(1, dtype=torch.float64), 0
        self.ddp.train()
        while self.steps < total_batches:
            with train.timer("dataloader_next"):
                x, y = self.next_batch()
            with train.timer("to_device"):
                x, y = x.to(self.device), y.to(self.device)
            with train.timer("train_batch"):
                lr = self.lr * (1 - self.steps / max(1, total_batches))
                for g in self.opt.param_groups:
                    g["lr"] = lr
                loss = F.cross_entropy(self.ddp(x), y)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
            with train.timer("from_device"):
                loss_sum += loss.item()
            group += 1
            self.steps += 1
            if self.steps % REPORT_EVERY == 0 or self.steps == total_batches:
                with train.timer("reduce_metrics"):
                    mean = (self.reduce(loss_sum.clone()) / (group * self.dist.size)).item()
                if self.dist.rank == 0:
                    train.report_training_metrics(steps_completed=self.steps,
                                                  metrics={"loss": mean, "lr": lr})
                    print(f"batch {self.steps}/{total_batches}  loss {mean:.4f}", flush=True)
                loss_sum.zero_()
                group = 0
            if self.steps % validation_period == 0 or self.steps == total_batches:
                metrics = self.validate()
                if self.dist.rank == 0:
                    train.report_validation_metrics(steps_completed=self.steps, metrics=metrics)
                    print(f"validation at batch {self.steps}: loss "
                          f"{metrics['validation_loss']:.4f}  accuracy {metrics['accuracy']:.4f}",
                          flush=True)
                self.last_validation = metrics
                self.save()
            if self.core.preempt.should_preempt():
                print(f"asked to stop ({self.core.preempt.reason}) at batch {self.steps}",
                      flush=True)
                self.save()
                return False
        return True


def main() -> None:
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("nccl" if os.environ.get("DET_SLOT_TYPE") == "cuda" else "gloo")
    distributed = det.core.DistributedContext.from_torch_distributed() if world > 1 else None
    info = det.get_cluster_info()
    hparams = dict(DEFAULTS, **(info.trial.hparams if info else {}))
    seed = info.trial.trial_seed if info else 0
    data_dir = info.user_data.get("dir", data.DEFAULT_DIR) if info else data.DEFAULT_DIR
    off_length = OFF_CLUSTER_EPOCHS * (60000 // hparams["global_batch_size"])
    run(info, distributed, hparams, seed, data_dir, off_length)
    gc.collect()  # The model and its DDP reducer, should a reference cycle hold them.
    if world > 1:
        # Tear the process group down only here, after the model (DDP) is gone and with no
        # collective in flight: torch 1.13 can deadlock at exit when DDP's last reference
        # destroys a Gloo process group (holding the GIL) while a Gloo worker thread still
        # releases the previous collective's tensors (holding the group's lock, waiting for
        # the GIL). The barrier lets the workers finish; destroy_process_group() then drops
        # the last reference. (Seen here: 1 run in 2 of core_api_test's killed-rank case hung
        # a rank at exit.) NCCL's barrier is told its device: torch 2.x warns when it guesses.
        if dist.get_backend() == "nccl":
            dist.barrier(device_ids=[torch.cuda.current_device()])
        else:
            dist.barrier()
        dist.destroy_process_group()


def run(info, distributed, hparams, seed, data_dir, off_length) -> None:
    """Trains until the searcher's operation is done or det asks to stop."""
    with det.core.init(distributed=distributed, searcher_length=off_length) as core:
        d = core.distributed
        print(f"rank {d.rank} of {d.size} (local rank {d.local_rank}, pid {os.getpid()}), "
              f"trial seed {seed}", flush=True)
        trainer = Trainer(core, hparams, seed, data_dir)
        if info and info.latest_checkpoint:
            trainer.restore(info.latest_checkpoint)
        validation_period = (info.trial.validation_period if info else 0) or \
            trainer.batches_per_epoch
        for op in core.searcher.operations():
            total = info.trial.to_batches(op.length) if info else op.length
            if not trainer.train(total, validation_period):
                return  # Stopped at a step boundary, checkpointed: det resumes it later.
            if trainer.last_validation is None:  # Resumed from a checkpoint at the end.
                trainer.last_validation = trainer.validate()
            if core.distributed.rank == 0:
                op.report_completed(trainer.last_validation["validation_loss"])

if __name__ == "__main__":
    main()
