"""SearcherContext: the training length the experiment's searcher asks of this trial, as
operations (Determined's det.core.SearcherContext). det's master gives each run of a trial
one target (DET_TRIAL_TARGET_BATCHES); adaptive searchers (ASHA) stop a trial early from the
validation metrics it reports, which should_preempt() then says."""

import enum
import math
import numbers
import warnings
from typing import Any, Iterator, Optional

from det import _client, _info
from det.core import _distributed, _train

_DEPRECATED = ("SearcherContext.operations() was deprecated in Determined 0.38.0: set the "
               "training length in the training code, and report progress with "
               "core.train.report_progress()")


class Unit(enum.Enum):
    """The unit of searcher.max_length (Determined's Unit)."""

    EPOCHS = "EPOCHS"
    RECORDS = "RECORDS"
    BATCHES = "BATCHES"


class SearcherMode(enum.Enum):
    """Who iterates SearcherContext.operations() (Determined's SearcherMode):
    WorkersAskChief, every rank; ChiefOnly, the chief alone."""

    WorkersAskChief = "WORKERS_ASK_CHIEF"
    # Determined's value, spelling included; "CHIEF_ONLY" is accepted too.
    ChiefOnly = "CHEIF_ONLY"

    @classmethod
    def _missing_(cls, value: Any) -> Optional["SearcherMode"]:
        return cls.ChiefOnly if value == "CHIEF_ONLY" else None


class SearcherOperation:
    """Train until `length` (in the unit of searcher.max_length: batches, epochs or records,
    counted from the trial's start), then report_completed(searcher metric)."""

    def __init__(self, context: "SearcherContext", length: int, is_chief: bool) -> None:
        self._context = context
        self._length = length
        self._is_chief = is_chief
        self._completed = False

    @property
    def length(self) -> int:
        return self._length

    @property
    def completed(self) -> bool:
        return self._completed

    def report_progress(self, length: float) -> None:
        """Progress in the unit of searcher.max_length (chief only; deprecated in Determined
        0.38 for TrainContext.report_progress)."""
        if not self._is_chief:
            raise RuntimeError("SearcherOperation.report_progress: only the chief may report")
        if isinstance(length, bool) or not isinstance(length, numbers.Real) or \
                math.isnan(length) or length < 0:
            raise ValueError(f"report_progress: length: expected a number >= 0, got {length!r}")
        if self._completed and length != self._length:
            raise RuntimeError("SearcherOperation.report_progress: the operation was already "
                               "completed")
        self._context._train.report_batches(self._context._to_batches(length))

    def report_completed(self, searcher_metric: float) -> None:
        """The operation is done; `searcher_metric` is the value of searcher.metric at its
        length, reported as a validation metric (what the master's searcher judges) unless
        the last validation report already carried it (chief only)."""
        if not self._is_chief:
            raise RuntimeError("SearcherOperation.report_completed: only the chief may report")
        if self._completed:
            raise RuntimeError(f"SearcherOperation(length={self._length}): already completed")
        self._context._report_completed(self._length, searcher_metric)
        self._completed = True


class SearcherContext:
    def __init__(self, client: _client.WorkerClient, dist: _distributed.DistributedContext,
                 train: _train.TrainContext, info: Optional[_info.TrialInfo],
                 off_cluster_length: Optional[int] = None) -> None:
        self._client = client
        self._dist = dist
        self._train = train
        self._info = info
        self._off_cluster_length = off_cluster_length

    def _to_batches(self, length: float) -> int:
        return self._info.to_batches(length) if self._info is not None else int(length)

    def get_configured_units(self) -> Optional[Unit]:
        """The unit searcher.max_length is written in (Unit.BATCHES, EPOCHS or RECORDS);
        None when it names none (or off-cluster, where there is no config)."""
        if self._info is None:
            return None
        unit = self._info.spec.searcher.max_length_unit
        return Unit(unit.upper()) if unit.upper() in Unit.__members__ else None

    def operations(self, searcher_mode: SearcherMode = SearcherMode.WorkersAskChief,
                   auto_ack: bool = True) -> Iterator[SearcherOperation]:
        """The operations of this run: one, of the length the searcher asked for (for
        adaptive searchers, the end of the trial's current rung). Every rank iterates
        (WorkersAskChief) or the chief alone (ChiefOnly); the chief reports. Leaving the loop
        early (a preemption) is fine; finishing an operation without report_completed() is a
        RuntimeError. Deprecated in Determined 0.38 (a FutureWarning says so), and kept."""
        warnings.warn(_DEPRECATED, FutureWarning, stacklevel=2)
        searcher_mode = SearcherMode(searcher_mode)
        chief = self._dist.rank == 0
        if searcher_mode == SearcherMode.ChiefOnly and not chief:
            raise RuntimeError("searcher.operations: SearcherMode.ChiefOnly: only the chief may "
                               f"iterate (rank {self._dist.rank} did)")
        if self._info is not None:
            length = self._info.from_batches(self._info.target_batches)
        elif self._off_cluster_length is not None:
            length = self._off_cluster_length
        else:
            raise RuntimeError("searcher.operations: off-cluster there is no searcher; pass "
                               "searcher_length= to det.core.init")
        op = SearcherOperation(self, length, chief)
        yield op
        if chief and not op.completed:
            raise RuntimeError(f"searcher operation of length {length} was not completed: call "
                               "op.report_completed(searcher_metric) when training reaches it")

    def acknowledge_out_of_ops(self) -> None:
        """Nothing to do (as in Determined 0.38, where it is deprecated and ignored)."""

    def _report_completed(self, length: int, metric: float) -> None:
        name = self._info.searcher_metric if self._info is not None else "searcher_metric"
        if not name:
            raise RuntimeError("report_completed: the experiment config has no searcher.metric")
        batches = self._to_batches(length)
        value = _train.check_metrics("validation", batches, {name: metric})[name]
        last = self._train.last_validation
        if last is not None and last[0] == batches and name in last[1] and \
                (last[1][name] == value or (math.isnan(value) and math.isnan(last[1][name]))):
            return  # Already reported with the validation metrics at that batch.
        self._train.report_validation_metrics(batches, {name: value})


class DummySearcherOperation(SearcherOperation):
    """An operation of `length` that reports nowhere: its reports are printed (Determined's
    DummySearcherOperation)."""

    def __init__(self, length: int, is_chief: bool) -> None:
        super().__init__(DummySearcherContext(_distributed.DummyDistributedContext(), length),
                         length, is_chief)


class DummySearcherContext(SearcherContext):
    """One operation of `length`, for code run without a cluster; reports are printed
    (Determined's DummySearcherContext)."""

    def __init__(self, dist: _distributed.DistributedContext, length: int = 1) -> None:
        client = _client.OffClusterClient()
        super().__init__(client, dist, _train.TrainContext(client, None), None,
                         off_cluster_length=length)
