"""Fashion-MNIST from Debian's dataset-fashion-mnist package (gzipped IDX files), as float
tensors scaled to [0, 1] and int64 labels."""

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


def load(directory: str, split: str):
    """(images [N, 1, 28, 28] float32, labels [N] int64) of split "train" or "t10k"."""
    images = _read_idx(os.path.join(directory, f"{split}-images-idx3-ubyte.gz"))
    labels = _read_idx(os.path.join(directory, f"{split}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))
