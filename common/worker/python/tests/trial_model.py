"""A tiny PyTorchTrial for trial_test: linear regression on a data set whose records carry
their own index, so the test sees exactly which records each batch held. Every batch, rank
and validation is appended as a JSON line to the file named by hparam "log"."""

import json
import os
import signal

import torch

from det import pytorch

N_RECORDS = 64


class IndexedData(torch.utils.data.Dataset):
    def __init__(self, n: int = N_RECORDS) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 2, generator=g)
        self.y = self.x @ torch.tensor([[2.0], [-1.0]]) + 0.5

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i], i


class TinyTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        torch.manual_seed(1)
        self.model = context.wrap_model(torch.nn.Linear(2, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(),
                                                          lr=context.get_hparam("lr")))
        mode = context.get_hparams().get("lr_mode")
        if mode:
            self.sched = context.wrap_lr_scheduler(
                torch.optim.lr_scheduler.StepLR(self.opt, step_size=1, gamma=0.5),
                step_mode=pytorch.LRScheduler.StepMode[mode],
                frequency=context.get_hparams().get("lr_frequency", 1))
        self.log_path = context.get_hparam("log")
        self.rank = context.distributed.get_rank()
        self._log(kind="init", initial_batch=context.get_initial_batch())

    def _log(self, **record) -> None:
        with open(self.log_path, "a") as f:
            f.write(json.dumps(dict(record, rank=self.rank)) + "\n")

    def build_training_data_loader(self):
        self._log(kind="loader", initial_batch=self.context.get_initial_batch())
        return pytorch.DataLoader(IndexedData(), batch_size=self.context.get_per_slot_batch_size(),
                                  shuffle=self.context.get_hparams().get("shuffle", True))

    def build_validation_data_loader(self):
        return pytorch.DataLoader(IndexedData(16), batch_size=4)

    def train_batch(self, batch, epoch_idx, batch_idx):
        x, y, ids = batch
        hp = self.context.get_hparams()
        if hp.get("invalid_at") == batch_idx:
            raise pytorch.InvalidHP(f"bad hparams at batch {batch_idx}")
        if hp.get("sigterm_at") == batch_idx and hp.get("sigterm_rank", 0) == self.rank:
            os.kill(os.getpid(), signal.SIGTERM)
        if hp.get("stop_at") == batch_idx:
            self.context.set_stop_requested(True)
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        self._log(kind="train", batch_idx=batch_idx, epoch_idx=epoch_idx, ids=ids.tolist(),
                  lr=self.opt.param_groups[0]["lr"])
        return {"loss": loss, "rank_metric": torch.tensor(float(self.rank)),
                "batch_idx_metric": batch_idx}

    def evaluate_batch(self, batch, batch_idx):
        x, y, ids = batch
        self._log(kind="eval", batch_idx=batch_idx, ids=ids.tolist())
        return {"validation_loss": torch.nn.functional.mse_loss(self.model(x), y),
                "first_id": float(ids[0])}


class OldEvaluateTrial(TinyTrial):
    """evaluate_batch(self, batch): the form of Determined's older examples."""

    def evaluate_batch(self, batch):
        x, y, ids = batch
        self._log(kind="eval_old", ids=ids.tolist())
        return {"validation_loss": torch.nn.functional.mse_loss(self.model(x), y)}


class FullDatasetTrial(TinyTrial):
    evaluate_batch = pytorch.PyTorchTrial.evaluate_batch

    def evaluate_full_dataset(self, data_loader):
        n = sum(len(b[0]) for b in data_loader)
        # "batches" of its own: the Trainer must not replace it.
        return {"validation_loss": 1.0, "records": n, "batches": 99}


class AmpTrial(TinyTrial):
    """experimental.use_amp() before wrap_model, as Determined's AMP examples do."""

    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        context.experimental.use_amp()
        super().__init__(context)


class DeterministicTrial(TinyTrial):
    """For deterministic mode (reproducibility.deterministic): an MLP with dropout (so the
    micro-batches' random draws matter), SGD with momentum; every micro-batch is logged."""

    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        torch.manual_seed(1)
        self.model = context.wrap_model(torch.nn.Sequential(
            torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2),
            torch.nn.Linear(16, 1)))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.05,
                                                          momentum=0.9))
        self.log_path = context.get_hparam("log")
        self.rank = context.distributed.get_rank()
        self._log(kind="init", initial_batch=context.get_initial_batch())
