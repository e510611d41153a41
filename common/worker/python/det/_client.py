"""The worker channel: what this process tells the master (WorkerService in
proto/worker.proto), authenticated by its allocation token. Off-cluster (no DET_MASTER), a
printing stand-in says what would have been reported instead."""

import json
import os
import sys
import threading
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from det._info import ClusterEnvironmentError

# A report: (group, total_batches, values).
Report = Tuple[str, int, Mapping[str, float]]


class MasterError(RuntimeError):
    """The master refused a call, or could not be reached before the deadline; the message
    names the call, the master and the master's reason."""


class AllocationEndedError(MasterError):
    """The allocation this process belongs to has ended: nothing more can be reported."""


class UnimplementedError(MasterError):
    """The master does not offer the call (a master older than this package)."""


class WorkerClient:
    """The calls of WorkerService. Thread-safe."""

    def report_metrics(self, reports: Sequence[Report]) -> None:
        raise NotImplementedError

    def report_checkpoint(self, uuid: str, storage_path: str, total_batches: int,
                          resources: Mapping[str, int], metadata_json: str) -> None:
        raise NotImplementedError

    def rendezvous(self, key: str, value: str, timeout_s: float) -> List[str]:
        """Publishes `value` for this rank in round `key`; every rank's value, by rank, once
        all ranks have called."""
        raise NotImplementedError

    def should_preempt(self, wait_ms: int) -> Tuple[bool, str]:
        """(preempt, reason), waiting up to `wait_ms` for preempt to become true."""
        raise NotImplementedError

    def report_early_exit(self, reason: str) -> None:
        """Tells the master why the trial stops before its length; `reason` is the name of a
        det.core.EarlyExitReason ("INVALID_HP", "USER_REQUESTED_STOP"). UnimplementedError
        when the master (or this package's worker.proto) has no such call."""
        raise NotImplementedError

    def get_experiment_best_validation(self) -> Optional[float]:
        """The best searcher.metric validation value of this trial's experiment so far (as
        searcher.smaller_is_better says), None while no trial reported one."""
        raise NotImplementedError

    def close(self) -> None:
        pass


def _now_ms() -> int:
    return int(time.time() * 1000)


MASTER_CERT_FILE_ENV = "DET_MASTER_CERT_FILE"


def master_channel(grpc, master: str, environ=None):
    """A channel to the master, chosen as the C++ harness chooses (common/rpc/rpc.h): TLS
    verifying the master against the CA in DET_MASTER_CERT_FILE when it is set (the agent
    passes its master_cert_file on), else plaintext. An unreadable file is an error naming
    it, never a silent fall back to plaintext."""
    environ = os.environ if environ is None else environ
    options = [("grpc.max_receive_message_length", 256 << 20),
               ("grpc.initial_reconnect_backoff_ms", 200),
               ("grpc.max_reconnect_backoff_ms", 2000)]
    path = environ.get(MASTER_CERT_FILE_ENV, "")
    if not path:
        return grpc.insecure_channel(master, options=options)
    try:
        with open(path, "rb") as f:
            pem = f.read()
    except OSError as e:
        raise ClusterEnvironmentError(
            f"{MASTER_CERT_FILE_ENV}: cannot read {path!r}: {e.strerror}") from None
    return grpc.secure_channel(master, grpc.ssl_channel_credentials(root_certificates=pem),
                               options=options)


