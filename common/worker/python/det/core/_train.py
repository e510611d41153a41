"""TrainContext: training and validation metrics, progress and timings of the trial
(Determined's det.core.TrainContext)."""

import contextlib
import enum
import math
import numbers
import pathlib
import sys
import threading
import time
from typing import Any, Dict, Iterator, Mapping, Optional

from det import _client, _info
from det.core import _tensorboard, _timings


# The metric groups the master accepts (master/metrics/metrics_manager.cc, kGroups).
METRIC_GROUPS = ("training", "validation", "timings", "progress")


def _number(group: str, steps: int, name: Any, value: Any) -> float:
    if not isinstance(name, str) or not name:
        raise TypeError(f"{group} metrics at steps_completed={steps}: metric names must be "
                        f"non-empty strings, got {name!r}")
    if isinstance(value, (str, bytes)) or value is None:
        raise TypeError(f"{group} metric '{name}' at steps_completed={steps}: expected a number "
                        f"(NaN and infinities are numbers), got {type(value).__name__} {value!r}")
    if isinstance(value, numbers.Real):
        return float(value)
    # 0-d or 1-element tensors and numpy arrays.
    item = getattr(value, "item", None)
    if callable(item):
        try:
            v = item()
        except (ValueError, RuntimeError):
            v = None
        if isinstance(v, numbers.Real):
            return float(v)
    raise TypeError(f"{group} metric '{name}' at steps_completed={steps}: expected a number "
                    f"(NaN and infinities are numbers), got {type(value).__name__} {value!r}")


def check_metrics(group: str, steps: int, metrics: Mapping[str, Any]) -> Dict[str, float]:
    """`metrics` as floats. TypeError naming the metric for a value that is not a number."""
    if not isinstance(metrics, Mapping):
        raise TypeError(f"{group} metrics at steps_completed={steps}: expected a dict of "
                        f"name -> number, got {type(metrics).__name__}")
    return {k: _number(group, steps, k, v) for k, v in metrics.items()}


class EarlyExitReason(enum.Enum):
    """Why a trial stops before its length (Determined's EarlyExitReason)."""

    INVALID_HP = "EXITED_REASON_INVALID_HP"
    # Generally unnecessary: just exit.
    USER_REQUESTED_STOP = "EXITED_REASON_USER_REQUESTED_STOP"


def _missing_in_master(what: str, rpc: str) -> NotImplementedError:
    return NotImplementedError(
        f"{what} needs the master to {rpc}, and det's worker channel (WorkerService in "
        "proto/worker.proto: ReportMetrics, ReportCheckpoint, Rendezvous, ShouldPreempt, "
        "ReportEarlyExit, GetExperimentBestValidation) has "
        "no such call yet")


def _steps(steps_completed: Any) -> int:
    if isinstance(steps_completed, bool) or not isinstance(steps_completed, numbers.Integral) \
            or steps_completed < 0:
        raise TypeError(f"steps_completed: expected an integer >= 0, got {steps_completed!r}")
    return int(steps_completed)


