"""ProfilerContext: system metrics of the agent a trial runs on, sampled in the background
while `core.profiler.on()` (Determined's det.core.ProfilerContext).

Determined stores them in metric groups of their own ("cpu", "memory", "disk", "network",
"gpu"); det's master accepts the groups training, validation, timings and progress only
(master/metrics/metrics_manager.cc), so they are reported in the "timings" group, each
averaged over `samples_per_report` samples, as
  system/<agent>/cpu/cpu_util_simple          percent
  system/<agent>/memory/memory_free           bytes
  system/<agent>/disk/disk_iops               operations per second
  system/<agent>/disk/disk_throughput_read    bytes per second (and _write)
  system/<agent>/disk/<mount>/disk_util       percent used
  system/<agent>/network/net_throughput_sent  bytes per second (and _recv)
  system/<agent>/gpu/<GPU uuid>/gpu_util      percent (and gpu_free_memory, bytes)
at the trial's latest reported batch, where GET /api/v1/trials/<id>/timings finds them
(there is no profiler chart for them yet). GPU metrics come from pynvml when it is
installed, else from `nvidia-smi`; without either there are none."""

import shutil
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from det import _client
from det.core import _distributed, _train

# The group the samples go to, and the prefix of their names.
GROUP = "timings"
PREFIX = "system"
_DISK_PATHS = ["/"]


class ProfilerContext:
    """Turns system-metrics collection on and off. Only the local chief (local_rank 0) of
    each agent collects: the metrics are the machine's. Thread-safe."""

    def __init__(self, client: _client.WorkerClient, dist: _distributed.DistributedContext,
                 train: _train.TrainContext, agent_id: str) -> None:
        self._client = client
        self._dist = dist
        self._train = train
        self._agent_id = agent_id or "agent"
        self._lock = threading.Lock()
        self._collector: Optional["_Collector"] = None  # GUARDED_BY(_lock)

    def on(self, sampling_interval: float = 1, samples_per_report: int = 10) -> None:
        """Starts sampling every `sampling_interval` seconds (at least 0.1) and reporting the
        average of every `samples_per_report` samples (an int >= 1). Idempotent. ValueError
        for bad arguments; RuntimeError when the psutil package is missing."""
        if isinstance(sampling_interval, bool) or \
                not isinstance(sampling_interval, (int, float)) or sampling_interval < 0.1:
            raise ValueError(f"profiler.on: sampling_interval must be >= 0.1 seconds, got "
                             f"{sampling_interval!r}")
        if isinstance(samples_per_report, bool) or not isinstance(samples_per_report, int) \
                or samples_per_report < 1:
            raise ValueError(f"profiler.on: samples_per_report must be an int >= 1, got "
                             f"{samples_per_report!r}")
        with self._lock:
            if self._collector is not None or self._dist.local_rank != 0:
                return
            self._collector = _Collector(self._report, self._agent_id, float(sampling_interval),
                                         samples_per_report)
            self._collector.start()

    def off(self) -> None:
        """Stops sampling (the samples since the last report are dropped) and waits for a
        report under way to end (a few seconds at most). Idempotent."""
        with self._lock:
            collector, self._collector = self._collector, None
        if collector is not None:
            collector.stop()
            collector.join(timeout=5.0)

    @property
    def is_on(self) -> bool:
        with self._lock:
            return self._collector is not None

    def _close(self) -> None:
        self.off()

    def _report(self, values: Dict[str, float]) -> None:
        self._client.report_metrics([(GROUP, self._train.steps_completed, values)])


class DummyProfilerContext(ProfilerContext):
    """Collects nothing: for code run without a cluster, where there is no master to report
    to (Determined's DummyProfilerContext); on() says so once, on stderr."""

    def __init__(self) -> None:
        self._said = False

    def on(self, sampling_interval: float = 1, samples_per_report: int = 10) -> None:
        if not self._said:
            self._said = True
            print("det: profiler.on(): not in a det allocation, so no system metrics are "
                  "collected", file=sys.stderr, flush=True)

    def off(self) -> None:
        pass

    @property
    def is_on(self) -> bool:
        return False

    def _close(self) -> None:
        pass


