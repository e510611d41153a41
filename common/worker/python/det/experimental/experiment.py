"""Experiments, as Determined's SDK has them (determined.experimental.Experiment): state and
config, wait(), kill/pause/activate/archive, trials, and the best checkpoints."""

import enum
import sys
import time
import warnings
from typing import Any, Dict, Iterator, List, Optional, Set, Union

from det._proto import api_pb2, types_pb2
from det.experimental import _session
from det.experimental._enums import OrderBy, State, state
from det.experimental.checkpoint import Checkpoint, CheckpointOrderBy, CheckpointSortBy
from det.experimental.trial import Trial, sort_checkpoints


# An experiment's state: det's one State (_enums.State).
ExperimentState = State

_ENDED = (ExperimentState.COMPLETED, ExperimentState.CANCELED, ExperimentState.ERROR,
          ExperimentState.DELETED)


class TrialSortBy(enum.Enum):
    """The field list_trials() sorts by."""

    ID = "ID"
    START_TIME = "START_TIME"
    END_TIME = "END_TIME"
    STATE = "STATE"
    BATCHES_PROCESSED = "BATCHES_PROCESSED"
    RESTARTS = "RESTARTS"


# Determined's name of the order of list_trials().
TrialOrderBy = OrderBy


class Experiment:
    """An experiment, usually from client.create_experiment() or client.get_experiment(id).

    Attributes (as of the last reload(); wait() reloads): `id`, `config` (the effective
    config as a dict), `state` (ExperimentState), `archived`, `name`, `progress` (0..1),
    `description`, `labels` (a set). det's own: `owner`, `error`, `warnings`."""

    def __init__(self, experiment_id: int, session: _session.Session) -> None:
        self._id = experiment_id
        self._session = session
        self._config_yaml = ""
        self.state: Optional[ExperimentState] = None
        self.archived: Optional[bool] = None
        self.name: Optional[str] = None
        self.progress: Optional[float] = None
        self.description: Optional[str] = None
        self.notes: Optional[str] = None
        self.labels: Optional[Set[str]] = None
        self.owner: Optional[str] = None
        self.error: Optional[str] = None
        self.warnings: List[str] = []

    @property
    def id(self) -> int:
        return self._id

    @property
    def config(self) -> Optional[Dict[str, Any]]:
        """The effective (merged, defaulted) config as a dict; None before reload()."""
        if not self._config_yaml:
            return None
        return self._session.experiment_config(self._id, lambda: self._config_yaml)

    @classmethod
    def _from_proto(cls, proto: types_pb2.Experiment, session: _session.Session) -> "Experiment":
        e = cls(proto.id, session)
        e._hydrate(proto)
        return e

    def _hydrate(self, proto: types_pb2.Experiment) -> None:
        self._config_yaml = proto.config_yaml
        self.state = state(proto.state, ExperimentState)
        self.archived = proto.archived
        self.name = proto.name
        self.progress = proto.progress
        self.description = proto.description
        self.labels = set(proto.labels) if proto.labels else None
        self.owner = proto.owner
        self.error = proto.error
        self.warnings = list(proto.warnings)

    def _get(self) -> api_pb2.GetExperimentResponse:
        return self._session.call("GetExperiment", api_pb2.GetExperimentRequest(id=self._id))

    def reload(self) -> None:
        """Refreshes the cached attributes from the master."""
        self._hydrate(self._get().experiment)

    # Actions.

    def activate(self) -> None:
        """Queues a paused experiment's trials again."""
        self._session.call("ActivateExperiment", api_pb2.ActivateExperimentRequest(id=self._id))

    def pause(self) -> None:
        """Running trials checkpoint and stop; the experiment becomes PAUSED."""
        self._session.call("PauseExperiment", api_pb2.PauseExperimentRequest(id=self._id))

    def kill(self) -> None:
        """Stops every trial at once; the experiment ends CANCELED."""
        self._session.call("KillExperiment", api_pb2.KillExperimentRequest(id=self._id))

    def cancel(self) -> None:
        """The same as kill() in det (which has no gentler stop)."""
        self.kill()

    def archive(self) -> None:
        """Hides an ended experiment from list_experiments() (unless asked for)."""
        self._session.call("ArchiveExperiment", api_pb2.ArchiveExperimentRequest(id=self._id))
        self.archived = True

    def unarchive(self) -> None:
        self._session.call("UnarchiveExperiment",
                           api_pb2.UnarchiveExperimentRequest(id=self._id))
        self.archived = False

    def delete(self) -> None:
        """Deletes an ended experiment, its trials, metrics, logs and checkpoints (their files
        by a garbage collection task on an agent)."""
        self._session.call("DeleteExperiment", api_pb2.DeleteExperimentRequest(id=self._id))

    def _patch(self, **fields: Any) -> None:
        resp = self._session.call("PatchExperiment",
                                  api_pb2.PatchExperimentRequest(id=self._id, **fields))
        self._hydrate(resp.experiment)

    def set_name(self, name: str) -> None:
        self._patch(name=name)

    def set_description(self, description: str) -> None:
        self._patch(description=description)

    def set_notes(self, notes: str) -> None:
        raise NotImplementedError("Experiment.set_notes: det's experiments have no notes "
                                  "(set_description instead)")

    def add_label(self, label: str) -> None:
        self._patch(add_labels=[label])

    def remove_label(self, label: str) -> None:
        self._patch(remove_labels=[label])

    def set_labels(self, labels: Set[str]) -> None:
        """Makes the experiment's labels exactly `labels`."""
        self.reload()
        current = self.labels or set()
        self._patch(add_labels=sorted(set(labels) - current),
                    remove_labels=sorted(current - set(labels)))

    def wait(self, interval: float = 5.0, timeout: Optional[float] = None) -> ExperimentState:
        """Polls every `interval` seconds until the experiment has ended (COMPLETED,
        CANCELED, ERROR or DELETED) and returns that state. ValueError when it is PAUSED
        (it would wait forever), as Determined does; TimeoutError after `timeout` seconds
        (None: no limit; det's addition)."""
        start = time.monotonic()
        next_note = 60.0
        while True:
            self.reload()
            assert self.state is not None
            if self.state in _ENDED:
                return self.state
            if self.state == ExperimentState.PAUSED:
                raise ValueError(f"Experiment {self.id} is in paused state. Make sure the "
                                 "experiment is active.")
            elapsed = time.monotonic() - start
            if timeout is not None and elapsed + interval > timeout:
                raise TimeoutError(f"experiment {self.id} still {self.state.name} after "
                                   f"{timeout} s")
            if elapsed >= next_note:
                print(f"Waiting for Experiment {self.id} to complete. Elapsed "
                      f"{elapsed / 60:.1f} minutes", file=sys.stderr)
                next_note += 60.0
            time.sleep(interval)

    # Trials.

    def list_trials(self, sort_by: TrialSortBy = TrialSortBy.ID,
                    order_by: TrialOrderBy = TrialOrderBy.ASCENDING,
                    limit: Optional[int] = None) -> Iterator[Trial]:
        """The experiment's trials, sorted by `sort_by` in `order_by` order. `limit` is
        accepted for Determined's signature (it is a page size there; det answers in one
        page)."""
        resp = self._get()
        self._hydrate(resp.experiment)
        keys = {
            TrialSortBy.ID: lambda t: t.id,
            TrialSortBy.START_TIME: lambda t: t.start_time_ms,
            TrialSortBy.END_TIME: lambda t: t.end_time_ms,
            TrialSortBy.STATE: lambda t: types_pb2.State.Name(t.state),
            TrialSortBy.BATCHES_PROCESSED: lambda t: t.total_batches,
            TrialSortBy.RESTARTS: lambda t: t.restarts,
        }
        trials = sorted(resp.trials, key=keys[sort_by], reverse=order_by.value == "DESC")
        for t in trials:
            yield Trial._from_proto(t, self._session)

    def get_trials(self, sort_by: TrialSortBy = TrialSortBy.ID,
                   order_by: TrialOrderBy = TrialOrderBy.ASCENDING) -> List[Trial]:
        """Deprecated (as in Determined): list(list_trials())."""
        warnings.warn("Experiment.get_trials() is deprecated: use Experiment.list_trials()",
                      FutureWarning, stacklevel=2)
        return list(self.list_trials(sort_by, order_by))

    def await_first_trial(self, interval: float = 0.1,
                          timeout: Optional[float] = None) -> Trial:
        """Waits until the experiment has a trial that started, and returns the first to
        start. TimeoutError after `timeout` seconds (None: no limit; det's addition)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            resp = self._get()
            started = [t for t in resp.trials if t.start_time_ms]
            if started:
                first = min(started, key=lambda t: (t.start_time_ms, t.id))
                return Trial._from_proto(first, self._session)
            if deadline is not None and time.monotonic() + interval > deadline:
                raise TimeoutError(f"no trial of experiment {self.id} started within "
                                   f"{timeout} s")
            time.sleep(interval)

    # Checkpoints.

    def _all_checkpoints(self) -> List[Checkpoint]:
        got = self._get()
        self._hydrate(got.experiment)
        hparams = {t.id: Trial._from_proto(t, self._session).hparams for t in got.trials}
        resp = self._session.call("ListCheckpoints",
                                  api_pb2.ListCheckpointsRequest(experiment_id=self._id))
        return [Checkpoint(self._session, c, hparams.get(c.trial_id)) for c in resp.checkpoints]

    def list_checkpoints(self, sort_by: Optional[Union[str, CheckpointSortBy]] = None,
                         order_by: Optional[CheckpointOrderBy] = None,
                         max_results: Optional[int] = None) -> List[Checkpoint]:
        """The experiment's checkpoints (deleted ones included; see Checkpoint.state), sorted
        by `sort_by` (a CheckpointSortBy field or a validation metric's name; default the
        searcher's metric, best first) in `order_by` order; at most `max_results`."""
        cps = self._all_checkpoints()
        if not cps:
            return []
        cps = sort_checkpoints(cps, self.config or {}, sort_by, order_by)
        return cps[:max_results] if max_results is not None else cps

    def top_n_checkpoints(self, limit: int, sort_by: Optional[str] = None,
                          smaller_is_better: Optional[bool] = None) -> List[Checkpoint]:
        """The best checkpoint of each of the `limit` best trials, by validation metric
        `sort_by` (default: the searcher's metric and its smaller_is_better; with sort_by,
        smaller_is_better defaults to True). Only checkpoints whose files exist count.
        AssertionError when there is none (as in Determined)."""
        live = [c for c in self._all_checkpoints() if c.state.name == "COMPLETED"]
        if not live:
            raise AssertionError(f"No checkpoints found for experiment {self.id}")
        order = None
        if sort_by is not None:
            order = CheckpointOrderBy.ASC if smaller_is_better in (None, True) \
                else CheckpointOrderBy.DESC
        ordered = sort_checkpoints(live, self.config or {}, sort_by, order)
        seen: Set[int] = set()
        best: List[Checkpoint] = []
        for c in ordered:
            if c.trial_id not in seen:
                seen.add(c.trial_id)
                best.append(c)
        return best[:limit]

    def top_checkpoint(self, sort_by: Optional[str] = None,
                       smaller_is_better: Optional[bool] = None) -> Checkpoint:
        """The experiment's checkpoint with the best validation metric (see
        top_n_checkpoints)."""
        return self.top_n_checkpoints(1, sort_by=sort_by, smaller_is_better=smaller_is_better)[0]

    def __repr__(self) -> str:
        return f"Experiment(id={self.id})"
