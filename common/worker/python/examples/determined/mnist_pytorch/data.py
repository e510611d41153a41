"""The data lines of the example, changed for det: instead of downloading MNIST, a data set
of MNIST's shape (1x28x28 images, normalized as torchvision's MNIST transform leaves them,
labels 0-9) generated on the fly. Each class is a fixed random stroke pattern plus per-record
noise, so a CNN learns it within a few hundred batches. Record i is the same on every rank
and every run."""

import pathlib
from typing import Tuple, Union

import torch

TRAIN_RECORDS = 60000
# MNIST's test set has 10,000 records; fewer keep validations short on CPU slots.
VALIDATION_RECORDS = 2000
_MEAN, _STD = 0.1307, 0.3081


class SyntheticMNIST(torch.utils.data.Dataset):
    def __init__(self, records: int, seed: int) -> None:
        self.records = records
        self.seed = seed
        g = torch.Generator().manual_seed(1234)
        # One pattern per class: a sparse set of bright pixels, blurred.
        strokes = (torch.rand(10, 1, 28, 28, generator=g) > 0.85).float()
        self.patterns = torch.nn.functional.avg_pool2d(strokes, 3, stride=1, padding=1) * 2

    def __len__(self) -> int:
        return self.records

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        label = int(torch.randint(0, 10, (1,), generator=g))
        image = (self.patterns[label] + 0.3 * torch.rand(1, 28, 28, generator=g)).clamp(0, 1)
        return (image - _MEAN) / _STD, torch.tensor(label)


def get_dataset(data_dir: Union[str, pathlib.Path], train: bool) -> torch.utils.data.Dataset:
    """MNIST's training set (train=True) or test set, as Determined's example's
    get_dataset(data_dir, train); data_dir is kept for its signature and unused."""
    del data_dir
    return SyntheticMNIST(TRAIN_RECORDS if train else VALIDATION_RECORDS, 1 if train else 2)


def download_dataset(download_directory: str, data_config: dict) -> str:
    """The pre-0.38 example's download step: nothing to download here; the directory back."""
    del data_config
    return download_directory
