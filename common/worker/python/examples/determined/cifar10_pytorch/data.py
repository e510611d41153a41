"""The data lines of the CIFAR-10 example, changed for det: instead of torchvision's
download, a data set of CIFAR-10's shape (3x32x32 images normalized to [-1, 1] as the
example's transform leaves them, labels 0-9) generated on the fly: each class is a fixed
smooth colour pattern plus per-record noise. Record i is the same on every rank and run."""

from typing import Tuple

import torch

TRAIN_RECORDS = 50000
# CIFAR-10's test set has 10,000 records; fewer keep validations short on CPU slots.
VALIDATION_RECORDS = 1000


class SyntheticCIFAR10(torch.utils.data.Dataset):
    def __init__(self, records: int, seed: int) -> None:
        self.records = records
        self.seed = seed
        g = torch.Generator().manual_seed(4321)
        coarse = torch.rand(10, 3, 4, 4, generator=g)
        self.patterns = torch.nn.functional.interpolate(coarse, size=32, mode="bilinear",
                                                        align_corners=False)

    def __len__(self) -> int:
        return self.records

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        label = int(torch.randint(0, 10, (1,), generator=g))
        image = 0.7 * self.patterns[label] + 0.3 * torch.rand(3, 32, 32, generator=g)
        return image * 2 - 1, torch.tensor(label)


def download_dataset(train: bool) -> torch.utils.data.Dataset:
    """The example's download_dataset(train): the training set (50,000 records) or the
    validation set."""
    return SyntheticCIFAR10(TRAIN_RECORDS if train else VALIDATION_RECORDS, 1 if train else 2)
