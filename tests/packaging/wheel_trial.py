"""A Trainer-API script in the shape of Determined's (det.pytorch.init() and
Trainer(trial, context).fit(...)), for //tests/packaging:wheel_test: run with the det wheel
installed in a venv and no DET_MASTER, it trains a linear model on random tensors in local
mode (12 batches of 8, validation and checkpoint every 6) and prints, as its last line, one
JSON object with what the test checks. Checkpoints go to $TMPDIR/det-checkpoints."""

import json
import sys

import torch

import det
from det import pytorch


class RandomRegression(torch.utils.data.Dataset):
    """`n` records x ~ N(0, 1)^4, y = x . w + 0.5, the same for a given seed."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 4, generator=g)
        self.y = self.x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.5

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


class TinyTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        self.model = context.wrap_model(torch.nn.Linear(4, 1))
        self.optimizer = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=context.get_hparam("lr")))

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(RandomRegression(64, seed=0),
                                  batch_size=self.context.get_per_slot_batch_size())

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(RandomRegression(16, seed=1), batch_size=8)

    def train_batch(self, batch, epoch_idx: int, batch_idx: int):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch, batch_idx: int):
        x, y = batch
        return {"validation_loss": torch.nn.functional.mse_loss(self.model(x), y)}


def main() -> int:
    torch.manual_seed(0)
    with pytorch.init(hparams={"global_batch_size": 8, "lr": 0.05}) as context:
        trial = TinyTrial(context)
        trainer = pytorch.Trainer(trial, context)
        trainer.fit(max_length=pytorch.Batch(12), validation_period=pytorch.Batch(6),
                    checkpoint_period=pytorch.Batch(6))
        print(json.dumps({
            "cluster_info": det.get_cluster_info() is not None,
            "world_size": context.distributed.get_size(),
            "det": det.__file__,
            "det.pytorch": pytorch.__file__,
        }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