class TrainContext:
    """Reports of the trial's training. Metrics are reported by the rank that calls (report
    from the chief, as in Determined, unless each rank should report its own). Thread-safe
    where its client is."""

    def __init__(self, client: _client.WorkerClient, info: Optional[_info.TrialInfo], *,
                 rank: int = 0,
                 tensorboard_mode: _tensorboard.TensorboardMode =
                 _tensorboard.TensorboardMode.AUTO,
                 tensorboard: Optional[_tensorboard.TensorboardFiles] = None) -> None:
        self._client = client
        self._info = info
        self._rank = rank
        self._timings = _timings.Timings()
        self._last_steps: Optional[int] = None
        self._last_time = time.monotonic()
        self._lock = threading.Lock()
        self._max_steps = 0  # GUARDED_BY(_lock)
        self._tensorboard_mode = _tensorboard.TensorboardMode(tensorboard_mode)
        self._tensorboard = tensorboard
        self._warned: set = set()
        # The last validation report: (steps, values); the searcher skips a duplicate.
        self.last_validation: Optional[tuple] = None
        # What set_status() said last ("" before).
        self.status = ""

    @property
    def steps_completed(self) -> int:
        """The largest steps_completed reported so far by this process (0 before)."""
        with self._lock:
            return self._max_steps

    def _reported(self, steps: int) -> None:
        with self._lock:
            self._max_steps = max(self._max_steps, steps)
        if self._tensorboard_mode == _tensorboard.TensorboardMode.AUTO and self._tensorboard:
            try:
                self._tensorboard.sync(lambda _: True, lambda p, _: p, self._rank)
            except (OSError, RuntimeError) as e:
                self._warn_once("tensorboard", f"det: TensorBoard files not uploaded: {e}")

    def _close(self) -> None:
        """At the context's close, after the last upload (each report's in
        TensorboardMode.AUTO, the script's in MANUAL): det's own temporary TensorBoard
        directory is removed."""
        if self._tensorboard is not None:
            self._tensorboard.close()

    def _warn_once(self, key: str, text: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            print(text, file=sys.stderr, flush=True)

    # Timings ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def timer(self, name: str) -> Iterator[None]:
        """Times the block as one sample of phase `name` (e.g. "dataloader_next",
        "to_device", "train_batch", "step_lr_schedulers", "from_device")."""
        with self._timings.time(name):
            yield

    def record_timing(self, name: str, seconds: float) -> None:
        """Adds one sample of phase `name`."""
        self._timings.add(name, seconds)

    # Reports ---------------------------------------------------------------------------

    def report_training_metrics(self, steps_completed: int, metrics: Mapping[str, Any],
                                batch_metrics: Optional[Any] = None) -> None:
        """Training metrics after `steps_completed` batches (global steps), with the
        timings sampled since the last report (group "timings", plus batches_per_second
        and samples_per_second when the global batch size is known), in one call.
        TypeError naming the metric for a value that is not a number."""
        steps = _steps(steps_completed)
        values = check_metrics("training", steps, metrics)
        if batch_metrics:
            self._warn_once("batch_metrics", "det: report_training_metrics: batch_metrics are "
                            "not stored (det's master keeps the metrics of each report, not of "
                            "each batch); the aggregated metrics are")
        now = time.monotonic()
        timings = self._timings.take_summary()
        if self._last_steps is not None and steps > self._last_steps and now > self._last_time:
            rate = (steps - self._last_steps) / (now - self._last_time)
            timings["batches_per_second"] = rate
            if self._info is not None and self._info.global_batch_size > 0:
                timings["samples_per_second"] = rate * self._info.global_batch_size
        self._last_steps, self._last_time = steps, now
        reports = [("training", steps, values)]
        if timings:
            reports.append(("timings", steps, timings))
        self._client.report_metrics(reports)
        self._reported(steps)

    def report_validation_metrics(self, steps_completed: int,
                                  metrics: Mapping[str, Any]) -> None:
        """Validation metrics after `steps_completed` batches; the searcher judges the trial
        by searcher.metric among them. TypeError naming the metric for a value that is not
        a number."""
        steps = _steps(steps_completed)
        values = check_metrics("validation", steps, metrics)
        self._client.report_metrics([("validation", steps, values)])
        self.last_validation = (steps, values)
        self._reported(steps)

    def report_metrics(self, group: str, steps_completed: int,
                       metrics: Mapping[str, Any]) -> None:
        """Metrics of one of the groups the master stores: "training", "validation",
        "timings" or "progress" (METRIC_GROUPS); ValueError naming them for any other
        group, before anything is sent (the master would refuse it with
        INVALID_ARGUMENT). Unlike report_validation_metrics, a "validation" report here
        is not kept as the last validation."""
        steps = _steps(steps_completed)
        if not isinstance(group, str) or group not in METRIC_GROUPS:
            raise ValueError(f"group: expected one of {', '.join(METRIC_GROUPS)}, "
                             f"got {group!r}")
        self._client.report_metrics([(group, steps, check_metrics(group, steps, metrics))])
        self._reported(steps)

    def report_progress(self, progress: float) -> None:
        """The trial's progress, 0..1 of the length the searcher asked for (recorded as
        batches: progress x target batches)."""
        if isinstance(progress, bool) or not isinstance(progress, numbers.Real) \
                or math.isnan(progress) or not 0 <= progress <= 1:
            raise ValueError(f"progress: expected a number in [0, 1], got {progress!r}")
        target = self._info.target_batches if self._info is not None else 0
        batches = int(round(float(progress) * target))
        self._client.report_metrics([("progress", batches, {"progress": float(progress)})])

    def report_batches(self, batches: int) -> None:
        """Progress as batches trained (what searcher operations report)."""
        target = self._info.target_batches if self._info is not None else 0
        fraction = min(1.0, batches / target) if target > 0 else 0.0
        self._client.report_metrics([("progress", _steps(batches), {"progress": fraction})])

    # Status, early exit, the experiment's best --------------------------------------------

    def set_status(self, status: str) -> None:
        """A short user-facing string saying what the trial is doing. det's master has no
        field for it: it is written to the trial's log ("det: trial status: ..."), where
        `det trial logs` shows it, and kept as .status."""
        if not isinstance(status, str):
            raise TypeError(f"set_status: expected a string, got {type(status).__name__}")
        self.status = status
        print(f"det: trial status: {status}", flush=True)

    def report_early_exit(self, reason: EarlyExitReason) -> None:
        """Says why the trial stops early (Determined's report_early_exit).

        USER_REQUESTED_STOP: the trial ends when the script exits 0, which det's master
        records as a completed trial (nothing is sent; a line in the trial log says so).
        INVALID_HP: tells the master the trial's hyperparameters are invalid, so that it ends
        the trial as invalid and its searcher creates a replacement, as Determined's do;
        call it from the chief, then exit 0 (leaving det.core.init()'s `with` block with
        det.InvalidHP does both). NotImplementedError when the master has no call for it (a
        master older than this package)."""
        reason = EarlyExitReason(reason)
        if reason == EarlyExitReason.USER_REQUESTED_STOP:
            print("det: report_early_exit(USER_REQUESTED_STOP): the trial ends when this "
                  "process exits 0", flush=True)
            return
        try:
            self._client.report_early_exit(reason.name)
        except _client.UnimplementedError as e:
            raise NotImplementedError(
                f"report_early_exit(EarlyExitReason.INVALID_HP) needs the master to mark the "
                f"trial's hyperparameters invalid and replace it, and it cannot: {e}") from None

    def get_experiment_best_validation(self) -> Optional[float]:
        """The best searcher.metric value any trial of this trial's experiment (this one
        included) has reported in validation so far: the smallest, or the largest when
        searcher.smaller_is_better is false, as the master answers it
        (WorkerService.GetExperimentBestValidation). None while none has, and off-cluster.
        MasterError when the master refuses or cannot be reached."""
        try:
            return self._client.get_experiment_best_validation()
        except _client.UnimplementedError as e:
            raise NotImplementedError(
                f"get_experiment_best_validation() needs a master that answers the "
                f"experiment's best searcher metric to a worker: {e}") from None

    def set_metadata(self, metadata: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """Determined: replaces the run's metadata on the master. NotImplementedError on det,
        whose master stores no run metadata."""
        raise _missing_in_master("set_metadata()", "store a run's metadata")

    def get_metadata(self) -> Optional[Dict[str, Any]]:
        """Determined: the run's metadata from the master. NotImplementedError on det."""
        raise _missing_in_master("get_metadata()", "store a run's metadata")

    # TensorBoard ---------------------------------------------------------------------------

    def get_tensorboard_path(self) -> pathlib.Path:
        """The local directory to write TensorBoard files into (this process's own, created
        on the first call); they are uploaded to
        <checkpoint storage>/tensorboard/experiment/<id>/trial/<id>/ after each metrics report
        (TensorboardMode.AUTO) or by upload_tensorboard_files() (MANUAL)."""
        if self._tensorboard is None:
            raise ValueError("get_tensorboard_path: this context has no TensorBoard directory")
        return self._tensorboard.local_dir

    def upload_tensorboard_files(
            self, selector: _tensorboard.Selector = lambda _: True,
            mangler: _tensorboard.Mangler = lambda p, __: p) -> None:
        """Copies the files under get_tensorboard_path() that `selector(relative path)` picks
        and that are new or changed since the last upload to the checkpoint storage, at
        mangler(relative path, rank) under the trial's TensorBoard directory. Only with
        det.core.init(tensorboard_mode=TensorboardMode.MANUAL) (RuntimeError otherwise, as in
        Determined); RuntimeError when the experiment has no checkpoint_storage."""
        if self._tensorboard_mode == _tensorboard.TensorboardMode.AUTO:
            raise RuntimeError("upload_tensorboard_files can only be used in MANUAL mode "
                               "(det.core.init(tensorboard_mode=TensorboardMode.MANUAL))")
        if self._tensorboard is None:
            raise ValueError("upload_tensorboard_files: this context has no TensorBoard "
                             "directory")
        self._tensorboard.sync(selector, mangler, self._rank)


class DummyTrainContext(TrainContext):
    """Reports printed instead of sent, for code run without a cluster (Determined's
    DummyTrainContext); TensorBoard files stay in `tensorboard_path`."""

    def __init__(self, tensorboard_path: Optional[pathlib.Path] = None) -> None:
        local = pathlib.Path(tensorboard_path) if tensorboard_path is not None else None
        super().__init__(_client.OffClusterClient(), None,
                         tensorboard_mode=_tensorboard.TensorboardMode.MANUAL,
                         tensorboard=_tensorboard.TensorboardFiles(local, None))

    def upload_tensorboard_files(
            self, selector: _tensorboard.Selector = lambda _: True,
            mangler: _tensorboard.Mangler = lambda p, __: p) -> None:
        print("det (off-cluster, not uploaded): TensorBoard files stay in "
              f"{self.get_tensorboard_path()}", flush=True)
