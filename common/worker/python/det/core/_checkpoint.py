"""CheckpointContext: checkpoints as directories <checkpoint storage>/<storage_id> (the
experiment's shared_fs checkpoint_storage; common/checkpoint's CheckpointDirectory rules),
written into a hidden temporary directory and renamed into place, then registered with the
master (ReportCheckpoint with the files' sizes and the metadata), so a reader sees a whole
checkpoint or none (Determined's det.core.CheckpointContext)."""

import contextlib
import json
import os
import shutil
import uuid as uuid_lib
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

from det import _client
from det.core import _distributed

METADATA_FILE = "metadata.json"


class CheckpointContext:
    """Stores and restores checkpoints under `directory`. store_path(shard=False) is called
    by the chief alone; shard=True by every rank."""

    def __init__(self, client: _client.WorkerClient, dist: _distributed.DistributedContext,
                 directory: str) -> None:
        self._client = client
        self._dist = dist
        # As the master computes it (CheckpointDirectory): the reported path must match.
        self._dir = directory or ""

    @property
    def directory(self) -> str:
        """The storage directory ("" when the experiment configures no checkpoint_storage)."""
        return self._dir

    def _require_storage(self, what: str) -> str:
        if not self._dir:
            raise RuntimeError(f"{what}: the experiment has no checkpoint_storage (set "
                               "checkpoint_storage: {type: shared_fs, host_path: ...} in its "
                               "config, or pass checkpoint_storage= to det.core.init off-cluster)")
        return self._dir

    def _path_of(self, storage_id: str, what: str) -> str:
        """The directory of checkpoint `storage_id` (a storage id, or its full storage path).
        ValueError when it names anything but a directory directly in the storage."""
        directory = self._require_storage(what)
        if not isinstance(storage_id, str) or not storage_id:
            raise ValueError(f"{what}: storage_id: expected a non-empty string, got {storage_id!r}")
        if "/" in storage_id:
            path = os.path.normpath(storage_id)
            if not os.path.isabs(path) or os.path.dirname(path) != os.path.normpath(directory):
                raise ValueError(f"{what}: '{storage_id}' is outside the checkpoint storage "
                                 f"'{directory}': a checkpoint is a directory "
                                 f"'{directory}/<storage_id>'")
            return path
        if storage_id in (".", "..") or storage_id.startswith(".tmp-"):
            raise ValueError(f"{what}: storage_id '{storage_id}' is not a checkpoint name")
        return os.path.join(directory, storage_id)

    @contextlib.contextmanager
    def store_path(self, metadata: Optional[Mapping[str, Any]] = None,
                   shard: bool = False) -> Iterator[Tuple[str, str]]:
        """Yields (path, storage_id): a fresh directory to write the checkpoint's files into.
        On a normal exit it becomes <storage>/<storage_id>, gets `metadata` (a dict that
        JSON can write; "steps_completed" there is the checkpoint's batch) as metadata.json,
        and is registered with the master; on an exception it is removed and nothing is
        registered. shard=False: the chief alone calls it (RuntimeError elsewhere);
        shard=True: every rank calls it and writes its own files into the same directory."""
        directory = self._require_storage("store_path")
        metadata = dict(metadata or {})
        try:
            metadata_json = json.dumps(metadata, sort_keys=True, allow_nan=True)
        except (TypeError, ValueError) as e:
            raise TypeError(f"store_path: metadata must be a JSON-serializable dict: {e}") from None
        steps = metadata.get("steps_completed", 0)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise TypeError(f"store_path: metadata['steps_completed']: expected an integer >= 0, "
                            f"got {steps!r}")
        if not shard and self._dist.rank != 0:
            raise RuntimeError(f"store_path(shard=False) is for the chief only; rank "
                               f"{self._dist.rank} called it (use shard=True on every rank)")
        storage_id = str(uuid_lib.uuid4())
        if shard:
            storage_id = self._dist.broadcast(storage_id)
        tmp = directory + "/.tmp-" + storage_id
        final = directory + "/" + storage_id
        os.makedirs(tmp, exist_ok=True)
        try:
            yield tmp, storage_id
        except BaseException:
            if shard:
                self._dist.allgather(False)
            if not shard or self._dist.rank == 0:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        if shard and not all(self._dist.allgather(True)):
            if self._dist.rank == 0:
                shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError(f"store_path: another rank failed writing checkpoint {storage_id}; "
                               "nothing was registered")
        if self._dist.rank == 0:
            with open(os.path.join(tmp, METADATA_FILE), "w") as f:
                f.write(metadata_json)
            resources = _resources(tmp)
            _fsync_tree(tmp)
            os.rename(tmp, final)
            _fsync_dir(directory)
            self._client.report_checkpoint(storage_id, final, steps, resources, metadata_json)
        if shard:
            self._dist.allgather(True)  # Every rank returns once it is registered.

    def upload(self, ckpt_dir: str, metadata: Optional[Mapping[str, Any]] = None,
               shard: bool = False) -> str:
        """Copies the files of `ckpt_dir` into a new checkpoint; its storage_id."""
        with self.store_path(metadata, shard=shard) as (path, storage_id):
            if ckpt_dir:
                shutil.copytree(ckpt_dir, path, dirs_exist_ok=True)
        return storage_id

    @contextlib.contextmanager
    def restore_path(self, storage_id: str) -> Iterator[str]:
        """Yields the directory of checkpoint `storage_id` (a storage id such as
        det.get_cluster_info().latest_checkpoint, or its full path). ValueError for a path
        outside the checkpoint storage; FileNotFoundError when it does not exist."""
        path = self._path_of(storage_id, "restore_path")
        if not os.path.isdir(path):
            raise FileNotFoundError(f"restore_path: checkpoint '{storage_id}' does not exist "
                                    f"(no directory '{path}')")
        yield path

    def download(self, storage_id: str, ckpt_dir: str) -> None:
        """Copies checkpoint `storage_id` into `ckpt_dir`."""
        with self.restore_path(storage_id) as path:
            shutil.copytree(path, ckpt_dir, dirs_exist_ok=True)

    def get_metadata(self, storage_id: str) -> Dict[str, Any]:
        """The metadata stored with checkpoint `storage_id` ({} when it has none)."""
        with self.restore_path(storage_id) as path:
            try:
                with open(os.path.join(path, METADATA_FILE)) as f:
                    return json.load(f)
            except FileNotFoundError:
                return {}


def _resources(root: str) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            full = os.path.join(dirpath, name)
            out[os.path.relpath(full, root)] = os.path.getsize(full)
    return out


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: str) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(dirpath)
