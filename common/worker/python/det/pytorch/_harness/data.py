"""det.pytorch.DataLoader (Determined's determined.pytorch.DataLoader): a torch DataLoader's
arguments, from which det's training loop builds this rank's loaders. Training batches come
in det's elastic order (ElasticSampler, or a sequential twin for shuffle=False): global step
i is window i of the epoch's order, rank r of W takes the r-th slice of it, and a resumed
trial starts at its next step in O(1), without reading or replaying the batches before."""

import math
import numbers
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Type, Union, cast

import numpy as np
import torch
import torch.utils.data

from ..sampler import ElasticSampler

TorchData = Union[Dict[str, torch.Tensor], Sequence[torch.Tensor], torch.Tensor]


class DataLoader:
    """Takes torch.utils.data.DataLoader's arguments (map-style data sets only). Iterating
    it (or len()) outside det's training loop behaves as the torch DataLoader would.

    In training, with no custom sampler or batch_sampler: batch_size is the per-slot batch
    (context.get_per_slot_batch_size()), the global step is batch_size x ranks, each epoch is
    len(dataset) // global step steps (a partial last step is dropped on every rank, whatever
    drop_last says), shuffle=True orders each epoch with det's elastic order seeded by the
    trial seed, shuffle=False keeps the data set's order. With a custom sampler or
    batch_sampler, rank r takes batches r, r + W, ... of it and a resume skips the batches
    already trained (Determined's own scheme)."""

    def __init__(self, dataset: Any, batch_size: Optional[int] = 1, shuffle: bool = False,
                 sampler: Any = None, batch_sampler: Any = None, num_workers: int = 0,
                 collate_fn: Optional[Callable] = None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0,
                 worker_init_fn: Optional[Callable] = None,
                 multiprocessing_context: Any = None, generator: Any = None, *,
                 prefetch_factor: Optional[int] = None, persistent_workers: bool = False) -> None:
        if isinstance(dataset, torch.utils.data.IterableDataset):
            raise ValueError("det.pytorch.DataLoader: IterableDataset is not supported (return "
                             "a torch.utils.data.DataLoader and call context.experimental."
                             "disable_dataset_reproducibility_checks())")
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to "
                             "disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            batch_size = None
        elif batch_size is None and (shuffle or drop_last):
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with shuffle, and drop_last")
        elif batch_size is not None and (isinstance(batch_size, bool) or
                                         not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size should be a positive integer value, got {batch_size!r}")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.collate_fn = collate_fn
        self.pin_memory = pin_memory
        self.drop_last = drop_last
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers

    # -- torch DataLoaders -------------------------------------------------------------

    def _loader_options(self) -> Dict[str, Any]:
        options: Dict[str, Any] = {
            "num_workers": self.num_workers, "collate_fn": self.collate_fn,
            "pin_memory": self.pin_memory, "timeout": self.timeout,
            "worker_init_fn": self.worker_init_fn,
            "multiprocessing_context": self.multiprocessing_context,
            "generator": self.generator, "persistent_workers": self.persistent_workers,
        }
        # torch 1.x refuses any prefetch_factor without workers; 2.x defaults it to None.
        if self.prefetch_factor is not None:
            options["prefetch_factor"] = self.prefetch_factor
        return options

    def _torch_loader(self, **sampling: Any) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(self.dataset, **sampling, **self._loader_options())

    def _base_batch_sampler(self) -> Any:
        if self.batch_sampler is not None:
            return self.batch_sampler
        if self.batch_size is None:
            raise ValueError("det.pytorch.DataLoader: batch_size=None cannot be sharded")
        sampler = self.sampler
        if sampler is None:
            sampler = (torch.utils.data.RandomSampler(self.dataset, generator=self.generator)
                       if self.shuffle else torch.utils.data.SequentialSampler(self.dataset))
        return torch.utils.data.BatchSampler(sampler, self.batch_size, self.drop_last)

    def get_data_loader(self, repeat: bool = False, skip: int = 0, num_replicas: int = 1,
                        rank: int = 0) -> torch.utils.data.DataLoader:
        """A torch DataLoader of rank `rank`'s batches: batches rank, rank + num_replicas,
        ... of this loader's batches, after `skip` of them, repeated forever if `repeat`
        (Determined's method, for custom training loops)."""
        batches = adapt_batch_sampler(self._base_batch_sampler(), repeat=repeat, skip=skip,
                                      num_replicas=num_replicas, rank=rank)
        return self._torch_loader(batch_sampler=batches)

    def _uses_elastic_order(self) -> bool:
        return self.sampler is None and self.batch_sampler is None and self.batch_size is not None

    def __iter__(self) -> Iterator:
        return iter(self._torch_loader(
            batch_size=self.batch_size, shuffle=self.shuffle, sampler=self.sampler,
            batch_sampler=self.batch_sampler, drop_last=self.drop_last))

    def __len__(self) -> int:
        return len(self._base_batch_sampler())


class _SequentialOrder(ElasticSampler):
    """ElasticSampler's windows over the data set's own order (DataLoader(shuffle=False))."""

    def epoch_order(self, epoch: int) -> Sequence[int]:
        return range(self.dataset_size)


class _TrainingBatches:
    """This rank's training batches of `loader`, endless, from global step `start`."""

    def __init__(self, loader: Any, rank: int, size: int, seed: int, start: int) -> None:
        self.sampler: Optional[ElasticSampler] = None
        if isinstance(loader, DataLoader) and loader._uses_elastic_order():
            n = len(loader.dataset)
            global_batch = cast(int, loader.batch_size) * size
            if global_batch > n:
                raise ValueError(f"det.pytorch.DataLoader: the global batch ({loader.batch_size} "
                                 f"per slot x {size} slots) is larger than the training data "
                                 f"set ({n} records)")
            order = ElasticSampler if loader.shuffle else _SequentialOrder
            self.sampler = order(n, global_batch, seed=seed & ((1 << 64) - 1), rank=rank,
                                 world_size=size)
            self.epoch_len = n // global_batch
            self.sampler.load_state_dict(self.position(start))
            self._loader = loader._torch_loader(batch_size=loader.batch_size,
                                                sampler=self.sampler, drop_last=False)
        elif isinstance(loader, DataLoader):
            self._loader = loader.get_data_loader(repeat=True, skip=start, num_replicas=size,
                                                  rank=rank)
            self.epoch_len = len(loader.get_data_loader(num_replicas=size, rank=rank))
        else:
            # A bare torch DataLoader, as is (the trial disabled the reproducibility checks).
            self._loader = loader
            try:
                self.epoch_len = len(loader)
            except TypeError:
                self.epoch_len = 2 ** 62

    def position(self, steps: int) -> Optional[Dict[str, Any]]:
        """The elastic sampler's state at global step `steps` (what a resume there loads), or
        None for a loader without one. Computed, not read: with worker processes the
        sampler itself runs ahead of the training loop."""
        if self.sampler is None:
            return None
        epoch, step = divmod(steps, self.epoch_len)
        return dict(self.sampler.state_dict(), epoch=epoch,
                    samples_in_epoch=step * self.sampler.global_batch_size)

    def __iter__(self) -> Iterator:
        while True:
            empty = True
            for batch in self._loader:
                empty = False
                yield batch
            if empty:
                raise RuntimeError("the training data loader yields no batches")


def adapt_batch_sampler(batch_sampler: Any, repeat: bool = False, skip: int = 0,
                        num_replicas: int = 1, rank: int = 0) -> Any:
    """`batch_sampler` repeated (training), sharded (batch i to rank i % num_replicas) and
    with the first `skip` of its sharded batches skipped."""
    if repeat:
        batch_sampler = _RepeatBatches(batch_sampler)
    if num_replicas > 1:
        batch_sampler = _ShardBatches(batch_sampler, num_replicas, rank)
    if skip > 0:
        batch_sampler = _SkipBatches(batch_sampler, skip, same_length=repeat)
    return batch_sampler


# Batch samplers subclass torch's Sampler without calling its __init__ (torch 1.13's takes a
# data_source, 2.x's none).
class _RepeatBatches(torch.utils.data.Sampler):
    def __init__(self, batches: Any) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator:
        while True:
            empty = True
            for b in self.batches:
                empty = False
                yield b
            if empty:
                return


class _ShardBatches(torch.utils.data.Sampler):
    def __init__(self, batches: Any, num_replicas: int, rank: int) -> None:
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is outside num_replicas {num_replicas}")
        self.batches, self.num_replicas, self.rank = batches, num_replicas, rank

    def __len__(self) -> int:
        n = len(self.batches)
        return n // self.num_replicas + int(n % self.num_replicas > self.rank)

    def __iter__(self) -> Iterator:
        for i, b in enumerate(self.batches):
            if i % self.num_replicas == self.rank:
                yield b


class _SkipBatches(torch.utils.data.Sampler):
    def __init__(self, batches: Any, skip: int, same_length: bool) -> None:
        self.batches, self.skip = batches, skip
        self.length = len(batches) - (0 if same_length else skip)

    def __len__(self) -> int:
        return max(0, self.length)

    def __iter__(self) -> Iterator:
        it = iter(self.batches)
        for _ in range(self.skip):
            if next(it, None) is None:
                return
        yield from it


def data_length(data: Any) -> int:
    """Records in a batch: the length of its first tensor or array (searched in dicts, lists
    and tuples)."""
    if isinstance(data, (np.ndarray, torch.Tensor)):
        return len(data)
    if isinstance(data, dict):
        if not data:
            raise ValueError("data_length: an empty dict has no tensor")
        return data_length(next(iter(data.values())))
    if isinstance(data, (list, tuple)):
        if not data:
            raise ValueError(f"data_length: an empty {type(data).__name__} has no tensor")
        return data_length(data[0])
    raise TypeError(f"data_length: data of incorrect type: {type(data).__name__}")


def _map_nested(data: Any, leaf: Callable[[Any], Any]) -> Any:
    """`data` with leaf(value) for every value inside dicts, lists and tuples (namedtuples
    kept)."""
    if isinstance(data, dict):
        return {k: _map_nested(v, leaf) for k, v in data.items()}
    if isinstance(data, list):
        return [_map_nested(v, leaf) for v in data]
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(_map_nested(v, leaf) for v in data))
    if isinstance(data, tuple):
        return tuple(_map_nested(v, leaf) for v in data)
    return leaf(data)


