"""Trials, as Determined's SDK has them (determined.experimental.Trial): state,
hyperparameters and summary metrics, checkpoints (best, latest, sorted), logs and metrics."""

import dataclasses
import datetime
import json
import time
import warnings
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

from det._proto import api_pb2, types_pb2
from det.experimental import _session
from det.experimental._enums import State, state
from det.experimental import checkpoint as checkpoint_mod
from det.experimental.checkpoint import Checkpoint, CheckpointOrderBy, CheckpointSortBy


# A trial's state: det's one State (_enums.State).
TrialState = State

_ENDED = ("STATE_COMPLETED", "STATE_CANCELED", "STATE_ERROR", "STATE_DELETED")


@dataclasses.dataclass
class TrialMetrics:
    """One report of metrics of a trial (Determined's TrialMetrics). `steps_completed` is the
    trial's batch at the report; `trial_run_id` the run that reported it (0, +1 per restart);
    `batch_metrics` is always None (det keeps no per-batch metrics)."""

    trial_id: int
    trial_run_id: int
    steps_completed: int
    end_time: Optional[datetime.datetime]
    metrics: Dict[str, Any]
    group: str
    batch_metrics: Optional[List[Dict[str, Any]]] = None


def _summary(summaries: Any) -> Dict[str, Dict[str, Any]]:
    return {name: {"min": s.min, "max": s.max, "last": s.last, "count": s.count}
            for name, s in summaries.items()}


def sort_checkpoints(checkpoints: List[Checkpoint], config: Dict[str, Any],
                     sort_by: Optional[Union[str, CheckpointSortBy]],
                     order_by: Optional[CheckpointOrderBy]) -> List[Checkpoint]:
    """`checkpoints` sorted as list_checkpoints() says: by a field, or by a validation metric
    (a string, or SEARCHER_METRIC / no sort_by: the config's searcher.metric, in the order of
    its searcher.smaller_is_better unless `order_by` says); checkpoints without the metric
    come last."""
    if sort_by is None or sort_by == CheckpointSortBy.SEARCHER_METRIC:
        searcher = config.get("searcher") or {}
        metric = searcher.get("metric")
        if not isinstance(metric, str):
            raise ValueError("no searcher.metric found in the experiment's config; give a "
                             "sort_by metric")
        if order_by is None:
            smaller = searcher.get("smaller_is_better", True)
            order_by = CheckpointOrderBy.ASC if smaller else CheckpointOrderBy.DESC
        sort_by = metric
    if order_by is None:
        order_by = CheckpointOrderBy.ASC
    reverse = order_by.value == "DESC"
    if isinstance(sort_by, CheckpointSortBy):
        keys: Dict[CheckpointSortBy, Callable[[Checkpoint], Any]] = {
            CheckpointSortBy.END_TIME: lambda c: c.report_time_ms,
            CheckpointSortBy.UUID: lambda c: c.uuid,
            CheckpointSortBy.BATCH_NUMBER: lambda c: c.total_batches,
            CheckpointSortBy.STATE: lambda c: c.state.value,
        }
        return sorted(checkpoints, key=keys[sort_by], reverse=reverse)
    name = sort_by
    have = [c for c in checkpoints if name in c._metrics]
    missing = [c for c in checkpoints if name not in c._metrics]
    return sorted(have, key=lambda c: c._metrics[name], reverse=reverse) + missing


