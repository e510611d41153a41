"""A small CNN for 28x28 grey images: two strided convolutions (28 -> 14 -> 7), then two
fully connected layers. (Strided convolutions instead of max pooling: several times faster
on CPU with this torch build.)"""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, filters1: int = 32, filters2: int = 64, hidden: int = 128,
                 dropout: float = 0.25) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, filters1, 5, stride=2, padding=2), nn.ReLU(),
            nn.Conv2d(filters1, filters2, 3, stride=2, padding=1), nn.ReLU())
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Dropout(dropout), nn.Linear(filters2 * 7 * 7, hidden), nn.ReLU(),
            nn.Dropout(dropout), nn.Linear(hidden, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))
