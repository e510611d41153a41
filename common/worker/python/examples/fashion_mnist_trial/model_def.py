"""A PyTorchTrial: a small CNN on Fashion-MNIST, in the shape of Determined's mnist_pytorch
tutorial (model_def.py), for det.

The model, optimizer and LR scheduler are wrapped in __init__; train_batch and
evaluate_batch are the forward passes; det's training loop does the rest (data sharding by
rank, metric reduction, validations, checkpoints, pause and resume, the searcher's length).

Run it with `entrypoint: model_def:FashionTrial` (configs/examples/trial-const.yaml), or
from a script with the Trainer API (train.py)."""

from typing import Any, Dict

import torch
from torch import nn

from det import pytorch

import data


def build_model(n_filters1: int, n_filters2: int, hidden: int, dropout: float) -> nn.Module:
    """Two strided convolutions (28 -> 14 -> 7) and two fully connected layers. (Strided
    convolutions instead of max pooling: several times faster on CPUs.)"""
    return nn.Sequential(
        nn.Conv2d(1, n_filters1, 5, stride=2, padding=2), nn.ReLU(),
        nn.Conv2d(n_filters1, n_filters2, 3, stride=2, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Dropout(dropout),
        nn.Linear(n_filters2 * 7 * 7, hidden), nn.ReLU(), nn.Dropout(dropout),
        nn.Linear(hidden, 10))


class FashionTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        self.data_dir = context.get_data_config().get("dir", data.DEFAULT_DIR)

        self.model = context.wrap_model(build_model(
            n_filters1=context.get_hparam("n_filters1"),
            n_filters2=context.get_hparam("n_filters2"),
            hidden=context.get_hparam("hidden"),
            dropout=context.get_hparam("dropout")))
        self.optimizer = context.wrap_optimizer(
            torch.optim.Adam(self.model.parameters(), lr=context.get_hparam("learning_rate")))
        # The learning rate decays once per epoch; its state is checkpointed with the trial.
        self.lr_scheduler = context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1,
                                            gamma=context.get_hparam("lr_decay")),
            step_mode=pytorch.LRScheduler.StepMode.STEP_EVERY_EPOCH)
        self.loss_fn = nn.CrossEntropyLoss()

    def build_training_data_loader(self) -> pytorch.DataLoader:
        train_data = data.get_dataset(self.data_dir, train=True)
        return pytorch.DataLoader(train_data, batch_size=self.context.get_per_slot_batch_size(),
                                  shuffle=True)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        validation_data = data.get_dataset(self.data_dir, train=False)
        return pytorch.DataLoader(validation_data,
                                  batch_size=self.context.get_per_slot_batch_size())

    def train_batch(self, batch: pytorch.TorchData, epoch_idx: int,
                    batch_idx: int) -> Dict[str, torch.Tensor]:
        images, labels = batch
        loss = self.loss_fn(self.model(images), labels)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss, "lr": self.lr_scheduler.get_last_lr()[0]}

    def evaluate_batch(self, batch: pytorch.TorchData, batch_idx: int) -> Dict[str, Any]:
        images, labels = batch
        output = self.model(images)
        return {"validation_loss": self.loss_fn(output, labels).item(),
                "accuracy": (output.argmax(dim=1) == labels).float().mean().item()}
