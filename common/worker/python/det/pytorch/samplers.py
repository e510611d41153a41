"""Building blocks for a data loader a trial assembles itself (Determined's
determined.pytorch.samplers), with Determined's names and semantics: repeat a sampler
forever, take one rank's share, skip what was trained before a resume, shuffle the same way
every time.

det.pytorch.DataLoader does all of this already (sharding, a seeded order, resuming mid-epoch,
through det's ElasticSampler); these are for trials that build torch loaders by hand after
context.experimental.disable_dataset_reproducibility_checks(). Wrap them in this order:
shuffle the finite sampler, then repeat, then skip (a skip inside the repeat would skip
again at every epoch; a shuffle outside the repeat would never end).
"""

from typing import Any, Iterable, Iterator, List

import numpy as np
import torch.utils.data


def _length(sampler: Iterable[Any]) -> int:
    return len(sampler)  # type: ignore[arg-type]


class RepeatSampler(torch.utils.data.Sampler):
    """Yields the items of `sampler` over and over, without end; its length is `sampler`'s."""

    def __init__(self, sampler: Iterable[Any]) -> None:
        self._sampler = sampler

    def __len__(self) -> int:
        return _length(self._sampler)

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield from self._sampler


class RepeatBatchSampler(torch.utils.data.BatchSampler):
    """RepeatSampler for a batch sampler (`batch_sampler` stays its attribute, as in torch)."""

    def __init__(self, batch_sampler: Iterable[Any]) -> None:
        self.batch_sampler = batch_sampler

    def __len__(self) -> int:
        return _length(self.batch_sampler)

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield from self.batch_sampler


def _check_shard(num_workers: int, rank: int) -> None:
    if num_workers < 1:
        raise ValueError(f"num_workers must be positive, got {num_workers}")
    if not 0 <= rank < num_workers:
        raise ValueError(f"rank must be in [0, num_workers={num_workers}), got {rank}")


def _shard_length(total: int, num_workers: int) -> int:
    # Every rank reports the same length (ceil): epoch ends stay in step across ranks.
    return -(-total // num_workers)


class DistributedSampler(torch.utils.data.Sampler):
    """Rank `rank`'s share of `sampler`: the items at positions rank, rank + num_workers, ...
    A link in a chain (unlike torch's DistributedSampler, it neither shuffles nor needs a
    sized data set). Every rank reports the same length, ceil(len / num_workers)."""

    def __init__(self, sampler: Iterable[Any], num_workers: int, rank: int) -> None:
        _check_shard(num_workers, rank)
        self._sampler = sampler
        self._num_workers = num_workers
        self._rank = rank

    def __len__(self) -> int:
        return _shard_length(_length(self._sampler), self._num_workers)

    def __iter__(self) -> Iterator[Any]:
        for i, item in enumerate(self._sampler):
            if i % self._num_workers == self._rank:
                yield item


class DistributedBatchSampler(torch.utils.data.BatchSampler):
    """DistributedSampler for a batch sampler: rank `rank` gets every num_workers-th batch."""

    def __init__(self, batch_sampler: Iterable[Any], num_workers: int, rank: int) -> None:
        _check_shard(num_workers, rank)
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.rank = rank

    def __len__(self) -> int:
        return _shard_length(_length(self.batch_sampler), self.num_workers)

    def __iter__(self) -> Iterator[Any]:
        for i, batch in enumerate(self.batch_sampler):
            if i % self.num_workers == self.rank:
                yield batch


class SkipSampler(torch.utils.data.Sampler):
    """The items of `sampler` after the first `skip`. Its length stays `sampler`'s (it is
    meant to wrap a RepeatSampler, skipping once). Skipping records reproduces a resume
    only when every batch has the same size: prefer SkipBatchSampler."""

    def __init__(self, sampler: Iterable[Any], skip: int) -> None:
        if skip < 0:
            raise ValueError(f"skip must be >= 0, got {skip}")
        self._sampler = sampler
        self._skip = skip

    def __len__(self) -> int:
        return _length(self._sampler)

    def __iter__(self) -> Iterator[Any]:
        for i, item in enumerate(self._sampler):
            if i >= self._skip:
                yield item


class SkipBatchSampler(torch.utils.data.BatchSampler):
    """The batches of `batch_sampler` after the first `skip` (e.g. the batches trained before
    a resume, context.get_initial_batch()). Its length stays `batch_sampler`'s."""

    def __init__(self, batch_sampler: Iterable[Any], skip: int) -> None:
        if skip < 0:
            raise ValueError(f"skip must be >= 0, got {skip}")
        self.batch_sampler = batch_sampler
        self.skip = skip

    def __len__(self) -> int:
        return _length(self.batch_sampler)

    def __iter__(self) -> Iterator[Any]:
        for i, batch in enumerate(self.batch_sampler):
            if i >= self.skip:
                yield batch


class _Shuffled:
    def __init__(self, source: Iterable[Any], seed: int) -> None:
        self._source = source
        # One generator for the sampler's life: each epoch (each iteration) gets the next
        # permutation of the same seeded sequence, in every process alike.
        self._rng = np.random.RandomState(seed)

    def __len__(self) -> int:
        return _length(self._source)

    def __iter__(self) -> Iterator[Any]:
        items: List[Any] = list(self._source)
        order = self._rng.permutation(len(items))
        return iter([items[i] for i in order])


class ReproducibleShuffleSampler(_Shuffled, torch.utils.data.Sampler):
    """The items of `sampler` in an order drawn from `seed`: the same orders, epoch after
    epoch, in every run with that seed."""

    def __init__(self, sampler: Iterable[Any], seed: int) -> None:
        _Shuffled.__init__(self, sampler, seed)


class ReproducibleShuffleBatchSampler(_Shuffled, torch.utils.data.Sampler):
    """ReproducibleShuffleSampler over whole batches (batches keep their contents; prefer
    shuffling records with ReproducibleShuffleSampler where the loader allows it)."""

    def __init__(self, batch_sampler: Iterable[Any], seed: int) -> None:
        _Shuffled.__init__(self, batch_sampler, seed)
