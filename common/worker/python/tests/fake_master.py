"""A real gRPC WorkerService on loopback (port 0) that records what workers send: the
master's side of the worker channel for det's unit tests."""

import contextlib
import os
import tempfile
import threading
from concurrent import futures
from typing import Dict, Iterator, List, Optional, Tuple

import grpc
from google.protobuf import json_format

from det._proto import worker_pb2, worker_pb2_grpc


class FakeWorkerService(worker_pb2_grpc.WorkerServiceServicer):
    def __init__(self, world_size: int = 1) -> None:
        self.lock = threading.Condition()
        self.metrics: List[worker_pb2.ReportMetricsRequest] = []
        self.checkpoints: List[worker_pb2.ReportCheckpointRequest] = []
        self.preempt_requests: List[worker_pb2.ShouldPreemptRequest] = []
        self.world_size = world_size
        self.rounds: Dict[str, Dict[int, str]] = {}
        # What ShouldPreempt answers: None (wait until told), or (preempt, reason), or an
        # exception code with a message.
        self.preempt: Optional[tuple] = None
        self.preempt_error: Optional[tuple] = None
        # A status code every ReportMetrics answers with, when set.
        self.metrics_error: Optional[tuple] = None
        self.early_exits: List[worker_pb2.ReportEarlyExitRequest] = []
        self.best_requests: List[worker_pb2.GetExperimentBestValidationRequest] = []
        # What GetExperimentBestValidation answers (None: no trial reported the metric).
        self.best_validation: Optional[float] = None
        # (code, message) ReportEarlyExit / GetExperimentBestValidation abort with, when set
        # (UNIMPLEMENTED plays a master older than the package).
        self.early_exit_error: Optional[tuple] = None
        self.best_error: Optional[tuple] = None

    def ReportMetrics(self, request, context):
        with self.lock:
            if self.metrics_error:
                context.abort(*self.metrics_error)
            self.metrics.append(request)
            self.lock.notify_all()
        return worker_pb2.ReportMetricsResponse()

    def ReportCheckpoint(self, request, context):
        with self.lock:
            self.checkpoints.append(request)
            self.lock.notify_all()
        return worker_pb2.ReportCheckpointResponse()

    def Rendezvous(self, request, context):
        with self.lock:
            r = self.rounds.setdefault(request.key, {})
            r[request.auth.rank] = request.address
            self.lock.notify_all()
            done = self.lock.wait_for(lambda: len(r) == self.world_size,
                                      timeout=request.wait_ms / 1000.0)
            if not done:
                return worker_pb2.RendezvousResponse(ready=False)
            return worker_pb2.RendezvousResponse(
                ready=True, addresses=[r[i] for i in range(self.world_size)])

    def ShouldPreempt(self, request, context):
        with self.lock:
            self.preempt_requests.append(request)
            self.lock.notify_all()
            self.lock.wait_for(lambda: self.preempt is not None or self.preempt_error is not None,
                               timeout=request.wait_ms / 1000.0)
            if self.preempt_error is not None:
                context.abort(*self.preempt_error)
            preempt, reason = self.preempt or (False, "")
        return worker_pb2.ShouldPreemptResponse(preempt=preempt, reason=reason)

    def ReportEarlyExit(self, request, context):
        with self.lock:
            if self.early_exit_error:
                context.abort(*self.early_exit_error)
            self.early_exits.append(request)
            self.lock.notify_all()
        return worker_pb2.ReportEarlyExitResponse()

    def GetExperimentBestValidation(self, request, context):
        with self.lock:
            if self.best_error:
                context.abort(*self.best_error)
            self.best_requests.append(request)
            best = self.best_validation
        if best is None:
            return worker_pb2.GetExperimentBestValidationResponse(found=False)
        return worker_pb2.GetExperimentBestValidationResponse(found=True, value=best)

    def set_preempt(self, preempt: bool, reason: str) -> None:
        with self.lock:
            self.preempt = (preempt, reason)
            self.lock.notify_all()

    def set_preempt_error(self, code, message: str) -> None:
        with self.lock:
            self.preempt_error = (code, message)
            self.lock.notify_all()

    def wait_for(self, predicate, timeout: float = 30.0) -> bool:
        with self.lock:
            return self.lock.wait_for(predicate, timeout=timeout)

    def rows(self, group: Optional[str] = None):
        with self.lock:
            return [m for r in self.metrics for m in r.metrics if group is None or m.group == group]