class Trial:
    """A trial, usually from client.get_trial(id) or Experiment.list_trials().

    Attributes (as of the last reload()): `id`, `experiment_id`, `hparams` (dict), `state`
    (TrialState), `summary_metrics` ({"avg_metrics": {name: {min, max, last, count}},
    "validation_metrics": {...}} of training and validation reports). det's own: `seed`,
    `total_batches`, `restarts`, `error`, `pending_reason`, `warnings`."""

    def __init__(self, trial_id: int, session: _session.Session) -> None:
        self.id = trial_id
        self._session = session
        self.experiment_id: Optional[int] = None
        self.hparams: Optional[Dict[str, Any]] = None
        self.state: Optional[TrialState] = None
        self.summary_metrics: Optional[Dict[str, Any]] = None
        self.seed: Optional[int] = None
        self.total_batches: Optional[int] = None
        self.restarts: Optional[int] = None
        self.error: Optional[str] = None
        self.pending_reason: Optional[str] = None
        self.warnings: List[str] = []

    @classmethod
    def _from_proto(cls, proto: types_pb2.Trial, session: _session.Session) -> "Trial":
        t = cls(proto.id, session)
        t._hydrate(proto)
        return t

    def _hydrate(self, proto: types_pb2.Trial) -> None:
        self.experiment_id = proto.experiment_id
        self.hparams = json.loads(proto.hparams_json) if proto.hparams_json else {}
        self.state = state(proto.state, TrialState)
        self.summary_metrics = {"avg_metrics": _summary(proto.training_summary),
                                "validation_metrics": _summary(proto.validation_summary)}
        self.seed = proto.seed
        self.total_batches = proto.total_batches
        self.restarts = proto.restarts
        self.error = proto.error
        self.pending_reason = proto.pending_reason
        self.warnings = list(proto.warnings)

    def reload(self) -> None:
        """Refreshes the cached attributes from the master."""
        self._hydrate(self._session.call("GetTrial", api_pb2.GetTrialRequest(id=self.id)).trial)

    def kill(self) -> None:
        """Stops the trial (it ends CANCELED); its experiment goes on with its other trials."""
        self._session.call("KillTrial", api_pb2.KillTrialRequest(id=self.id))

    def wait(self, interval: float = 5.0, timeout: Optional[float] = None) -> TrialState:
        """Polls every `interval` seconds until the trial has ended; its final state.
        TimeoutError after `timeout` seconds (None: no limit; det's addition)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.reload()
            assert self.state is not None
            if self.state.value in _ENDED:
                return self.state
            if deadline is not None and time.monotonic() + interval > deadline:
                raise TimeoutError(f"trial {self.id} still {self.state.name} after {timeout} s")
            time.sleep(interval)

    # Checkpoints.

    def _checkpoints(self) -> List[Checkpoint]:
        if self.experiment_id is None:
            self.reload()
        assert self.experiment_id is not None
        resp = self._session.call("ListCheckpoints", api_pb2.ListCheckpointsRequest(
            experiment_id=self.experiment_id, trial_id=self.id))
        if self.hparams is None:
            self.reload()
        return [Checkpoint(self._session, c, self.hparams) for c in resp.checkpoints]

    def list_checkpoints(self, sort_by: Optional[Union[str, CheckpointSortBy]] = None,
                         order_by: Optional[CheckpointOrderBy] = None,
                         max_results: Optional[int] = None) -> List[Checkpoint]:
        """The trial's checkpoints (deleted ones included; see Checkpoint.state), sorted by
        `sort_by` (a CheckpointSortBy field or a validation metric's name; default the
        searcher's metric) in `order_by` order (default: ascending, or for the searcher's
        metric, best first); at most `max_results`."""
        cps = self._checkpoints()
        if not cps:
            return []
        assert self.experiment_id is not None
        config = self._session.experiment_config(self.experiment_id)
        cps = sort_checkpoints(cps, config, sort_by, order_by)
        return cps[:max_results] if max_results is not None else cps

    def get_checkpoints(self, sort_by: Optional[Union[str, CheckpointSortBy]] = None,
                        order_by: Optional[CheckpointOrderBy] = None) -> List[Checkpoint]:
        """Deprecated (as in Determined): list_checkpoints()."""
        warnings.warn("Trial.get_checkpoints() is deprecated: use Trial.list_checkpoints()",
                      FutureWarning, stacklevel=2)
        return self.list_checkpoints(sort_by=sort_by, order_by=order_by)

    def top_checkpoint(self, sort_by: Optional[str] = None,
                       smaller_is_better: Optional[bool] = None) -> Checkpoint:
        """The trial's checkpoint with the best validation metric `sort_by` (default: the
        searcher's metric and its smaller_is_better). ValueError when it has none."""
        return self.select_checkpoint(best=True, sort_by=sort_by,
                                      smaller_is_better=smaller_is_better)

    def select_checkpoint(self, latest: bool = False, best: bool = False,
                          uuid: Optional[str] = None, sort_by: Optional[str] = None,
                          smaller_is_better: Optional[bool] = None) -> Checkpoint:
        """One checkpoint: the `latest` (highest batch), the `best` (see top_checkpoint), or
        the one of `uuid`; exactly one of them must be given."""
        if sum([bool(latest), bool(best), uuid is not None]) != 1:
            raise ValueError("exactly one of latest, best or uuid must be set")
        if sort_by is not None and not best:
            raise ValueError("sort_by and smaller_is_better apply only with best")
        if uuid is not None:
            c = self._session.call("GetCheckpoint",
                                   api_pb2.GetCheckpointRequest(uuid=uuid)).checkpoint
            return Checkpoint(self._session, c)
        live = [c for c in self._checkpoints()
                if c.state != checkpoint_mod.CheckpointState.DELETED]
        if latest:
            ordered = sorted(live, key=lambda c: (c.total_batches, c.report_time_ms),
                             reverse=True)
        else:
            assert self.experiment_id is not None
            config = self._session.experiment_config(self.experiment_id)
            order = None
            if sort_by is not None:
                order = CheckpointOrderBy.ASC if smaller_is_better in (None, True) \
                    else CheckpointOrderBy.DESC
            ordered = sort_checkpoints(live, config, sort_by, order)
        if not ordered:
            raise ValueError(f"trial {self.id} has no checkpoint")
        return ordered[0]

    # Logs and metrics.

    def logs(self, follow: bool = False, *, head: Optional[int] = None,
             tail: Optional[int] = None, container_ids: Optional[List[str]] = None,
             rank_ids: Optional[List[int]] = None, stdtypes: Optional[List[str]] = None,
             min_level: Optional[Any] = None) -> Iterable[str]:
        """The trial's log lines (their text). `follow`: keep waiting for new lines until the
        trial ends; `head`/`tail`: only the first/last N lines; `rank_ids`: only these
        ranks' lines; `stdtypes`: only lines of these streams ("stdout", "stderr").
        `container_ids` and `min_level` raise NotImplementedError (det's log lines carry no
        container id and no level)."""
        if container_ids is not None:
            raise NotImplementedError("Trial.logs(container_ids=...): det runs no containers")
        if min_level is not None:
            raise NotImplementedError("Trial.logs(min_level=...): det's log lines have no level")
        for name, n in (("head", head), ("tail", tail)):
            if n is not None and n < 0:
                raise ValueError(f"{name} must be non-negative, got {n}")
        if sum([follow, head is not None, tail is not None]) > 1:
            raise ValueError("follow, head and tail are mutually exclusive")
        lines = self._log_lines(follow, rank_ids, stdtypes)
        if head is not None:
            for i, line in enumerate(lines):
                if i >= head:
                    return
                yield line
            return
        if tail is not None:
            kept = list(lines)
            for line in kept[len(kept) - tail:] if tail else []:
                yield line
            return
        yield from lines

    def _log_lines(self, follow: bool, rank_ids: Optional[List[int]],
                   stdtypes: Optional[List[str]]) -> Iterator[str]:
        after = 0
        single_rank = rank_ids[0] if rank_ids is not None and len(rank_ids) == 1 else None
        while True:
            req = api_pb2.GetTrialLogsRequest(trial_id=self.id, after_id=after, limit=5000,
                                              wait_ms=20000 if follow else 0)
            if single_rank is not None:
                req.rank = single_rank
            resp = self._session.call("GetTrialLogs", req,
                                      extra_timeout=20.0 if follow else 0.0)
            for line in resp.lines:
                after = line.id
                if rank_ids is not None and line.rank not in rank_ids:
                    continue
                if stdtypes is not None and line.stream not in stdtypes:
                    continue
                yield line.message
            if resp.done or (not follow and not resp.lines):
                return

    def iter_metrics(self, group: str) -> Iterator[TrialMetrics]:
        """The trial's reports of metric group `group` ("training", "validation" or
        "timings"), oldest first."""
        resp = self._session.call("GetTrialMetrics", api_pb2.GetTrialMetricsRequest(
            trial_id=self.id, group=group))
        for m in resp.metrics:
            end = datetime.datetime.fromtimestamp(m.report_time_ms / 1000,
                                                  tz=datetime.timezone.utc) \
                if m.report_time_ms else None
            yield TrialMetrics(trial_id=m.trial_id or self.id, trial_run_id=m.run_id,
                               steps_completed=m.total_batches, end_time=end,
                               metrics=dict(m.values), group=m.group or group)

    def stream_metrics(self, group: str) -> Iterator[TrialMetrics]:
        """The same as iter_metrics(group) (Determined's older name)."""
        return self.iter_metrics(group)

    def stream_training_metrics(self) -> Iterator[TrialMetrics]:
        """Deprecated (as in Determined): iter_metrics("training")."""
        return self.iter_metrics("training")

    def stream_validation_metrics(self) -> Iterator[TrialMetrics]:
        """Deprecated (as in Determined): iter_metrics("validation")."""
        return self.iter_metrics("validation")

    def __repr__(self) -> str:
        return f"Trial(id={self.id})"