def _slice(data: Any, lo: int, hi: int) -> Any:
    """Records [lo, hi) of a batch: every tensor and array sliced on its first dimension,
    through dicts, lists and tuples; other values as they are."""
    def leaf(value: Any) -> Any:
        if isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim > 0:
            return value[lo:hi]
        return value
    return _map_nested(data, leaf)


def to_device(data: Any, device: Any, warned_types: Optional[Set[Type]] = None) -> Any:
    """`data` with every tensor (and numpy array, as a tensor) moved to `device`, through
    dicts, lists and tuples; other values as they are."""
    warned = set() if warned_types is None else warned_types

    def leaf(value: Any) -> Any:
        if isinstance(value, np.ndarray) and value.dtype != object:
            return torch.from_numpy(value).to(device)
        if callable(getattr(value, "to", None)):
            return value.to(device)
        if not isinstance(value, (str, bytes, numbers.Number, type(None))):
            warned.add(type(value))
        return value
    return _map_nested(data, leaf)


def _number(what: str, name: Any, value: Any) -> float:
    """A metric value as a float: numbers, numpy scalars, one-element tensors and arrays."""
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.numel() == 1:
            return float(value.cpu().item())
    elif isinstance(value, np.ndarray):
        if value.size == 1:
            return float(value.reshape(()).item())
    elif isinstance(value, numbers.Real):
        return float(value)
    raise TypeError(f"{what} metric '{name}': expected a number or a one-element tensor, got "
                    f"{type(value).__name__} {value!r}")


def _numbers(what: str, metrics: Any) -> Dict[str, float]:
    if not isinstance(metrics, dict):
        raise TypeError(f"{what} metrics must be a dict of name -> number (or a loss tensor from "
                        f"train_batch), got {type(metrics).__name__}")
    return {k: _number(what, k, v) for k, v in metrics.items()}


def _mean(values: List[float]) -> float:
    return math.fsum(values) / len(values) if values else float("nan")
