"""CheckpointContext: checkpoints as directories <checkpoint storage>/<storage_id> (the
experiment's shared_fs checkpoint_storage; common/checkpoint's CheckpointDirectory rules),
written into a hidden temporary directory and renamed into place, then registered with the
master (ReportCheckpoint with the files' sizes and the metadata), so a reader sees a whole
checkpoint or none (Determined's det.core.CheckpointContext).

The storage is a file system every worker sees, so nothing is downloaded: restore_path()
yields the checkpoint's own directory, and download() copies from it."""

import contextlib
import enum
import fnmatch
import hashlib
import json
import os
import pathlib
import shutil
import socket
import stat
import uuid as uuid_lib
from typing import (Any, Callable, ContextManager, Dict, Iterator, List, Mapping, Optional,
                    Sequence, Tuple, Union)

from det import _client
from det.core import _distributed

METADATA_FILE = "metadata.json"

PathLike = Union[str, "os.PathLike[str]"]
Selector = Callable[[str], bool]


class DownloadMode(enum.Enum):
    """How download() and restore_path() coordinate the workers of an agent (Determined's
    DownloadMode). LocalWorkersShareDownload (the default): every worker calls download() in
    step and the agent's local chief alone copies, for all of them. NoSharedDownload: no
    coordination; each caller copies for itself. restore_path() copies nothing on det (the
    storage is a shared file system), so it needs no coordination in either mode."""

    LocalWorkersShareDownload = "LOCAL_WORKERS_SHARE_DOWNLOAD"
    NoSharedDownload = "NO_SHARED_DOWNLOAD"


def merge_metadata(all_metadata: Sequence[Mapping[str, Any]]
                   ) -> Tuple[Dict[str, Any], Dict[str, List[int]]]:
    """The ranks' metadata merged into one dict, and the conflicts: "/a/b" -> the ranks that
    gave key a.b different values. Dicts under the same key merge recursively; any other
    repeated key must have the same value on every rank that gives it."""
    merged: Dict[str, Any] = {}
    givers: Dict[str, List[int]] = {}
    conflicts: Dict[str, List[int]] = {}

    def merge(into: Dict[str, Any], rank: int, md: Mapping[str, Any], prefix: str) -> None:
        for key, value in md.items():
            full = f"{prefix}/{key}"
            givers.setdefault(full, []).append(rank)
            if isinstance(value, Mapping) and (key not in into or isinstance(into[key], dict)):
                merge(into.setdefault(key, {}), rank, value, full)
            elif key in into and into[key] != value:
                conflicts[full] = list(givers[full])
            elif key not in into:
                into[key] = value

    for rank, md in enumerate(all_metadata):
        merge(merged, rank, md or {}, "")
    return merged, conflicts


