"""A CNN on CIFAR-10 as a PyTorchTrial, in the shape of determined-examples'
computer_vision/cifar10_pytorch/model_def.py (after Keras's cifar10_cnn example): launched
by `entrypoint: model_def:CIFARTrial`, trained for max_length in epochs of
records_per_epoch, with the old evaluate_batch(batch) signature.

Changed for det: the import line and the data (data.py instead of torchvision's download)."""

from typing import Any, Dict, Sequence, Tuple, Union, cast

import torch
from torch import nn

from det.pytorch import DataLoader, PyTorchTrial, PyTorchTrialContext

import data

IMAGE_SIZE = 32
NUM_CHANNELS = 3
NUM_CLASSES = 10

TorchData = Union[Dict[str, torch.Tensor], Sequence[torch.Tensor], torch.Tensor]


def accuracy_rate(predictions: torch.Tensor, labels: torch.Tensor) -> float:
    """The share of records whose highest-scored class is their label."""
    if len(predictions) != len(labels) or labels.dim() != 1:
        raise ValueError("accuracy_rate: one label per prediction, labels a column vector")
    return float((predictions.argmax(1) == labels.long()).sum()) / predictions.shape[0]


class Flatten(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous().view(x.size(0), -1)


class CIFARTrial(PyTorchTrial):
    def __init__(self, context: PyTorchTrialContext) -> None:
        self.context = context
        hp = self.context.get_hparam
        self.model = self.context.wrap_model(nn.Sequential(
            nn.Conv2d(NUM_CHANNELS, IMAGE_SIZE, kernel_size=(3, 3)),
            nn.ReLU(),
            nn.Conv2d(32, 32, kernel_size=(3, 3)),
            nn.ReLU(),
            nn.MaxPool2d((2, 2)),
            nn.Dropout(hp("layer1_dropout")),
            nn.Conv2d(32, 64, (3, 3), padding=1),
            nn.ReLU(),
            nn.Conv2d(64, 64, (3, 3)),
            nn.ReLU(),
            nn.MaxPool2d((2, 2)),
            nn.Dropout(hp("layer2_dropout")),
            Flatten(),
            nn.Linear(2304, 512),
            nn.ReLU(),
            nn.Dropout(hp("layer3_dropout")),
            nn.Linear(512, NUM_CLASSES),
        ))
        self.optimizer = self.context.wrap_optimizer(torch.optim.RMSprop(
            self.model.parameters(), lr=hp("learning_rate"),
            weight_decay=hp("learning_rate_decay"), alpha=0.9))

    def train_batch(self, batch: TorchData, epoch_idx: int,
                    batch_idx: int) -> Dict[str, torch.Tensor]:
        images, labels = cast(Tuple[torch.Tensor, torch.Tensor], batch)
        output = self.model(images)
        loss = nn.functional.cross_entropy(output, labels)
        accuracy = accuracy_rate(output, labels)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss, "train_error": 1.0 - accuracy, "train_accuracy": accuracy}

    def evaluate_batch(self, batch: TorchData) -> Dict[str, Any]:
        images, labels = cast(Tuple[torch.Tensor, torch.Tensor], batch)
        accuracy = accuracy_rate(self.model(images), labels)
        return {"validation_accuracy": accuracy, "validation_error": 1.0 - accuracy}

    def build_training_data_loader(self) -> Any:
        return DataLoader(data.download_dataset(train=True),
                          batch_size=self.context.get_per_slot_batch_size())

    def build_validation_data_loader(self) -> Any:
        return DataLoader(data.download_dataset(train=False),
                          batch_size=self.context.get_per_slot_batch_size())
