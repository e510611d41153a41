"""MNIST as a PyTorchTrial launched by Determined's older entrypoint form
(`entrypoint: model_def:MNistTrial`, const-legacy.yaml), in the shape of the example before
0.38: the trial takes the context alone and reads its hyperparameters, per-slot batch size
and data config from it, and evaluate_batch takes the batch alone (the old signature).

Changed for det: the imports and the data (data.py)."""

from typing import Any, Dict, Sequence, Tuple, Union, cast

import torch
from torch import nn

from det import pytorch

import data
import model

TorchData = Union[Dict[str, torch.Tensor], Sequence[torch.Tensor], torch.Tensor]


class MNistTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        # One directory per rank, as the original's downloads did.
        self.download_directory = f"/tmp/data-rank{self.context.distributed.get_rank()}"
        self.data_downloaded = False
        hparams = {name: self.context.get_hparam(name)
                   for name in ("n_filters1", "n_filters2", "dropout1", "dropout2")}
        self.model = self.context.wrap_model(model.build_model(hparams))
        self.optimizer = self.context.wrap_optimizer(torch.optim.Adadelta(
            self.model.parameters(), lr=self.context.get_hparam("learning_rate")))

    def _data_dir(self) -> str:
        if not self.data_downloaded:
            self.download_directory = data.download_dataset(
                download_directory=self.download_directory,
                data_config=self.context.get_data_config())
            self.data_downloaded = True
        return self.download_directory

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(data.get_dataset(self._data_dir(), train=True),
                                  batch_size=self.context.get_per_slot_batch_size())

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(data.get_dataset(self._data_dir(), train=False),
                                  batch_size=self.context.get_per_slot_batch_size())

    def train_batch(self, batch: TorchData, epoch_idx: int,
                    batch_idx: int) -> Dict[str, torch.Tensor]:
        images, labels = cast(Tuple[torch.Tensor, torch.Tensor], batch)
        loss = nn.functional.nll_loss(self.model(images), labels)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch: TorchData) -> Dict[str, Any]:
        images, labels = cast(Tuple[torch.Tensor, torch.Tensor], batch)
        output = self.model(images)
        predicted = output.argmax(dim=1, keepdim=True)
        return {"validation_loss": nn.functional.nll_loss(output, labels).item(),
                "accuracy": predicted.eq(labels.view_as(predicted)).sum().item() / len(images)}