class CheckpointContext:
    """Stores and restores checkpoints under `directory`. store_path(shard=False) and
    upload(shard=False) are for the chief alone; with shard=True every rank calls them, in
    step, and they are collectives."""

    def __init__(self, client: _client.WorkerClient, dist: _distributed.DistributedContext,
                 directory: str, require_steps: bool = True,
                 hold_sigterm: Optional[Callable[[], ContextManager[None]]] = None) -> None:
        """hold_sigterm: entered around each store_path (writing and registering), so that
        a SIGTERM does not end the process half-way (PreemptContext._holding_sigterm)."""
        self._client = client
        self._hold_sigterm = hold_sigterm or contextlib.nullcontext
        self._dist = dist
        # As the master computes it (CheckpointDirectory): the reported path must match.
        self._dir = directory or ""
        # Inside an allocation a checkpoint must say its batch (metadata["steps_completed"]),
        # as Determined requires; off-cluster it defaults to 0.
        self._require_steps = require_steps

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

    def _path_of(self, storage_id: Any, what: str) -> str:
        """The directory of checkpoint `storage_id` (a storage id, or its full storage path).
        ValueError when it names anything but a directory directly in the storage."""
        directory = self._require_storage(what)
        if isinstance(storage_id, os.PathLike):
            storage_id = os.fspath(storage_id)
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

    def _existing(self, storage_id: Any, what: str) -> str:
        path = self._path_of(storage_id, what)
        if not os.path.isdir(path):
            raise FileNotFoundError(f"{what}: checkpoint '{storage_id}' does not exist "
                                    f"(no directory '{path}')")
        return path

    def _check_metadata(self, metadata: Mapping[str, Any], what: str) -> Tuple[str, int]:
        """(metadata as JSON, steps_completed). TypeError/ValueError before anything is
        written."""
        try:
            metadata_json = json.dumps(metadata, sort_keys=True, allow_nan=True)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{what}: metadata must be a JSON-serializable dict: {e}") from None
        if "steps_completed" not in metadata and self._require_steps:
            raise ValueError(f"{what}: metadata needs a 'steps_completed' item (the batch the "
                             "checkpoint was taken at), as in Determined")
        steps = metadata.get("steps_completed", 0)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise TypeError(f"{what}: metadata['steps_completed']: expected an integer >= 0, "
                            f"got {steps!r}")
        return metadata_json, steps

    @contextlib.contextmanager
    def store_path(self, metadata: Optional[Mapping[str, Any]] = None,
                   shard: bool = False) -> Iterator[Tuple[pathlib.Path, str]]:
        """Yields (path, storage_id): `path` (a pathlib.Path) is a fresh directory to write
        the checkpoint's files into. On a normal exit it becomes <storage>/<storage_id>, gets
        `metadata` (a dict that JSON can write, with "steps_completed", the checkpoint's
        batch) as metadata.json, and is registered with the master; on an exception it is
        removed and nothing is registered. shard=False: the chief alone calls it
        (RuntimeError elsewhere); shard=True: every rank calls it, writes its own files into
        the same directory, and the ranks' metadata are merged (RuntimeError naming the keys
        that conflict)."""
        with self._hold_sigterm():
            yield from self._store(metadata, shard)

    def _store(self, metadata: Optional[Mapping[str, Any]],
               shard: bool) -> Iterator[Tuple[pathlib.Path, str]]:
        """store_path's steps (a generator that yields once)."""
        directory = self._require_storage("store_path")
        if not shard:
            if self._dist.rank != 0:
                raise RuntimeError(f"store_path(shard=False) is for the chief only; rank "
                                   f"{self._dist.rank} called it (use shard=True on every rank)")
            merged = dict(metadata or {})
            metadata_json, steps = self._check_metadata(merged, "store_path")
            storage_id = str(uuid_lib.uuid4())
        else:
            # One collective: the chief's storage id and every rank's metadata.
            everything = self._dist.allgather(
                (str(uuid_lib.uuid4()) if self._dist.rank == 0 else None, dict(metadata or {})))
            storage_id = everything[0][0]
            merged, conflicts = merge_metadata([m for _, m in everything])
            if conflicts:
                raise RuntimeError("store_path(shard=True): the ranks' metadata conflict: " +
                                   "; ".join(f"{k} given differently by ranks {r}"
                                             for k, r in sorted(conflicts.items())))
            metadata_json, steps = self._check_metadata(merged, "store_path")
        tmp = directory + "/.tmp-" + storage_id
        final = directory + "/" + storage_id
        os.makedirs(directory, exist_ok=True)
        try:
            os.mkdir(tmp, 0o700)  # Private to the trial's OS user from the start.
        except FileExistsError:
            pass  # Another rank's (shard=True).
        try:
            yield pathlib.Path(tmp), storage_id
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
            _make_private(tmp)
            resources = _resources(tmp)
            _fsync_tree(tmp)
            os.rename(tmp, final)
            _fsync_dir(directory)
            self._client.report_checkpoint(storage_id, final, steps, resources, metadata_json)
        if shard:
            self._dist.allgather(True)  # Every rank returns once it is registered.

    def upload(self, ckpt_dir: Optional[PathLike], metadata: Optional[Mapping[str, Any]] = None,
               *, shard: bool = False, selector: Optional[Selector] = None) -> str:
        """Copies the files of `ckpt_dir` (str or os.PathLike; its name is not kept) into a
        new checkpoint; its storage_id. `selector(relative_path)` picks files (default: all).
        shard=False: the chief alone calls it. shard=True: every rank calls it, in step; a
        rank with nothing to upload passes ckpt_dir=None; the checkpoint holds the union of
        their files, each directory uploaded once by the lowest rank that names it, and a
        file uploaded by several ranks with different contents is a RuntimeError (nothing is
        stored)."""
        missing = None
        if ckpt_dir is not None:
            ckpt_dir = os.fspath(ckpt_dir)
            if not os.path.isdir(ckpt_dir):
                missing = f"upload: '{ckpt_dir}' is not a directory"
                if not shard:
                    raise FileNotFoundError(missing)
        if not shard:
            if self._dist.rank != 0:
                raise RuntimeError(f"upload(shard=False) is for the chief only; rank "
                                   f"{self._dist.rank} called it (use shard=True on every rank)")
            if ckpt_dir is None:
                raise RuntimeError("upload(ckpt_dir=None, shard=False) would upload nothing")
            files = _list_files(ckpt_dir, selector)
            with self.store_path(metadata) as (path, storage_id):
                _copy_files(ckpt_dir, files, os.fspath(path))
            return storage_id

        # Sharded: who uploads which directory (one rank per directory, by device and inode
        # on its host), and which files conflict.
        key = None
        if ckpt_dir is not None and missing is None:
            st = os.stat(ckpt_dir)
            key = (socket.gethostname(), st.st_dev, st.st_ino)
        gathered = self._dist.allgather((key, missing))
        errors = [(r, m) for r, (_, m) in enumerate(gathered) if m]
        if errors:  # Every rank raises, none waits on the others.
            raise FileNotFoundError("; ".join(f"rank {r}: {m}" for r, m in errors))
        keys = [k for k, _ in gathered]
        if all(k is None for k in keys):
            raise RuntimeError("upload(shard=True): every rank passed ckpt_dir=None; at least "
                               "one must have files to upload")
        uploads = key is not None and keys.index(key) == self._dist.rank
        files = _list_files(ckpt_dir, selector) if uploads and ckpt_dir else []
        all_files = self._dist.allgather(files)
        uploaders: Dict[str, List[int]] = {}
        for rank, names in enumerate(all_files):
            for name in names:
                uploaders.setdefault(name, []).append(rank)
        clashing = sorted(n for n, r in uploaders.items() if len(r) > 1)
        if clashing:
            mine = {n: _md5(os.path.join(ckpt_dir, n)) for n in clashing if n in files} \
                if ckpt_dir else {}
            digests = self._dist.allgather(mine)
            conflicts = {n: uploaders[n] for n in clashing
                         if len({d[n] for d in digests if n in d}) > 1}
            if conflicts:
                raise RuntimeError("upload(shard=True): refusing to upload with file conflicts: " +
                                   "; ".join(f"{n} uploaded by ranks {r}"
                                             for n, r in sorted(conflicts.items())))
            # Identical copies: the lowest rank writes each.
            files = [n for n in files if uploaders[n][0] == self._dist.rank]
        with self.store_path(metadata, shard=True) as (path, storage_id):
            if files and ckpt_dir:
                _copy_files(ckpt_dir, files, os.fspath(path))
        return storage_id

    @contextlib.contextmanager
    def restore_path(self, storage_id: str,
                     download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
                     *, selector: Optional[Selector] = None) -> Iterator[pathlib.Path]:
        """Yields the directory (a pathlib.Path) of checkpoint `storage_id` (a storage id such
        as det.get_cluster_info().latest_checkpoint, or its full path). The storage is a
        shared file system: the checkpoint's own directory is yielded, with every file in it
        (`selector` and `download_mode` change nothing), and any rank may call it alone.
        Treat it as read-only. ValueError for a path outside the checkpoint storage;
        FileNotFoundError when it does not exist."""
        DownloadMode(download_mode)
        yield pathlib.Path(self._existing(storage_id, "restore_path"))

    def download(self, storage_id: str, ckpt_dir: PathLike,
                 download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
                 *, selector: Optional[Selector] = None) -> None:
        """Copies checkpoint `storage_id` into `ckpt_dir` (str or os.PathLike; created when
        missing), the files `selector(relative_path)` picks (default: all).
        LocalWorkersShareDownload: every rank calls it in step (a collective); the local
        chief copies the files any local rank's selector picks, for all of them, into its
        ckpt_dir. NoSharedDownload: each caller copies for itself."""
        download_mode = DownloadMode(download_mode)
        ckpt_dir = os.fspath(ckpt_dir)
        if download_mode == DownloadMode.NoSharedDownload:
            existing = self._existing(storage_id, "download")
            _copy_files(existing, _list_files(existing, selector), ckpt_dir)
            return
        src: Optional[str] = None
        error: Optional[Exception] = None
        offer: Optional[Tuple[Optional[List[str]], Optional[str]]] = None
        if self._dist.local_rank == 0:
            try:
                src = self._existing(storage_id, "download")
                offer = (_list_files(src, None), None)
            except (OSError, ValueError, RuntimeError) as e:
                error = e
                offer = (None, str(e))
        # The local chief's listing (or its error); each local rank picks from it; the union
        # is copied.
        names = self._dist.broadcast_local(offer)
        if names[1] is not None:
            if error is not None:
                raise error
            raise FileNotFoundError(f"download: {names[1]}")
        listing: List[str] = names[0] or []
        picks = [selector is None or bool(selector(n)) for n in listing]
        everyone = self._dist.gather_local(picks)
        if self._dist.local_rank == 0:
            wanted = [n for i, n in enumerate(listing) if any(p[i] for p in everyone or [])]
            _copy_files(str(src), wanted, ckpt_dir)
        self._dist.broadcast_local(None)  # The copy is done.

    def get_metadata(self, storage_id: str) -> Dict[str, Any]:
        """The metadata stored with checkpoint `storage_id` ({} when it has none)."""
        # Its errors name restore_path, as they always have (bad_input_test matches them).
        path = self._existing(storage_id, "restore_path")
        try:
            with open(os.path.join(path, METADATA_FILE)) as f:
                return json.load(f)
        except FileNotFoundError:
            return {}

    def delete(self, storage_id: str, globs: Optional[Sequence[str]] = None) -> None:
        """Deletes checkpoint `storage_id`'s files from the storage: all of them (the
        directory goes), or with `globs` only those whose relative path matches one of them
        ("*.pt", "**/*", "optimizer/*"). As in Determined, this deletes files only: the
        master still lists the checkpoint (det's worker channel has no call to unregister
        it), and deleting the trial's latest checkpoint leaves nothing to resume from.
        FileNotFoundError when it does not exist."""
        path = self._existing(storage_id, "delete")
        if globs is None:
            shutil.rmtree(path)
            return
        if isinstance(globs, str):
            globs = [globs]
        for name in _list_files(path, None):
            if any(_glob_match(name, g) for g in globs):
                os.remove(os.path.join(path, name))
        for dirpath, _, _ in sorted(os.walk(path), key=lambda w: -len(w[0])):
            if dirpath != path and not os.listdir(dirpath):
                os.rmdir(dirpath)