class GrpcWorkerClient(WorkerClient):
    """WorkerService over gRPC. Transient failures (master restarting, connection lost) are
    retried with backoff until `give_up_after_s` has passed."""

    _CALL_TIMEOUT_S = 30.0

    def __init__(self, master: str, allocation_id: str, token: str, rank: int, trial_id: int,
                 give_up_after_s: float = 600.0) -> None:
        import grpc  # noqa: F401 (fails early with a clear ImportError when missing)
        from det._proto import worker_pb2, worker_pb2_grpc
        self._grpc = grpc
        self._pb = worker_pb2
        self._master = master
        self._trial_id = trial_id
        self._give_up_after_s = give_up_after_s
        self._channel = master_channel(grpc, master)
        self._stub = worker_pb2_grpc.WorkerServiceStub(self._channel)
        self._auth = worker_pb2.WorkerAuth(allocation_id=allocation_id, token=token, rank=rank)
        self._closed = False

    def _call(self, name: str, request, timeout_s: float = _CALL_TIMEOUT_S):
        grpc = self._grpc
        transient = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                     grpc.StatusCode.ABORTED, grpc.StatusCode.CANCELLED}
        give_up = time.monotonic() + self._give_up_after_s
        backoff = 0.2
        warned = False
        while True:
            try:
                return getattr(self._stub, name)(request, timeout=timeout_s)
            except grpc.RpcError as e:
                code, details = e.code(), e.details()
                if self._closed:
                    raise MasterError(f"{name}: the connection to the master was closed") from None
                # The master says "has ended" (ShouldPreempt) or, for the other calls,
                # PERMISSION_DENIED "allocation X is not running".
                if (code == grpc.StatusCode.FAILED_PRECONDITION and "has ended" in (details or "")) \
                        or (code == grpc.StatusCode.PERMISSION_DENIED
                            and "is not running" in (details or "")):
                    raise AllocationEndedError(
                        f"{name} to master {self._master}: {details}; this process's allocation "
                        "is over, so nothing more can be reported") from None
                if code == grpc.StatusCode.UNIMPLEMENTED:
                    raise UnimplementedError(
                        f"{name} to master {self._master}: the master does not offer it "
                        f"({details})") from None
                if code not in transient or time.monotonic() + backoff > give_up:
                    raise MasterError(
                        f"{name} to master {self._master} failed: {code.name}: {details}") from None
                if not warned:
                    print(f"det: {name} to master {self._master}: {code.name}: {details}; retrying",
                          file=sys.stderr, flush=True)
                    warned = True
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    def report_metrics(self, reports: Sequence[Report]) -> None:
        if not reports:
            return
        from det._proto import types_pb2
        rows = [types_pb2.Metrics(trial_id=self._trial_id, group=g, total_batches=int(b),
                                  values={k: float(v) for k, v in values.items()},
                                  report_time_ms=_now_ms())
                for g, b, values in reports]
        self._call("ReportMetrics", self._pb.ReportMetricsRequest(
            auth=self._auth, trial_id=self._trial_id, metrics=rows))

    def report_checkpoint(self, uuid: str, storage_path: str, total_batches: int,
                          resources: Mapping[str, int], metadata_json: str) -> None:
        from det._proto import types_pb2
        c = types_pb2.Checkpoint(uuid=uuid, trial_id=self._trial_id, total_batches=total_batches,
                                 report_time_ms=_now_ms(), resources=dict(resources),
                                 storage_path=storage_path, metadata_json=metadata_json)
        self._call("ReportCheckpoint", self._pb.ReportCheckpointRequest(auth=self._auth,
                                                                        checkpoint=c))

    def rendezvous(self, key: str, value: str, timeout_s: float) -> List[str]:
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise MasterError(f"Rendezvous '{key}' at master {self._master}: not every rank "
                                  f"arrived within {timeout_s:.0f} s")
            wait = min(left, 60.0)
            try:
                resp = self._call("Rendezvous", self._pb.RendezvousRequest(
                    auth=self._auth, address=value, key=key, wait_ms=int(wait * 1000)),
                    timeout_s=wait)
            except MasterError as e:
                if "DEADLINE_EXCEEDED" in str(e):
                    continue  # Not every rank is there yet: ask again.
                raise
            if resp.ready:
                return list(resp.addresses)

    def should_preempt(self, wait_ms: int) -> Tuple[bool, str]:
        resp = self._call("ShouldPreempt",
                          self._pb.ShouldPreemptRequest(auth=self._auth, wait_ms=wait_ms),
                          timeout_s=self._CALL_TIMEOUT_S + wait_ms / 1000.0)
        return resp.preempt, resp.reason

    # The call a master with early exits offers (WorkerService.ReportEarlyExit, enum
    # EarlyExitReason { EARLY_EXIT_REASON_<NAME> }); see docs/coming-from-determined.md.
    EARLY_EXIT_CALL = "ReportEarlyExit"

    def report_early_exit(self, reason: str) -> None:
        request_type = getattr(self._pb, f"{self.EARLY_EXIT_CALL}Request", None)
        enum_value = getattr(self._pb, f"EARLY_EXIT_REASON_{reason}", None)
        if request_type is None or enum_value is None:
            raise UnimplementedError(
                f"{self.EARLY_EXIT_CALL}({reason}) to master {self._master}: det's worker "
                "channel (WorkerService in proto/worker.proto) has no such call yet")
        self._call(self.EARLY_EXIT_CALL, request_type(auth=self._auth, reason=enum_value))

    def get_experiment_best_validation(self) -> Optional[float]:
        resp = self._call("GetExperimentBestValidation",
                          self._pb.GetExperimentBestValidationRequest(auth=self._auth))
        return resp.value if resp.found else None

    def close(self) -> None:
        self._closed = True
        self._channel.close()


class OffClusterClient(WorkerClient):
    """Outside a det allocation: prints each call, as one line, to `out` (stdout)."""

    def __init__(self, out=None) -> None:
        self._out = out
        self._lock = threading.Lock()

    def _print(self, text: str) -> None:
        with self._lock:
            print(f"det (off-cluster, not reported): {text}", file=self._out or sys.stdout,
                  flush=True)

    def report_metrics(self, reports: Sequence[Report]) -> None:
        for g, b, values in reports:
            self._print(f"{g} metrics at batch {b}: {json.dumps(dict(values), sort_keys=True)}")

    def report_checkpoint(self, uuid: str, storage_path: str, total_batches: int,
                          resources: Mapping[str, int], metadata_json: str) -> None:
        self._print(f"checkpoint {uuid} at batch {total_batches} in {storage_path}: "
                    f"{len(resources)} file(s), {sum(resources.values())} bytes, "
                    f"metadata {metadata_json or '{}'}")

    def rendezvous(self, key: str, value: str, timeout_s: float) -> List[str]:
        return [value]

    def should_preempt(self, wait_ms: int) -> Tuple[bool, str]:
        return False, ""

    def report_early_exit(self, reason: str) -> None:
        self._print(f"early exit: {reason}")

    def get_experiment_best_validation(self) -> Optional[float]:
        return None  # No experiment: no other trial has reported anything.
