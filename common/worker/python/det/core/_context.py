"""det.core.init() and the Context it yields (Determined's det.core.Context)."""

import os
import pathlib
import sys
import tempfile
from typing import Any, Dict, Optional, Union

from det import _client, _info
from det.pytorch._harness.errors import InvalidHP
from det.core import (_checkpoint, _distributed, _preempt, _profiler, _searcher, _tensorboard,
                      _train)


class Context:
    """What a Core API script uses: .distributed, .train, .checkpoint, .preempt, .searcher,
    .profiler, and .info (the ClusterInfo; None off-cluster). A context manager: leaving it
    stops the preemption poller and the profiler and closes the connection to the master.
    det.core.init() returns it started; start() and entering it again do nothing more."""

    def __init__(self, *, client: _client.WorkerClient,
                 distributed: _distributed.DistributedContext,
                 info: Optional[_info.ClusterInfo], checkpoint_dir: str,
                 preempt_mode: _preempt.PreemptMode,
                 searcher_length: Optional[int],
                 tensorboard_mode: _tensorboard.TensorboardMode =
                 _tensorboard.TensorboardMode.AUTO) -> None:
        self.info = info
        self.distributed = distributed
        self._client = client
        self._started = False
        self._closed = False
        trial = info.trial if info is not None else None
        prefix = info.allocation_id if info is not None else "off-cluster"
        remote = None
        if checkpoint_dir:
            remote = pathlib.Path(checkpoint_dir, "tensorboard", "experiment",
                                  str(trial.experiment_id if trial else 0), "trial",
                                  str(trial.trial_id if trial else 0))
        tensorboard = _tensorboard.TensorboardFiles(
            None, remote, prefix=f"det-tensorboard-{prefix}-{distributed.rank}-")
        self.train = _train.TrainContext(client, trial, rank=distributed.rank,
                                         tensorboard_mode=tensorboard_mode,
                                         tensorboard=tensorboard)
        if info is not None:
            self.preempt = _preempt.PreemptContext(client, distributed, preempt_mode,
                                                   on_cluster=True)
            self.profiler: _profiler.ProfilerContext = _profiler.ProfilerContext(
                client, distributed, self.train, info.agent_id)
        else:
            # Off-cluster, SIGTERM still says stop.
            self.preempt = _preempt.PreemptContext(client, distributed, preempt_mode,
                                                   on_cluster=False)
            self.profiler = _profiler.DummyProfilerContext()
        self.checkpoint = _checkpoint.CheckpointContext(
            client, distributed, checkpoint_dir, require_steps=info is not None,
            hold_sigterm=self.preempt._holding_sigterm)
        self.searcher = _searcher.SearcherContext(client, distributed, self.train, trial,
                                                  off_cluster_length=searcher_length)

    def start(self) -> "Context":
        """Starts the preemption poller; once (later calls do nothing)."""
        if not self._started:
            self._started = True
            self.preempt.start()
        return self

    def close(self, exc_type: Optional[type] = None, exc_val: Optional[BaseException] = None,
              exc_tb: Any = None) -> None:
        """Stops the profiler, removes det's temporary TensorBoard directory (what was
        uploaded stays in the checkpoint storage), stops the preemption poller and closes the
        connection."""
        if self._closed:
            return
        self._closed = True
        self.profiler._close()
        self.train._close()
        self.preempt.close()
        self.distributed.close()
        self._client.close()

    def __enter__(self) -> "Context":
        return self.start()

    def __exit__(self, exc_type: Optional[type], exc_val: Optional[BaseException],
                 exc_tb: Any) -> None:
        invalid_hp = isinstance(exc_val, InvalidHP)
        try:
            if invalid_hp:
                # As Determined: the chief tells the master, then the process exits 0 (a
                # failure would be restarted; an invalid trial is replaced instead).
                if self.distributed.rank == 0:
                    self.train.report_early_exit(_train.EarlyExitReason.INVALID_HP)
                print(f"det: det.InvalidHP ({exc_val}): the trial ends as invalid; exiting 0",
                      file=sys.stderr, flush=True)
        except (NotImplementedError, _client.MasterError) as e:
            # The master cannot replace the trial: leave with the exception (a failed run).
            print(f"det: det.InvalidHP ({exc_val}) is not reported: {e}", file=sys.stderr,
                  flush=True)
            invalid_hp = False
        finally:
            self.close(exc_type, exc_val, exc_tb)
        if invalid_hp:
            sys.exit(0)