def _glob_match(name: str, pattern: str) -> bool:
    """pathlib-style matching of a relative path: "**/" spans directories."""
    if pattern in ("**", "**/*"):
        return True
    if pattern.startswith("**/"):
        rest = pattern[3:]
        parts = name.split("/")
        return any(fnmatch.fnmatchcase("/".join(parts[i:]), rest) for i in range(len(parts)))
    return fnmatch.fnmatchcase(name, pattern) and name.count("/") == pattern.count("/")


def _list_files(root: str, selector: Optional[Selector]) -> List[str]:
    """The relative paths of the files under `root` that `selector` picks, sorted."""
    out = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            if selector is None or selector(rel):
                out.append(rel)
    return sorted(out)


def _copy_files(src: str, names: Sequence[str], dst: str) -> None:
    os.makedirs(dst, exist_ok=True)
    for name in names:
        target = os.path.join(dst, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(src, name), target)


def _md5(path: str) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _resources(root: str) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            full = os.path.join(dirpath, name)
            out[os.path.relpath(full, root)] = os.path.getsize(full)
    return out


def _make_private(root: str) -> None:
    """Directories 0700 and files 0600 under `root` (those this OS user owns; links are left
    alone): a checkpoint is readable by its trial's OS user only."""
    uid = os.geteuid()
    for dirpath, dirs, files in os.walk(root):
        for name, mode in [(d, 0o700) for d in dirs] + [(f, 0o600) for f in files] + [("", 0o700)]:
            path = os.path.join(dirpath, name) if name else dirpath
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode) or st.st_uid != uid:
                continue
            os.chmod(path, mode)


def _fsync_dir(path: str) -> None:
    if not os.access(path, os.R_OK):
        return  # A storage root its user may add to, not read (cluster-up's 01733): no fd.
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


class DummyCheckpointContext(CheckpointContext):
    """Checkpoints in `directory` with no master: registrations are printed, and metadata
    need not name steps_completed (Determined's DummyCheckpointContext, which takes a
    storage manager where det takes a directory)."""

    def __init__(self, dist: _distributed.DistributedContext, directory: PathLike) -> None:
        super().__init__(_client.OffClusterClient(), dist, os.fspath(directory),
                         require_steps=False)
