"""Phase timings (Determined's dataloader_next, to_device, train_batch, step_lr_schedulers,
from_device, reduce_metrics, or any name), summarized per report exactly as the C++
harness's common/worker/cpp/harness/timings does: <name>_mean_ms, _p50_ms, _p90_ms, _p99_ms (nearest
rank), _max_ms and _count, in the "timings" metrics group."""

import contextlib
import math
import threading
import time
from typing import Dict, Iterator, List


def summarize(samples: Dict[str, List[float]]) -> Dict[str, float]:
    """The summary of `samples` (name -> milliseconds)."""
    out: Dict[str, float] = {}
    for name, values in samples.items():
        if not values:
            continue
        v = sorted(values)

        def percentile(p: float) -> float:
            rank = int(math.ceil(p / 100.0 * len(v)))
            return v[min(max(rank, 1), len(v)) - 1]

        out[name + "_mean_ms"] = sum(v) / len(v)
        out[name + "_p50_ms"] = percentile(50)
        out[name + "_p90_ms"] = percentile(90)
        out[name + "_p99_ms"] = percentile(99)
        out[name + "_max_ms"] = v[-1]
        out[name + "_count"] = float(len(v))
    return out


class Timings:
    """Samples of named phases since the last summary. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: Dict[str, List[float]] = {}

    def add(self, name: str, seconds: float) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"timing name: expected a non-empty string, got {name!r}")
        with self._lock:
            self._samples.setdefault(name, []).append(float(seconds) * 1000.0)

    @contextlib.contextmanager
    def time(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def take_summary(self) -> Dict[str, float]:
        """The summary of every phase sampled since the last call; forgets the samples."""
        with self._lock:
            samples, self._samples = self._samples, {}
        return summarize(samples)
