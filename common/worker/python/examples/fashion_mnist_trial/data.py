"""Fashion-MNIST from Debian's dataset-fashion-mnist package (gzipped IDX files, no
download): torch data sets of float images scaled to [0, 1] and int64 labels."""

import gzip
import os

import numpy as np
import torch

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def _read_idx(path: str) -> np.ndarray:
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: not found (install Debian's dataset-fashion-mnist, or "
                                "set data.dir in the experiment config)") from None
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def get_dataset(directory: str, train: bool) -> torch.utils.data.TensorDataset:
    """The training set (60,000 records) or the test set (10,000): (image [1, 28, 28], label)."""
    split = "train" if train else "t10k"
    images = _read_idx(os.path.join(directory, f"{split}-images-idx3-ubyte.gz"))
    labels = _read_idx(os.path.join(directory, f"{split}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    return torch.utils.data.TensorDataset(x, torch.from_numpy(labels.astype(np.int64)))
