"""PyTorchTrial (Determined's determined.pytorch.PyTorchTrial): the model code of a trial;
det's training loop (Trainer) calls it."""

import abc
import inspect
from typing import Any, Dict, Union

import torch

from . import data as _data
from .callback import PyTorchCallback
from .context import PyTorchTrialContext
from .reducer import Reducer


class PyTorchTrial(metaclass=abc.ABCMeta):
    """Subclass it: wrap models, optimizers and LR schedulers in __init__ with the context's
    wrap_* methods, build the data loaders, train one batch in train_batch (context.backward,
    context.step_optimizer) and evaluate with exactly one of evaluate_batch and
    evaluate_full_dataset."""

    @abc.abstractmethod
    def __init__(self, context: PyTorchTrialContext) -> None:
        ...

    @abc.abstractmethod
    def train_batch(self, batch: _data.TorchData, epoch_idx: int,
                    batch_idx: int) -> Union[torch.Tensor, Dict[str, Any]]:
        """Trains one batch (already on context.device); returns a loss tensor (reported as
        "loss") or a dict of metrics (numbers or one-element tensors). batch_idx counts
        batches since the trial started; epoch_idx = batch_idx // batches per epoch."""

    @abc.abstractmethod
    def build_training_data_loader(self) -> Any:
        """A det.pytorch.DataLoader (or a bare torch DataLoader after
        context.experimental.disable_dataset_reproducibility_checks())."""

    @abc.abstractmethod
    def build_validation_data_loader(self) -> Any:
        """As build_training_data_loader; its batches are split among the ranks."""

    def build_callbacks(self) -> Dict[str, PyTorchCallback]:
        return {}

    def evaluate_batch(self, batch: _data.TorchData, batch_idx: int) -> Dict[str, Any]:
        """Metrics of one validation batch; reduced over every batch of every rank with
        evaluation_reducer(). The older form evaluate_batch(self, batch) works too."""
        raise NotImplementedError

    def evaluation_reducer(self) -> Union[Reducer, Dict[str, Reducer]]:
        return Reducer.AVG

    def evaluate_full_dataset(self, data_loader: Any) -> Dict[str, Any]:
        """Metrics of the whole validation set, on the chief alone (a torch DataLoader)."""
        raise NotImplementedError

    def get_batch_length(self, batch: Any) -> int:
        return _data.data_length(batch)


def _overrides(trial: PyTorchTrial, name: str) -> bool:
    return getattr(type(trial), name) is not getattr(PyTorchTrial, name)


def _takes_batch_idx(method: Any) -> bool:
    """Whether evaluate_batch takes batch_idx (by name, or as a second positional)."""
    params = list(inspect.signature(method).parameters.values())
    if any(p.name == "batch_idx" or p.kind == p.VAR_KEYWORD for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                                                  p.VAR_POSITIONAL)]
    return len(positional) >= 2
