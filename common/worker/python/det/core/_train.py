"""TrainContext: training and validation metrics, progress and timings of the trial
(Determined's det.core.TrainContext)."""

import contextlib
import math
import numbers
import time
from typing import Any, Dict, Iterator, Mapping, Optional

from det import _client, _info
from det.core import _timings


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


def _steps(steps_completed: Any) -> int:
    if isinstance(steps_completed, bool) or not isinstance(steps_completed, numbers.Integral) \
            or steps_completed < 0:
        raise TypeError(f"steps_completed: expected an integer >= 0, got {steps_completed!r}")
    return int(steps_completed)


class TrainContext:
    """Reports of the trial's training. Metrics are reported by the rank that calls (report
    from the chief, as in Determined, unless each rank should report its own). Thread-safe
    where its client is."""

    def __init__(self, client: _client.WorkerClient, info: Optional[_info.TrialInfo]) -> None:
        self._client = client
        self._info = info
        self._timings = _timings.Timings()
        self._last_steps: Optional[int] = None
        self._last_time = time.monotonic()
        # The last validation report: (steps, values); the searcher skips a duplicate.
        self.last_validation: Optional[tuple] = None

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

    def report_validation_metrics(self, steps_completed: int,
                                  metrics: Mapping[str, Any]) -> None:
        """Validation metrics after `steps_completed` batches; the searcher judges the trial
        by searcher.metric among them. TypeError naming the metric for a value that is not
        a number."""
        steps = _steps(steps_completed)
        values = check_metrics("validation", steps, metrics)
        self._client.report_metrics([("validation", steps, values)])
        self.last_validation = (steps, values)

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
