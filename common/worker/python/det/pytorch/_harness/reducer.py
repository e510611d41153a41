"""Metric reduction across batches and ranks (Determined's determined.pytorch.Reducer,
MetricReducer and context.wrap_reducer)."""

import abc
import enum
import itertools
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .errors import InvalidExperimentException


class Reducer(enum.Enum):
    """How evaluate_batch's per-batch values become one value (PyTorchTrial.evaluation_reducer).
    AVG is weighted by batches: the mean over every batch of every rank."""
    AVG = 1
    SUM = 2
    MAX = 3
    MIN = 4


def _reduce(reducer: Reducer, values: Sequence[float],
            weights: Optional[Sequence[int]] = None) -> float:
    if reducer == Reducer.AVG:
        if weights is None:
            return math.fsum(values) / len(values)
        return math.fsum(v * w for v, w in zip(values, weights)) / sum(weights)
    if reducer == Reducer.SUM:
        return math.fsum(values)
    if reducer == Reducer.MAX:
        return max(values)
    if reducer == Reducer.MIN:
        return min(values)
    raise InvalidExperimentException(f"unknown reducer {reducer!r}")


def _reducers_for(spec: Union[Reducer, Dict[str, Reducer]], keys: Sequence[str]) -> Dict[str, Reducer]:
    if isinstance(spec, dict):
        if set(spec) != set(keys):
            raise InvalidExperimentException(
                "Please provide a single evaluation reducer or a reducer for every validation "
                f"metric. Expected keys: {sorted(keys)}, provided keys: {sorted(spec)}.")
        reducers = dict(spec)
    else:
        reducers = {k: spec for k in keys}
    for k, r in reducers.items():
        if not isinstance(r, Reducer):
            raise InvalidExperimentException(
                f"evaluation_reducer() for '{k}': expected a det.pytorch.Reducer, got {r!r}")
    return reducers


def reduce_validation(allgather: Callable[[Any], List[Any]],
                      batch_metrics: List[Dict[str, float]],
                      spec: Union[Reducer, Dict[str, Reducer]]) -> Tuple[Dict[str, float], int]:
    """evaluate_batch's per-batch metrics of every rank reduced to one dict, on every rank
    (a collective); and the number of batches in all. Each rank reduces its own batches, then
    the ranks' values are reduced (AVG weighted by each rank's batches)."""
    keys = list(batch_metrics[0]) if batch_metrics else []
    local = {k: _reduce(r, [b[k] for b in batch_metrics])
             for k, r in _reducers_for(spec, keys).items()} if batch_metrics else {}
    everything = [(m, n) for m, n in allgather((local, len(batch_metrics))) if n > 0]
    total = sum(n for _, n in everything)
    if not everything:
        return {}, 0
    keys = list(everything[0][0])
    for m, _ in everything:
        if list(m) != keys:
            raise ValueError("Validation metric names must match across all ranks: "
                             f"{sorted(keys)} != {sorted(m)}")
    reducers = _reducers_for(spec, keys)
    weights = [n for _, n in everything]
    return {k: _reduce(reducers[k], [m[k] for m, _ in everything], weights) for k in keys}, total


def average_training(allgather: Callable[[Any], List[Any]],
                     batch_metrics: List[Any],
                     micro_batches: bool = False) -> Tuple[Dict[str, float],
                                                           List[Dict[str, float]]]:
    """train_batch's metrics of one reporting window on every rank (a collective): each
    batch's values averaged over the ranks (batch_metrics), and those averaged over the
    window's batches (avg_metrics). With micro_batches (deterministic mode) each entry of
    batch_metrics is the list of the rank's micro-batches' metrics, and a batch's value is
    the mean over every micro-batch of every rank: math.fsum is correctly rounded whatever
    the order, so the value is the same, bit for bit, at any rank count."""
    per_rank = allgather(batch_metrics)
    averaged: List[Dict[str, float]] = []
    for i in range(len(batch_metrics)):
        batch = [m for rank in per_rank if i < len(rank)
                 for m in (rank[i] if micro_batches else [rank[i]])]
        keys = list(dict.fromkeys(k for b in batch for k in b))
        averaged.append({k: math.fsum(b[k] for b in batch if k in b) /
                         sum(1 for b in batch if k in b) for k in keys})
    keys = list(dict.fromkeys(k for b in averaged for k in b))
    avg = {k: math.fsum(b[k] for b in averaged if k in b) / sum(1 for b in averaged if k in b)
           for k in keys}
    return avg, averaged