@contextlib.contextmanager
def serve(world_size: int = 1, tls: Optional[Tuple[bytes, bytes]] = None) -> Iterator[tuple]:
    """A started FakeWorkerService and its "host:port"; with `tls` (private key PEM,
    certificate PEM) it speaks TLS only."""
    service = FakeWorkerService(world_size)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    worker_pb2_grpc.add_WorkerServiceServicer_to_server(service, server)
    if tls is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([tls]))
    server.start()
    try:
        yield service, f"127.0.0.1:{port}"
    finally:
        with service.lock:
            service.preempt = service.preempt or (False, "server stopping")
            service.lock.notify_all()
        server.stop(grace=None)


def trial_spec(checkpoint_dir: str, target_batches: int = 100,
               max_length: Tuple[int, str] = (100, "batches")) -> worker_pb2.TrialSpec:
    """The TrialSpec the master would build for trial 7 (experiment 3): global batch 64,
    640 records per epoch (10 batches), searcher metric validation_loss, checkpoints under
    `checkpoint_dir` ("" for an experiment without checkpoint_storage)."""
    value, unit = max_length
    spec = worker_pb2.TrialSpec(
        experiment_id=3, trial_id=7, run_id=1, trial_seed=42,
        hparams_json='{"global_batch_size": 64, "learning_rate": 0.1}',
        global_batch_size=64, records_per_epoch=640, batches_per_epoch=10, scheduling_unit=100,
        checkpoint_dir=checkpoint_dir, checkpoint_policy="best", aggregation_frequency=1,
        average_training_metrics=True, bucket_bytes=64 << 20, data_json="{}",
        target_batches=target_batches)
    spec.searcher.metric = "validation_loss"
    spec.searcher.smaller_is_better = True
    spec.searcher.max_length_value = value
    spec.searcher.max_length_unit = unit
    spec.searcher.max_length_batches = value * (10 if unit == "epochs" else 1)
    return spec


_launch_files: Optional["tempfile.TemporaryDirectory[str]"] = None  # Removed when the tests exit.


def launch_file(name: str, text: str) -> str:
    """A file holding `text`, as the agent writes the launch's variable `name`; its path. The
    files live in one temporary directory of this process, removed when it exits."""
    global _launch_files
    if _launch_files is None:
        _launch_files = tempfile.TemporaryDirectory(prefix="det-launch-files-")
    fd, path = tempfile.mkstemp(prefix=name + "-", suffix=".json", dir=_launch_files.name)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def allocation_env(master: str, checkpoint_dir: str, rank: int = 0, world_size: int = 1,
                   target_batches: int = 100, max_length: Tuple[int, str] = (100, "batches"),
                   spec: Optional[worker_pb2.TrialSpec] = None) -> Dict[str, str]:
    """The environment a det agent gives rank `rank` of trial 7 (experiment 3): `spec` (by
    default trial_spec(checkpoint_dir, target_batches, max_length)) in the file
    DET_TRIAL_SPEC_FILE names, and the user's copies of the hyperparameters and config in
    DET_HPARAMS_FILE and DET_EXPERIMENT_CONFIG_FILE (which det's own code never reads)."""
    if spec is None:
        spec = trial_spec(checkpoint_dir, target_batches, max_length)
    return {
        "DET_MASTER": master, "DET_TRIAL_ID": "7", "DET_EXPERIMENT_ID": "3",
        "DET_TRIAL_RUN_ID": "1", "DET_TRIAL_SEED": "42",
        "DET_HPARAMS_FILE": launch_file("DET_HPARAMS", spec.hparams_json),
        "DET_EXPERIMENT_CONFIG_FILE": launch_file(
            "DET_EXPERIMENT_CONFIG", '{"note": "the user\'s copy; det does not read it"}'),
        "DET_TRIAL_SPEC_FILE": launch_file(
            "DET_TRIAL_SPEC",
            json_format.MessageToJson(spec, preserving_proto_field_name=True, indent=None)),
        "DET_TRIAL_TARGET_BATCHES": str(spec.target_batches),
        "DET_LATEST_CHECKPOINT": spec.latest_checkpoint, "DET_ALLOCATION_ID": "7.1",
        "DET_ALLOCATION_TOKEN": "tok", "DET_AGENT_ID": "a1", "DET_SLOT_IDS": str(rank),
        "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world_size), "CROSS_RANK": "0", "CROSS_SIZE": "1",
    }


@contextlib.contextmanager
def environment(env: Dict[str, str]) -> Iterator[None]:
    """os.environ with `env` set (and DET_*/rank variables not in it removed)."""
    saved = dict(os.environ)
    for k in list(os.environ):
        if k.startswith("DET_") or k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                         "CROSS_RANK", "CROSS_SIZE", "MASTER_ADDR",
                                         "MASTER_PORT"):
            del os.environ[k]
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