def _storage_directory(checkpoint_storage: Union[str, "os.PathLike[str]", Dict[str, Any]]) -> str:
    """The directory of an off-cluster checkpoint_storage: a path, or a mapping of type
    "directory" (container_path) or "shared_fs" (host_path, storage_path). ValueError for
    anything else (det stores checkpoints in a directory every worker sees)."""
    if isinstance(checkpoint_storage, os.PathLike):
        checkpoint_storage = os.fspath(checkpoint_storage)
    if isinstance(checkpoint_storage, str):
        if "://" in checkpoint_storage:
            raise ValueError(f"checkpoint_storage: '{checkpoint_storage}': det stores checkpoints "
                             "in a directory (a path), not in cloud storage")
        return checkpoint_storage
    if isinstance(checkpoint_storage, dict):
        kind = checkpoint_storage.get("type")
        if kind == "directory" and checkpoint_storage.get("container_path"):
            return str(checkpoint_storage["container_path"])
        if kind == "shared_fs" and checkpoint_storage.get("host_path"):
            return os.path.join(str(checkpoint_storage["host_path"]),
                                str(checkpoint_storage.get("storage_path") or ""))
        raise ValueError(f"checkpoint_storage: type {kind!r}: det takes a directory (a path, "
                         "{type: directory, container_path: ...} or {type: shared_fs, "
                         "host_path: ...})")
    raise TypeError(f"checkpoint_storage: expected a path or a dict, got "
                    f"{type(checkpoint_storage).__name__}")


def init(*, distributed: Optional[_distributed.DistributedContext] = None,
         checkpoint_storage: Optional[Union[str, "os.PathLike[str]", Dict[str, Any]]] = None,
         preempt_mode: _preempt.PreemptMode = _preempt.PreemptMode.WorkersAskChief,
         tensorboard_mode: _tensorboard.TensorboardMode = _tensorboard.TensorboardMode.AUTO,
         searcher_length: Optional[int] = None) -> Context:
    """The Core API context of this process; use it as `with det.core.init(...) as core:`.

    distributed: the ranks and collectives (DistributedContext.from_torch_distributed() for
      a script that set up torch.distributed); default: from the environment (RANK,
      WORLD_SIZE, ...), with collectives over torch.distributed once initialized, else over
      the master.
    checkpoint_storage: off-cluster, the directory checkpoints go to (a path, or a
      {type: directory | shared_fs, ...} dict; default: $TMPDIR/det-checkpoints). On a
      cluster the experiment's checkpoint_storage is used, since the master registers
      checkpoints there alone: a different one given here is ignored, with a warning.
    preempt_mode: who calls preempt.should_preempt() (PreemptMode).
    tensorboard_mode: when the files under train.get_tensorboard_path() are uploaded
      (TensorboardMode.AUTO: after each metrics report; MANUAL: by
      train.upload_tensorboard_files()).
    searcher_length: det's own, off-cluster only: the length of the one searcher operation.

    Inside a det allocation (DET_MASTER set) it reports to the master; a missing or
    malformed DET_* variable is a ClusterEnvironmentError naming it. Outside one (no
    DET_MASTER) every report is printed instead."""
    tensorboard_mode = _tensorboard.TensorboardMode(tensorboard_mode)
    preempt_mode = _preempt.PreemptMode(preempt_mode)
    info = _info.get_cluster_info()
    if info is not None:
        client: _client.WorkerClient = _client.GrpcWorkerClient(
            info.master_url, info.allocation_id, info.session_token, info.rank, info.trial.trial_id)
        checkpoint_dir = info.trial.checkpoint_dir
        prefix = info.allocation_id
        if checkpoint_storage is not None:
            wanted = _storage_directory(checkpoint_storage)
            if os.path.normpath(wanted) != os.path.normpath(checkpoint_dir or "."):
                print(f"det: core.init(checkpoint_storage={wanted!r}) is ignored inside a det "
                      f"allocation: checkpoints go to the experiment's checkpoint_storage "
                      f"({checkpoint_dir or 'none configured'}), the only place its master "
                      "registers them", file=sys.stderr, flush=True)
    else:
        client = _client.OffClusterClient()
        checkpoint_dir = (_storage_directory(checkpoint_storage) if checkpoint_storage is not None
                          else os.path.join(tempfile.gettempdir(), "det-checkpoints"))
        prefix = "off-cluster"
        print("det: not in a det allocation (no DET_MASTER): reports are printed, checkpoints "
              f"go to {checkpoint_dir}", file=sys.stderr, flush=True)
    if distributed is None:
        distributed = _distributed.DistributedContext.from_environment()
    distributed._set_rendezvous(client, prefix)
    if info is not None and distributed.size != info.world_size:
        raise ValueError(f"det.core.init: the distributed context has {distributed.size} ranks "
                         f"but the allocation has WORLD_SIZE={info.world_size}")
    return Context(client=client, distributed=distributed, info=info,
                   checkpoint_dir=checkpoint_dir, preempt_mode=preempt_mode,
                   searcher_length=searcher_length, tensorboard_mode=tensorboard_mode).start()
