"""MNIST with the PyTorch Trainer API, in the shape of Determined 0.38's
examples/tutorials/mnist_pytorch/train.py: a PyTorchTrial built with the trial's
hyperparameters, trained by Trainer.fit() on a cluster (`entrypoint: python3 train.py
--epochs 1`) or locally (`python3 train.py --batches 50`, hyperparameters from const.yaml).

Changed for det: the imports (det instead of determined) and the data (data.py); const.yaml
is read with PyYAML (Debian's python3-yaml) instead of ruamel."""

import argparse
import logging
import pathlib
from typing import Any, Dict

import torch
import yaml
from torch import nn

import det
from det import pytorch

import data
import model


class MNistTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext, hparams: Dict[str, Any]) -> None:
        self.context = context
        self.data_dir = pathlib.Path("data")
        # A fixed global batch, split among the slots.
        self.batch_size = 64
        self.per_slot_batch_size = self.batch_size // self.context.distributed.get_size()
        self.loss_fn = nn.NLLLoss()
        self.model = self.context.wrap_model(model.build_model(hparams=hparams))
        self.optimizer = self.context.wrap_optimizer(
            torch.optim.Adadelta(self.model.parameters(), lr=hparams["learning_rate"]))

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(data.get_dataset(self.data_dir, train=True),
                                  batch_size=self.per_slot_batch_size)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(data.get_dataset(self.data_dir, train=False),
                                  batch_size=self.per_slot_batch_size)

    def train_batch(self, batch: pytorch.TorchData, epoch_idx: int,
                    batch_idx: int) -> Dict[str, torch.Tensor]:
        images, labels = batch
        loss = self.loss_fn(self.model(images), labels)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch: pytorch.TorchData, batch_idx: int) -> Dict[str, Any]:
        images, labels = batch
        output = self.model(images)
        predicted = output.argmax(dim=1)
        return {"validation_loss": self.loss_fn(output, labels).item(),
                "accuracy": (predicted == labels).float().mean().item(),
                "batch": self.context.current_train_batch()}


def run(max_length: pytorch.TrainUnit, local: bool = False) -> None:
    info = det.get_cluster_info()
    if local:
        config = yaml.safe_load(pathlib.Path("const.yaml").read_text())
        hparams = config["hyperparameters"]
        latest_checkpoint = None
    else:
        assert info is not None
        hparams = info.trial.hparams
        # Resumes after a pause, a preemption or a restart.
        latest_checkpoint = info.latest_checkpoint
    with pytorch.init() as train_context:
        trial = MNistTrial(train_context, hparams=hparams)
        trainer = pytorch.Trainer(trial, train_context)
        trainer.fit(max_length=max_length, latest_checkpoint=latest_checkpoint)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    parser = argparse.ArgumentParser()
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--batches", type=int)
    group.add_argument("--epochs", type=int)
    args = parser.parse_args()
    if args.batches:
        length: pytorch.TrainUnit = pytorch.Batch(args.batches)
    elif args.epochs:
        length = pytorch.Epoch(args.epochs)
    else:
        length = pytorch.Batch(100)
    run(length, local=det.get_cluster_info() is None)
