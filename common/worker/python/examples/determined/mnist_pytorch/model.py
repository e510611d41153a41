"""The CNN of the MNIST example (Determined's mnist_pytorch model.build_model shape):
two convolutions, max pooling, dropout and two linear layers, log-softmax outputs."""

from typing import Any, Dict

import torch
from torch import nn


class Flatten(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.size(0), -1)


def build_model(hparams: Dict[str, Any]) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, hparams["n_filters1"], 3, 1),
        nn.ReLU(),
        nn.Conv2d(hparams["n_filters1"], hparams["n_filters2"], 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(hparams["dropout1"]),
        Flatten(),
        nn.Linear(144 * hparams["n_filters2"], 128),
        nn.ReLU(),
        nn.Dropout(hparams["dropout2"]),
        nn.Linear(128, 10),
        nn.LogSoftmax(dim=1),
    )