class MetricReducer(metaclass=abc.ABCMeta):
    """A custom metric reduced across batches and ranks: the trial feeds it (any update()
    method of its own) during train_batch or evaluate_batch; at the end of each reporting
    window or validation det calls per_slot_reduce() on every rank and cross_slot_reduce()
    with the list of every rank's result, and reset() before the next."""

    @abc.abstractmethod
    def reset(self) -> None:
        ...

    @abc.abstractmethod
    def per_slot_reduce(self) -> Any:
        ...

    @abc.abstractmethod
    def cross_slot_reduce(self, per_slot_metrics: List) -> Any:
        ...


class _SimpleReducer(MetricReducer):
    """wrap_reducer(fn): update(value) collects values; fn gets all of them, interleaved by
    rank as the data was sharded."""

    def __init__(self, fn: Callable[[List[Any]], Any]) -> None:
        self.fn = fn
        self.reset()

    def reset(self) -> None:
        self.values: List[Any] = []

    def update(self, value: Any) -> None:
        self.values.append(value)

    def per_slot_reduce(self) -> Any:
        return self.values

    def cross_slot_reduce(self, per_slot_metrics: List) -> Any:
        missing = object()
        flat = [v for group in itertools.zip_longest(*per_slot_metrics, fillvalue=missing)
                for v in group if v is not missing]
        return self.fn(flat)


class _Wrapped:
    def __init__(self, reducer: MetricReducer, name: Optional[str], for_training: bool,
                 for_validation: bool) -> None:
        self.reducer, self.name = reducer, name
        self.for_training, self.for_validation = for_training, for_validation

    def describe(self) -> str:
        return f'reducer of type {type(self.reducer).__name__} for name="{self.name}"'


class _ReducerContext:
    """The wrap_reducer part of PyTorchTrialContext."""

    def __init__(self, allgather: Callable[[Any], List[Any]]) -> None:
        self._wrapped_reducers: List[_Wrapped] = []
        self._allgather = allgather

    def wrap_reducer(self, reducer: Union[Callable, MetricReducer], name: Optional[str] = None,
                     for_training: bool = True, for_validation: bool = True) -> MetricReducer:
        """Registers a custom reducer (a MetricReducer, or a function of the list of every
        value passed to the returned object's update()). name=None: it returns a dict of
        metrics; else one metric called `name`. Returns the reducer to update."""
        if any(w.reducer is reducer for w in self._wrapped_reducers):
            raise AssertionError(f"wrap_reducer: the same reducer of type "
                                 f"{type(reducer).__name__} was wrapped twice")
        if not isinstance(reducer, MetricReducer):
            if not callable(reducer):
                raise AssertionError(f"wrap_reducer: expected a function or a "
                                     f"det.pytorch.MetricReducer, got {type(reducer).__name__}")
            reducer = _SimpleReducer(reducer)
        self._wrapped_reducers.append(_Wrapped(reducer, name, for_training, for_validation))
        return reducer

    def reset_reducers(self) -> None:
        for w in self._wrapped_reducers:
            try:
                w.reducer.reset()
            except Exception as e:
                raise ValueError(f"{w.describe()} failed in a call to reset()") from e

    def reduce_metrics(self, for_training: bool) -> Dict[str, Any]:
        """The registered reducers' metrics (a collective when any reducer applies)."""
        wanted = [w for w in self._wrapped_reducers
                  if (w.for_training if for_training else w.for_validation)]
        if not wanted:
            return {}
        local = []
        for w in wanted:
            try:
                local.append(w.reducer.per_slot_reduce())
            except Exception as e:
                raise ValueError(f"{w.describe()} failed in a call to per_slot_reduce()") from e
        gathered = self._allgather(local)
        metrics: Dict[str, Any] = {}
        for w, per_slot in zip(wanted, zip(*gathered)):
            try:
                value = w.reducer.cross_slot_reduce(list(per_slot))
            except Exception as e:
                raise ValueError(f"{w.describe()} failed in a call to cross_slot_reduce()") from e
            if w.name is None:
                if not isinstance(value, dict):
                    raise AssertionError(f"{w.describe()}: wrap_reducer(name=None) needs a dict of "
                                         f"metrics, got {type(value).__name__}")
                metrics.update(value)
            else:
                if isinstance(value, dict):
                    raise AssertionError(f"{w.describe()}: wrap_reducer(name=...) needs one metric "
                                         "value, got a dict (leave name=None to return a dict)")
                metrics[w.name] = value
        return metrics