class _Collector(threading.Thread):
    def __init__(self, report: Callable[[Dict[str, float]], None], agent_id: str,
                 interval: float, samples_per_report: int) -> None:
        super().__init__(name="det-profiler", daemon=True)
        try:
            import psutil
        except ImportError:
            raise RuntimeError("profiler.on: needs the psutil package (Debian: python3-psutil) "
                               "to read system metrics") from None
        self._psutil = psutil
        self._report = report
        self._prefix = f"{PREFIX}/{agent_id}/"
        self._interval = interval
        self._samples_per_report = samples_per_report
        self._stop_event = threading.Event()
        self._gpus = _GpuReader()
        psutil.cpu_percent()  # The first call only starts the measurement.
        self._last = (time.monotonic(), psutil.disk_io_counters(), psutil.net_io_counters())

    def stop(self) -> None:
        self._stop_event.set()

    def _sample(self) -> Dict[str, float]:
        ps = self._psutil
        now, disk, net = time.monotonic(), ps.disk_io_counters(), ps.net_io_counters()
        then, disk0, net0 = self._last
        self._last = (now, disk, net)
        dt = max(now - then, 1e-6)
        out = {"cpu/cpu_util_simple": float(ps.cpu_percent()),
               "memory/memory_free": float(ps.virtual_memory().available)}
        if disk is not None and disk0 is not None:
            out["disk/disk_iops"] = ((disk.read_count + disk.write_count) -
                                     (disk0.read_count + disk0.write_count)) / dt
            out["disk/disk_throughput_read"] = (disk.read_bytes - disk0.read_bytes) / dt
            out["disk/disk_throughput_write"] = (disk.write_bytes - disk0.write_bytes) / dt
        for path in _DISK_PATHS:
            try:
                out[f"disk/{path.strip('/') or 'root'}/disk_util"] = \
                    float(ps.disk_usage(path).percent)
            except OSError:
                pass
        if net is not None and net0 is not None:
            out["network/net_throughput_sent"] = (net.bytes_sent - net0.bytes_sent) / dt
            out["network/net_throughput_recv"] = (net.bytes_recv - net0.bytes_recv) / dt
        for uuid, (util, free) in self._gpus.read().items():
            out[f"gpu/{uuid}/gpu_util"] = util
            out[f"gpu/{uuid}/gpu_free_memory"] = free
        return out

    def run(self) -> None:
        while not self._stop_event.is_set():
            samples: List[Dict[str, float]] = []
            for _ in range(self._samples_per_report):
                next_at = time.monotonic() + self._interval
                samples.append(self._sample())
                if self._stop_event.wait(max(0.0, next_at - time.monotonic())):
                    return
            sums: Dict[str, List[float]] = {}
            for s in samples:
                for k, v in s.items():
                    sums.setdefault(k, []).append(v)
            try:
                self._report({self._prefix + k: sum(v) / len(v) for k, v in sums.items()})
            except _client.MasterError as e:
                print(f"det: profiler: stopped: {e}", file=sys.stderr, flush=True)
                return


class _GpuReader:
    """(utilization percent, free memory bytes) per GPU uuid, from pynvml or nvidia-smi."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: Dict[str, Any] = {}
        self._smi = None
        try:
            import pynvml
            pynvml.nvmlInit()
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                uuid = pynvml.nvmlDeviceGetUUID(h)
                self._handles[uuid.decode() if isinstance(uuid, bytes) else str(uuid)] = h
            self._nvml = pynvml
        except Exception:  # noqa: B902 (no pynvml, or no usable NVML: try nvidia-smi)
            self._handles = {}
            self._smi = shutil.which("nvidia-smi")

    def read(self) -> Dict[str, tuple]:
        if self._nvml is not None:
            try:
                return {u: (float(self._nvml.nvmlDeviceGetUtilizationRates(h).gpu),
                            float(self._nvml.nvmlDeviceGetMemoryInfo(h).free))
                        for u, h in self._handles.items()}
            except Exception:  # noqa: B902 (a GPU gone bad: stop reading GPUs)
                self._nvml = None
                return {}
        if self._smi is None:
            return {}
        try:
            text = subprocess.run(
                [self._smi, "--query-gpu=uuid,utilization.gpu,memory.free",
                 "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10,
                check=True).stdout
        except (OSError, subprocess.SubprocessError):
            self._smi = None
            return {}
        out: Dict[str, Tuple[Any, ...]] = {}
        for line in text.strip().splitlines():
            parts = [p.strip() for p in line.split(",")]
            try:
                out[parts[0]] = (float(parts[1]), float(parts[2]) * 1024 * 1024)
            except (IndexError, ValueError):
                continue
        return out
