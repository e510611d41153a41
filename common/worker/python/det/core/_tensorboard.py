"""TensorBoard files: what a script writes under TrainContext.get_tensorboard_path() is
copied into the checkpoint storage, at
<storage>/tensorboard/experiment/<experiment id>/trial/<trial id>/ (Determined's layout),
where `tensorboard --logdir` reads it. det writes no event files of its own: the metrics go
to the master."""

import enum
import os
import pathlib
import shutil
import tempfile
import threading
from typing import Callable, Dict, Optional, Tuple

Selector = Callable[[pathlib.Path], bool]
Mangler = Callable[[pathlib.Path, int], pathlib.Path]


class TensorboardMode(enum.Enum):
    """When the files under get_tensorboard_path() are uploaded (Determined's
    TensorboardMode). AUTO: after every metrics report. MANUAL: when the script calls
    TrainContext.upload_tensorboard_files()."""

    AUTO = "AUTO"
    MANUAL = "MANUAL"


class TensorboardFiles:
    """Copies new and changed files from a local directory to `remote_dir`. Thread-safe."""

    def __init__(self, local_dir: Optional[pathlib.Path], remote_dir: Optional[pathlib.Path],
                 prefix: str = "det-tensorboard-") -> None:
        """local_dir: the directory to upload from; None: a fresh one of this process's own
        (named `prefix`...) under the temporary directory, made when first asked for."""
        self.remote_dir = remote_dir
        self._prefix = prefix
        self._lock = threading.Lock()
        self._local_dir = local_dir  # GUARDED_BY(_lock)
        # Whether _local_dir is det's own temporary directory, removed by close().
        self._made = False  # GUARDED_BY(_lock)
        self._synced: Dict[pathlib.Path, Tuple[int, int]] = {}  # GUARDED_BY(_lock)

    @property
    def local_dir(self) -> pathlib.Path:
        """The local directory (created when missing)."""
        with self._lock:
            if self._local_dir is None:
                self._local_dir = pathlib.Path(tempfile.mkdtemp(prefix=self._prefix))
                self._made = True
            self._local_dir.mkdir(parents=True, exist_ok=True)
            return self._local_dir

    def sync(self, selector: Selector, mangler: Mangler, rank: int) -> int:
        """Copies the files under local_dir that `selector(relative path)` picks and that are
        new or changed since the last sync, to remote_dir / mangler(relative path, rank);
        the number copied. RuntimeError when there is no checkpoint storage to copy to."""
        with self._lock:
            local = self._local_dir
            if local is None or not local.is_dir():
                return 0  # Nobody asked for the directory, or it is gone.
            copied = 0
            for dirpath, _, files in os.walk(local):
                for name in files:
                    full = pathlib.Path(dirpath) / name
                    rel = full.relative_to(local)
                    if not selector(rel):
                        continue
                    try:
                        st = full.stat()
                    except FileNotFoundError:
                        continue  # Removed while we walked.
                    stamp = (st.st_mtime_ns, st.st_size)
                    if self._synced.get(rel) == stamp:
                        continue
                    if self.remote_dir is None:
                        raise RuntimeError(
                            "upload_tensorboard_files: the experiment has no checkpoint_storage "
                            "to upload TensorBoard files to")
                    target = self.remote_dir / mangler(rel, rank)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(full, target)
                    self._synced[rel] = stamp
                    copied += 1
            return copied

    def close(self) -> None:
        """Removes the local directory when it is det's own temporary one (a local_dir given
        to the constructor is left alone). Call it after the last sync(); a later local_dir
        makes a fresh one."""
        with self._lock:
            local, made = self._local_dir, self._made
            if made:
                self._local_dir, self._made = None, False
                self._synced.clear()
        if made and local is not None:
            shutil.rmtree(local, ignore_errors=True)
